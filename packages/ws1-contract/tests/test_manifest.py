"""C2: the manifest's structure, fixtures and declarations; malformed copies name their path."""

import pytest

from ws1_contract import ContractError, load_contract, load_manifest
from ws1_contract.manifest import fixture_hash, manifest_from_dict


@pytest.fixture(scope="module")
def contract():
    return load_contract()


def test_loads(contract):
    m = load_manifest(contract=contract)
    assert m.workload_seed == 20260812
    assert m.active_tokens == 27 and m.total_tokens == 59
    assert [s.length for s in m.fixtures.primary] == [11, 16, 13, 19]
    assert m.fixtures.short.length == 8 and m.fixtures.long.length == 32
    assert m.model.config["num_hidden_layers"] == 36 and m.model.parameter_tensors == 399
    for p in contract.profiles:
        for node in m.required_nodes:
            assert m.kernel_id(p, node)
        for op in m.ops:
            for tier in m.tiers:
                assert m.cases(profile=p, op=op, tier=tier), (p, op, tier)
    assert m.kernel_id("cpu_bf16", "det_gemm") == "ws1_cpu::det_gemm"
    assert (
        m.cases(profile="cpu_bf16", op="attention", tier="long")[0].case_id
        == "attention-long-decodeB1Sq1Skv32-cpu_bf16"
    )


def _expect(data, contract, path, rule):
    with pytest.raises(ContractError) as ei:
        manifest_from_dict(data, contract)
    assert ei.value.path == path, str(ei.value)
    assert rule in ei.value.rule, str(ei.value)


def test_fixture_edit_changes_hash(manifest_data, contract):
    manifest_data["fixtures"]["primary"][2]["prompt"][0] = 121
    _expect(manifest_data, contract, "fixture_identity_sha256", "fixture hash mismatch")
    manifest_data["fixture_identity_sha256"] = fixture_hash(manifest_data["fixtures"])
    manifest_from_dict(manifest_data, contract)  # rehashed: accepted again


def test_empty_kernel_id(manifest_data, contract):
    manifest_data["nodes"]["rope"]["kernels"]["cuda_bf16"]["kernel_id"] = "  "
    _expect(manifest_data, contract, "nodes.rope.kernels.cuda_bf16.kernel_id", "empty kernel id")


def test_duplicate_kernel_id(manifest_data, contract):
    nodes = manifest_data["nodes"]
    nodes["silu"]["kernels"]["cpu_bf16"]["kernel_id"] = nodes["swiglu"]["kernels"]["cpu_bf16"]["kernel_id"]
    _expect(manifest_data, contract, "nodes.silu.kernels.cpu_bf16.kernel_id", "duplicate kernel id 'ws1_cpu::swiglu'")


def test_cross_family_kernel_is_rejected(manifest_data, contract):
    manifest_data["nodes"]["det_gemm"]["kernels"]["ascend_bf16"]["kernel_id"] = "ws1_cuda::det_gemm"
    _expect(manifest_data, contract, "nodes.det_gemm.kernels.ascend_bf16.kernel_id", "is not a ascend kernel id")


def test_unknown_node(manifest_data, contract):
    manifest_data["nodes"]["softmax"] = manifest_data["nodes"]["silu"]
    _expect(manifest_data, contract, "nodes.softmax", "unknown op 'softmax'")


def test_node_of_the_contract_missing_from_the_table(manifest_data, contract):
    del manifest_data["nodes"]["rope"]
    _expect(manifest_data, contract, "nodes", "the contract's op 'rope' has no row in the node table")


def test_unknown_profile(manifest_data, contract):
    manifest_data["nodes"]["rope"]["kernels"]["tpu_bf16"] = {"kernel_id": "ws1_tpu::rope", "source": "x"}
    _expect(manifest_data, contract, "nodes.rope.kernels.tpu_bf16", "unknown profile 'tpu_bf16'")


def test_missing_profile(manifest_data, contract):
    del manifest_data["nodes"]["rope"]["kernels"]["ascend_bf16"]
    _expect(
        manifest_data, contract, "nodes.rope.kernels", "no kernel declared for profile 'ascend_bf16' (missing_required)"
    )


def test_helper_node_needs_a_reason_and_no_kernels(manifest_data, contract):
    manifest_data["nodes"]["pack"]["reason"] = " "
    _expect(manifest_data, contract, "nodes.pack", "profile_independent helper with a reason")


def test_bad_row_kind_and_unknown_case_tier(manifest_data, contract):
    manifest_data["nodes"]["rope"]["rows"] = "column"
    _expect(manifest_data, contract, "nodes.rope.rows", "must be one of ['token', 'sequence', 'layout']")
    manifest_data["nodes"]["rope"]["rows"] = "token"
    manifest_data["nodes"]["rope"]["cases"]["medium"] = manifest_data["nodes"]["rope"]["cases"]["short"]
    _expect(manifest_data, contract, "nodes.rope.cases.medium", "unknown tier 'medium'")


def test_fixture_summary_must_match_the_fixtures(manifest_data, contract):
    manifest_data["fixture_summary"]["active_tokens"] = 28
    _expect(manifest_data, contract, "fixture_summary.active_tokens", "declares 28, the fixtures give 27")


def test_cases_are_derived_one_per_profile_node_tier(contract):
    m = load_manifest(contract=contract)
    ids = [c.case_id for c in m.representative_cases]
    assert len(ids) == len(set(ids)) == len(contract.profiles) * sum(len(d.cases) for d in m.nodes.values())
    assert m.extra_tiers == {"long": ["attention"]}
    assert m.nodes_where(rows="sequence") == ["attention"] and m.helper_nodes.keys() == {"pack"}


def test_wrong_type_in_fixture(manifest_data, contract):
    manifest_data["fixtures"]["primary"][1]["completion"][0] = "210"
    _expect(manifest_data, contract, "fixtures.primary[1].completion[0]", "expected an integer")


def test_missing_key(manifest_data, contract):
    del manifest_data["workload_seed"]
    _expect(manifest_data, contract, "workload_seed", "required field missing")


def test_unknown_kernel_lookup(contract):
    m = load_manifest(contract=contract)
    with pytest.raises(ContractError, match="unknown profile"):
        m.kernel_id("tpu", "rope")
    with pytest.raises(ContractError, match="missing_required"):
        m.kernel_id("cpu_bf16", "pack")
