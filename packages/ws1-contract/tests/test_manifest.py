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
    assert m.cases(profile="cpu_bf16", op="attention", tier="long")[0].case_id == "attention-long-decodeB1Sq1Skv32-cpu_bf16"


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
    manifest_data["profiles"]["cuda_bf16"]["nodes"]["rope"]["kernel_id"] = "  "
    _expect(manifest_data, contract, "profiles.cuda_bf16.nodes.rope.kernel_id", "empty kernel id")


def test_duplicate_kernel_id(manifest_data, contract):
    nodes = manifest_data["profiles"]["cpu_bf16"]["nodes"]
    nodes["silu"]["kernel_id"] = nodes["swiglu"]["kernel_id"]
    _expect(manifest_data, contract, "profiles.cpu_bf16.nodes.silu.kernel_id", "duplicate kernel id 'ws1_cpu::swiglu'")


def test_cross_family_kernel_is_rejected(manifest_data, contract):
    manifest_data["profiles"]["ascend_bf16"]["nodes"]["det_gemm"]["kernel_id"] = "ws1_cuda::det_gemm"
    _expect(manifest_data, contract, "profiles.ascend_bf16.nodes.det_gemm.kernel_id", "is not a ascend kernel id")


def test_unknown_node(manifest_data, contract):
    manifest_data["profiles"]["cpu_bf16"]["nodes"]["softmax"] = {"kernel_id": "ws1_cpu::softmax", "source": "x"}
    _expect(manifest_data, contract, "profiles.cpu_bf16.nodes.softmax", "unknown node 'softmax'")


def test_unknown_profile(manifest_data, contract):
    manifest_data["profiles"]["tpu_bf16"] = manifest_data["profiles"]["cpu_bf16"]
    _expect(manifest_data, contract, "profiles.tpu_bf16", "unknown profile 'tpu_bf16'")


def test_missing_profile(manifest_data, contract):
    del manifest_data["profiles"]["ascend_bf16"]
    _expect(manifest_data, contract, "profiles", "profile 'ascend_bf16' of the contract is not declared")


def test_wrong_family(manifest_data, contract):
    manifest_data["profiles"]["triton_cuda_bf16"]["backend_family"] = "cuda"
    _expect(manifest_data, contract, "profiles.triton_cuda_bf16.backend_family", "the contract says 'triton'")


def test_unknown_case_op(manifest_data, contract):
    manifest_data["representative_cases"][3]["op"] = "softmax"
    _expect(manifest_data, contract, "representative_cases[3].op", "unknown op 'softmax'")


def test_case_tier_not_defined(manifest_data, contract):
    c = manifest_data["representative_cases"][0]  # embedding short
    c["tier"] = "long"
    _expect(manifest_data, contract, "representative_cases[0].tier", "tier 'long' is not defined for op 'embedding'")


def test_duplicate_case_id(manifest_data, contract):
    manifest_data["representative_cases"].append(dict(manifest_data["representative_cases"][0]))
    _expect(manifest_data, contract, f"representative_cases[{len(manifest_data['representative_cases']) - 1}].case_id",
            "duplicate case id")


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
