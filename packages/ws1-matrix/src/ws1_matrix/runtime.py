"""C2 runtime evidence: run every required node once, forward and backward, on the profile's own
device, and check that the registry recorded exactly the kernel the manifest declares.

    python -m ws1_matrix c2-runtime cpu_bf16 [--json]     (nox -s c2_manifest -- cpu_bf16 --runtime)

A node whose recorded kernel id, family or device differs from the declaration is red (an
undeclared fallback); one the profile cannot run is red with the reason; an absent device exits 2.
"""

from __future__ import annotations

import sys

import torch

import ws1_accel
from ws1_contract import Cell, gate_main
from ws1_ops import registry
from ws1_ops.registry import KernelUnavailable, record, use_profile

BF = torch.bfloat16


def _calls(dev: torch.device):
    """node -> a closure that runs it forward and backward on small inputs on ``dev``."""
    import ws1_ops as w

    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=BF, grad=True):
        return (torch.randn(*shape, generator=g) * 0.5).to(dtype).to(dev).requires_grad_(grad)

    keys = torch.arange(6, device=dev)
    ids = torch.tensor([3, 1, 4, 1, 5, 9], device=dev)
    cu = torch.tensor([0, 6], device=dev)
    pos = torch.arange(6, device=dev)

    def back(y):
        y.float().sum().backward()

    return {
        "embedding": lambda: back(w.embedding(ids, r(16, 32), keys)),
        "rms_norm": lambda: back(w.rms_norm(r(6, 32, dtype=torch.float32), r(32), 1e-6, keys)),
        "det_gemm": lambda: back(w.det_gemm(r(6, 32), r(16, 32), keys)),
        "qk_norm": lambda: back(w.qk_norm(r(6, 4, 32), r(32), 1e-6, keys)),
        "rope": lambda: back(w.rope(r(6, 4, 32), pos, 1e6)),
        "attention": lambda: back(w.attention(r(6, 4, 32), r(6, 2, 32), r(6, 2, 32), cu, cu, pos)),
        "swiglu": lambda: back(w.swiglu(r(6, 32), r(6, 32))),
        "silu": lambda: back(w.silu(r(6, 32))),
        "lm_head": lambda: back(w.lm_head(r(6, 32), r(40, 32), keys)),
        "logprob": lambda: back(w.logprob(r(6, 40, dtype=torch.float32), ids)),
        "batch_invariant_logp": lambda: back(w.batch_invariant_logp(r(6, 40, dtype=torch.float32))),
    }


def node_problems(s: dict | None, declared: str, family: str, dev_type: str, need_backward: bool) -> list[str]:
    """What is wrong with one node's record (a :meth:`Recorder.summary` entry) against its declaration:
    never ran, another kernel id, another family (an undeclared fallback), another device, a
    direction missing, or calls the kernel package itself did not count (``package_problems``).
    Empty: it ran exactly the declared kernel. (C2 runtime and C9 judge with it.)"""
    if s is None:
        return ["never ran"]
    problems = []
    if s["kernel_ids"] != [declared]:
        problems.append(f"ran {s['kernel_ids']}, declared {declared}")
    if s["families"] != [family]:
        problems.append(f"family {s['families']} is not {family} (undeclared fallback)")
    if s["devices"] != [dev_type]:
        problems.append(f"ran on {s['devices']}, not {dev_type}")
    if s["forward"] < 1:
        problems.append("no forward call")
    if need_backward and s["backward"] < 1:
        problems.append("no backward record")
    # the label is not enough: the kernel package's own count must confirm every recorded call
    problems += s.get("package_problems", ["the record carries no kernel self-report"])
    return problems


def c2_runtime(run, args) -> None:
    profile, m = run.profile, run.manifest
    family = run.contract.family(profile)
    dev = ws1_accel.resolve_device(profile)
    why = registry.family_available(family)
    for node in m.required_nodes:
        declared = m.kernel_id(profile, node)
        cid = f"runtime-{node}"
        if why is not None:
            run.add(Cell(id=cid, judgment="manifest_runtime", status="red", detail=f"not executed: {why}",
                         extra={"node": node, "declared": declared}))
            continue
        call = _calls(dev).get(node)
        if call is None:
            run.add(Cell(id=cid, judgment="manifest_runtime", status="red",
                         detail=f"not executed: ws1_matrix.runtime._calls has no call for node {node!r} (docs/adding_a_node.md)",
                         extra={"node": node, "declared": declared}))
            continue
        try:
            with use_profile(profile), record() as rec:
                call()
        except KernelUnavailable as exc:
            run.add(Cell(id=cid, judgment="manifest_runtime", status="red", detail=f"missing_required: {exc}",
                         extra={"node": node, "declared": declared}))
            continue
        s = rec.summary().get(node)
        problems = node_problems(s, declared, family, dev.type, need_backward=True)
        others = sorted(rec.ops() - {node})
        detail = "; ".join(problems) if problems else (
            f"ran {declared} on {dev.type}: forward {s['forward']}, backward {s['backward']} kernel calls")
        if others and not problems:
            detail += f" (also ran {others})"
        run.add(Cell(id=cid, judgment="manifest_runtime", status="red" if problems else "green", detail=detail,
                     extra={"node": node, "declared": declared, "recorded": s}))


def main(argv=None) -> int:
    return gate_main("c2_runtime", c2_runtime, argv, needs_device=True,
                     description="C2 runtime: each required node ran its declared kernel")


if __name__ == "__main__":
    sys.exit(main())
