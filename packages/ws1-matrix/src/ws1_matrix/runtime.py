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
from ws1_contract import gate_main, judged
from ws1_ops import registry
from ws1_ops.registry import KernelUnavailable, record, use_profile

from . import cases

BF = torch.bfloat16


def calls(manifest, profile: str, dev: torch.device) -> dict:
    """node -> a closure that runs it forward and backward once on ``dev``: the node's own C3/C4 input
    builder (ws1_matrix.cases.BUILDERS) on its first case with the widths shrunk, through the same
    gradient run as C4 (candidate forward + backward with row keys; the FP32 reference is plain torch
    and records nothing). Nothing here lists nodes: a node without a builder or a case has no call."""
    from .judge import RUNNERS

    out = {}
    for node in manifest.required_nodes:
        found = manifest.cases(profile=profile, op=node)
        if found and node in cases.BUILDERS:

            def run(case=cases.shrunk(found[0])):
                built = cases.build(case, manifest)
                RUNNERS[built.kind].gradient_accuracy(built, dev)

            out[node] = run
    return out


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
    runs = calls(m, profile, dev)
    for node in m.required_nodes:
        declared = m.kernel_id(profile, node)
        cid = f"runtime-{node}"
        if why is not None:
            run.add(
                judged(
                    cid, "manifest_runtime", False, f"not executed: {why}", extra={"node": node, "declared": declared}
                )
            )
            continue
        call = runs.get(node)
        if call is None:
            run.add(
                judged(
                    cid,
                    "manifest_runtime",
                    False,
                    f"not executed: node {node!r} has no representative case or no "
                    "input builder (ws1_matrix.cases.BUILDERS; docs/adding_a_node.md)",
                    extra={"node": node, "declared": declared},
                )
            )
            continue
        try:
            with use_profile(profile), record() as rec:
                call()
            cases.forget()
        except KernelUnavailable as exc:
            run.add(
                judged(
                    cid,
                    "manifest_runtime",
                    False,
                    f"missing_required: {exc}",
                    extra={"node": node, "declared": declared},
                )
            )
            continue
        s = rec.summary().get(node)
        problems = node_problems(s, declared, family, dev.type, need_backward=True)
        others = sorted(rec.ops() - {node})
        detail = (
            "; ".join(problems)
            if problems
            else (f"ran {declared} on {dev.type}: forward {s['forward']}, backward {s['backward']} kernel calls")
        )
        if others and not problems:
            detail += f" (also ran {others})"
        run.add(
            judged(
                cid, "manifest_runtime", not problems, detail, extra={"node": node, "declared": declared, "recorded": s}
            )
        )


def main(argv=None) -> int:
    return gate_main(
        "c2_runtime",
        c2_runtime,
        argv,
        needs_device=True,
        description="C2 runtime: each required node ran its declared kernel",
    )


if __name__ == "__main__":
    sys.exit(main())
