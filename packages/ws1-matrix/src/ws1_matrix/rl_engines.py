"""The GRPO run on the engines users run: vLLM rollouts, transformers trained under FSDP2 (2 ranks, gloo).

    python -m ws1_matrix rl-onpolicy cpu_bf16 --engine vllm [--steps 24] [--tp 2]
    nox -s rl_onpolicy -- cpu_bf16 --engine vllm [--tp 2]          (in .venv-vllm)

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

``--tp T`` (2, 4, 8): vLLM rolls out at tensor-parallel degree T (T worker processes) while the trainer stays FSDP2 on
2 ranks — the layout RL teams run, and the issue's "vLLM at TP 2 equal to the trainer at DP 2". The plugin then runs
the parallel-invariant order (o_proj/down_proj K in 8 chunks, one tree across the TP group) and the WS1 trainers take
the same order (``FSDPTrainer(k_chunks=8)``). A fourth run, ``default_order`` (shown): the plugin at TP T with the
trainer in the default order — what the order option is for. Files: ``rl_onpolicy_vllm_tpT.json`` / ``.png``.
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


DEFAULT_ORDER = "default_order"  # at TP > 1: the plugin's rollout, the trainer in the default K order (shown)


def child(run: str, profile: str, checkpoint: str, steps: int, seed: int, out: str, tp: int = 1) -> None:
    """One run, in this process (its environment already chose the plugin): JSON lines of StepLog dicts to ``out``."""
    import ws1_dist
    import ws1_vllm
    from ws1_qwen3 import rl

    trainer_profile = {"stock": None, CONTROL: CONTROL}.get(run, profile)
    # at TP > 1 the plugin computes the parallel-invariant order; WS1's trainers take it (but the shown default_order)
    k_chunks = ws1_dist.CHUNKS if tp > 1 and run not in ("stock", DEFAULT_ORDER) else None
    config = _config(steps, seed)
    parallel = {"tensor_parallel_size": tp, "distributed_executor_backend": "mp"} if tp > 1 else {}
    rollout = ws1_vllm.VllmRollout(checkpoint, enforce_eager=True, max_model_len=64, block_size=32, **parallel)
    try:
        with (
            ws1_dist.FSDPTrainer(checkpoint, trainer_profile, config, world=2, k_chunks=k_chunks) as trainer,
            open(out, "w") as f,
        ):
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


def run_names(profile: str, tp: int = 1) -> tuple[str, ...]:
    """The runs, in order: the profile, our control, stock; at TP > 1 also the default-order trainer (shown)."""
    return (profile, CONTROL, "stock", *((DEFAULT_ORDER,) if tp > 1 else ()))


def stem(tp: int) -> str:
    """The record's file name, without suffix."""
    return "rl_onpolicy_vllm" if tp == 1 else f"rl_onpolicy_vllm_tp{tp}"


def run(profile: str, steps: int, seed: int, out_dir: Path, progress=None, tp: int = 1) -> dict:
    """The runs of :func:`run_names`, each a subprocess of this interpreter (it must have vLLM); the record."""
    import ws1_qwen3

    t0 = time.perf_counter()
    runs: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ws1-rl-engines-") as tmp:
        checkpoint = str(Path(tmp) / "tiny")
        ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny", profile), checkpoint)
        for name in run_names(profile, tp):
            env = {k: v for k, v in os.environ.items() if k not in ("WS1_VLLM_PROFILE", "WS1_VLLM_CANDIDATE")}
            env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
            if tp > 1:
                # vLLM binds each TP worker's threads to cores of its own NUMA node by default, and refuses a host
                # with fewer nodes than workers; a user's own binding is kept
                env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            if name != "stock":
                env["WS1_VLLM_PROFILE"] = profile  # the control's rollout is WS1's too: only its trainer varies
            lines = Path(tmp) / f"{name}.jsonl"
            code = (
                "import sys; from ws1_matrix.rl_engines import child; "
                f"child({name!r}, {profile!r}, {checkpoint!r}, {steps}, {seed}, {str(lines)!r}, {tp})"
            )
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            runs[name] = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
            if proc.returncode != 0:
                tail = [x for x in proc.stderr.strip().splitlines() if x.strip()][-1:] or ["(no output)"]
                failed[name] = f"exit {proc.returncode}: {tail[0][:300]}"
            if progress:
                progress(name)
    problems = [f"run {n} failed: {why}" for n, why in failed.items() if n not in ("stock", DEFAULT_ORDER)]
    problems += verdict(profile, runs, steps)
    stock = runs.get("stock", [])
    record = {
        "gate": "rl_onpolicy_vllm",
        "profile": profile,
        "engines": {
            "rollout": f"vLLM (ws1_vllm.VllmRollout), tensor parallel {tp}",
            "trainer": "transformers under FSDP2, 2 ranks (gloo)"
            + (", o_proj/down_proj in the 8-chunk K order (k_chunks=8)" if tp > 1 else ""),
        },
        "tp": tp,
        "config": {**_config(steps, seed).__dict__},
        "model": "tiny (synthetic)",
        "status": "green" if not problems else "red",
        "problems": problems,
        "stock_failed": failed.get("stock"),
        "default_order_failed": failed.get(DEFAULT_ORDER),
        "stock_nonzero_from_step_0": bool(stock) and all(x["ws1/tokens_different"] > 0 for x in stock[:1]),
        "runs": runs,
        "wall_time_s": round(time.perf_counter() - t0, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem(tp)}.json").write_text(json.dumps(record, indent=1))
    if any(runs.values()):
        from .rl_plot import plot

        plot(
            {k: v for k, v in runs.items() if v},
            out_dir / f"{stem(tp)}.png",
            f"reward (copy task, tiny): vLLM rollouts at TP {tp}, FSDP2 trainer at DP 2",
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
        f"══ GRPO on vLLM (TP {record.get('tp', 1)}) + FSDP2 (DP 2) · {record['profile']} — "
        f"{'PASS' if record['status'] == 'green' else 'FAIL'} "
        f"in {record['wall_time_s']:.0f}s ══",
        f"  {'run':<20} {'step':>4} " + " ".join(f"{label:>18}" for label in SHOWN.values()),
    ]
    for name, logs in record["runs"].items():
        for x in logs[:1] + logs[-1:]:
            lines.append(f"  {name:<20} {x['step']:>4} " + " ".join(f"{x[k]:>18.6g}" for k in SHOWN))
    for name, logs in record["runs"].items():
        n = sum(1 for x in logs if x["ws1/tokens_different"])
        lines.append(f"  {name:<20} steps with differing log-probs {n}/{len(logs)}")
    for name in ("stock", DEFAULT_ORDER):
        if record.get(f"{name}_failed"):
            lines.append(f"  {name} run failed (shown only): {record[f'{name}_failed']}")
    lines += [f"  FAIL  {p}" for p in record["problems"]]
    name = stem(record.get("tp", 1))
    lines += [f"  wrote {out_dir / f'{name}.json'}", f"  wrote {out_dir / f'{name}.png'}"]
    return "\n".join(lines)
