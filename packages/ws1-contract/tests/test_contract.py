"""C1: the contract loads and resolves; every malformed copy is rejected with its JSON path."""

import json

import pytest
import torch

from ws1_contract import ContractError, load_contract
from ws1_contract.contract import contract_from_dict, fingerprint_of


def test_loads_and_resolves():
    c = load_contract()
    assert sorted(c.profiles) == ["ascend_bf16", "cpu_bf16", "cuda_bf16", "triton_cuda_bf16"]
    assert c.family("ascend_bf16") == "ascend"
    th = c.resolve("forward_accuracy", "det_gemm", torch.bfloat16)
    assert (th.atol, th.rtol) == (5e-2, 2e-2)
    assert c.resolve("gradient_accuracy", "lm_head", "bf16").atol == 1e-1
    assert c.resolve("gradient_accuracy", "logprob", "bfloat16").atol == 5e-2
    assert c.resolve("forward_accuracy", "silu", "float32").atol == 1e-5
    assert c.resolve("forward_invariance", "attention", "bfloat16").atol == 0
    assert c.is_bitwise("gradient_invariance") and not c.is_bitwise("forward_accuracy")
    assert c.aggregate_thresholds("bfloat16") == {"max_abs_dlogp": 0.06, "approx_kl0": 0.05, "clipfrac0": 0}
    assert c.clip_interval == (0.8, 1.2)
    assert len(c.ops) == 12


def test_fingerprint_is_sorted_compact_sha256(raw_contract):
    import hashlib

    c = load_contract()
    want = hashlib.sha256(json.dumps(raw_contract, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert c.fingerprint == want == fingerprint_of(raw_contract)


@pytest.mark.parametrize(
    "query, match",
    [
        (("forward_speed", "det_gemm", "bfloat16"), r"^judgments: unknown judgment 'forward_speed'"),
        (("forward_accuracy", "softmax", "bfloat16"), r"^op_classes: unknown op 'softmax'"),
        (("forward_accuracy", "det_gemm", "int8"), r"^dtype_policy.supported_dtypes: unknown dtype 'int8'"),
        (("forward_accuracy", "det_gemm", torch.float8_e4m3fn), r"out of scope"),
    ],
)
def test_resolve_bad_queries(query, match):
    with pytest.raises(ContractError, match=match):
        load_contract().resolve(*query)


def test_unknown_profile():
    with pytest.raises(ContractError, match=r"^profiles: unknown profile 'tpu_bf16'"):
        load_contract().family("tpu_bf16")


def _expect(data, path, rule):
    with pytest.raises(ContractError) as ei:
        contract_from_dict(data)
    assert ei.value.path == path, str(ei.value)
    assert rule in ei.value.rule, str(ei.value)


def test_missing_key(contract_data):
    del contract_data["judgments"]["forward_accuracy"]["by_op_class"]["reduction"]["bfloat16"]["rtol"]
    _expect(contract_data, "judgments.forward_accuracy.by_op_class.reduction.bfloat16.rtol", "required field missing")


def test_wrong_type(contract_data):
    contract_data["judgments"]["forward_accuracy"]["by_op_class"]["logprob"]["bfloat16"]["atol"] = "0.06"
    _expect(contract_data, "judgments.forward_accuracy.by_op_class.logprob.bfloat16.atol", "expected a number, got str")


def test_bool_is_not_a_number(contract_data):
    contract_data["judgments"]["forward_accuracy"]["by_op_class"]["logprob"]["bfloat16"]["rtol"] = False
    _expect(
        contract_data, "judgments.forward_accuracy.by_op_class.logprob.bfloat16.rtol", "expected a number, got bool"
    )


def test_unknown_key(contract_data):
    contract_data["profiles"]["cpu_bf16"]["fallback"] = "cuda"
    _expect(contract_data, "profiles.cpu_bf16", "extra fields found (fallback)")


def test_nonzero_invariance_threshold(contract_data):
    contract_data["judgments"]["forward_invariance"]["by_op_class"]["reduction"]["bfloat16"]["atol"] = 1e-7
    _expect(
        contract_data,
        "judgments.forward_invariance.by_op_class.reduction.bfloat16.atol",
        "an invariance threshold must be 0",
    )


def test_unknown_profile_family(contract_data):
    contract_data["profiles"]["cpu_bf16"]["backend_family"] = "tpu"
    _expect(contract_data, "profiles.cpu_bf16.backend_family", "unknown family 'tpu'")


def test_wrong_family_for_required_profile(contract_data):
    contract_data["profiles"]["ascend_bf16"]["backend_family"] = "cuda"
    contract_data["profiles"]["ascend_bf16"]["device_type"] = "cuda"
    _expect(contract_data, "profiles.ascend_bf16.backend_family", "must be family 'ascend'")


def test_missing_profile(contract_data):
    del contract_data["profiles"]["triton_cuda_bf16"]
    _expect(contract_data, "profiles", "required profile 'triton_cuda_bf16' is missing")


def test_unknown_op_class(contract_data):
    contract_data["op_classes"]["softmaxes"] = ["softmax"]
    _expect(contract_data, "op_classes", "unknown op class(es) ['softmaxes']")


def test_op_in_two_classes(contract_data):
    contract_data["op_classes"]["reduction"].append("rope")
    _expect(contract_data, "op_classes.reduction[4]", "already in class 'elementwise'")


def test_unknown_judgment(contract_data):
    contract_data["judgments"]["speed"] = contract_data["judgments"]["forward_accuracy"]
    _expect(contract_data, "judgments", "unknown judgment(s) ['speed']")


def test_unknown_dtype_row(contract_data):
    contract_data["judgments"]["forward_accuracy"]["by_op_class"]["reduction"]["int4"] = {"atol": 1, "rtol": 1}
    _expect(contract_data, "judgments.forward_accuracy.by_op_class.reduction", "unknown dtype(s) ['int4']")


def test_negative_threshold(contract_data):
    contract_data["judgments"]["gradient_accuracy"]["by_op_class"]["attention"]["float32"]["atol"] = -1
    _expect(contract_data, "judgments.gradient_accuracy.by_op_class.attention.float32.atol", "finite number >= 0")


def test_private_relaxation(contract_data):
    contract_data["backend_private_tolerance_relaxation"] = True
    _expect(contract_data, "backend_private_tolerance_relaxation", "must be false")


def test_tf32_must_be_disabled(contract_data):
    contract_data["dtype_policy"]["tf32"] = "allowed"
    _expect(contract_data, "dtype_policy.tf32", "must be 'disabled'")


def test_forbidden_role_as_pair_side(contract_data):
    contract_data["comparison_roles"]["pairs"]["invariance"]["rhs"] = "baseline"
    _expect(contract_data, "comparison_roles.pairs.invariance.rhs", "forbidden role 'baseline'")


def test_reversed_role_pair(contract_data):
    contract_data["comparison_roles"]["pairs"]["train_infer_parity"] = {
        "lhs": "inference_style_rollout_decode",
        "rhs": "training_style_teacher_forcing",
    }
    _expect(contract_data, "comparison_roles.pairs.train_infer_parity", "reversed role pair")


def test_forbidden_roles_must_stay_forbidden(contract_data):
    contract_data["comparison_roles"]["forbidden"] = ["baseline"]
    _expect(contract_data, "comparison_roles.forbidden", "'singleton_aggregate' must be forbidden")


def test_clip_interval(contract_data):
    contract_data["aggregates"]["clip_interval"] = [1.1, 1.2]
    _expect(contract_data, "aggregates.clip_interval", "lo < 1 < hi")


def test_not_an_object():
    with pytest.raises(ContractError, match=r"^\$: the contract must be a JSON object"):
        contract_from_dict([1, 2])


def test_non_json_file(tmp_path):
    p = tmp_path / "tolerance_contract.json"
    p.write_text("{ this is not json")
    with pytest.raises(ContractError, match=r"^\$: .*tolerance_contract.json: not JSON"):
        load_contract(p)


def test_missing_file(tmp_path):
    with pytest.raises(ContractError, match="file not found"):
        load_contract(tmp_path / "nope.json")


def test_role_pair_validation():
    c = load_contract()
    c.validate_role_pair("accuracy", "bf16_candidate", "fp32_reference")
    with pytest.raises(ContractError, match="reversed role pair"):
        c.validate_role_pair("accuracy", "fp32_reference", "bf16_candidate")
    with pytest.raises(ContractError, match="may not be a comparison side"):
        c.validate_role_pair("invariance", "singleton_aggregate", "canonical_config")
    with pytest.raises(ContractError, match="unknown role"):
        c.validate_role_pair("invariance", "my_config", "canonical_config")
    with pytest.raises(ContractError, match="is not"):
        c.validate_role_pair("invariance", "bf16_candidate", "canonical_config")


# ---- the tensor-norm rule beside the gradient atol/rtol (issue 11 item 4) ---------------------------


def test_gradient_accuracy_resolves_its_tensor_norm_rule():
    """One resolver gives a gradient judgment everything it must meet; the atol/rtol are unchanged."""
    c = load_contract()
    th = c.resolve("gradient_accuracy", "det_gemm", "bfloat16")
    assert (th.atol, th.rtol) == (1e-1, 2e-2)
    assert 0 < th.max_rel_l2 < 0.5 and 0 < th.min_cosine <= 1
    for op in c.ops:
        for dt in c.dtype_policy.supported_dtypes:
            t = c.resolve("gradient_accuracy", op, dt)
            assert t.max_rel_l2 is not None and t.min_cosine is not None, (op, dt)
    assert c.resolve("forward_accuracy", "det_gemm", "bfloat16").max_rel_l2 is None
    assert c.judgments["gradient_accuracy"].tensor_norm.note


def test_logprob_ops_are_judged_by_their_fp32_row():
    c = load_contract()
    for op in ("logprob", "batch_invariant_logp"):
        assert c.judged_dtype(op, "bfloat16") == "float32"
        assert c.resolve("forward_accuracy", op, c.judged_dtype(op, "bfloat16")).atol == 1e-5
    assert c.judged_dtype("det_gemm", torch.bfloat16) == "bfloat16"


def test_gradient_accuracy_needs_a_tensor_norm_rule(contract_data):
    del contract_data["judgments"]["gradient_accuracy"]["tensor_norm"]
    _expect(contract_data, "judgments.gradient_accuracy.tensor_norm", "required")


@pytest.mark.parametrize(
    "field,value,rule",
    [
        ("max_rel_l2", 0.5, "a halved tensor has rel L2 0.5"),  # would let a halved gradient pass
        ("max_rel_l2", -1e-3, "must be in [0, 0.5)"),
        ("min_cosine", 0.0, "a zeroed tensor has cosine 0"),  # would let a zeroed gradient pass
        ("min_cosine", 1.5, "must be in (0, 1]"),
    ],
)
def test_tensor_norm_limits_that_see_nothing_are_rejected(contract_data, field, value, rule):
    contract_data["judgments"]["gradient_accuracy"]["tensor_norm"]["by_op_class"]["reduction"]["bfloat16"][field] = (
        value
    )
    _expect(contract_data, f"judgments.gradient_accuracy.tensor_norm.by_op_class.reduction.bfloat16.{field}", rule)


def test_tensor_norm_rule_structure(contract_data):
    import copy

    good = copy.deepcopy(contract_data)
    del contract_data["judgments"]["gradient_accuracy"]["tensor_norm"]["by_op_class"]["attention"]["float32"]
    _expect(
        contract_data, "judgments.gradient_accuracy.tensor_norm.by_op_class.attention", "missing dtype(s) ['float32']"
    )
    bad = copy.deepcopy(good)
    bad["judgments"]["forward_invariance"]["tensor_norm"] = good["judgments"]["gradient_accuracy"]["tensor_norm"]
    _expect(bad, "judgments.forward_invariance.tensor_norm", "only a tolerance judgment")
    bad = copy.deepcopy(good)
    bad["judgments"]["gradient_accuracy"]["by_op_class"]["reduction"]["bfloat16"]["max_rel_l2"] = 0.01
    _expect(
        bad,
        "judgments.gradient_accuracy.by_op_class.reduction.bfloat16",
        "belong in judgments.gradient_accuracy.tensor_norm",
    )
    bad = copy.deepcopy(good)
    bad["judgments"]["gradient_accuracy"]["tensor_norm"]["note"] = ""
    _expect(bad, "judgments.gradient_accuracy.tensor_norm.note", "how the limits were chosen")


# ---- the logprob class's FP64-reference row (issue 23 item 5) ------------------------------------------


def _fp64(data):
    return data["judgments"]["forward_accuracy"]["fp64_reference"]


def test_logprob_ops_resolve_an_fp64_reference_row_beside_their_bf16_row():
    """One resolver: the logprob ops (values in FP32) get a second forward row, atol 5e-5 rtol 0 against
    FP64; their BF16 row against the FP32 reference is unchanged; no other op or judgment has one."""
    c = load_contract()
    for op in ("logprob", "batch_invariant_logp"):
        assert c.references("forward_accuracy", op, "float32") == ("float32", "float64")
        th = c.resolve("forward_accuracy", op, "float32", reference="float64")
        assert (th.atol, th.rtol, th.max_rel_l2) == (5e-5, 0.0, None)
        assert (
            c.resolve("forward_accuracy", op, "bfloat16").atol,
            c.resolve("forward_accuracy", op, "bfloat16").rtol,
        ) == (6e-2, 0)
        assert c.references("gradient_accuracy", op, "float32") == ("float32",)
        assert c.references("forward_accuracy", op, "bfloat16") == ("float32",)
    assert c.references("forward_accuracy", "det_gemm", "bfloat16") == ("float32",)
    note = c.judgments["forward_accuracy"].fp64_reference.note  # how it was chosen: the numbers and the control
    assert "V 151936" in note and "atol 5e-5" in note and "variant_logprob_lse_shift" in note


@pytest.mark.parametrize(
    "query, path",
    [
        (
            ("forward_accuracy", "det_gemm", "bfloat16"),
            "judgments.forward_accuracy.fp64_reference.by_op_class.reduction.bfloat16",
        ),
        (
            ("forward_accuracy", "logprob", "bfloat16"),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.bfloat16",
        ),
        (
            ("gradient_accuracy", "logprob", "float32"),
            "judgments.gradient_accuracy.fp64_reference.by_op_class.logprob.float32",
        ),
    ],
)
def test_a_missing_fp64_row_is_an_error_naming_its_path(query, path):
    with pytest.raises(ContractError) as ei:
        load_contract().resolve(*query, reference="float64")
    assert ei.value.path == path and "no FP64-reference row" in ei.value.rule, str(ei.value)


def test_unknown_reference_is_an_error():
    with pytest.raises(ContractError, match="unknown reference 'float16'"):
        load_contract().resolve("forward_accuracy", "logprob", "float32", reference="float16")


def test_fp64_row_moves_the_fingerprint(raw_contract, contract_data):
    _fp64(contract_data)["by_op_class"]["logprob"]["float32"]["atol"] = 4e-5
    assert contract_from_dict(contract_data).fingerprint != fingerprint_of(raw_contract) == load_contract().fingerprint


@pytest.mark.parametrize(
    "mutate, path, rule",
    [
        (
            lambda d: d["judgments"]["forward_accuracy"].pop("fp64_reference"),
            "judgments.forward_accuracy.fp64_reference",
            "required: the logprob class is judged in float32",
        ),
        (
            lambda d: _fp64(d)["by_op_class"].pop("logprob"),
            "judgments.forward_accuracy.fp64_reference.by_op_class",
            "missing op class(es) ['logprob']",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"].pop("float32"),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob",
            "missing dtype(s) ['float32']",
        ),
        # never a relaxation: looser than the BF16 row it is judged beside
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(atol=0.1),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.atol",
            "looser than judgments.forward_accuracy",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(rtol=0.01),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.rtol",
            "never relaxes one",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(atol=-5e-5),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.atol",
            "finite number >= 0",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(atol=float("nan")),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.atol",
            "finite number >= 0",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(atol="5e-5"),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.atol",
            "expected a number, got str",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].pop("rtol"),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32.rtol",
            "required field missing",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"]["float32"].update(max_rel_l2=1e-5),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob.float32",
            "atol and rtol only",
        ),
        (
            lambda d: _fp64(d)["by_op_class"]["logprob"].update(int4={"atol": 0, "rtol": 0}),
            "judgments.forward_accuracy.fp64_reference.by_op_class.logprob",
            "unknown dtype(s) ['int4']",
        ),
        (
            lambda d: _fp64(d)["by_op_class"].update(softmax={"float32": {"atol": 0, "rtol": 0}}),
            "judgments.forward_accuracy.fp64_reference.by_op_class",
            "unknown op class(es) ['softmax']",
        ),
        (
            lambda d: _fp64(d).update(note=""),
            "judgments.forward_accuracy.fp64_reference.note",
            "how the row was chosen",
        ),
        (lambda d: _fp64(d).pop("note"), "judgments.forward_accuracy.fp64_reference.note", "required field missing"),
        (
            lambda d: _fp64(d).update(reference_dtype="float64"),
            "judgments.forward_accuracy.fp64_reference",
            "extra fields found (reference_dtype)",
        ),
        (
            lambda d: d["judgments"]["forward_invariance"].update(fp64_reference=json.loads(json.dumps(_fp64(d)))),
            "judgments.forward_invariance.fp64_reference",
            "only a tolerance judgment",
        ),
    ],
)
def test_malformed_fp64_rows_are_one_line_errors_naming_the_path(contract_data, mutate, path, rule):
    mutate(contract_data)
    with pytest.raises(ContractError) as ei:
        contract_from_dict(contract_data)
    assert "\n" not in str(ei.value)
    assert ei.value.path == path, str(ei.value)
    assert rule in ei.value.rule, str(ei.value)
