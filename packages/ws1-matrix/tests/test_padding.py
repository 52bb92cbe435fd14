"""Padding reaches the kernels in the model's padded layouts, and a kernel that leaks pad rows into dW
turns the C10 cells red (the ``variant_pad_leak_dw`` negative control), through the gate's own cells."""

from ws1_contract import bitwise
from ws1_matrix.chain_gate import CANONICAL, cell_plans, compare_grads, run_cell
from ws1_qwen3.teacher import teacher_forcing


def test_padded_layouts_run_every_row_through_every_node(tiny, samples):
    """All 4*24 rows reach every traced node (attention included: no gather of the valid rows), and
    the pad rows (key -1) carry garbage token ids, not one repeated pad id."""
    from ws1_qwen3 import teacher

    shapes = {}
    tiny.tracer = lambda layer, node, t, keys: shapes.setdefault(node, t.shape[0])
    try:
        teacher_forcing(tiny, samples, layout="padded_left", padded_length=24)
    finally:
        tiny.tracer = None
    for node in ("embedding", "rope_k", "attention", "swiglu", "mlp_residual", "final_norm"):
        assert shapes[node] == 96, (node, shapes[node])
    assert shapes["lm_head"] == 27 + 96 - sum(s.length for s in samples)  # selected rows + every pad row
    rows, _ = teacher._rows(tiny, samples, "padded_left", 24)
    # attention's segments cover all 96 rows: 4 sequences and 4 pad runs (before: the 59 valid rows)
    assert rows.cu.numel() - 1 == 8 and int(rows.cu[-1]) == 96 and rows.ids[rows.keys < 0].unique().numel() > 4


def test_pad_leak_control_turns_the_cells_with_other_padding_red(tiny, samples):
    """cpu_bf16: every cell bitwise. The control (det_gemm's dW summed over the pad rows too, which
    get a garbage gradient): every det_gemm weight's gradient differs in every cell whose pad rows
    differ from the canonical's (the canonical BN/full is itself right-padded to 20, so B1 and packed,
    without padding, differ too); BN/chunked, the canonical's own layout, stays bitwise, and so do
    all log-probs (the forward is the kernel's)."""
    plans = cell_plans(samples)
    gemm = {n for n, _ in tiny.named_parameters() if n.endswith("_proj.weight")}
    try:
        for profile in ("cpu_bf16", "variant_pad_leak_dw"):
            tiny.profile = profile
            c_logp, _, _, c_grads, _ = run_cell(tiny, *plans[CANONICAL], 27)
            canon = {n: g.detach().clone() for n, g in c_grads.items()}
            red = {}
            for name, (calls, kw) in plans.items():
                if name == CANONICAL:
                    continue
                logp, _, _, grads, _ = run_cell(tiny, calls, kw, 27)
                assert bitwise(logp, c_logp).passed, (profile, name)
                cmp = compare_grads(grads, canon, "full", name)
                if not cmp.passed:
                    red[name] = cmp.n_diff
                    assert set(cmp.first_diff["parameters"]) <= gemm, (name, cmp.first_diff)  # det_gemm's only
            if profile == "cpu_bf16":
                assert red == {}, red
            else:
                assert red == dict.fromkeys(
                    ("B1/full", "B1/chunked", "padded_left", "padded_right", "permuted", "packed"), len(gemm)
                ), red
    finally:
        tiny.profile = "cpu_bf16"
        tiny.zero_grad(set_to_none=True)
