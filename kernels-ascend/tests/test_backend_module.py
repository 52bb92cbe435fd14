"""ws1_ops.backends.ascend, checked here without an NPU: in a scratch interpreter a stand-in
ws1_kernels_ascend defines the ws1_ascend library's op SCHEMAS only (copied from the emulator build of the same
host layer, no implementation — nothing can run), then the registry checks the module against the manifest's
node table exactly as it would on an Atlas host (every node declared, its manifest kernel id among what it runs,
no raw kernel missing). The real import, without torch_npu, must fail."""

import subprocess
import sys

SCRATCH = r"""
import sys, types, torch
import ws1_kernels_ascend_emu  # only for the schemas of the shared host layer
sys.modules["ws1_kernels_ascend"] = types.ModuleType("ws1_kernels_ascend")
lib = torch.library.Library("ws1_ascend", "DEF")
TEST_HOOKS = {"set_soc_cores", "set_gemm_k_panel", "hazard_probes", "hazard_probe", "op_counts",
              "legacy_gemm"}  # the emulator's alone
for s in torch._C._jit_get_all_schemas():
    if s.name.startswith("ws1_ascend_emu::") and s.name.split("::")[1] not in TEST_HOOKS:
        lib.define(str(s).split("::", 1)[1])
from ws1_contract.manifest import load_manifest
from ws1_ops import registry
import ws1_ops.backends.ascend as b
m = load_manifest()
decl = m.profiles["ascend_bf16"]
assert b.FAMILY == "ascend"
assert set(b.KERNELS) == set(m.required_nodes), sorted(set(b.KERNELS) ^ set(m.required_nodes))
for node, impl in b.KERNELS.items():
    kid = decl.nodes[node].kernel_id
    assert kid in impl.runs, (node, kid, impl.runs)
    assert impl.missing == (), (node, impl.missing)
registry.register_backend(b)
print("OK", len(b.KERNELS))
"""


def test_backend_module_matches_the_node_table():
    p = subprocess.run([sys.executable, "-c", SCRATCH], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "OK 11" in p.stdout, p.stdout + p.stderr


def test_backend_module_import_fails_without_the_package():
    p = subprocess.run(
        [sys.executable, "-c", "import ws1_ops.backends.ascend"], capture_output=True, text=True, timeout=300
    )
    assert p.returncode != 0 and "ws1_kernels_ascend" in p.stderr
