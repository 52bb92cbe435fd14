"""The GRPO runs' figure, shared by ``rl-onpolicy`` and its ``--engine vllm`` mode (ws1_matrix.rl_engines)."""

from __future__ import annotations

from pathlib import Path


def plot(runs: dict[str, list[dict]], path: Path, title: str = "reward (copy task, tiny)", linthresh=1e-6) -> None:
    """Two panels per run: the mean reward and the max |Δlogp| (rollout vs trainer) per step, to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, logs in runs.items():
        steps = [x["step"] for x in logs]
        a.plot(steps, [x["reward_mean"] for x in logs], label=name)
        b.plot(steps, [x["ws1/max_abs_dlogp"] for x in logs], label=name, marker=".")
    a.set(title=title, xlabel="step", ylabel="mean reward")
    b.set(title="max |Δlogp| rollout vs trainer", xlabel="step", ylabel="max |Δlogp|")
    b.set_yscale("symlog", linthresh=linthresh)
    for ax in (a, b):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
