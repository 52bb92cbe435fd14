"""The per-call overhead cuts change no bit: parameter gradients read rows in place when the canonical order
is the identity, one canonical order per keys tensor, one-call stashes used without a copy; and the value
checks that would be host syncs on a device are skipped only where the caller vouches for the values."""

import pytest
import torch

import ws1_ops
from ws1_ops import OpInputError, canonical
from ws1_ops.canonical import canonical_order, is_identity

BF = torch.bfloat16


def _bits(t):
    return t.detach().contiguous().view(torch.int16 if t.dtype == BF else torch.int32)


def _step(keys, seed=0):
    """A small chain with every parameter-gradient kind (embedding, rms_norm, qk_norm, det_gemm, lm_head),
    forward + backward inside canonical_grads(); returns the parameter gradients."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    T, H, V = keys.numel(), 32, 50
    p = {
        n: (torch.randn(*s, generator=g, device="cpu") * 0.1).to(BF).requires_grad_()
        for n, s in (("emb", (V, H)), ("norm", (H,)), ("qk", (8,)), ("w", (H, H)), ("head", (V, H)))
    }
    ids = torch.randint(V, (T,), generator=g, device="cpu")
    with ws1_ops.use_profile("cpu_bf16"):
        x = ws1_ops.embedding(ids, p["emb"], keys)
        x = ws1_ops.rms_norm(x.float(), p["norm"], 1e-6, keys)
        x = ws1_ops.qk_norm(x.view(T, 4, 8), p["qk"], 1e-6, keys).view(T, H)
        x = ws1_ops.det_gemm(x, p["w"], keys)
        lp = ws1_ops.logprob(ws1_ops.lm_head(x, p["head"], keys), ids)
        with ws1_ops.canonical_grads():
            (-lp.sum()).backward()
    return {n: t.grad for n, t in p.items()}


def test_in_place_rows_give_the_gathered_rows_bits(monkeypatch):
    """Keys in order, no padding: the order is the identity and the dW kernels read dy and x in place. The
    same step with the shortcut disabled (every row gathered by index_select, as before) has the same bits."""
    keys = torch.arange(40, dtype=torch.int64, device="cpu")
    perm = canonical_order(keys, 40)
    assert is_identity(perm, 40) and not is_identity(perm, 39)
    fast = _step(keys)
    monkeypatch.setattr("ws1_ops.backends.cpu.is_identity", lambda perm, n: False)
    slow = _step(keys)
    for n in fast:
        assert torch.equal(_bits(fast[n]), _bits(slow[n])), n


def test_identity_is_marked_only_when_it_is_one():
    assert not is_identity(canonical_order(torch.tensor([1, 0, 2], device="cpu"), 3), 3)
    assert not is_identity(canonical_order(torch.tensor([0, -1, 2], device="cpu"), 3), 3)  # padding dropped
    assert not is_identity(torch.arange(3, device="cpu"), 3)  # unmarked: gathered
    ex = canonical.expand_rows(canonical_order(torch.arange(3, device="cpu"), 3), 4)
    assert is_identity(ex, 12) and torch.equal(ex, torch.arange(12, device="cpu"))


def test_canonical_order_once_per_keys_tensor():
    keys = torch.tensor([5, 3, -1, 4], device="cpu")
    a = canonical_order(keys, 4)
    assert canonical_order(keys, 4) is a  # cached by identity and version
    keys[0] = 1  # an in-place change: recomputed
    b = canonical_order(keys, 4)
    assert b is not a and b.tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="share a logical key"):
        canonical_order(torch.tensor([1, 1], device="cpu"), 2)


def test_value_checks_run_unless_the_caller_vouches():
    w = torch.zeros(10, 4, dtype=BF, device="cpu")
    bad = torch.tensor([3, 10], device="cpu")
    with ws1_ops.use_profile("cpu_bf16"):
        with pytest.raises(OpInputError, match="token id 10 out of range"):
            ws1_ops.embedding(bad, w)
        with pytest.raises(OpInputError, match="positions must be >= 0"):
            ws1_ops.rope(torch.zeros(2, 1, 4, dtype=BF, device="cpu"), torch.tensor([0, -1], device="cpu"))
        with ws1_ops.trusted_inputs():
            # the Python check is skipped; the cpu kernel's own check still refuses (fail closed)
            with pytest.raises(RuntimeError, match="out of range|outside"):
                ws1_ops.embedding(bad, w)
        with pytest.raises(OpInputError):
            ws1_ops.embedding(bad, w)  # the scope ended: checked again
