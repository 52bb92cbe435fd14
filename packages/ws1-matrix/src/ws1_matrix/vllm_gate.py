"""The vLLM gate: vLLM serving the WS1 model through the ws1-vllm plugin returns, for every token, the log-prob
WS1's teacher forcing computes for the same sequence on the same profile and weights — bitwise (FP32 bit patterns).

    python -m ws1_matrix vllm cpu_bf16 [--regimes R,...] [--no-controls] [--json]      (nox -s vllm_gate -- cpu_bf16)
    python -m ws1_matrix vllm cpu_bf16 --control stock|variant_m_split_k              (one negative control)

Runs in .venv-vllm (``bash ci/setup_vllm.sh``), vLLM in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) on
seeded synthetic ``tiny`` weights written to a temporary directory, token-id prompts, no tokenizer. One cell per
regime, each with the log-probs compared, those differing and the first mismatch (request, position, got, want):

    alone_vs_batch        a request alone == the same request among 64 concurrent ones of mixed lengths (seeded:
                          tokens and log-probs); each of the 64 vs teacher forcing
    chunked_prefill_on    prompts longer than a 32-token step budget, prefilled in chunks
    chunked_prefill_off   the same prompts, chunked prefill off and a large budget
    prefix_cache_on       requests sharing a 2-block prefix that hits the prefix cache (num_cached_tokens > 0)
    prefix_cache_off      the same requests, prefix caching off (num_cached_tokens == 0)
    n_samples             n > 1 samples per prompt: unseeded ones differ; a seeded request reproduces alone and in
                          a batch (chunked prefill off: vLLM 0.32 CPU crashes on seeded sampling + chunked prefill)
    preemption            a KV cache of a few blocks: requests are preempted and recomputed (vllm:num_preemptions > 0)
    weight_update         new weights pushed into the running engine (reload_weights), the prefix cache reset, a
                          prompt whose prefix was cached before the update vs teacher forcing on the new weights
    provenance            ws1_vllm.provenance() names the profile's kernel for every node of the chain, and agrees
                          with what this process recorded during generate

Negative controls (each in its own process: the plugin registers process-wide), which must come out red; the gate's
cells ``control/<name>`` are green when they did: ``stock`` (plugin off: vLLM's own Qwen3 vs WS1 teacher forcing) and
``variant_m_split_k`` (plugin on a WS1 control whose det_gemm splits K above 8 rows, teacher forcing on the same
control: decode steps of <= 8 rows vs teacher forcing's longer batch, so only vLLM's batching can make them differ).

A host without vLLM for the profile: every cell red, not executed, with the reason; without the profile's device:
the same, and exit 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ws1_accel
import ws1_vllm
from ws1_contract import Cell, judged, red_not_executed

REGIMES = (
    "alone_vs_batch",
    "chunked_prefill_on",
    "chunked_prefill_off",
    "prefix_cache_on",
    "prefix_cache_off",
    "n_samples",
    "preemption",
    "weight_update",
    "provenance",
)
CONTROLS = ("stock", "variant_m_split_k")
# the dense Qwen3 chain as vLLM runs it (the manifest's nodes but silu and the trainer's logprob)
CHAIN = ws1_vllm.NODES
MODEL = "tiny"
SEED, NEW_SEED = 20260812, 20260813  # the weights before and after weight_update
BLOCK = 32  # vLLM CPU's KV block size must be a multiple of 32
STEP_BUDGET = 32  # max_num_batched_tokens of the chunked engine: the long prompts are prefilled in pieces
GATE = "vllm_gate"

# the regimes each engine serves: an LLM() costs seconds, so as few as the settings allow
ENGINES = {
    "chunked+prefix": ("chunked_prefill_on", "prefix_cache_on", "weight_update"),
    "plain": ("alone_vs_batch", "chunked_prefill_off", "prefix_cache_off", "n_samples"),
    "small-kv": ("preemption",),
}

_runs: dict[str, tuple] = {}  # profile -> (GateRun, device absent?): main()'s exit code


def control_gate(name: str) -> str:
    return f"vllm_negative_control_{name}"


def log(msg: str) -> None:
    from ws1_contract import progress

    progress.log(f"  · {msg}")


# ---- what vLLM returned, and teacher forcing of the same sequence ---------------------------------------------------


@dataclass
class Seq:
    """One returned sequence: its prompt and completion, the log-prob vLLM returned per position (prompt positions
    where prompt_logprobs was asked, every completion position), and the prefix-cache hit of its request."""

    label: str
    prompt: tuple[int, ...]
    completion: tuple[int, ...]
    logp: dict[int, float]
    cached: int

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.prompt + self.completion

    def completion_logp(self) -> list[float]:
        return [self.logp[p] for p in range(len(self.prompt), len(self.tokens))]


def bits(x: float) -> int:
    """The FP32 bit pattern of a log-prob (vLLM returns FP32 values as Python floats: exact)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


@dataclass
class Tally:
    """Log-probs compared with teacher forcing, those differing, the first mismatch."""

    compared: int = 0
    differing: int = 0
    first: dict | None = None

    def add(self, seq: Seq, want: dict[int, float]) -> None:
        for p in sorted(seq.logp):
            self.compared += 1
            got, ref = seq.logp[p], want.get(p)
            if ref is None or bits(got) != bits(ref):
                self.differing += 1
                if self.first is None:
                    self.first = {"request": seq.label, "position": p, "got": got, "want": ref}

    def merge(self, other: Tally) -> None:
        if self.first is None:
            self.first = other.first
        self.compared += other.compared
        self.differing += other.differing

    def text(self) -> str:
        s = f"{self.compared} log-probs vs teacher forcing, {self.differing} differ"
        if self.first:
            f = self.first
            s += f" (first: {f['request']} position {f['position']}: got {f['got']!r}, want {f['want']!r})"
        return s

    def facts(self) -> dict:
        return {"tokens_compared": self.compared, "tokens_differing": self.differing, "first_mismatch": self.first}


class Teacher:
    """Teacher forcing of one sequence at a time (``layout="packed", all_tokens=True``) on one model, memoized."""

    def __init__(self, model):
        self.model, self._memo = model, {}

    def logp(self, seq: Seq) -> dict[int, float]:
        from ws1_qwen3 import Sample, teacher_forcing

        key = (seq.tokens, len(seq.prompt))
        if key not in self._memo:
            tf = teacher_forcing(self.model, [Sample(0, seq.tokens, len(seq.prompt))], layout="packed", all_tokens=True)
            self._memo[key] = {int(k) & 0xFFFFFFFF: v for k, v in zip(tf.keys.tolist(), tf.logp.tolist())}
        return self._memo[key]

    def tally(self, seqs: list[Seq]) -> Tally:
        t = Tally()
        for s in seqs:
            t.add(s, self.logp(s))
        return t


# ---- the engine ---------------------------------------------------------------------------------------------------


@dataclass
class Req:
    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    seed: int | None = None
    n: int = 1
    prompt_logprobs: bool = False
    temperature: float = 1.0


def _summaries_merge(into: dict, summary: dict) -> None:
    for op, e in summary.items():
        d = into.setdefault(op, {"kernel_ids": [], "families": [], "variant": []})
        for k in ("kernel_ids", "families", "variant"):
            d[k] = sorted(set(d[k]) | set(e.get(k, [])))


class Engine:
    """One in-process vLLM LLM(); every generate call runs under a ws1_ops recorder (what vLLM ran here)."""

    def __init__(self, name: str, weights: str, **kw):
        from vllm import LLM

        self.name, self.kw = name, kw
        self.recorded: dict = {}
        self.summaries: list[dict] = []  # each generate call's recorder summary (the kernel packages' own counts)
        self.llm = LLM(
            model=weights,
            skip_tokenizer_init=True,
            dtype="bfloat16",
            block_size=BLOCK,
            seed=0,
            **kw,
        )

    def generate(self, reqs: list[Req]) -> list[Seq]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        import ws1_ops

        sps = [
            SamplingParams(
                n=r.n,
                max_tokens=r.max_tokens,
                min_tokens=r.max_tokens,
                temperature=r.temperature,
                seed=r.seed,
                logprobs=1,
                prompt_logprobs=1 if r.prompt_logprobs else None,
                detokenize=False,
            )
            for r in reqs
        ]
        with ws1_ops.record() as rec:
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(r.prompt)) for r in reqs], sps, use_tqdm=False)
        self.summaries.append(rec.summary())
        _summaries_merge(self.recorded, self.summaries[-1])
        seqs = []
        for r, o in zip(reqs, outs):
            prompt = tuple(o.prompt_token_ids)
            plp = {p: d[prompt[p]].logprob for p, d in enumerate(o.prompt_logprobs or []) if d is not None}
            for c in o.outputs:
                comp = tuple(c.token_ids)
                lp = dict(plp)
                for j, d in enumerate(c.logprobs or []):
                    lp[len(prompt) + j] = d[comp[j]].logprob
                label = r.name if r.n == 1 else f"{r.name}#{c.index}"
                seqs.append(Seq(label, prompt, comp, lp, o.num_cached_tokens or 0))
        return seqs

    def preemptions(self) -> int:
        return int(sum(m.value for m in self.llm.get_metrics() if m.name == "vllm:num_preemptions"))

    def close(self) -> None:
        try:
            self.llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 (best effort: the engine goes with the object)
            pass
        del self.llm
        gc.collect()


ENGINE_KW = {
    # chunked prefill with a 32-token step budget, prefix caching on; eager
    "chunked+prefix": dict(
        enforce_eager=True,
        max_model_len=256,
        max_num_seqs=16,
        max_num_batched_tokens=STEP_BUDGET,
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
    ),
    # both off; a budget for 64 requests' prefill in one step; vLLM's default compilation (on CPU: DYNAMO_TRACE_ONCE,
    # which compiles nothing of the plugin's model — it is not a @support_torch_compile class)
    "plain": dict(
        enforce_eager=False,
        max_model_len=256,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        enable_chunked_prefill=False,
        enable_prefix_caching=False,
    ),
    # 5 blocks of 32 tokens (one is vLLM's null block): 4 requests of 2 blocks each cannot all stay; stats on for the
    # preemption counter
    "small-kv": dict(
        enforce_eager=True,
        max_model_len=64,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        enable_prefix_caching=False,
        num_gpu_blocks_override=5,
        disable_log_stats=False,
    ),
}


def _prompt(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, 1000) for _ in range(n))


# ---- the regimes --------------------------------------------------------------------------------------------------


@dataclass
class Result:
    """A regime's outcome before it is a cell: the tally, what must hold besides it, facts for the evidence."""

    tally: Tally = field(default_factory=Tally)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0

    def cell(self, regime: str) -> Cell:
        ok = self.tally.compared > 0 and self.tally.differing == 0 and not self.problems
        detail = "; ".join([self.tally.text(), *self.problems, *self.notes])
        return judged(
            f"regime/{regime}",
            "vllm_parity",
            ok,
            detail,
            lhs_role="vllm",
            rhs_role="teacher_forcing",
            thresholds={"atol": 0.0, "rtol": 0.0, "bitwise": True},
            extra={"regime": regime, **self.tally.facts(), **self.facts, "seconds": round(self.seconds, 1)},
        )


class Prompts:
    """The gate's fixed, seeded prompts (token ids in [1, 1000) of the tiny vocabulary)."""

    def __init__(self, seed: int = 7):
        rng = random.Random(seed)
        self.long = [_prompt(rng, n) for n in (40, 57, 70, 100)]  # longer than the 32-token step budget
        self.prefix = _prompt(rng, 2 * BLOCK)  # 2 full blocks
        self.suffixes = [_prompt(rng, n) for n in (9, 14, 5)]
        self.update_prefix = _prompt(rng, 2 * BLOCK)
        self.update_suffixes = [_prompt(rng, n) for n in (7, 11, 4)]
        self.alone = _prompt(rng, 24)
        self.batch = [(_prompt(rng, rng.randrange(3, 91)), rng.randrange(1, 13)) for _ in range(63)]
        self.n_unseeded, self.n_seeded = _prompt(rng, 16), _prompt(rng, 20)
        self.others = [(_prompt(rng, rng.randrange(4, 40)), rng.randrange(2, 9)) for _ in range(6)]
        self.preempt = [_prompt(rng, 28) for _ in range(4)]
        self.control = [_prompt(rng, n) for n in (12, 19, 26, 33)]


def chunked(eng: Engine, t: Teacher, P: Prompts, on: bool) -> Result:
    seqs = eng.generate([Req(f"long{i}", p, 4, prompt_logprobs=True) for i, p in enumerate(P.long)])
    r = Result(t.tally(seqs))
    budget = eng.kw["max_num_batched_tokens"]
    lens = [len(p) for p in P.long]
    if on:
        chunks = [-(-n // budget) for n in lens]
        r.facts = {"prompt_lengths": lens, "step_budget": budget, "prefill_chunks": chunks}
        if min(chunks) < 2:
            r.problems.append(f"a prompt fit the {budget}-token budget: not chunked")
        r.notes.append(f"prompts of {lens} tokens prefilled in {chunks} chunks of <= {budget}")
    else:
        r.facts = {"prompt_lengths": lens, "step_budget": budget, "enable_chunked_prefill": False}
        r.notes.append(f"prompts of {lens} tokens, each prefilled in one step (budget {budget})")
    return r


def prefix_cache(eng: Engine, t: Teacher, P: Prompts, on: bool) -> Result:
    # the first request fills the cache with the shared prefix; the next two (no prompt_logprobs: a request asking for
    # them never reads the prefix cache) read it
    first = eng.generate([Req("prefix0", P.prefix + P.suffixes[0], 4)])
    rest = eng.generate([Req(f"prefix{i}", P.prefix + s, 4) for i, s in enumerate(P.suffixes[1:], 1)])
    seqs = first + rest
    r = Result(t.tally(seqs))
    hits = [s.cached for s in rest]
    r.facts = {"shared_prefix_tokens": len(P.prefix), "num_cached_tokens": [s.cached for s in seqs]}
    if on and not all(h > 0 for h in hits):
        r.problems.append(f"the prefix cache was not hit: num_cached_tokens {hits}")
    if not on and any(s.cached for s in seqs):
        r.problems.append(f"prefix caching off, yet num_cached_tokens {[s.cached for s in seqs]}")
    r.notes.append(f"num_cached_tokens of the requests sharing a {len(P.prefix)}-token prefix: {hits}")
    return r


def alone_vs_batch(eng: Engine, t: Teacher, P: Prompts) -> Result:
    x = Req("x", P.alone, 8, seed=4242, prompt_logprobs=True)
    alone = eng.generate([x])[0]
    reqs = [
        Req(f"b{i}", p, n, seed=1000 + i, prompt_logprobs=i % 2 == 0) for i, (p, n) in enumerate(P.batch)
    ]  # 63 others: prompts of 3-90 tokens, 1-12 new tokens each (requests leave the batch at different steps)
    reqs.insert(37, Req("x@37", P.alone, 8, seed=4242, prompt_logprobs=True))
    batch = eng.generate(reqs)
    inb = next(s for s in batch if s.label == "x@37")
    r = Result(t.tally([alone, *batch]))
    r.facts = {"batch_size": len(reqs), "prompt_lengths": [len(q.prompt) for q in reqs]}
    if inb.completion != alone.completion:
        r.problems.append(f"seeded request x sampled {inb.completion} in the batch vs {alone.completion} alone")
    elif [bits(v) for v in inb.logp.values()] != [bits(v) for v in alone.logp.values()]:
        r.problems.append("request x's log-probs in the batch differ from alone")
    else:
        r.notes.append(f"x alone == x among {len(reqs)} (tokens and {len(alone.logp)} log-probs, bitwise)")
    return r


def n_samples(eng: Engine, t: Teacher, P: Prompts) -> Result:
    unseeded = eng.generate([Req("u", P.n_unseeded, 8, n=4)])
    s_alone = eng.generate([Req("s", P.n_seeded, 8, seed=777, n=3)])
    others = [Req(f"o{i}", p, k, seed=None if i % 2 else 50 + i) for i, (p, k) in enumerate(P.others)]
    mixed = eng.generate(others[:3] + [Req("s", P.n_seeded, 8, seed=777, n=3)] + others[3:])
    s_batch = [s for s in mixed if s.label.startswith("s#")]
    r = Result(t.tally(unseeded + s_alone + mixed))
    distinct = len({s.completion for s in unseeded})
    r.facts = {"unseeded_distinct_of_4": distinct, "seeded_n": 3, "enable_chunked_prefill": False}
    if distinct < 2:
        r.problems.append("4 unseeded samples of one prompt were all the same")
    if sorted((s.label, s.completion) for s in s_alone) != sorted((s.label, s.completion) for s in s_batch):
        r.problems.append("the seeded request (n=3) sampled other tokens in a batch than alone")
    elif sorted((s.label, [bits(v) for v in s.completion_logp()]) for s in s_alone) != sorted(
        (s.label, [bits(v) for v in s.completion_logp()]) for s in s_batch
    ):
        r.problems.append("the seeded request's (n=3) log-probs differ in a batch from alone")
    else:
        r.notes.append("seeded n=3 alone == in a batch of 7 (tokens and log-probs)")
    r.notes.append(
        f"{distinct} distinct of 4 unseeded samples; chunked prefill off (vLLM 0.32 CPU crashes on seeded sampling "
        "with chunked prefill: CPU Generator does not use offset)"
    )
    return r


def preemption(eng: Engine, t: Teacher, P: Prompts) -> Result:
    before = eng.preemptions()
    seqs = eng.generate([Req(f"p{i}", p, 20, prompt_logprobs=i == 0) for i, p in enumerate(P.preempt)])
    n = eng.preemptions() - before
    r = Result(t.tally(seqs))
    r.facts = {"num_preemptions": n, "num_gpu_blocks": eng.kw["num_gpu_blocks_override"], "requests": len(seqs)}
    if n <= 0:
        r.problems.append("no request was preempted (vllm:num_preemptions 0): the regime was not exercised")
    r.notes.append(
        f"{n} preemptions (vllm:num_preemptions): {len(seqs)} requests of 48 tokens in "
        f"{eng.kw['num_gpu_blocks_override']} KV blocks of {BLOCK}"
    )
    return r


def weight_update(eng: Engine, old: Teacher, new: Teacher, new_dir: str, P: Prompts) -> Result:
    a, b, c = (P.update_prefix + s for s in P.update_suffixes)
    before = eng.generate([Req("before", a, 4)])  # fills the cache with the prefix's old-weight K/V
    r = Result(old.tally(before))
    t0 = time.perf_counter()
    eng.llm.collective_rpc("reload_weights", kwargs={"weights_path": new_dir})
    reload_s = time.perf_counter() - t0
    # without a reset: what the installed vLLM does with the prefix entries of the old weights
    stale = eng.generate([Req("no-reset", b, 4)])[0]
    st = new.tally([stale])
    reset = eng.llm.reset_prefix_cache()
    after = eng.generate([Req("after-reset", a, 4, prompt_logprobs=True)])  # recomputed from scratch
    again = eng.generate([Req("after-reset-hit", c, 4)])  # reads the new weights' prefix from the cache
    r.tally.merge(new.tally(after + again))
    r.facts = {
        "reload_weights_s": round(reload_s, 2),
        "reset_prefix_cache": reset,
        "no_reset": {"num_cached_tokens": stale.cached, **st.facts()},
        "num_cached_tokens": {"after_reset": after[0].cached, "after_reset_hit": again[0].cached},
    }
    if not reset:
        r.problems.append("llm.reset_prefix_cache() returned False")
    if again[0].cached <= 0:
        r.problems.append("after the reset the shared prefix was not cached again: the new weights' reuse untested")
    if stale.cached > 0 and st.differing:
        r.notes.append(
            f"without reset_prefix_cache() vLLM reused {stale.cached} cached tokens of the old weights: "
            f"{st.differing}/{st.compared} log-probs differ from the new weights' teacher forcing, so the procedure "
            "is reload_weights + reset_prefix_cache()"
        )
    elif stale.cached > 0:
        r.notes.append(f"without a reset {stale.cached} tokens came from the cache, yet every log-prob matched")
    else:
        r.notes.append("without a reset no stale prefix entry was reused (num_cached_tokens 0)")
    r.notes.append(
        f"after reload + reset: teacher forcing on the new weights, cache hit {again[0].cached} tokens on reuse"
    )
    return r


def provenance_cell(profile: str, manifest, recorded: dict) -> Cell:
    """ws1_vllm.provenance() names the profile's declared kernel for every node of the chain; what this process
    recorded during generate agrees."""
    declared = {node: manifest.kernel_id(profile, node) for node in CHAIN}
    prov = ws1_vllm.provenance()
    problems = []
    for node, kid in declared.items():
        got = (prov.get(node) or {}).get("kernel_ids", [])
        if got != [kid]:
            problems.append(f"{node}: plugin reports {got or 'nothing'}, declared {kid}")
        seen = (recorded.get(node) or {}).get("kernel_ids", [])
        if seen != [kid]:
            problems.append(f"{node}: recorded during generate {seen or 'nothing'}, declared {kid}")
        if (prov.get(node) or {}).get("variant") or (recorded.get(node) or {}).get("variant"):
            problems.append(f"{node}: a negative control's variant ran")
    detail = "; ".join(problems) if problems else f"all {len(CHAIN)} nodes of the chain ran {profile}'s kernels"
    return judged(
        "regime/provenance",
        "provenance",
        not problems,
        detail,
        extra={"declared": declared, "plugin": prov, "recorded": recorded},
    )


# ---- the gate -----------------------------------------------------------------------------------------------------


def _vllm_env(profile: str, candidate: str | None, plugin: bool = True) -> None:
    """vLLM in this process, a small KV cache, logs on stderr; the plugin on (or off for the stock control)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    for k in ("WS1_VLLM_PROFILE", "WS1_VLLM_CANDIDATE"):
        os.environ.pop(k, None)
    if plugin:
        os.environ["WS1_VLLM_PROFILE"] = profile
        if candidate:
            os.environ["WS1_VLLM_CANDIDATE"] = candidate


def why_not(profile: str) -> tuple[str | None, bool]:
    """(why vLLM cannot run ``profile`` here, whether that is the device's absence), or (None, False)."""
    why = ws1_accel.unavailable_reason(profile)
    if why is not None:
        return f"no {ws1_accel.device_type_of(profile)} device: {why}", True
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not importable in {sys.executable} (run `bash ci/setup_vllm.sh`, use .venv-vllm)", False
    from vllm.platforms import current_platform

    want = ws1_accel.device_type_of(profile)
    if current_platform.device_type != want:
        return f"the installed vLLM is built for {current_platform.device_type!r}, {profile} needs {want!r}", False
    return None, False


def _weights(tmp: Path, profile: str) -> tuple[str, str]:
    import ws1_qwen3

    out = []
    for name, seed in (("old", SEED), ("new", NEW_SEED)):
        d = tmp / name
        ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(MODEL, profile, seed=seed), d)
        out.append(str(d))
    return out[0], out[1]


def _run_control(profile: str, name: str, evidence_dir: str | None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ws1_matrix", "vllm", profile, "--control", name]
    if evidence_dir:
        cmd += ["--evidence-dir", evidence_dir]
    from ws1_contract.evidence import run_id

    env = {**os.environ, "WS1_RUN_ID": run_id()}
    # its table goes to our stderr (our stdout is the table or --json)
    return subprocess.Popen(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr)


def control_verdict(profile: str, name: str, rc: int, evidence_dir: str | None) -> Cell:
    """A negative control's record of this run: green when the control ran as set up and came out red."""
    from ws1_contract.evidence import evidence_root, read_evidence, run_id

    path = Path(evidence_dir or evidence_root()) / profile / f"{control_gate(name)}.json"
    cid = f"control/{name}"
    try:
        rec = read_evidence(path)
    except Exception as exc:  # noqa: BLE001 (any unreadable record is a red cell)
        return judged(cid, "negative_control", False, f"no record of the control (exit {rc}): {exc}")
    if rec.get("run_id") != run_id():
        return judged(cid, "negative_control", False, f"{path} is not of this run (exit {rc}): a stale record")
    cells = {c["id"]: c for c in rec["cells"]}
    setup, parity = cells.get("control/setup"), cells.get("control/vs_teacher_forcing")
    facts = {"record": str(path), "exit_code": rc}
    if setup is None or parity is None:
        return judged(cid, "negative_control", False, f"incomplete control record (exit {rc})", extra=facts)
    facts.update({k: parity.get(k) for k in ("tokens_compared", "tokens_differing", "first_mismatch")})
    if setup["status"] != "green":
        return judged(cid, "negative_control", False, f"the control was not set up: {setup['detail']}", extra=facts)
    if parity["status"] == "red" and (parity.get("tokens_differing") or 0) > 0:
        return judged(cid, "negative_control", True, f"red, as it must be: {parity['detail']}", extra=facts)
    return judged(cid, "negative_control", False, f"the control did not come out red: {parity['detail']}", extra=facts)


def _engine_cells(run, regimes, old_dir, new_dir, teachers, P, recorded, summaries) -> None:
    for ename, served in ENGINES.items():
        todo = [g for g in served if g in regimes]
        if not todo:
            continue
        t0 = time.perf_counter()
        log(f"engine {ename} ({', '.join(todo)}): starting vLLM")
        try:
            eng = Engine(ename, old_dir, **ENGINE_KW[ename])
        except Exception as exc:  # noqa: BLE001 (a refusal or a crash of the engine: each regime red, one line)
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            for g in todo:
                run.add(judged(f"regime/{g}", "vllm_parity", False, f"LLM() raised {type(exc).__name__}: {msg}"))
            continue
        log(f"engine {ename}: LLM() in {time.perf_counter() - t0:.1f}s")
        for g in todo:
            t1 = time.perf_counter()
            log(f"regime {g} …")
            try:
                if g in ("chunked_prefill_on", "chunked_prefill_off"):
                    res = chunked(eng, teachers["old"], P, on=g.endswith("_on"))
                elif g in ("prefix_cache_on", "prefix_cache_off"):
                    res = prefix_cache(eng, teachers["old"], P, on=g.endswith("_on"))
                elif g == "alone_vs_batch":
                    res = alone_vs_batch(eng, teachers["old"], P)
                elif g == "n_samples":
                    res = n_samples(eng, teachers["old"], P)
                elif g == "preemption":
                    res = preemption(eng, teachers["old"], P)
                else:
                    res = weight_update(eng, teachers["old"], teachers["new"], new_dir, P)
                res.seconds = time.perf_counter() - t1
                cell = res.cell(g)
            except Exception as exc:  # noqa: BLE001 (a crash inside vLLM or the plugin is this regime's red cell)
                msg = (str(exc).strip().splitlines() or [""])[-1]
                cell = judged(f"regime/{g}", "vllm_parity", False, f"raised {type(exc).__name__}: {msg}")
            run.add(cell)
            log(f"regime {g}: {cell.status} in {time.perf_counter() - t1:.1f}s — {cell.detail[:150]}")
        _summaries_merge(recorded, eng.recorded)
        summaries.extend(eng.summaries)
        eng.close()


def gate(run, args) -> None:
    profile = run.profile
    regimes = [g for g in REGIMES if g in (args.regimes.split(",") if args.regimes else REGIMES)]
    controls = [] if args.no_controls else list(CONTROLS)
    _vllm_env(profile, None)  # before vllm is imported: its logging reads the environment then
    why, absent = why_not(profile)
    _runs[profile] = (run, absent)
    if why is not None:
        for g in regimes:
            run.add(red_not_executed(f"regime/{g}", "vllm_parity", why))
        for c in controls:
            run.add(red_not_executed(f"control/{c}", "negative_control", why))
        return
    t0 = time.perf_counter()
    procs = {}
    if controls:  # each in its own process (the plugin registers process-wide), beside this one's engines
        log(f"negative controls {', '.join(controls)}: started in subprocesses")
        procs = {c: _run_control(profile, c, args.evidence_dir) for c in controls}
    import ws1_qwen3

    with tempfile.TemporaryDirectory(prefix="ws1-vllm-gate-") as tmp:
        old_dir, new_dir = _weights(Path(tmp), profile)
        teachers = {k: Teacher(ws1_qwen3.from_pretrained(d, profile)) for k, d in (("old", old_dir), ("new", new_dir))}
        log(f"weights: synthetic {MODEL} seeds {SEED} and {NEW_SEED} in {time.perf_counter() - t0:.1f}s")
        recorded: dict = {}
        summaries: list[dict] = []
        _engine_cells(run, regimes, old_dir, new_dir, teachers, Prompts(), recorded, summaries)
    if "provenance" in regimes:
        run.add(provenance_cell(profile, run.manifest, recorded))
    for c, p in procs.items():
        t1 = time.perf_counter()
        rc = p.wait()
        cell = control_verdict(profile, c, rc, args.evidence_dir)
        run.add(cell)
        log(f"control {c}: {cell.status} (waited {time.perf_counter() - t1:.1f}s) — {cell.detail[:150]}")
    import vllm

    run.extra.update(
        {
            "model": MODEL,
            "synthetic": True,
            "vllm": vllm.__version__,
            "recorded": recorded,
            "engines": {name: {"regimes": ENGINES[name], **kw} for name, kw in ENGINE_KW.items()},
        }
    )
    run.provenance = _provenance(run, recorded, summaries)


def _provenance(run, recorded: dict, summaries: list[dict]) -> dict:
    """The record's provenance: the family and (on CPU) the ISA path of the kernels that ran inside vLLM."""
    from ws1_contract import collect_provenance
    from ws1_ops.registry import arch_key_of

    fams = sorted({f for e in recorded.values() for f in e["families"]})
    actual = fams[0] if len(fams) == 1 else f"mixed{fams}"
    cpu = ws1_accel.device_type_of(run.profile) == "cpu"
    return collect_provenance(
        run.profile,
        actual,
        run.contract,
        run.manifest.fixture_identity_sha256,
        arch_key=arch_key_of(summaries) if cpu and summaries else None,
    ).to_dict()


# ---- a negative control (its own process) -------------------------------------------------------------------------


def control(run, args) -> None:
    """``--control NAME``: vLLM on a setting that must make it differ from WS1's teacher forcing."""
    profile, name = run.profile, args.control
    stock = name == "stock"
    _vllm_env(profile, None if stock else name, plugin=not stock)
    why, absent = why_not(profile)
    _runs[profile] = (run, absent)
    if why is not None:
        run.add(red_not_executed("control/setup", "negative_control", why))
        run.add(red_not_executed("control/vs_teacher_forcing", "vllm_parity", why))
        return
    import ws1_qwen3

    P = Prompts()
    with tempfile.TemporaryDirectory(prefix="ws1-vllm-control-") as tmp:
        d = str(Path(tmp) / "w")
        ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(MODEL, profile, seed=SEED), d)
        teacher = Teacher(ws1_qwen3.from_pretrained(d, profile if stock else name))
        t0 = time.perf_counter()
        eng = Engine("control", d, **ENGINE_KW["plain"])
        log(f"control {name}: LLM() in {time.perf_counter() - t0:.1f}s")
        # stock: prompt and completion log-probs; the variant: 4 requests (decode steps of 4 rows, the variant's
        # small-M path) whose teacher forcing has > 8 rows (its split-K path), completion log-probs only
        reqs = [Req(f"c{i}", p, 6, prompt_logprobs=stock) for i, p in enumerate(P.control)]
        seqs = eng.generate(reqs)
        tally = teacher.tally(seqs)
        recorded = eng.recorded
        eng.close()
    if stock:
        ok = not recorded
        setup = (
            "plugin off: no ws1 kernel ran inside vLLM"
            if ok
            else f"the plugin ran with WS1_VLLM_PROFILE unset: {sorted(recorded)}"
        )
    else:
        from ws1_ops.backends.controls import M_SPLIT_ABOVE

        ran = (recorded.get("det_gemm") or {}).get("variant", [])
        rows = [len(s.tokens) for s in seqs]
        ok = ran == [name] and len(reqs) <= M_SPLIT_ABOVE < min(rows)
        setup = (
            f"det_gemm ran the variant {ran} in vLLM; decode steps of {len(reqs)} rows (<= {M_SPLIT_ABOVE}), "
            f"teacher forcing of {min(rows)}-{max(rows)} rows (> {M_SPLIT_ABOVE})"
            if ok
            else f"the variant did not run as set up: det_gemm variants recorded {ran}, teacher forcing rows {rows}"
        )
    run.add(judged("control/setup", "negative_control", ok, setup, extra={"recorded": recorded}))
    run.add(
        judged(
            "control/vs_teacher_forcing",
            "vllm_parity",
            tally.compared > 0 and tally.differing == 0,
            tally.text(),
            lhs_role="vllm",
            rhs_role="teacher_forcing",
            extra={"control": name, **tally.facts()},
        )
    )
    import vllm

    run.extra.update({"control": name, "model": MODEL, "vllm": vllm.__version__})
    run.provenance = {
        "profile": profile,
        "control": name,
        "families_recorded": sorted({f for e in recorded.values() for f in e["families"]}),
    }


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--regimes", default=None, help=f"comma-separated subset of {','.join(REGIMES)} (default: all)")
    ap.add_argument("--no-controls", action="store_true", help="skip the negative controls (developer iterations)")
    ap.add_argument("--control", choices=CONTROLS, default=None, help="run one negative control (its own record)")


def main(argv: list[str]) -> int:
    from ws1_contract import gate_main

    argv = list(argv)
    ctl = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--control"), None)
    ctl = ctl or next((a.split("=", 1)[1] for a in argv if a.startswith("--control=")), None)
    _runs.clear()
    code = gate_main(
        control_gate(ctl) if ctl else GATE,
        control if ctl else gate,
        argv,
        add_args=add_args,
        description="vLLM gate: vLLM's log-probs vs WS1 teacher forcing, bitwise, per serving regime",
    )
    # a profile whose device is absent: its cells are red (not executed) and the exit code is 2, unless an executed
    # profile came out red (red wins over absent)
    absent = [p for p, (_, a) in _runs.items() if a]
    red = [p for p, (run, a) in _runs.items() if not a and not run.passed]
    if code == 1 and absent and not red:
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
