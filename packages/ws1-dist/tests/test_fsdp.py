"""ws1_dist's refusals, and what goes wrong without it, each one line (in-process, a world-1 gloo group).

The multi-rank results (per-rank log-probs == one device, gradients run to run, world 1 == one device, the
difference across world sizes, the variant control) are ws1_matrix's fsdp check, run at 1, 2 and 4 ranks by
the parallel gate (packages/ws1-matrix/tests/test_parallel_gate.py)."""

import contextlib

import pytest
import torch
import torch.distributed as dist

import ws1_dist
import ws1_ops
import ws1_qwen3


@contextlib.contextmanager
def _group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _loss(model):
    tf = ws1_qwen3.teacher_forcing(model, ws1_qwen3.fixture_samples(), layout="packed", grad=True)
    return tf.loss


def test_refusals_without_a_process_group():
    assert not dist.is_initialized()
    with pytest.raises(ws1_dist.DistError, match="ws1_dist: torch.distributed is not initialized"):
        ws1_dist.shard(ws1_qwen3.synthetic("tiny", "cpu_bf16"))
    with pytest.raises(ws1_dist.DistError, match="shard takes a ws1_qwen3.Qwen3ForCausalLM or a transformers"):
        ws1_dist.shard(torch.nn.Linear(2, 2))
    with pytest.raises(ws1_dist.DistError, match="is not sharded: call ws1_dist.shard"):
        with ws1_dist.canonical_grads(ws1_qwen3.synthetic("tiny", "cpu_bf16")):
            pass
    with pytest.raises(ws1_dist.DistError, match="is not sharded"):
        ws1_dist.full_state_dict(ws1_qwen3.synthetic("tiny", "cpu_bf16"))


def test_sharded_step_and_its_refusals(tmp_path):
    with _group(tmp_path):
        model = ws1_dist.shard(ws1_qwen3.synthetic("tiny", "cpu_bf16"))
        with pytest.raises(ws1_dist.DistError, match="already sharded"):
            ws1_dist.shard(model)
        with pytest.raises(ws1_dist.DistError, match="divide_factor must be > 0"):
            with ws1_dist.canonical_grads(model, divide_factor=0):
                pass
        # ws1_ops' own scope on a sharded model: FSDP2 freed the unsharded parameters, and a gradient left there
        # would reach no optimizer; refused, naming ws1_dist's scope
        loss = _loss(model)
        with pytest.raises(ws1_ops.OpInputError, match="storage is freed.*ws1_dist.canonical_grads"):
            with ws1_ops.canonical_grads():
                loss.backward()
        # the sharded step: a gradient on every parameter, a DTensor shaped like it, the one-device bits (world 1)
        with ws1_dist.canonical_grads(model, divide_factor=1.0):
            _loss(model).backward()
        one = ws1_qwen3.synthetic("tiny", "cpu_bf16")
        with ws1_ops.canonical_grads():
            _loss(one).backward()
        plain = dict(one.named_parameters())
        for name, p in model.named_parameters():
            g = p.grad.full_tensor()
            assert g.shape == p.shape and g.dtype == p.dtype
            assert torch.equal(g.view(torch.int16), plain[name].grad.view(torch.int16)), name
        whole = ws1_dist.full_state_dict(model)
        assert set(whole) == set(plain) and all(torch.equal(whole[n], plain[n].detach()) for n in plain)


def test_fsdp_default_cast_of_the_residual_is_refused(tmp_path):
    """A user's own fully_shard with FSDP2's default MixedPrecisionPolicy (cast_forward_inputs=True) would round the
    FP32 residual stream to BF16 at each decoder layer: the layer refuses it, one line naming the fix."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with _group(tmp_path):
        from torch.distributed.device_mesh import init_device_mesh

        model = ws1_qwen3.synthetic("tiny", "cpu_bf16")
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        mesh = init_device_mesh("cpu", (1,))  # named: FSDP2's default asks torch for the accelerator
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        from torch.distributed.fsdp import register_fsdp_forward_method

        register_fsdp_forward_method(model, "hidden")
        register_fsdp_forward_method(model, "logits_of")
        with pytest.raises(
            ws1_qwen3.ModelInputError, match="residual stream arrived as torch.bfloat16.*ws1_dist.shard"
        ):
            _loss(model)


def test_dp_block_deals_aligned_power_of_two_blocks():
    assert [list(ws1_dist.dp_block(8, 4, r)) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [list(ws1_dist.dp_block(8, 2, r)) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [list(ws1_dist.dp_block(6, 4, r)) for r in range(4)] == [[0, 1], [2, 3], [4, 5], []]
    assert list(ws1_dist.dp_block(5, 1, 0)) == [0, 1, 2, 3, 4]
    with pytest.raises(ws1_dist.DistError, match="dp_block needs"):
        ws1_dist.dp_block(4, 2, 2)


def test_cross_rank_needs_the_tree_order(tmp_path):
    with _group(tmp_path):
        model = ws1_dist.shard(ws1_qwen3.synthetic("tiny", "cpu_bf16"))
        with pytest.raises(ws1_dist.DistError, match="cross_rank='tree' with order='serial'"):
            with ws1_dist.canonical_grads(model, cross_rank="tree"):
                pass
        with pytest.raises(ws1_ops.OpInputError, match="order must be one of"):
            with ws1_dist.canonical_grads(model, order="nope"):
                pass
