"""The same GRPO run side by side on a profile and on candidates without WS1's guarantees.

    python -m ws1_matrix rl-onpolicy [PROFILE] [--steps 40] [--candidates torch_default,variant_attn_decode_order]
                                     [--json] [--out DIR]                (nox -s rl_onpolicy -- cpu_bf16)

Each run starts from the same seeded ``tiny`` weights and the same seed; per step it logs the reward
and :func:`ws1_qwen3.rl.mismatch_metrics` (the rollout's recorded log-probs against the trainer's
recomputed ones). Writes ``<out>/<profile>/rl_onpolicy.json`` (every step of every run) and
``rl_onpolicy.png`` (reward and max |Δlogp| per step), and prints a one-screen summary.

Verdict (exit 0 / 1): the profile's run must be bitwise on-policy at every step (max |Δlogp| 0,
ratio exactly 1, no token's bits differ), and our own negative control (a ``variant_*`` candidate,
built from the cpu kernels, so the same on every host) must show a mismatch (it does from step 0; a
one-ulp variant's effect can vanish later, once the policy saturates).
``torch_default`` is shown for what a user sees with plain PyTorch ops; its mismatch depends on the
CPU (on AMX hosts torch's BF16 kernels are row-invariant), so it is never part of the verdict.
Exit 2: the profile's device is absent, or a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import ws1_accel
import ws1_ops
import ws1_qwen3
from ws1_contract.evidence import evidence_root
from ws1_contract.progress import Progress
from ws1_qwen3 import rl

from .rl_plot import plot

EXIT_GREEN, EXIT_RED, EXIT_UNAVAILABLE = 0, 1, 2
SHOWN = (
    "reward_mean",
    "ws1/max_abs_dlogp",
    "rollout_corr/k3_kl",
    "rollout_corr/rollout_is_min",
    "rollout_corr/rollout_is_max",
    "ws1/clip_fraction",
    "ws1/tokens_different",
)


def _config(args) -> rl.GRPOConfig:
    return rl.GRPOConfig(
        steps=args.steps, prompts_per_step=4, group_size=8, max_new_tokens=(4, 8), lr=2e-2, seed=args.seed
    )


def run_one(name: str, config: rl.GRPOConfig, bar: Progress) -> list[dict]:
    model = ws1_qwen3.synthetic("tiny", name)  # the same seeded weights for every run
    logs = []
    for log in rl.Trainer(model, config):
        logs.append(log.to_dict())
        bar.update()
    return logs


def verdict(profile: str, runs: dict[str, list[dict]]) -> list[str]:
    """What is wrong (empty: green): the profile off-policy at some step, or our control on-policy."""
    bad = []
    for x in runs[profile]:
        if (
            x["ws1/max_abs_dlogp"] != 0
            or x["ws1/tokens_different"] != 0
            or x["rollout_corr/rollout_is_min"] != 1.0
            or x["rollout_corr/rollout_is_max"] != 1.0
        ):
            bad.append(f"{profile} step {x['step']}: not bitwise on-policy (max |Δlogp| {x['ws1/max_abs_dlogp']:.3e})")
    for name, logs in runs.items():
        # a one-ulp variant's effect can vanish once the policy saturates (a log-prob of ~0 absorbs it),
        # so the control must show the mismatch, not at every step
        if name.startswith("variant_") and not any(x["ws1/tokens_different"] for x in logs):
            bad.append(f"negative control {name} shows no mismatch at any step: the check could not fail")
    return bad


def _summary(profile: str, runs: dict[str, list[dict]], problems: list[str], paths: list[Path], wall: float) -> str:
    lines = [
        f"══ WS1 on-policy GRPO · {profile} — {'PASS' if not problems else 'FAIL'} in {wall:.0f}s ══",
        f"  {'run':<28} {'step':>4} " + " ".join(f"{k.split('/')[-1]:>16}" for k in SHOWN),
    ]
    for name, logs in runs.items():
        for x in (logs[0], logs[-1]):
            lines.append(f"  {name:<28} {x['step']:>4} " + " ".join(f"{x[k]:>16.6g}" for k in SHOWN))
    for name, logs in runs.items():
        n = sum(1 for x in logs if x["ws1/tokens_different"])
        worst = max(x["ws1/max_abs_dlogp"] for x in logs)
        lines.append(f"  {name:<28} steps with differing tokens {n}/{len(logs)}, worst max |Δlogp| {worst:.3e}")
    lines += [f"  FAIL  {p}" for p in problems]
    lines += [f"  wrote {p}" for p in paths]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ws1 rl-onpolicy", description="the same GRPO run on a profile and on candidates")
    ap.add_argument("profile", nargs="?", default="cpu_bf16")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 40; 24 with --engine vllm)")
    ap.add_argument(
        "--engine",
        choices=("ws1", "vllm"),
        default="ws1",
        help="ws1: WS1's engine and trainer (one process); vllm: vLLM rollouts + transformers under FSDP2 "
        "(ws1_matrix.rl_engines; needs vLLM: bash ci/setup_vllm.sh, run in .venv-vllm)",
    )
    ap.add_argument(
        "--tp",
        type=int,
        default=1,
        help="with --engine vllm: vLLM's tensor-parallel degree (1, 2, 4, 8); the trainer stays FSDP2 on 2 ranks",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--candidates",
        default="torch_default,variant_attn_decode_order",
        help="comma-separated candidates run beside the profile",
    )
    ap.add_argument("--out", default=None, help="evidence root (default: $WS1_EVIDENCE_DIR or ./evidence)")
    ap.add_argument("--json", action="store_true", help="print the record as JSON instead of the summary")
    args = ap.parse_args(argv)
    if args.steps is None:
        args.steps = 24 if args.engine == "vllm" else 40
    if args.steps < 1:
        print(f"ws1 rl-onpolicy: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.tp not in (1, 2, 4, 8) or (args.tp > 1 and args.engine != "vllm"):
        print(
            f"ws1 rl-onpolicy: --tp must be 1, 2, 4 or 8, and above 1 only with --engine vllm; got {args.tp}",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    try:
        why = ws1_accel.unavailable_reason(args.profile)
    except ws1_accel.AcceleratorError as exc:
        print(f"ws1 rl-onpolicy: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if why is not None:
        print(
            f"ws1 rl-onpolicy: {args.profile} needs a {ws1_accel.device_type_of(args.profile)} device: {why}",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    if args.engine == "vllm":
        return _main_vllm(args)
    names = [args.profile, *[c for c in args.candidates.split(",") if c]]
    unknown = [c for c in names[1:] if c not in ws1_ops.candidate_names()]
    if unknown:
        print(
            f"ws1 rl-onpolicy: unknown candidate(s) {unknown}; expected some of {list(ws1_ops.candidate_names())}",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    config = _config(args)
    t0 = time.perf_counter()
    bar = Progress(len(names) * args.steps, f"rl_onpolicy {args.profile}", unit="step")
    runs = {}
    try:
        for name in names:
            bar.doing(name)
            runs[name] = run_one(name, config, bar)
    finally:
        bar.close()
    problems = verdict(args.profile, runs)
    out = (Path(args.out) if args.out else evidence_root()) / args.profile
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "gate": "rl_onpolicy",
        "profile": args.profile,
        "config": {**config.__dict__},
        "model": "tiny (synthetic)",
        "status": "green" if not problems else "red",
        "problems": problems,
        "runs": runs,
        "wall_time_s": round(time.perf_counter() - t0, 1),
    }
    jpath, ppath = out / "rl_onpolicy.json", out / "rl_onpolicy.png"
    jpath.write_text(json.dumps(record, indent=1))
    plot(runs, ppath)
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        print(_summary(args.profile, runs, problems, [jpath, ppath], record["wall_time_s"]))
    return EXIT_GREEN if not problems else EXIT_RED


def _main_vllm(args) -> int:
    import importlib.util

    from . import rl_engines

    out = (Path(args.out) if args.out else evidence_root()) / args.profile
    if args.profile != "cpu_bf16":
        # the device is here (main checked it): the run is not executed on it — red with the reason, never a pass
        why = (
            f"not executed: --engine vllm runs cpu_bf16 (vLLM's CPU build); {args.profile}'s vLLM attention layout "
            "is not served by ws1-vllm yet (docs/vllm.md)"
        )
        out.mkdir(parents=True, exist_ok=True)
        record = {"gate": "rl_onpolicy_vllm", "profile": args.profile, "status": "red", "problems": [why], "runs": {}}
        (out / f"{rl_engines.stem(args.tp)}.json").write_text(json.dumps(record, indent=1))
        print(f"ws1 rl-onpolicy: {args.profile}: RED, {why}", file=sys.stderr)
        return EXIT_RED
    if importlib.util.find_spec("vllm") is None:
        print(
            f"ws1 rl-onpolicy: --engine vllm needs vLLM in this interpreter ({sys.executable}): bash ci/setup_vllm.sh, "
            "then run it with .venv-vllm/bin/python (nox -s rl_onpolicy does)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    names = rl_engines.run_names(args.profile, args.tp)
    bar = Progress(len(names), f"rl_onpolicy --engine vllm --tp {args.tp} {args.profile}", unit="run")
    try:
        record = rl_engines.run(
            args.profile, args.steps, args.seed, out, progress=lambda _name: bar.update(), tp=args.tp
        )
    finally:
        bar.close()
    print(json.dumps(record, indent=1) if args.json else rl_engines.summary(record, out))
    return EXIT_GREEN if record["status"] == "green" else EXIT_RED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
