"""``python -m ws1_qwen3 c6|c7|c9 [PROFILE ...] [options]``: the model gates (see each module)."""

import sys

from ws1_contract import gate_main

from . import c6, c7, c9, c10

GATES = {
    "c6": ("c6_decode_prefill", c6.c6, c6.add_args, "C6: decode vs prefill, operator and model level"),
    "c7": ("c7_stateful_kv", c7.c7, c7.add_args, "C7: stateful KV caches B1 (contiguous) and B2 (paged)"),
    "c9": ("c9_model", c9.c9, c9.add_args, "C9: the model runs on its profile's device; node kinds observed"),
    "c10": ("c10_chain_gate", c10.c10, c10.add_args, "C10: the chain gate on the whole model"),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in GATES:
        print(f"usage: python -m ws1_qwen3 {{{','.join(GATES)}}} [PROFILE ...] [--json] [options]", file=sys.stderr)
        return 2
    gate, body, add_args, desc = GATES[argv[0]]
    if argv[0] == "c10" and any(a == "--candidate" or a.startswith("--candidate=") for a in argv):
        gate = "c10_negative_control"      # its own evidence file: a red negative control is the expected outcome
    return gate_main(gate, body, argv[1:], needs_device=True, add_args=add_args, description=desc)


if __name__ == "__main__":
    sys.exit(main())
