"""The GRPO run on the engines users run: vLLM rollouts, transformers trained under FSDP2 (2 ranks, gloo).

    python -m ws1_matrix rl-onpolicy cpu_bf16 --engine vllm [--steps 24]
    nox -s rl_onpolicy -- cpu_bf16 --engine vllm          (in .venv-vllm)

Three runs from the same seeded ``tiny`` checkpoint and seed, each in its own process (vLLM's plugin is chosen per
process), each ``ws1_qwen3.rl.run_on_engines`` with ``ws1_vllm.VllmRollout`` and ``ws1_dist.FSDPTrainer``:

* ``<profile>``: vLLM with the ws1-vllm plugin (``WS1_VLLM_PROFILE``) + transformers patched by ``apply_ws1`` under
  ``ws1_dist`` — must be exactly on-policy at every step: every difference 0, every ratio 1, no token's bits differ;
* ``variant_m_split_k`` (ours, the verdict's control): the same, the trainer on our variant kernels — must show a
  mismatch (the proof the check can fail, on every host);
* ``stock``: stock vLLM + stock transformers under FSDP2's own ``fully_shard`` — what a user has without WS1; shown
  (and recorded whether it is nonzero from step 0), never part of the verdict (a third party's bits).

The weights are pushed into vLLM after every step (``reload_weights`` + ``reset_prefix_cache``). Writes
``<out>/<profile>/rl_onpolicy_vllm.json`` (every step's metrics under verl's, TRL's, OpenRLHF's and slime's names)
and ``rl_onpolicy_vllm.png``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONTROL = "variant_m_split_k"
# the mismatch under each trainer's name, and the value it has when the run is exactly on-policy
EXACT = {
    "training/rollout_probs_diff_max": 0.0,  # verl
    "rollout_corr/kl": 0.0,  # verl
    "sampling/sampling_logp_difference/max": 0.0,  # TRL
    "sampling/importance_sampling_ratio/max": 1.0,  # TRL
    "sampling/importance_sampling_ratio/min": 1.0,  # TRL
    "train/train_rollout_logprob_abs_diff": 0.0,  # slime
    "vllm_kl": 0.0,  # OpenRLHF
    "rollout_corr/k3_kl": 0.0,  # slime / Miles (true on-policy)
    "ws1/max_abs_dlogp": 0.0,
    "ws1/tokens_different": 0,
}


def _config(steps: int, seed: int):
    from ws1_qwen3 import rl

    return rl.GRPOConfig(steps=steps, prompts_per_step=4, group_size=8, max_new_tokens=(4, 8), lr=2e-2, seed=seed)


def child(run: str, profile: str, checkpoint: str, steps: int, seed: int, out: str) -> None:
    """One run, in this process (its environment already chose the plugin): JSON lines of StepLog dicts to ``out``."""
    import ws1_dist
    import ws1_vllm
    from ws1_qwen3 import rl

    trainer_profile = {"stock": None, CONTROL: CONTROL}.get(run, profile)
    config = _config(steps, seed)
    rollout = ws1_vllm.VllmRollout(checkpoint, enforce_eager=True, max_model_len=64, block_size=32)
    try:
        with ws1_dist.FSDPTrainer(checkpoint, trainer_profile, config, world=2) as trainer, open(out, "w") as f:
            for log in rl.run_on_engines(rollout, trainer, config):
                f.write(json.dumps(log.to_dict()) + "\n")
                f.flush()
                print(f"rl-engines {run}: step {log.step}", file=sys.stderr, flush=True)
    finally:
        rollout.close()


def verdict(profile: str, runs: dict[str, list[dict]], steps: int) -> list[str]:
    bad = []
    if len(runs.get(profile, [])) != steps:
        bad.append(f"{profile}: {len(runs.get(profile, []))} of {steps} steps ran")
    for x in runs.get(profile, []):
        off = {k: x[k] for k, want in EXACT.items() if x[k] != want}
        if off:
            k = next(iter(off))
            bad.append(f"{profile} step {x['step']}: not exactly on-policy ({k} = {off[k]!r})")
    if not any(x["ws1/tokens_different"] for x in runs.get(CONTROL, [])):
        bad.append(f"negative control {CONTROL} shows no mismatch at any step: the check could not fail")
    return bad


def run(profile: str, steps: int, seed: int, out_dir: Path, progress=None) -> dict:
    """The three runs, each a subprocess of this interpreter (it must have vLLM); returns the record."""
    import ws1_qwen3

    t0 = time.perf_counter()
    runs: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ws1-rl-engines-") as tmp:
        checkpoint = str(Path(tmp) / "tiny")
        ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny", profile), checkpoint)
        for name in (profile, CONTROL, "stock"):
            env = {k: v for k, v in os.environ.items() if k not in ("WS1_VLLM_PROFILE", "WS1_VLLM_CANDIDATE")}
            env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
            if name != "stock":
                env["WS1_VLLM_PROFILE"] = profile  # the control's rollout is WS1's too: only its trainer varies
            lines = Path(tmp) / f"{name}.jsonl"
            code = (
                "import sys; from ws1_matrix.rl_engines import child; "
                f"child({name!r}, {profile!r}, {checkpoint!r}, {steps}, {seed}, {str(lines)!r})"
            )
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            runs[name] = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
            if proc.returncode != 0:
                tail = [x for x in proc.stderr.strip().splitlines() if x.strip()][-1:] or ["(no output)"]
                failed[name] = f"exit {proc.returncode}: {tail[0][:300]}"
            if progress:
                progress(name)
    problems = [f"run {n} failed: {why}" for n, why in failed.items() if n != "stock"]
    problems += verdict(profile, runs, steps)
    stock = runs.get("stock", [])
    record = {
        "gate": "rl_onpolicy_vllm",
        "profile": profile,
        "engines": {"rollout": "vLLM (ws1_vllm.VllmRollout)", "trainer": "transformers under FSDP2, 2 ranks (gloo)"},
        "config": {**_config(steps, seed).__dict__},
        "model": "tiny (synthetic)",
        "status": "green" if not problems else "red",
        "problems": problems,
        "stock_failed": failed.get("stock"),
        "stock_nonzero_from_step_0": bool(stock) and all(x["ws1/tokens_different"] > 0 for x in stock[:1]),
        "runs": runs,
        "wall_time_s": round(time.perf_counter() - t0, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "rl_onpolicy_vllm.json").write_text(json.dumps(record, indent=1))
    if any(runs.values()):
        from .rl_plot import plot

        plot(
            {k: v for k, v in runs.items() if v},
            out_dir / "rl_onpolicy_vllm.png",
            "reward (copy task, tiny): vLLM rollouts, FSDP2 trainer",
            linthresh=1e-7,
        )
    return record


# metric -> column label
SHOWN = {
    "reward_mean": "reward",
    "sampling/sampling_logp_difference/max": "max|Δlogp| (TRL)",
    "sampling/importance_sampling_ratio/max": "max ratio (TRL)",
    "training/rollout_probs_diff_max": "max|Δp| (verl)",
    "vllm_kl": "vllm_kl (ORLHF)",
    "ws1/tokens_different": "tokens differ",
}


def summary(record: dict, out_dir: Path) -> str:
    lines = [
        f"══ GRPO on vLLM + FSDP2 · {record['profile']} — {'PASS' if record['status'] == 'green' else 'FAIL'} "
        f"in {record['wall_time_s']:.0f}s ══",
        f"  {'run':<20} {'step':>4} " + " ".join(f"{label:>18}" for label in SHOWN.values()),
    ]
    for name, logs in record["runs"].items():
        for x in logs[:1] + logs[-1:]:
            lines.append(f"  {name:<20} {x['step']:>4} " + " ".join(f"{x[k]:>18.6g}" for k in SHOWN))
    for name, logs in record["runs"].items():
        n = sum(1 for x in logs if x["ws1/tokens_different"])
        lines.append(f"  {name:<20} steps with differing log-probs {n}/{len(logs)}")
    if record["stock_failed"]:
        lines.append(f"  stock run failed (shown only): {record['stock_failed']}")
    lines += [f"  FAIL  {p}" for p in record["problems"]]
    lines += [f"  wrote {out_dir / 'rl_onpolicy_vllm.json'}", f"  wrote {out_dir / 'rl_onpolicy_vllm.png'}"]
    return "\n".join(lines)
