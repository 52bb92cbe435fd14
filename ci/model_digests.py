"""Digests of what the model computes, to show a refactor changed no bit.

    python ci/model_digests.py --out before.json            # at the commit before the change
    python ci/model_digests.py --check before.json          # after it: exit 1 and name what differs

On seeded synthetic weights (the ``tiny`` preset and a two-layer GQA shape) and the manifest's fixture
samples, for ``cpu_bf16``, the FP32 ``reference`` and the ``torch_default`` candidate: the logits of
``forward`` and ``forward_packed``, teacher forcing's log-probs in every layout, the loss and every
parameter gradient (under ``canonical_grads``), the rollout's log-softmax, the engine's prefill /
chunked prefill / decode logits through a paged cache, and ``generate``'s tokens and log-probs (seeded
sampling and greedy; not on the reference, which has no cache path). Each is the SHA-256 of the tensor's
raw bytes with its dtype and shape, so one flipped bit anywhere is a different digest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

import ws1_ops
import ws1_qwen3
from ws1_qwen3 import Request, fixture_samples, generate, teacher_forcing

PROFILES = ("cpu_bf16", "reference", "torch_default")
SHAPES = {"tiny": "tiny", "mqa3": dict(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=1, head_dim=16)}


def digest(t: torch.Tensor) -> str:
    shape = tuple(t.shape)
    t = t.detach().contiguous().cpu().reshape(-1)
    h = hashlib.sha256(f"{t.dtype}{shape}".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:24]


def model_of(shape: str, profile: str) -> ws1_qwen3.Qwen3ForCausalLM:
    spec = SHAPES[shape]
    config = ws1_qwen3.preset("tiny") if spec == "tiny" else ws1_qwen3.preset("tiny").replace(**spec)
    return ws1_qwen3.synthetic(config, profile, seed=20261207)


def digests_of(shape: str, profile: str) -> dict[str, str]:
    out: dict[str, str] = {}
    model = model_of(shape, profile)
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, (3, 11), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        out["forward.logits"] = digest(model(ids))
        lens = torch.tensor([5, 11, 1, 9])
        flat = torch.randint(vocab, (int(lens.sum()),), generator=torch.Generator().manual_seed(8))
        out["forward_packed.logits"] = digest(model.forward_packed(flat, ws1_ops.cu_seqlens_from_lengths(lens)))
    samples = fixture_samples()
    for layout in ws1_qwen3.LAYOUTS:
        model.zero_grad(set_to_none=True)
        tf = teacher_forcing(model, samples, layout=layout, grad=True)
        out[f"tf.{layout}.logp"] = digest(tf.logp)
        out[f"tf.{layout}.loss"] = digest(tf.loss)
        with ws1_ops.canonical_grads():
            tf.loss.backward()
        for name, p in model.named_parameters():
            out[f"tf.{layout}.grad.{name}"] = digest(p.grad)
        with torch.no_grad():
            out[f"tf.{layout}.rollout_logp"] = digest(model.rollout_logp(tf.logp.detach()[None].repeat(2, 1)))
    model.zero_grad(set_to_none=True)
    if profile == "reference":  # the FP32 reference has no KV-cache path (the cache attends with ws1 kernels)
        return out
    with torch.no_grad():
        prompts = {f"s{i}": list(s.tokens) for i, s in enumerate(samples)}
        for label, chunk in (("prefill", None), ("chunked", 4)):
            cache = model.new_cache("paged", max_seqs=len(prompts), max_len=64, block_size=4, prefix_reuse=False)
            for s in prompts:
                cache.begin(s)
            got = model.prefill(cache, prompts, chunk=chunk, all_logits=True)
            for s, lg in got.items():
                out[f"engine.{label}.{s}"] = digest(lg)
            step = model.decode(cache, {s: 3 for s in prompts})
            for s, lg in step.items():
                out[f"engine.{label}.decode.{s}"] = digest(lg)
    reqs = [
        Request(prompt=tuple(s.tokens[:6]), max_new_tokens=6, seed=11 + i, request_id=f"r{i}")
        for i, s in enumerate(samples)
    ] + [Request(prompt=(1, 2, 3), max_new_tokens=5, temperature=0.0, request_id="greedy")]
    for c in generate(model, reqs, max_batch=3):
        out[f"generate.{c.request_id}.tokens"] = digest(torch.tensor(c.tokens, dtype=torch.int64))
        out[f"generate.{c.request_id}.logprobs"] = digest(torch.tensor(c.logprobs, dtype=torch.float32))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the digests here (JSON)")
    ap.add_argument("--check", type=Path, help="compare with digests written before; exit 1 on any difference")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    got = {
        f"{shape}/{profile}/{k}": v
        for shape in SHAPES
        for profile in PROFILES
        for k, v in digests_of(shape, profile).items()
    }
    if args.out:
        args.out.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"{len(got)} digests over {len(SHAPES)} shapes x {len(PROFILES)} profiles")
    if args.check:
        want = json.loads(args.check.read_text())
        diff = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        for k in diff[:40]:
            print(f"  differs: {k}: {want.get(k, 'absent')} -> {got.get(k, 'absent')}")
        print(
            f"{len(want) - len(diff)} of {len(want)} equal to {args.check}" + (f"; {len(diff)} differ" if diff else "")
        )
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
