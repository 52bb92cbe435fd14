"""``python -m ws1_matrix <gate> [PROFILE ...] [options]`` — every gate of the harness, one style.

    c2-runtime [PROFILE ...]            C2 runtime: each required node ran its declared kernel
    c3 [PROFILE ...] [--op OP]          C3 forward accuracy + invariance          (nox -s c3_forward)
    c4 [PROFILE ...] [--op OP]          C4 gradient accuracy + invariance         (nox -s c4_gradient)
    c5 [PROFILE ...]                    C5 elementwise inventory                  (nox -s c5_inventory)
    c6 [PROFILE ...] [--models M,...]   C6 decode vs prefill                      (nox -s c6_decode_prefill)
    c7 [PROFILE ...]                    C7 stateful KV caches                     (nox -s c7_stateful_kv)
    c8 [PROFILE ...] [--execute]        C8 the four-judgment matrix               (nox -s c8_matrix)
    c9 [PROFILE ...]                    C9 the model on its device, nodes observed (nox -s c9_model)
    c10 [PROFILE ...] [--model M] [--candidate NAME]  C10 the chain gate          (nox -s c10_chain_gate)
    report EVIDENCE.json                re-render a C8 record's Markdown table and SVG figure
    nodes [--json]                      every place each node of the node table must appear (not a gate)
    fsdp [PROFILE] [--world 1,2,4]      FSDP2 on gloo: per-rank log-probs, gradients run to run and across
                                        world sizes                              (nox -s fsdp_check)
    tp [PROFILE] [--world 1,2,4,8]      tensor parallel on gloo: the same log-probs at TP 1/2/4/8 (nox -s tp_check)
    cp [PROFILE] [--world 1,2,4]        context parallel on gloo: the same attention and gradients, and the same
                                        log-probs, at CP 1/2/4 on one long sequence (nox -s cp_check)
    parallel [PROFILE]                  fsdp, tp and cp: the parallel-invariant order's gate (nox -s parallel_gate)
    rl-onpolicy [PROFILE] [--steps N]   the same GRPO run on a profile and on candidates (nox -s rl_onpolicy)
    triton-aot [--arch 90,80]           the Triton kernels compiled for sm_90a/sm_80, no GPU (nox -s triton_aot)
    vllm [PROFILE ...] [--control NAME] vLLM's log-probs vs teacher forcing per serving regime, in .venv-vllm
                                        (nox -s vllm_gate)

C1 and C2 (static) are ``python -m ws1_contract c1|c2``; C11 is ``ci/c11.py``. ``<gate> --help``
lists a gate's options. Common: ``--json`` (records instead of tables), ``--evidence-dir DIR``.
``WS1_STRAY_DEVICE=meta`` runs a gate with torch's default device set to ``meta``, so a tensor made
without a device fails on a CPU host as it would on a GPU (:mod:`ws1_matrix.stray`).
Exit codes: 0 every cell green (N/A aside; all-N/A is not green), 1 a red cell or a broken
contract/evidence file (red wins over an absent device), 2 a requested profile's device is absent
or the command line names an unknown gate, op or profile — always one line on stderr.
"""

from __future__ import annotations

import importlib
import os
import sys

# torch's switch for 2 MB-aligned, madvise(MADV_HUGEPAGE) CPU allocations (c10 alloc_cpu), read once
# at the first allocation, so set before torch is imported. The gates (C3-C10 all run through here)
# allocate and touch vocabulary-sized tensors (2.5 GB FP32 gradients) many times, and with 4 KB pages
# the kernel's page faults cost as much as the arithmetic (C4's lm_head cells on a 2-core host: 160 s,
# 138 s of it system time; with it 118 s, 73 s). It changes where memory lies, never a value.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from ws1_contract.errors import EvidenceError  # noqa: E402

EXIT_BAD_ARGS = 2

# command -> (module of ws1_matrix, how its main is called)
GATES = {
    "c2-runtime": ("runtime", ()),
    "c3": ("forward_gradient", ("c3",)),
    "c4": ("forward_gradient", ("c4",)),
    "c5": ("inventory", ()),
    "c6": ("decode_prefill", ()),
    "c7": ("stateful_kv", ()),
    "c8": ("matrix", ()),
    "c9": ("model_nodes", ()),
    "c10": ("chain_gate", ()),
    "nodes": ("node_places", ()),
    "fsdp": ("fsdp_check", ()),
    "tp": ("tp_check", ()),
    "cp": ("cp_check", ()),
    "parallel": ("parallel_gate", ()),
    "rl-onpolicy": ("rl_onpolicy", ()),
    "triton-aot": ("triton_aot", ()),
    "vllm": ("vllm_gate", ()),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_BAD_ARGS
    cmd, rest = argv[0], argv[1:]
    if cmd in GATES:
        from .stray import from_env

        module, extra = GATES[cmd]
        with from_env():
            return importlib.import_module(f"ws1_matrix.{module}").main(rest, *extra)
    if cmd == "report":
        from . import report

        try:
            return report.main(rest)
        except EvidenceError as exc:
            print(f"ws1 report: {exc}", file=sys.stderr)
            return 1
    print(f"ws1-matrix: unknown command {cmd!r} ({', '.join([*GATES, 'report'])})", file=sys.stderr)
    return EXIT_BAD_ARGS


if __name__ == "__main__":
    sys.exit(main())
