"""WS1 chain nodes: batch-invariant ops with canonical backward.

    import ws1_ops
    with ws1_ops.use_profile("cpu_bf16"), ws1_ops.record() as rec:
        y = ws1_ops.det_gemm(x, w)            # x [M, K] BF16, w [N, K] -> [M, N] BF16
    rec.summary()                             # {'det_gemm': {'kernel_ids': ['ws1_cpu::det_gemm'], ...}}

Each node of the manifest's node table is ``ws1_ops.<node>``, the public function of
``ws1_ops.ops.<node>`` (imported on first use: no list of nodes is written here); its FP32
reference, with the same name and arguments, is in :mod:`ws1_ops.reference`. The kernels come from
the active profile's family (``cpu``, ``triton``, ``cuda``, ``ascend``); a missing kernel package is
an error, never a fallback.
"""

import importlib
import pkgutil

from . import reference
from .canonical import canonical_order, expand_rows, logical_keys
from .errors import OpInputError, graph_safe, trusted_inputs
from .grads import CanonicalGrads, canonical_grads
from .ops._common import cast_once
from .ops.pack import cu_seqlens_from_lengths, pack, padded_segments, unpack
from .registry import (
    Kernel,
    KernelUnavailable,
    NoProfile,
    Recorder,
    active,
    family_available,
    kernels_for,
    record,
    use_candidate,
    use_profile,
)


def _node_modules() -> list[str]:
    from . import ops

    return [m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_")]


def __getattr__(name: str):
    # REQUIRED_NODES derives from the manifest's node table; ws1_ops.<node> is ws1_ops.ops.<node>.<node>
    # (imported on first use, so no list of nodes is written here)
    if name == "REQUIRED_NODES":
        from ws1_contract.manifest import load_manifest

        value = tuple(load_manifest().required_nodes)
    elif not name.startswith("_") and name in _node_modules():
        value = getattr(importlib.import_module(f".ops.{name}", __name__), name, None)
        if value is None:
            raise AttributeError(f"ws1_ops/ops/{name}.py defines no public function {name}()")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "REQUIRED_NODES",
    "CanonicalGrads",
    "canonical_grads",
    "cast_once",
    "Kernel",
    "KernelUnavailable",
    "NoProfile",
    "OpInputError",
    "Recorder",
    "active",
    "canonical_order",
    "cu_seqlens_from_lengths",
    "expand_rows",
    "family_available",
    "graph_safe",
    "kernels_for",
    "logical_keys",
    "pack",
    "padded_segments",
    "record",
    "reference",
    "trusted_inputs",
    "unpack",
    "use_candidate",
    "use_profile",
]  # and ws1_ops.<node> for every op module ws1_ops/ops/<node>.py


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_node_modules()})
