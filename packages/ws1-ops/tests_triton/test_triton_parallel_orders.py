"""The parallel-invariant orders (docs/parallel.md) on the Triton kernels, under the interpreter, on gloo: the
row-parallel GEMM's 8-chunk K tree (``ws1_dist.TPOps``) gives one FP32 sum at TP 1, 2, 4 and 8, and context
parallel (``ws1_dist.ContextParallel``) one attention output and dq/dk/dv at CP 1 and 2 — the orders' code run on
this family's dx and attention kernels (strided K-chunk views, query-chunk calls), not only on cpu_bf16's.

Interpreter logic and invariance only (the family's GPU numerics are a GPU host's); small shapes: the interpreter
runs numpy. Ranks are spawned processes: TRITON_INTERPRET=1 (set by conftest) is in their environment before they
import the kernels."""

import os
import socket
import tempfile
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.interpreter_only  # gloo ranks on CPU tensors: the device mode runs one process per GPU

S, HQ, HKV, D = 256, 2, 1, 32  # two 128-position chunks


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 256, generator=g).bfloat16()
    w = (torch.randn(24, 256, generator=g) / 16).bfloat16()
    q = torch.randn(S, HQ, D, generator=g).bfloat16()
    k = torch.randn(S, HKV, D, generator=g).bfloat16()
    v = torch.randn(S, HKV, D, generator=g).bfloat16()
    dout = (torch.randn(S, HQ, D, generator=g) / 8).bfloat16()
    return x, w, q, k, v, dout


def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    import ws1_dist
    from ws1_ops import registry

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        x, w, q, k, v, dout = _inputs()
        got = {}
        with registry.activate("triton_interpreter", "triton"):
            kc = x.shape[1] // world
            mine = slice(rank * kc, (rank + 1) * kc)
            got["tp_sum"] = ws1_dist.TPOps(world, rank, None).row_parallel_sum(x[:, mine], w[:, mine])
            if world <= 2:
                cp = ws1_dist.ContextParallel(S)
                t = slice(cp.tokens.start, cp.tokens.stop)
                ql, kl, vl = (a[t].clone().requires_grad_(True) for a in (q, k, v))
                o = cp.attention(ql, kl, vl)
                o.backward(dout[t])
                for name, a in (("out", o), ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad)):
                    got[name] = cp.gather(a.detach())
        if rank == 0:
            torch.save(got, out)
    finally:
        dist.destroy_process_group()


def test_tp_sums_and_cp_attention_on_the_triton_kernels_are_one_at_every_degree(tri):
    import torch.multiprocessing as mp

    import ws1_dist
    import ws1_ops

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in (1, 2, 4, 8):
            out = str(Path(tmp) / f"w{world}.pt")
            mp.spawn(_rank, args=(world, _port(), out), nprocs=world, join=True)
            results[world] = torch.load(out)
    x, w, q, k, v, dout = _inputs()
    # the one-device references on the same kernels (this process: the `tri` fixture's activation)
    tree = ws1_dist.TPOps(1, 0, None).row_parallel_sum(x, w)
    assert torch.equal(ws1_ops.det_gemm(x, w, k_chunks=ws1_dist.CHUNKS), tree.bfloat16())
    cu = torch.tensor([0, S], dtype=torch.int64)
    pos = torch.arange(S, dtype=torch.int64)
    ql, kl, vl = (a.clone().requires_grad_(True) for a in (q, k, v))
    out = ws1_ops.attention(ql, kl, vl, cu, cu, pos)
    out.backward(dout)
    for world, got in results.items():
        assert torch.equal(got["tp_sum"], tree), world
        if world <= 2:
            assert torch.equal(got["out"], out.detach()) and torch.equal(got["dq"], ql.grad), world
            assert torch.equal(got["dk"], results[1]["dk"]) and torch.equal(got["dv"], results[1]["dv"]), world
    # the orders are other orders than the default's, on this family too (the comparisons can fail)
    assert not torch.equal(ws1_ops.det_gemm_partial(x, w), tree)
