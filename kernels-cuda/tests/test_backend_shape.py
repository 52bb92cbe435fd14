"""ws1_ops.backends.cuda has the one backend shape: KERNELS covers exactly the manifest's cuda_bf16 nodes,
each node runs its manifest kernel id, COUNTER reads ws1_cuda::calls — checked by the registry itself.

No CUDA library can load on a CPU host, so the check runs in a subprocess against stand-in ops: the op
schemas are read from the real registration file (csrc/ws1_cuda.cpp) and defined with torch.library, so
the backend must use exactly the ops that file registers. The stand-ins are never called. Negative
control: the same run with one schema dropped leaves that node missing (red), never served otherwise."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import PKG, ROOT  # noqa: E402

SCHEMAS = re.findall(r'm\.def\("([^"]+)"\s*(?:"([^"]*)")?', (PKG / "csrc" / "ws1_cuda.cpp").read_text())

SCRIPT = r"""
import json, sys, types
import torch
schemas, drop = json.loads(sys.argv[1]), sys.argv[2]
lib = torch.library.Library("ws1_cuda", "DEF")
for s in schemas:
    if s.split("(")[0] != drop:
        lib.define(s)
lib.impl("calls", lambda: "{}", "CompositeExplicitAutograd")
sys.modules["ws1_kernels_cuda"] = types.ModuleType("ws1_kernels_cuda")   # stand-in: the ops above
from ws1_ops import registry
from ws1_ops.backends import cuda
registry.register_backend(cuda)
print(json.dumps({
    "family": cuda.FAMILY,
    "nodes": sorted(cuda.KERNELS),
    "runs": {n: list(i.runs) for n, i in cuda.KERNELS.items()},
    "missing": {n: list(i.missing) for n, i in cuda.KERNELS.items() if i.missing},
    "registered": sorted(n for (n, fam) in registry._KERNELS if fam == "cuda"),
    "ids": {n: k.kernel_id for (n, fam), k in registry._KERNELS.items() if fam == "cuda"},
    "counter": cuda.COUNTER(),
}))
"""


def run(drop: str = "") -> dict:
    schemas = [a + b for a, b in SCHEMAS]
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(schemas), drop], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def manifest_cuda() -> dict[str, str]:
    nodes = json.loads((ROOT / "contracts" / "ws1_manifest.json").read_text())["nodes"]
    return {
        n: s["kernels"]["cuda_bf16"]["kernel_id"] for n, s in nodes.items() if (s.get("kernels") or {}).get("cuda_bf16")
    }


def test_kernels_cover_the_manifest_with_its_ids():
    declared = manifest_cuda()
    assert len(declared) == 11
    got = run()
    assert got["family"] == "cuda" and got["nodes"] == sorted(declared) and got["missing"] == {}
    assert got["registered"] == sorted(declared)
    assert got["ids"] == declared
    for node, kid in declared.items():
        assert kid in got["runs"][node] and all(r.startswith("ws1_cuda::") for r in got["runs"][node]), node
    assert got["counter"] == {}


def test_a_missing_op_leaves_its_node_missing():
    got = run(drop="attention_bwd")
    assert got["missing"] == {"attention": ["attention_bwd"]}
    assert "attention" not in got["registered"] and "det_gemm" in got["registered"]
