"""The matrix can fail: every kind of wrong kernel turns its cells red, for the right reason.

Shrunk shapes (tests/small.py); the comparisons, transforms and cell logic are the gates' own."""

import functools

import pytest
import torch
from small import args, make_run

import ws1_ops
from ws1_contract import Cell, EvidenceError
from ws1_matrix import compare, rows
from ws1_matrix import forward_gradient as c34
from ws1_ops import registry
from ws1_ops.backends import controls
from ws1_ops.invariance import standard_layouts, thread_counts


def _cells(run):
    return {c.id: c for c in run.cells}


def _failed_transforms(cell):
    return [t["transform"] for t in cell.extra.get("transforms", []) if not t["passed"]]


def test_torch_default_candidate_is_red(small_env):
    """Plain PyTorch ops stay an extra control: the gate is red (at least by the undeclared fallback).
    Which transforms torch's kernels fail depends on the host (on AMX its BF16 GEMM is row-invariant),
    so nothing is asserted about them — the project's own controls below carry that proof."""
    control = functools.partial(ws1_ops.use_candidate, "torch_default")
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["det_gemm"]), activate=control)
    assert any(c.status == "red" for c in run.cells)


# Every invariance family's own control (ws1_ops.backends.controls): per (op, gate, tier) the transforms
# it turns red. Each control's bits are the cpu kernels' (the same on every ISA path), so these sets
# are the same on every host. Everything else judged for that op must stay green — the accuracy cells
# and every other transform — except the attention padding transforms, whose construction is being
# changed to make pad rows reach the kernel (issue 11 item 3): neither side is asserted for them.
T1, TN = (f"threads{t}" for t in thread_counts())
M_SMALL = {"M1", "M2", "M3", "M7", "alone-row0", "alone-row29", "alone-row58", "chunked7"}
PACKED = {"B1", "permuted", "fillers", "padded_inline", "chunked7_op"}
CONTROL_REDS = {
    # batch size: split-K above M=8 — the short batch (M=8) differs once filler rows make M > 8; the
    # primary one (M=59) differs where M drops to 8 or less (B1's samples stay above 8)
    "variant_m_split_k": (
        "det_gemm",
        {
            "c3": {"short": {"random_positions", "padded_right", "padded_left"}, "primary": M_SMALL},
            "c4": {"short": {"random_positions", "padded_right", "padded_left"}, "primary": M_SMALL},
        },
    ),
    # the thread transforms that run another count than the canonical run's (both where the default is > 1; only
    # TN where it is 1: a 1-core host, or a test worker given one core's share)
    "variant_threads_split": (
        "det_gemm",
        {
            g: {
                t: {f"threads{n}" for n in thread_counts() if n != torch.get_num_threads()}
                for t in ("short", "primary")
            }
            for g in ("c3", "c4")
        },
    ),
    # row position: exactly the transforms that move some row to a position of the other parity
    "variant_row_parity": (
        "rms_norm",
        {
            g: {
                "short": {"alone-row7", "permuted", "random_positions", "padded_left", "chunked7"},
                "primary": {"alone-row29", "permuted", "random_positions", "padded_left", "B1", "chunked7"},
            }
            for g in ("c3", "c4")
        },
    ),
    # canonical order of dW: forward untouched; dW red where rows reach the reduction out of key order
    "variant_dw_batch_order": (
        "det_gemm",
        {
            "c3": {"short": set(), "primary": set()},
            "c4": {"short": {"permuted", "chunked7"}, "primary": {"permuted", "B1", "chunked7"}},
        },
    ),
    # packing: every transform that moves a sequence in the packed buffer (one call per chunk does too;
    # the short case is a single sequence at buffer row 0 in every transform)
    "variant_attn_pack_tiles": (
        "attention",
        {
            "c3": {"short": set(), "primary": PACKED | {"chunked7"}, "long": {"decode_batched"}},
            "c4": {"short": set(), "primary": PACKED, "long": {"decode_batched"}},
        },
    ),
    "variant_attn_chunk_tiles": (
        "attention",
        {
            "c3": {"short": set(), "primary": {"chunked7_op", "chunked7"}, "long": set()},
            "c4": {"short": set(), "primary": {"chunked7_op"}, "long": set()},
        },
    ),
    # decode: the long case's decode steps (its thread transforms are decode steps too) and the short
    # case's last 7-chunk, which holds one query (length 8): at the op, a one-query step is a decode step
    "variant_attn_decode_order": (
        "attention",
        {
            "c3": {
                "short": {"chunked7_op", "chunked7"},
                "primary": set(),
                "long": {"decode", "decode_batched", T1, TN},
            },
            "c4": {"short": {"chunked7_op"}, "primary": set(), "long": {"decode", "decode_batched", T1, TN}},
        },
    ),
}
UNASSERTED = {"attention": {"padded_right", "padded_left"}}


def test_every_invariance_family_has_a_registered_control():
    assert set(CONTROL_REDS) <= set(controls.CONTROLS)
    assert set(ws1_ops.candidate_names()) == {"torch_default", *controls.CONTROLS}
    families = {c.breaks for c in controls.CONTROLS.values()}
    assert {
        "batch_size",
        "thread_count",
        "row_position",
        "permutation",
        "packing",
        "chunking",
        "decode_prefill",
    } <= families


@pytest.mark.parametrize("name", sorted(CONTROL_REDS))
def test_control_turns_exactly_its_family_red(small_env, name):
    op, want = CONTROL_REDS[name]
    for gate, body in (("c3", c34.c3_forward), ("c4", c34.c4_gradient)):
        run = make_run({"c3": "c3_forward", "c4": "c4_gradient"}[gate])
        body(run, args(op=[op]), activate=functools.partial(ws1_ops.use_candidate, name))
        cells = _cells(run)
        inv_j, acc_j = (
            ("forward_invariance", "forward_accuracy") if gate == "c3" else ("gradient_invariance", "gradient_accuracy")
        )
        for tier, reds in want[gate].items():
            acc = cells[f"{op}-{tier}-{acc_j}"]
            assert acc.status == "green", (name, acc.id, acc.detail)  # within the accuracy thresholds
            inv = cells[f"{op}-{tier}-{inv_j}"]
            assert inv.extra["recorded"][op]["variant"] == [name]  # the evidence says a control ran
            judged = {t["transform"] for t in inv.extra["transforms"]} - UNASSERTED.get(op, set())
            assert reds <= judged, (name, inv.id, reds - judged)
            bad = set(_failed_transforms(inv)) & judged
            assert bad == reds, (name, inv.id, "red:", sorted(bad), "expected:", sorted(reds))
            assert inv.status == ("red" if reds else "green"), (name, inv.id, inv.detail)


def test_thread_transforms_compare_one_and_canonical_plus_one(small_env):
    """The thread transforms run 1 thread and the canonical count + 1 (never the canonical count
    itself), and the evidence records both counts."""
    canonical = torch.get_num_threads()
    assert thread_counts() == (1, canonical + 1)
    assert [lay.threads for lay in standard_layouts(16) if lay.threads] == [1, canonical + 1]
    run = make_run("c3_forward")
    c34.c3_forward(run, args(op=["det_gemm", "attention"]))
    for c in run.cells:
        if c.judgment == "forward_invariance":
            notes = {t["transform"]: t.get("note", "") for t in c.extra["transforms"]}
            assert notes[TN] == f"threads: {canonical + 1} vs the canonical run's {canonical}", (c.id, notes)
            assert notes[T1] == f"threads: 1 vs the canonical run's {canonical}"


def test_kernel_of_another_family_is_an_undeclared_fallback(small_env):
    real = ws1_ops.kernels_for("cpu")["silu"]
    registry._KERNELS[("silu", "cpu")] = ws1_ops.kernels_for("torch_default")["silu"]
    try:
        run = make_run("c3_forward")
        c34.c3_forward(run, args(op=["silu", "swiglu"]))
    finally:
        registry._KERNELS[("silu", "cpu")] = real
    for c in run.cells:
        if c.extra["op"] == "silu":
            assert c.status == "red" and "undeclared fallback" in c.detail, c.detail
            assert c.extra["kernel"]["families"] == ["torch_default"]
        else:
            assert c.status == "green", c.detail
    # the run's provenance names the family that actually ran, and says it is wrong
    assert run.provenance["actual_backend"] == "cpu,torch_default"
    assert any("undeclared fallback" in p for p in run.extra["provenance_problems"])


def test_missing_kernel_package_is_red_never_served_by_another_family(small_env, monkeypatch):
    monkeypatch.setattr(
        ws1_ops, "family_available", lambda fam: "ModuleNotFoundError: No module named 'ws1_kernels_cpu'"
    )
    run = make_run("c3_forward")
    c34.c3_forward(run, args(op=["det_gemm", "pack"]))
    cells = _cells(run)
    for tier in ("short", "primary"):
        c = cells[f"det_gemm-{tier}-forward_accuracy"]
        assert c.status == "red" and "not executed on this host: cpu kernel package missing" in c.detail
        assert "recorded" not in c.extra, "nothing may run in its place"
    assert cells["pack-short-forward_accuracy"].status == "N/A"


def test_missing_representative_case_is_red_not_skipped(tmp_path, monkeypatch):
    from small import small_contracts

    from ws1_matrix import cases

    def drop(m):
        del m["nodes"]["rope"]["cases"]["short"]

    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(small_contracts(tmp_path / "c", edit=drop)))
    cases.forget()
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["rope"]))
    cells = _cells(run)
    for j in ("gradient_accuracy", "gradient_invariance"):
        c = cells[f"rope-short-{j}"]
        assert c.status == "red" and "missing representative case for rope × short" in c.detail
        assert cells[f"rope-primary-{j}"].status == "green"


def test_hidden_na_is_rejected():
    with pytest.raises(EvidenceError, match="hidden N/A"):
        Cell(id="det_gemm-short-forward_accuracy", judgment="forward_accuracy", status="N/A", detail="skipped")
    with pytest.raises(EvidenceError, match="hidden N/A"):
        Cell(id="x", judgment="forward_accuracy", status="N/A", detail="", na_reason="profile_independent")


def test_digest_path_green_and_caught(small_env, monkeypatch):
    """The path the real vocabulary-sized gradients take (canonical kept as sha256 digests per row
    block, reference gradient computed block by block), forced onto small tensors."""
    monkeypatch.setattr(rows, "DIGEST_ABOVE", 100)
    monkeypatch.setattr(rows, "BLOCKWISE_REF_ABOVE", 100)
    monkeypatch.setattr(compare, "BLOCK_ELEMENTS", 4096)
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["lm_head", "embedding"]))
    cells = _cells(run)
    for op in ("lm_head", "embedding"):
        inv = cells[f"{op}-primary-gradient_invariance"]
        assert inv.status == "green", inv.detail
        acc = cells[f"{op}-primary-gradient_accuracy"]
        assert acc.status == "green", acc.detail
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["lm_head"]), activate=functools.partial(ws1_ops.use_candidate, "torch_default"))
    inv = _cells(run)["lm_head-primary-gradient_invariance"]
    details = [t["detail"] for t in inv.extra["transforms"] if not t["passed"]]
    assert any(
        "row blocks differ in their bits (sha256" in d and "first differing block starts at row" in d for d in details
    ), details
