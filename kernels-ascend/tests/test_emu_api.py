"""The emulator itself: the order it gives ReduceSum is the documented one, and the ops fail closed on bad input
with one line naming the problem."""

import pytest
import torch
from emu_cases import EPS, E, same_bits


def _tree64(v: torch.Tensor) -> torch.Tensor:
    lanes = torch.zeros(64, dtype=torch.float32)
    lanes[: v.numel()] = v
    while lanes.numel() > 1:  # lanes 2i and 2i+1 added, level by level (fp32 adds)
        lanes = lanes[0::2] + lanes[1::2]
    return lanes[0]


def test_reduce_sum_order_is_the_documented_method_2():
    # "ReduceSum" page (A2/A3, first-n-elements form): binary tree inside each 64-lane fp32 repeat, repeats
    # added in sequence. rms_norm's rstd exposes it: ss = per 4096-tile ReduceSum(x*x), tiles added in order.
    g = torch.Generator().manual_seed(11)
    H = 4200
    x = torch.randn(1, H, generator=g) * 3
    sq = x[0] * x[0]
    ss = None
    for t0 in range(0, H, 4096):
        tile = sq[t0 : t0 + 4096]
        acc = None
        for r0 in range(0, tile.numel(), 64):
            part = _tree64(tile[r0 : r0 + 64])
            acc = part if acc is None else acc + part
        ss = acc if ss is None else ss + acc
    inner = ss / torch.tensor(float(H)) + torch.tensor(EPS, dtype=torch.float32)
    rstd = torch.tensor(1.0) / torch.sqrt(inner)
    _, got = E.rms_norm(x, torch.ones(H).bfloat16(), EPS)
    assert same_bits(got, rstd.reshape(1))
    # and a sequential sum is NOT what it does (else this test could not tell the orders apart)
    seq = torch.tensor(0.0)
    for v in sq:
        seq = seq + v
    assert not same_bits(
        (torch.tensor(1.0) / torch.sqrt(seq / H + torch.tensor(EPS, dtype=torch.float32))).reshape(1), got
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: E.rms_norm(torch.randn(3, 8).double(), torch.ones(8), EPS), "x must be bfloat16 or float32"),
        (lambda: E.rms_norm(torch.randn(3, 8), torch.ones(7), EPS), "weight must be [8]"),
        (
            lambda: E.det_gemm(torch.randn(3, 8).bfloat16(), torch.randn(4, 9).bfloat16()),
            "need x [M, K] and weight [N, K]",
        ),
        (lambda: E.embedding(torch.tensor([0, 5]), torch.randn(5, 4)), "ids out of range [0, 5)"),
        (lambda: E.logprob(torch.randn(2, 6), torch.tensor([1, 6])), "targets out of range [0, 6)"),
        (
            lambda: E.attention(
                *[torch.randn(2, 4, 8).bfloat16()] * 3,
                torch.tensor([0, 2]),
                torch.tensor([0, 2]),
                torch.tensor([0, 2]),
                0.1,
            ),
            "q_pos[1] = 2 outside its sequence's 2 keys",
        ),
        (lambda: E.silu(torch.randn(4, 4)[:, :2]), "must be contiguous"),
    ],
)
def test_bad_input_is_one_line_naming_the_problem(call, message):
    with pytest.raises(RuntimeError) as e:
        call()
    first = str(e.value).splitlines()[0]
    assert message in first, first
