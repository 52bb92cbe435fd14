"""ws1_dist.FSDPTrainer (2 gloo ranks) in ws1_qwen3.rl.run_on_engines, with WS1's own engine as the rollout (no vLLM
needed here; the vLLM run is ci/tests/vllm/test_rl_on_engines_run.py): every step exactly on-policy, the weights the
trainer pushes are the ones the next rollout samples with; the trainer on our variant kernels shows the mismatch."""

import pytest
import torch

import ws1_dist
import ws1_qwen3
from ws1_qwen3 import rl


class Ws1Rollout:
    """WS1's engine as a RolloutEngine: generate() on a WS1 model, load_weights() copies the trainer's weights in."""

    def __init__(self, checkpoint):
        self.model = ws1_qwen3.from_pretrained(checkpoint, "cpu_bf16")
        self.loaded = 0

    def generate(self, requests):
        with torch.no_grad():
            return ws1_qwen3.generate(self.model, requests, max_batch=8)

    def load_weights(self, weights):
        params = dict(self.model.named_parameters())
        assert set(weights) == set(params)
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(weights[name])
        self.loaded += 1


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny", "cpu_bf16"), path)
    return str(path)


CONFIG = rl.GRPOConfig(steps=3, prompts_per_step=2, group_size=4, max_new_tokens=(3, 6), lr=2e-2)
# half the vocabulary in the alphabet: a random tiny policy's rewards differ within a group from step 0, so every
# step has a nonzero advantage and changes the weights (the default task's rewards are all 0 for the first steps)
TASK = rl.CopyTask(length=3, alphabet=tuple(range(4, 516)))


def test_fsdp_trainer_is_exactly_on_policy_with_weights_pushed(checkpoint):
    rollout = Ws1Rollout(checkpoint)
    before = {n: p.detach().clone() for n, p in rollout.model.named_parameters()}
    with ws1_dist.FSDPTrainer(checkpoint, "cpu_bf16", CONFIG, world=2) as trainer:
        logs = list(rl.run_on_engines(rollout, trainer, CONFIG, TASK))
    assert len(logs) == 3 and rollout.loaded == 3
    assert len(set(logs[0].rewards)) > 1
    for log in logs:
        m = log.metrics
        assert m["ws1/tokens_different"] == 0 and m["sampling/sampling_logp_difference/max"] == 0.0
        assert m["sampling/importance_sampling_ratio/max"] == 1.0 and m["training/rollout_probs_diff_max"] == 0.0
        assert m["vllm_kl"] == 0.0 and m["train/train_rollout_logprob_abs_diff"] == 0.0
    changed = [n for n, p in rollout.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "the pushed weights did not change the rollout model"


def test_fsdp_trainer_on_our_variant_shows_the_mismatch(checkpoint):
    config = rl.GRPOConfig(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=(3, 6), lr=2e-2)
    with ws1_dist.FSDPTrainer(checkpoint, "variant_m_split_k", config, world=2) as trainer:
        (log,) = rl.run_on_engines(Ws1Rollout(checkpoint), trainer, config, TASK)
    assert log.metrics["ws1/tokens_different"] > 0 and log.metrics["sampling/importance_sampling_ratio/max"] != 1.0


def test_a_failing_rank_is_one_line(checkpoint, tmp_path):
    with pytest.raises(ws1_dist.DistError, match="trainer rank 0 failed during ready: .*"):
        ws1_dist.FSDPTrainer(str(tmp_path / "nothing-here"), "cpu_bf16", CONFIG, world=2)
    with pytest.raises(ws1_dist.DistError, match="world must be >= 1"):
        ws1_dist.FSDPTrainer(checkpoint, "cpu_bf16", CONFIG, world=0)


def _weights_after(checkpoint, world, order, steps=2):
    config = rl.GRPOConfig(steps=steps, prompts_per_step=2, group_size=4, max_new_tokens=(3, 6), lr=2e-2)
    rollout = Ws1Rollout(checkpoint)
    with ws1_dist.FSDPTrainer(checkpoint, "cpu_bf16", config, world=world, order=order) as trainer:
        logs = list(rl.run_on_engines(rollout, trainer, config, TASK))
        weights = trainer.weights()
    assert all(log.metrics["ws1/tokens_different"] == 0 for log in logs)
    return weights


def test_the_parallel_invariant_order_trains_the_same_weights_at_1_and_2_ranks(checkpoint):
    """order='sample_tree': two GRPO steps at world 1 and at world 2 end in the same weights, bit for bit (the
    rollouts then see the same weights too); the default order at the same two world sizes does not (the control)."""
    one, two = (_weights_after(checkpoint, w, "sample_tree") for w in (1, 2))
    assert all(torch.equal(one[n], two[n]) for n in one)
    one_serial, two_serial = (_weights_after(checkpoint, w, "serial") for w in (1, 2))
    assert any(not torch.equal(one_serial[n], two_serial[n]) for n in one_serial)
