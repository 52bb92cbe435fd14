"""Inputs of the manifest's representative cases, built from their shapes and the fixtures.

Every tensor is drawn on the CPU from a generator seeded by the workload seed and the case's
``<op>-<tier>-<shape>`` (the profile left out), then moved to the profile's device: every profile
judges the same values, and a rerun judges the same values again.

Rows of a per-token case are fixture tokens, so each row has a logical key (sample rank, position):

* ``T`` equal to the tier's token count (primary 59, short 8) — every token of the tier's samples;
* ``T`` equal to its active-token count (primary 27, short 4) — the completion tokens only (the rows
  lm_head and the log-prob nodes see in training);
* any other ``T`` (an edited manifest) — one synthetic sample at positions 0..T-1 (said in ``source``).

Shapes (BF16 unless noted; params are FP32 masters holding values drawn in BF16):

=====================  ==========================================  =====================
op                     row inputs                                  params
=====================  ==========================================  =====================
embedding              ids [T] int64                               weight [V, H]
rms_norm               x [T, H] FP32 (the residual stream)         weight [H]
qk_norm                x [T, heads, D]                             weight [D]
det_gemm, lm_head      x [M, K]                                    weight [N, K]
rope                   x [T, heads, D], positions [T] int64        —
swiglu                 gate [T, F], up [T, F]                      —
silu                   x [T, F]                                    —
logprob                logits [T, V] FP32, targets [T] int64       —
batch_invariant_logp   logits [T, V] FP32                          —
attention              per sequence q [L, Hq, D], k, v [L, Hkv, D] —
pack                   x [B, S, H] with the fixture's lengths      —
=====================  ==========================================  =====================
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import attrs
import torch

import ws1_ops
from ws1_contract.errors import ContractError
from ws1_contract.manifest import Case, Manifest, Sample
from ws1_ops import reference

BF16, F32 = torch.bfloat16, torch.float32
CHUNK = 7  # chunked prefill: 7-token chunks, boundaries at absolute positions (docs/design.md §5)


# Widths for a quick run of a case (C2 runtime, the harness' tests): rows stay — they come from the
# fixtures and carry the logical keys — widths shrink (K 4096 -> 64, V 151936 -> 1000 >= 616 so the
# fixture's token ids fit, heads 32 -> 4, ...).
SHRINK = {"K": 64, "H": 64, "F": 96, "V": 1000, "heads": 4, "D": 32, "Hq": 4, "Hkv": 2}
N_SHRINK = {4096: 48, 12288: 96, 151936: 1000}


def shrink_shape(shape: dict) -> dict:
    out = dict(shape)
    for k, v in shape.items():
        if k in SHRINK:
            out[k] = SHRINK[k]
        elif k == "N":
            out[k] = N_SHRINK.get(v, 48)
    return out


def shrunk(case: Case) -> Case:
    """The case with its widths shrunk (same rows, same seed key: its id is unchanged)."""
    return attrs.evolve(case, shape=shrink_shape(case.shape))


def case_key(case: Case) -> str:
    """``<op>-<tier>-<shape>``: the case id without its profile (the inputs do not depend on it)."""
    return case.case_id[: -len(case.profile) - 1] if case.case_id.endswith("-" + case.profile) else case.case_id


def _generator(manifest: Manifest, case: Case) -> torch.Generator:
    return torch.Generator().manual_seed(manifest.workload_seed * 1_000_003 + zlib.crc32(case_key(case).encode()))


def _shape(case: Case, *keys: str) -> list[int]:
    out = []
    for k in keys:
        v = case.shape.get(k)
        if not isinstance(v, int) or v <= 0:
            raise ContractError(
                f"representative_cases[{case.case_id}].shape.{k}", f"{case.op} needs a positive int {k!r}, got {v!r}"
            )
        out.append(v)
    return out


# ---- rows: which fixture token each canonical row is ----------------------------------------


@dataclass
class Rows:
    """Canonical rows of a per-token case, in canonical order (sample rank, then position). [n] each."""

    sample: torch.Tensor
    position: torch.Tensor
    token: torch.Tensor
    source: str

    @property
    def n(self) -> int:
        return int(self.sample.numel())

    def keys(self, rows: torch.Tensor) -> torch.Tensor:
        """Logical keys of a layout's rows (``-1`` filler rows get key -1: padding, dropped from dW)."""
        safe = rows.clamp_min(0)
        return ws1_ops.logical_keys(self.sample[safe], self.position[safe], rows >= 0)

    def split_calls(self) -> dict[str, list[torch.Tensor]]:
        """Multi-call transforms: ``B1`` one call per sample; ``chunked7`` one call per 7-position
        chunk (every sample's rows of that chunk together). Only those with more than one call."""
        idx = torch.arange(self.n, device="cpu")
        out: dict[str, list[torch.Tensor]] = {}
        per_sample = [idx[self.sample == s] for s in torch.unique(self.sample).tolist()]
        if len(per_sample) > 1:
            out["B1"] = per_sample
        chunk = self.position // CHUNK
        chunks = [idx[chunk == c] for c in torch.unique(chunk).tolist()]
        if len(chunks) > 1:
            out[f"chunked{CHUNK}"] = chunks
        return out


def _tier_samples(manifest: Manifest, tier: str) -> list[Sample]:
    fx = manifest.fixtures
    return {"primary": list(fx.primary), "short": [fx.short], "long": [fx.long]}[tier]


def fixture_rows(manifest: Manifest, tier: str, T: int) -> Rows:
    samples = _tier_samples(manifest, tier)
    every, active = [], []
    for rank, s in enumerate(samples):
        for pos, tok in enumerate(s.tokens):
            every.append((rank, pos, tok))
            if pos >= len(s.prompt):
                active.append((rank, pos, tok))
    if T == len(every):
        picked, source = every, f"{tier} fixture: all {T} tokens"
    elif T == len(active):
        picked, source = active, f"{tier} fixture: the {T} active (completion) tokens"
    else:
        picked, source = (
            [(0, p, 0) for p in range(T)],
            f"synthetic: one sample at positions 0..{T - 1} (T={T} matches no {tier} fixture)",
        )
    t = torch.tensor(picked, dtype=torch.int64, device="cpu").reshape(-1, 3)
    return Rows(t[:, 0].clone(), t[:, 1].clone(), t[:, 2].clone(), source)


# ---- per-token cases ---------------------------------------------------------------------------


@dataclass
class TokenCase:
    """A per-token op: rows are independent, so invariance is judged row by row (ws1_ops.invariance)."""

    case: Case
    rows: Rows
    inputs: list[torch.Tensor]  # [n, ...] row inputs, CPU, canonical order
    # shared tensors (weights), CPU: FP32 *masters* holding BF16-representable values. Forward
    # judgments pass their BF16 copy (the rollout's weights); gradient judgments pass the masters
    # (the trainer's layout: exec rounding is exact, the gradient lands in FP32 unrounded).
    params: list[torch.Tensor]
    names: list[str]  # inputs then params
    call: Callable  # (*inputs, *params, row_keys) -> output
    ref: Callable  # (*inputs, *params) -> FP32 output (ws1_ops.reference)
    int_fill: list[int | None] = field(default_factory=list)  # filler value of each int input (padding)
    # vocabulary-sized weights: the FP32 reference gradient over a block of weight rows
    # (inputs, weight rows [v0, v1) as a leaf, v0, v1, dy) -> runs backward; see rows.gradient_accuracy
    ref_block: Callable | None = None
    # (*inputs, *params) -> the FP64 reference output, on the same inputs: the ops the contract judges
    # against one beside the FP32 reference (its fp64_reference rows: the logprob class)
    ref64: Callable | None = None
    # the params' BF16 execution copies, CPU, where the draw kept them (_Draw.weight): each master is
    # its copy widened, so the copy has exactly the bits a cast of the master gives. The forward
    # judgments and the subset runs read it instead of casting a [151936, 4096] master each time
    # (2.5 GB read, 1.2 GB written). None: rows casts the masters.
    exec_params: list[torch.Tensor] | None = None

    kind = "token"

    @property
    def n(self) -> int:
        return self.rows.n


def _pad_id(manifest: Manifest, V: int) -> int:
    # the fixture's pad id; a smaller vocabulary uses V - 1 (the manifest's pad_id_rule)
    return manifest.fixtures.pad_id if manifest.fixtures.pad_id < V else V - 1


class _Draw:
    """The seeded draws of one case: BF16 tensors, FP32 masters holding BF16 values, its rows."""

    def __init__(self, case: Case, manifest: Manifest, rows_key: str = "T"):
        self.g = _generator(manifest, case)
        cfg = manifest.model.config
        self.eps, self.theta, self.max_pos = (
            float(cfg["rms_norm_eps"]),
            float(cfg["rope_theta"]),
            int(cfg["max_position_embeddings"]),
        )
        (self.T,) = _shape(case, rows_key)
        self.rows = fixture_rows(manifest, case.tier, self.T)

    def r(self, *shape, scale=1.0, dtype=BF16):
        return torch.randn(*shape, generator=self.g, device="cpu").mul_(scale).to(dtype)

    def weight(self, *shape, scale=1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """A master weight (FP32 storage, BF16 values: drawn in BF16, widened exactly) and the BF16
        draw itself, which is its execution copy bit for bit (TokenCase.exec_params).

        The master has the bits of ``self.r(...).float()``: the BF16 draw is widened back into the
        FP32 buffer it was rounded from, so a [151936, 4096] master costs no second 2.5 GB allocation
        (on a 2-core host its page faults cost as much as the widening itself)."""
        x = torch.randn(*shape, generator=self.g, device="cpu").mul_(scale)
        b = x.to(BF16)
        return x.copy_(b), b

    def norm_weight(self, n):
        return (1 + 0.1 * torch.randn(n, generator=self.g, device="cpu")).to(BF16).float()  # ~1 +- 0.1


def _embedding(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    V, H = _shape(case, "V", "H")
    ids = d.rows.token % V
    # the fixture's ids are all distinct, which would leave dE's per-id row sum untested: every
    # third row repeats the id two rows up, so dE[id] sums rows in canonical order
    rep = torch.arange(2, d.T, 3, device="cpu")
    ids[rep] = ids[rep - 2]

    def emb_block(inputs, wb, v0, v1, dy):
        sel = (inputs[0] >= v0) & (inputs[0] < v1)
        if bool(sel.any()):
            reference.embedding(inputs[0][sel] - v0, wb).backward(dy[sel].float())

    W, W16 = d.weight(V, H, scale=0.02)
    return TokenCase(
        case,
        d.rows,
        [ids],
        [W],
        ["ids", "weight"],
        lambda i, w, row_keys: ws1_ops.embedding(i, w, row_keys),
        reference.embedding,
        [_pad_id(manifest, V)],
        emb_block,
        exec_params=[W16],
    )


def _rms_norm(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    (H,) = _shape(case, "H")
    # x is the FP32 residual stream (its RMS ~2, like a mid-depth hidden state)
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, H, scale=2.0, dtype=F32)],
        [d.norm_weight(H)],
        ["x", "weight"],
        lambda x, w, row_keys: ws1_ops.rms_norm(x, w, d.eps, row_keys),
        lambda x, w: reference.rms_norm(x, w, d.eps),
        [None],
    )


def _qk_norm(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    heads, D = _shape(case, "heads", "D")
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, heads, D, scale=2.0)],
        [d.norm_weight(D)],
        ["x", "weight"],
        lambda x, w, row_keys: ws1_ops.qk_norm(x, w, d.eps, row_keys),
        lambda x, w: reference.qk_norm(x, w, d.eps),
        [None],
    )


def _gemm(fn: Callable, ref: Callable) -> Callable[[Case, Manifest], TokenCase]:
    def build(case: Case, manifest: Manifest) -> TokenCase:
        d = _Draw(case, manifest, rows_key="M")
        K, N = _shape(case, "K", "N")

        def gemm_block(inputs, wb, v0, v1, dy):
            ref(inputs[0], wb).backward(dy[:, v0:v1].float())

        # weights ~ N(0, 0.02) (Qwen3's init scale), activations ~ N(0, 1): outputs ~ N(0, 0.02 sqrt(K));
        # x is drawn first (the order of the draws fixes their values)
        x = d.r(d.T, K)
        W, W16 = d.weight(N, K, scale=0.02)
        return TokenCase(
            case,
            d.rows,
            [x],
            [W],
            ["x", "weight"],
            lambda x, w, row_keys: fn(x, w, row_keys),
            ref,
            [None],
            gemm_block,
            exec_params=[W16],
        )

    return build


def _rope(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    heads, D = _shape(case, "heads", "D")
    # filler rows sit at the last position the model allows: a padding row's rotation is garbage
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, heads, D), d.rows.position.clone()],
        [],
        ["x", "positions"],
        lambda x, p, row_keys: ws1_ops.rope(x, p, d.theta),
        lambda x, p: reference.rope(x, p, d.theta),
        [None, d.max_pos - 1],
    )


def _swiglu(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    (F,) = _shape(case, "F")
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, F, scale=2.0), d.r(d.T, F, scale=2.0)],
        [],
        ["gate", "up"],
        lambda a, b, row_keys: ws1_ops.swiglu(a, b),
        reference.swiglu,
        [None, None],
    )


def _silu(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    (F,) = _shape(case, "F")
    return TokenCase(
        case, d.rows, [d.r(d.T, F, scale=2.0)], [], ["x"], lambda x, row_keys: ws1_ops.silu(x), reference.silu, [None]
    )


def _logprob(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    (V,) = _shape(case, "V")
    # logits ~ N(0, 3): a peaked but not degenerate softmax over the 151936-token vocabulary
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, V, scale=3.0, dtype=F32), d.rows.token % V],
        [],
        ["logits", "targets"],
        lambda lg, t, row_keys: ws1_ops.logprob(lg, t),
        reference.logprob,
        [None, _pad_id(manifest, V)],
        ref64=lambda lg, t: reference.logprob(lg, t, torch.float64),
    )


def _batch_invariant_logp(case: Case, manifest: Manifest) -> TokenCase:
    d = _Draw(case, manifest)
    (V,) = _shape(case, "V")
    return TokenCase(
        case,
        d.rows,
        [d.r(d.T, V, scale=3.0, dtype=F32)],
        [],
        ["logits"],
        lambda lg, row_keys: ws1_ops.batch_invariant_logp(lg),
        reference.batch_invariant_logp,
        [None],
        ref64=lambda lg: reference.batch_invariant_logp(lg, torch.float64),
    )


# ---- attention: sequence-level ------------------------------------------------------------------


@dataclass
class AttnCase:
    """Causal GQA attention over whole sequences (rows of one sequence are not independent).

    ``prefill``: every query of each sequence (lengths from the fixture). ``decode``: one query at
    ``decode_pos`` against keys 0..decode_pos of one sequence (the KV-cache step)."""

    case: Case
    mode: str
    lengths: list[int]
    seqs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (q [L, Hq, D], k, v [L, Hkv, D]) BF16, CPU
    padded_length: int
    decode_pos: int | None = None
    source: str = ""

    kind = "attention"

    @property
    def heads(self) -> tuple[int, int, int]:
        q, k, _ = self.seqs[0]
        return q.shape[1], k.shape[1], q.shape[2]


def _attn_case(case: Case, manifest: Manifest) -> AttnCase:
    g = _generator(manifest, case)
    B, Sq, Skv, Hq, Hkv, D = _shape(case, "B", "Sq", "Skv", "Hq", "Hkv", "D")
    mode = case.shape.get("mode", "prefill")
    fx = manifest.fixtures
    if mode == "prefill":
        if Sq != Skv:
            raise ContractError(
                f"representative_cases[{case.case_id}].shape", f"a prefill case needs Sq == Skv, got {Sq} and {Skv}"
            )
        fixture = [s.length for s in _tier_samples(manifest, case.tier)]
        if len(fixture) == B and max(fixture) == Sq:
            lengths, source = fixture, f"{case.tier} fixture lengths {fixture} (varlen)"
        else:
            lengths, source = [Sq] * B, f"{B} sequences of length {Sq}"
        decode_pos = None
    elif mode == "decode":
        if B != 1 or Sq != 1:
            raise ContractError(
                f"representative_cases[{case.case_id}].shape", f"a decode case is B1 Sq1, got B{B} Sq{Sq}"
            )
        lengths, decode_pos = [Skv], Skv - 1
        source = f"one sequence of {Skv} keys; the query at position {Skv - 1} decoded against all of them"
    else:
        raise ContractError(f"representative_cases[{case.case_id}].shape.mode", f"unknown attention mode {mode!r}")
    seqs = [tuple(torch.randn(L, h, D, generator=g, device="cpu").to(BF16) for h in (Hq, Hkv, Hkv)) for L in lengths]
    return AttnCase(case, mode, lengths, seqs, max(fx.padded_length, max(lengths)), decode_pos, source)


# ---- pack: profile-independent ------------------------------------------------------------------


@dataclass
class PackCase:
    case: Case
    lengths: list[int]
    x: torch.Tensor  # [B, S, H] BF16

    kind = "pack"


def _pack_case(case: Case, manifest: Manifest) -> PackCase:
    g = _generator(manifest, case)
    B, S, H = _shape(case, "B", "S", "H")
    fixture = [s.length for s in _tier_samples(manifest, case.tier)]
    lengths = fixture if len(fixture) == B and max(fixture) <= S else [S] * B
    return PackCase(case, lengths, torch.randn(B, S, H, generator=g, device="cpu").to(BF16))


# node -> its input builder (shapes from the node table's case, values from the seeded draws); a node
# of the table without one is a red cell naming it (tests: test_node_table.py)
BUILDERS: dict[str, Callable[[Case, Manifest], TokenCase | AttnCase | PackCase]] = {
    "embedding": _embedding,
    "rms_norm": _rms_norm,
    "qk_norm": _qk_norm,
    "det_gemm": _gemm(ws1_ops.det_gemm, reference.det_gemm),
    "lm_head": _gemm(ws1_ops.lm_head, reference.lm_head),
    "rope": _rope,
    "swiglu": _swiglu,
    "silu": _silu,
    "logprob": _logprob,
    "batch_invariant_logp": _batch_invariant_logp,
    "attention": _attn_case,
    "pack": _pack_case,
}

_LAST: list = []  # [(key, built case)]: at most one entry


def build(case: Case, manifest: Manifest) -> TokenCase | AttnCase | PackCase:
    """The case's inputs (never modified by the gates: they run on detached copies).

    The last case built is kept: C8 judges a case's forward and then its gradient cells, and
    drawing a [151936, 4096] weight takes seconds."""
    # the inputs are a function of these alone (seed, fixtures, model config, the case itself)
    key = (
        manifest.workload_seed,
        manifest.fixture_identity_sha256,
        json.dumps(manifest.model.config, sort_keys=True),
        case.op,
        case.tier,
        case_key(case),
        json.dumps(case.shape, sort_keys=True),
    )
    if _LAST and _LAST[0][0] == key:
        return _LAST[0][1]
    _LAST.clear()  # free the previous case's tensors before drawing the next
    builder = BUILDERS.get(case.op)
    if builder is None:
        raise ContractError(
            f"nodes.{case.op}",
            f"no case builder for node {case.op!r} in ws1_matrix.cases.BUILDERS (docs/adding_a_node.md)",
        )
    built = builder(case, manifest)
    _LAST.append((key, built))
    return built


def forget() -> None:
    """Drop the kept case (tests, and C8 before it moves on to another profile)."""
    _LAST.clear()
