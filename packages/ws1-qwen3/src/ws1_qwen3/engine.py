"""The rollout engine behind :func:`ws1_qwen3.generate`: continuous batching with the tokens kept on the device.

Per decode step nothing comes back to the host: the step's input tokens are the previous step's sampled
tokens, read on the device from a per-*lane* buffer (a lane: a running request's row of the engine's state;
with a contiguous cache, its cache slot); the sampler (:mod:`ws1_qwen3.sampling`) draws the whole batch on
the device; the host knows every position and step count without reading a token. Once per window of
``sync_every`` decode steps (a fixed K), or when no request has tokens left to draw, the engine reads the
window's tokens and log-probs back in one copy, finds stop tokens, finishes requests (their completions
end at the stop; tokens drawn after it in the same window are dropped), frees their cache space, and
admits waiting requests (prefill). One host sync per window, not per token; the count is tested on CPU.

Two ways to run a decode step, with the same bits (tested):

* eager — ``model.run_step`` over the running requests (any cache; B2's keys gathered, B1's read in place);
* static — one fixed-shape step per *bucket*: the first Bk lanes of a contiguous cache (Bk a power of two
  >= the highest running lane + 1), lanes without a running request being dummy rows. Its inputs and
  outputs live in persistent device buffers (tokens, positions, steps, streams, temperatures, an active
  mask) and the step updates them itself (an active lane's token, position and step advance; a dummy's
  stay), so on a GPU it is captured once per bucket into a CUDA graph and replayed: no Python, no launch
  per op, no host->device copy inside. The mask and new requests' state are written between replays. A
  request's bits never depend on the bucket: every kernel is batch-invariant, so dummy rows are
  bit-neutral for real rows (a dummy row attends key 0 of its own slot and writes only there). On a CPU
  the same static step runs directly (the CPU-capable path of the graph, tested against eager).

The graph path needs a contiguous cache (B1) holding only this run's sequences and no model tracer;
``generate(graphs=None)`` takes it when the model is on a CUDA device whose kernels can be captured
(:data:`CAPTURE_FAMILIES`: cuda_bf16 and triton_cuda_bf16) and the cache is contiguous. The static step always
runs inside :func:`ws1_ops.graph_safe` — captured, warmed up or called directly on a CPU — so the kernels take one
path there: the Triton attention plans its launch on the device (ws1_cuda's always does).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

import ws1_ops
from ws1_kv import ContiguousKVCache, KVCache

from . import sampling
from .model import Qwen3ForCausalLM, Rows


@dataclass
class _Run:
    """A running request: its lane, its stream, what the host knows without reading a token."""

    req: object  # generate.Request
    lane: int
    prompt_len: int  # positions in the cache before decoding (prompt, prefix hits included)
    drawn: int = 0  # tokens sampled so far (the host counts them; their values come at a sync)
    tokens: list[int] = field(default_factory=list)  # every drawn token, read back at syncs
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False  # a stop token is among the tokens read back

    @property
    def draws_left(self) -> bool:
        return self.drawn < self.req.max_new_tokens and not self.stopped


class _Clock:
    """Phase times without a host sync: CUDA events recorded at the boundaries, read at the end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object, object]] = []

    def now(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def add(self, phase: str, start, end) -> None:
        self.marks.append((phase, start, end))

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for phase, a, b in self.marks:
            s = a.elapsed_time(b) / 1e3 if self.cuda else b - a
            out[phase] = out.get(phase, 0.0) + s
        return out


class _Lanes:
    """The per-lane device buffers of the runs of ``model`` through one cache (``n`` lanes), and the static steps
    captured over them: what a later generate() through the same contiguous cache reuses."""

    NAMES = ("tok", "pos", "steps", "stream", "temp", "active")

    def __init__(self, model: Qwen3ForCausalLM, n: int, device: torch.device):
        self.model, self.n = model, n
        self.buffers = {
            name: torch.zeros(n, dtype=torch.float32 if name == "temp" else torch.int64, device=device)
            for name in self.NAMES
        }
        self.graphs: dict[int, _StaticStep] = {}  # bucket -> its static step (nothing here refers to the cache)


# The static path's lanes per contiguous cache, owned by the engine and weakly keyed: they go with their cache.
# Nothing in a _Lanes refers back to its cache (a static step is handed its engine per call), so the key can die.
_LANES: weakref.WeakKeyDictionary[KVCache, _Lanes] = weakref.WeakKeyDictionary()


class Engine:
    """One generate() run: ``model`` decoding ``requests`` through ``cache`` (see the module docstring)."""

    def __init__(
        self,
        model: Qwen3ForCausalLM,
        cache: KVCache,
        *,
        max_batch: int,
        chunk: int | None,
        graphs: bool,
        sync_every: int,
        progress=None,
    ):
        self.model, self.cache, self.chunk, self.graphs = model, cache, chunk, graphs
        self.dev = model.device
        self.sync_every = sync_every
        self.bar = progress
        self.static = isinstance(cache, ContiguousKVCache) and graphs
        self.lanes = cache.max_seqs if self.static else max_batch
        self.max_running = min(max_batch, self.lanes)
        L, dev = self.lanes, self.dev
        # per-lane state on the device: the next input token, its position, the next sampling step, the stream,
        # the temperature; and (static path) which lanes a step advances. The static path keeps it, with the
        # captured graphs that point at it, per cache (for this model) in _LANES: a later generate() through the
        # same cache replays them instead of capturing again.
        lanes = _LANES.get(cache) if self.static else None
        if lanes is None or lanes.model is not model or lanes.n != L:
            lanes = _Lanes(model, L, dev)
            if self.static:
                _LANES[cache] = lanes
        for n, buf in lanes.buffers.items():
            buf.zero_()
            setattr(self, n, buf)
        self._active_host = [0] * L
        self.free_lanes = list(range(L))
        self.running: dict[str, _Run] = {}
        # the window's draws: (lanes, their rows in the step's outputs, tokens, logprobs) per step
        self.window: list[tuple[tuple[int, ...], tuple[int, ...], torch.Tensor, torch.Tensor]] = []
        self.graphs_by_bucket: dict[int, _StaticStep] = lanes.graphs
        self.captured = 0
        self.buckets_used: set[int] = set()
        self.clock = _Clock(dev)
        self.n_syncs = 0
        self.n_decode_steps = 0
        self._lane_index: dict[tuple[int, ...], torch.Tensor] = {}

    # ---- bookkeeping ----------------------------------------------------------------------------------------

    def _index(self, lanes: tuple[int, ...]) -> torch.Tensor:
        """Lane indices on the device (one host->device copy per batch composition)."""
        t = self._lane_index.get(lanes)
        if t is None:
            if len(self._lane_index) > 256:
                self._lane_index.clear()
            t = self._lane_index[lanes] = torch.tensor(lanes, dtype=torch.int64, device="cpu").to(self.dev)
        return t

    def _set_lanes(self, lanes: Sequence[int], **values) -> None:
        """Write per-lane state of newly admitted requests (host -> device, between steps)."""
        idx = self._index(tuple(lanes))
        for name, vals in values.items():
            buf = getattr(self, name)
            buf.index_copy_(0, idx, torch.tensor(vals, dtype=buf.dtype, device="cpu").to(self.dev))

    def _sample(self, logits: torch.Tensor, lanes: tuple[int, ...]) -> None:
        """Sample one token per lane from its logits [n, V] (on the device), record them in the window."""
        idx = self._index(lanes)
        logp = self.model.rollout_logp(logits)
        tok, lp = sampling.sample(
            logp, self.temp.index_select(0, idx), self.stream.index_select(0, idx), self.steps.index_select(0, idx)
        )
        self.tok.index_copy_(0, idx, tok)
        self.steps.index_add_(0, idx, torch.ones_like(idx))
        self.window.append((lanes, tuple(range(len(lanes))), tok, lp))

    # ---- admission: prefill -----------------------------------------------------------------------------------

    def admit(self, reqs: list, out: dict) -> None:
        """Prefill ``reqs`` (prefix reuse where the cache has it) and sample their first tokens on the device."""
        t0 = self.clock.now()
        prompts, lanes = {}, []
        for r in reqs:
            hit = self.cache.begin(r.request_id, r.prompt)
            out[r.request_id].prefix_hit_tokens = hit
            prompts[r.request_id] = r.prompt[hit:]
            lane = self._take_lane(r.request_id)
            self.running[r.request_id] = _Run(r, lane, len(r.prompt))
            lanes.append(lane)
        self._set_lanes(
            lanes,
            stream=sampling.as_int64([sampling.stream_of(r.seed, r.request_id) for r in reqs]),
            temp=[float(r.temperature) for r in reqs],
            steps=[0] * len(reqs),
            pos=[len(r.prompt) for r in reqs],
        )
        logits = self.model.prefill(self.cache, prompts, chunk=self.chunk, checked=False)
        self._sample(torch.stack([logits[r.request_id] for r in reqs]), tuple(lanes))
        for r in reqs:
            self.running[r.request_id].drawn = 1
        self.clock.add("prefill", t0, self.clock.now())

    def _take_lane(self, rid: str) -> int:
        if self.static:
            return self.cache.slot(rid)  # B1: the lane is the cache slot (begin() chose the lowest free)
        lane = min(self.free_lanes)
        self.free_lanes.remove(lane)
        return lane

    # ---- decode -----------------------------------------------------------------------------------------------

    def decode_window(self) -> None:
        """Up to ``sync_every`` decode steps over the requests with draws left; no host sync."""
        t0 = self.clock.now()
        for _ in range(self.sync_every):
            act = sorted((r for r in self.running.values() if r.draws_left), key=lambda r: r.lane)
            if not act:
                break
            if self.static:
                self._step_static(act)
            else:
                self._step_eager(act)
            for r in act:
                r.drawn += 1
            self.n_decode_steps += 1
        self.clock.add("decode", t0, self.clock.now())

    def _step_eager(self, act: list[_Run]) -> None:
        lanes = tuple(r.lane for r in act)
        st = self.cache.reserve({r.req.request_id: 1 for r in act})  # lane order: B1 slots ascending, read in place
        ids = self.tok.index_select(0, self._index(lanes))
        logits = self.model.run_step(self.cache, st, ids)
        self.cache.commit(st)  # ids unknown here: filled in at the sync
        self._sample(logits, lanes)

    def _step_static(self, act: list[_Run]) -> None:
        mask = [0] * self.lanes
        for r in act:
            mask[r.lane] = 1
        if mask != self._active_host:
            # between replays: the new mask, and a lane that stopped advancing goes back to position 0 (its
            # dummy row then attends and writes only row 0 of its own slot)
            self.active.copy_(torch.tensor(mask, dtype=torch.int64, device="cpu").to(self.dev))
            self.pos.mul_(self.active)
            self._active_host = mask
        top = max(r.lane for r in act) + 1
        bk = 1
        while bk < top:
            bk *= 2
        bk = min(bk, self.lanes)
        g = self.graphs_by_bucket.get(bk)
        if g is None:
            g = self.graphs_by_bucket[bk] = _StaticStep(self, bk)
            self.captured += 1
        self.buckets_used.add(bk)
        tok, lp = g.run(self)
        self.cache.advance({r.req.request_id: 1 for r in act})
        lanes = tuple(r.lane for r in act)
        self.window.append((lanes, lanes, tok.clone(), lp.clone()))  # bucket row = lane

    # ---- the sync point ---------------------------------------------------------------------------------------

    def sync(self, out: dict) -> list[str]:
        """Read the window back (one device -> host copy), record each request's tokens, finish the requests
        that drew a stop token or all their tokens; returns the finished ids."""
        if self.window:
            toks = torch.cat([t for _, _, t, _ in self.window])
            lps = torch.cat([lp.view(torch.int32).to(torch.int64) for _, _, _, lp in self.window])
            host = torch.cat([toks, lps]).tolist()  # the window's one readback
            self.n_syncs += 1
            n = len(host) // 2
            by_lane = {r.lane: r for r in self.running.values()}
            k = 0
            for lanes, rows, t, _ in self.window:
                for lane, row in zip(lanes, rows):
                    r = by_lane[lane]
                    r.tokens.append(host[k + row])
                    r.logprobs.append(_f32(host[n + k + row]))
                k += t.numel()
            self.window.clear()
        done = []
        for rid, r in list(self.running.items()):
            stop = next((i for i, t in enumerate(r.tokens) if t in r.req.stop_token_ids), None)
            r.stopped = stop is not None
            if not r.stopped and len(r.tokens) < r.req.max_new_tokens:
                continue
            comp = out[rid]
            keep = stop + 1 if r.stopped else r.req.max_new_tokens  # tokens drawn after a stop are dropped
            comp.tokens, comp.logprobs = r.tokens[:keep], r.logprobs[:keep]
            comp.finish_reason = "stop" if r.stopped else "length"
            fed = self.cache.length(rid) - r.prompt_len  # decode steps run: their inputs were the drawn tokens
            if fed > 0:
                self.cache.fill_tokens(rid, r.prompt_len, r.tokens[:fed])
            self.cache.finish(rid)
            self.cache.free(rid)
            if not self.static:
                self.free_lanes.append(r.lane)
            del self.running[rid]
            done.append(rid)
            if self.bar is not None:
                self.bar.update(r.req.max_new_tokens)
        return done


def _f32(bits: int) -> float:
    """The FP32 value of a log-prob read back as its sign-extended int32 bit pattern."""
    import struct

    return struct.unpack("<f", struct.pack("<i", bits))[0]


class _StaticStep:
    """The decode step of bucket ``bk`` (lanes 0..bk-1 of a contiguous cache), on persistent buffers: a CUDA
    graph replayed on a GPU, the same function called directly on a CPU."""

    def __init__(self, eng: Engine, bk: int):
        self.bk = bk  # no reference to the engine or its cache is kept (see _LANES)
        cache, dev, ml = eng.cache, eng.dev, eng.cache.max_len
        self.cu_q = torch.arange(bk + 1, dtype=torch.int64, device=dev)
        self.cu_k = torch.arange(0, (bk + 1) * ml, ml, dtype=torch.int64, device=dev)
        self.base = torch.arange(0, bk * ml, ml, dtype=torch.int64, device=dev)  # each lane's slot row 0
        self.keys = torch.zeros(bk, dtype=torch.int64, device="cpu")  # no gradient: unused keys
        for layer in range(cache.n_layers):
            cache.storage(layer)  # allocated before any capture (a zero-fill must not be captured)
        self.graph = None
        self.out = None
        if dev.type == "cuda":
            self._capture(eng)

    def _capture(self, eng: Engine) -> None:
        saved = eng.active.clone()
        eng.active.zero_()  # warm-up steps advance nothing (their writes are the real step's own)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self._step(eng)  # compiles (Triton), plans, allocates: outside the capture
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._step(eng)
        eng.active.copy_(saved)

    def run(self, eng: Engine) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step of ``eng``'s lanes 0..bk-1 (the engine whose run these buffers serve now)."""
        if self.graph is not None:
            self.graph.replay()
            return self.out
        return self._step(eng)

    @torch.no_grad()
    def _step(self, eng: Engine) -> tuple[torch.Tensor, torch.Tensor]:
        with ws1_ops.graph_safe():  # no device -> host copy: the path a capture records (ws1_ops.graph_safe)
            return self._step_ops(eng)

    def _step_ops(self, eng: Engine) -> tuple[torch.Tensor, torch.Tensor]:
        bk = self.bk
        model, cache = eng.model, eng.cache
        tok, pos, act = eng.tok[:bk], eng.pos[:bk], eng.active[:bk]
        rows = self.base + pos  # each lane's write row: slot * max_len + position
        ml = cache.max_len

        def attend(layer, q, k, v):
            ks, vs = cache.storage(layer)
            ks.index_copy_(0, rows, k)
            vs.index_copy_(0, rows, v)
            return ws1_ops.attention(q, ks[: bk * ml], vs[: bk * ml], self.cu_q, self.cu_k, pos)

        with model.activate():
            x = model.hidden(Rows(tok, pos, self.keys, self.cu_q), attend=attend, checked=False)
            logits = model.logits_of(x, self.keys)
            logp = model.ops().batch_invariant_logp(logits)
        new_tok, lp = sampling.sample(logp, eng.temp[:bk], eng.stream[:bk], eng.steps[:bk])
        tok.copy_(torch.where(act > 0, new_tok, tok))
        pos.add_(act)
        eng.steps[:bk].add_(act)
        return new_tok, lp


# Families whose kernels can be captured into a CUDA graph with positions that move between replays: ws1_cuda's
# forward plans each launch on the device from cu_seqlens / q_pos and skips its host checks under capture; the
# Triton attention does the same inside ws1_ops.graph_safe (ws1_ops.triton.attention.plan_on_device).
CAPTURE_FAMILIES = ("cuda", "triton")


def capture_refused(model: Qwen3ForCausalLM) -> str | None:
    """Why ``model``'s decode step cannot be captured into a CUDA graph on its device (None: it can, or it runs
    on a CPU, where the static step is called directly)."""
    if model.device.type != "cuda":
        return None
    import ws1_accel

    try:
        family = ws1_accel.family_of(model.profile)
    except Exception:  # noqa: BLE001  the reference path or a candidate: not a profile
        return f"{model.profile!r} is not a GPU profile whose kernels can be captured"
    if family not in CAPTURE_FAMILIES:
        return f"{model.profile}'s kernels cannot be captured into a CUDA graph; its decode steps run eager"
    return None


__all__ = ["CAPTURE_FAMILIES", "Engine", "capture_refused"]
