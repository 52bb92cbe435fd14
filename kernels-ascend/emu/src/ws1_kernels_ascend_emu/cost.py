"""The cost model of kernels-ascend (docs/ascend.md, "Cost model"): per kernel call, what the kernels ISSUE — Cube MACs
as issued (m * n * k of every Mmad: padding included) and GM bytes per pipe (MTE2 reads, MTE3 and FIX writes) — as
closed formulas of the shapes, mirroring the code of kernels-ascend/csrc. tests/test_emu_op_counts.py checks every
formula against the emulator's own counts (ws1emu::Counts) at small shapes, bit for bit; the formulas then give the
910B roofline at the benchmark shapes, where the emulator is too slow to run.

    python -m ws1_kernels_ascend_emu.cost              # the tables of docs/ascend.md (formulas, roofline)
    python -m ws1_kernels_ascend_emu.cost --emulate    # also: the emulator's counts next to the formulas, small shapes

The 910B figures (docs/ascend.md cites each): Cube BF16 16 x 16 x 16 MACs per cycle per AIC, FP32 16 x 16 x 4
(asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md); 24 AIC / 48 AIV at 1800 MHz on an Ascend910B2, 20 / 40 at
1500 MHz on an Ascend910B4 (CANN's platform configs, hicann/runtime src/platform/platform_config/Ascend910B2.ini,
Ascend910B4-1.ini); vector FP32 64 elements per cycle (Add, Mul, Adds, Muls), 32 (Exp, Ln, Div) per AIV
(Vector指令理论性能汇总.md); HBM ~1.6 TB/s (third-party spec sheets; no Huawei primary figure in reach: an assumption).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

# ---- the kernels' fixed tiles (csrc/cube_gemm.h, attention.h, attention_bwd.h) --------------------------------------
BASE_M, BASE_N, BASE_K, M_GROUP, N_GROUP = 64, 128, 64, 2, 2
ROWS, KEY_TILE, ATTN_K, BWD_KEYS, BWD_SLOTS = 64, 128, 64, 64, 128


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def rup(a: int, b: int) -> int:
    return cdiv(a, b) * b


@dataclass
class Cost:
    """What one kernel call issues: Cube MACs (padding included), GM bytes per pipe, and the model's extras."""

    macs: int = 0
    mte2: int = 0  # GM -> UB / L1 bytes (MTE2)
    mte3: int = 0  # UB -> GM bytes (MTE3)
    fix: int = 0  # L0C -> GM bytes (FIX)
    useful_flops: float = 0.0
    hbm: int = 0  # unique HBM bytes: every input read once, every output written once
    ws: int = 0  # of mte2 + mte3 + fix: the per-core workspace round trips (L2-sized, see the doc)
    vec: int = 0  # vector element-operations, Exp / Ln counted twice (their half rate): an estimate
    fp32: bool = False  # FP32 Mmads (1024 MACs / cycle / AIC instead of 4096)
    items: int = 0  # work items: at most this many AI cores can be busy
    parts: list["Cost"] = field(default_factory=list)  # a call of several kernels: each its own roofline, summed

    def add(self, o: "Cost") -> "Cost":
        for f in ("macs", "mte2", "mte3", "fix", "useful_flops", "hbm", "ws", "vec"):
            setattr(self, f, getattr(self, f) + getattr(o, f))
        self.fp32 = self.fp32 or o.fp32
        return self


# ---- GEMM: det_gemm (bf16 -> bf16), lm_head (bf16 -> fp32), gemm_fp32 -------------------------------------------
def gemm(M: int, N: int, K: int, isz: int = 2, osz: int = 2) -> Cost:
    mt, nt, kc = cdiv(M, BASE_M), cdiv(N, BASE_N), cdiv(K, BASE_K)
    mg, ng = cdiv(mt, M_GROUP), cdiv(nt, N_GROUP)
    c = Cost(fp32=isz == 4)
    c.macs = mt * BASE_M * nt * BASE_N * kc * BASE_K
    # A: every item (2 x 2 output tiles) copies its M tiles' valid rows, all K columns, once (kept in L1 for its N
    # tiles); B: every item copies its N tiles' valid rows once per chunk (shared by its M tiles in L1 / L0B)
    c.mte2 = (ng * M * K + mg * N * K) * isz
    c.fix = M * N * osz
    c.useful_flops = 2.0 * M * N * K
    c.hbm = (M * K + N * K) * isz + M * N * osz
    c.items = mg * ng
    return c


# ---- attention -----------------------------------------------------------------------------------------------------
def query_blocks(lens_q: list[list[int]], G: int) -> list[tuple[int, int]]:
    """(query count, largest position) of every query block: per sequence its queries (positions) in blocks
    of 64 / G."""
    qb = 64 // G
    out = []
    for pos in lens_q:
        for s in range(0, len(pos), qb):
            blk = pos[s : s + qb]
            out.append((len(blk), max(blk)))
    return out


def attention_fwd(seqs: list[list[int]], Hq: int, Hkv: int, D: int) -> Cost:
    """seqs: per sequence the positions of its queries in the call (keys 0..max position are the cache)."""
    G, dk, np_ = Hq // Hkv, rup(D, ATTN_K), rup(D, 16)
    c = Cost()
    tiles = 0
    ws_mte2 = ws_mte3 = ws_fix = 0
    blocks = query_blocks(seqs, G)
    c.items = len(blocks) * Hkv
    for nq, pmax in blocks:
        nt = pmax // KEY_TILE + 1
        r = nq * G  # the block's valid rows: only they cross between the AIC and the AIVs
        tiles += nt * Hkv
        c.mte2 += Hkv * nq * G * D * 2  # Q rows (AIC)
        for t in range(nt):
            keys = min(KEY_TILE, pmax + 1 - t * KEY_TILE)
            c.mte2 += Hkv * 2 * keys * D * 2  # K and V rows (AIC)
        ws_mte2 += nt * Hkv * r * KEY_TILE * (2 + 4 + 4)  # P (AIC), S and O (AIVs)
        ws_mte3 += nt * Hkv * r * KEY_TILE * 2  # P
        ws_fix += nt * Hkv * r * (KEY_TILE * 4 + np_ * 4)  # S, O
    c.macs = tiles * (ROWS * KEY_TILE * dk + ROWS * np_ * KEY_TILE)
    Tq = sum(len(p) for p in seqs)
    c.mte2 += ws_mte2
    c.mte3 = ws_mte3 + Tq * Hq * (D * 2 + 4)  # + out, lse
    c.fix = ws_fix
    c.ws = ws_mte2 + ws_mte3 + ws_fix
    pairs = sum(p + 1 for pos in seqs for p in pos)
    c.useful_flops = 4.0 * D * Hq * pairs
    Tk = sum(max(p) + 1 for p in seqs)
    c.hbm = Tq * Hq * D * 2 * 2 + 2 * Tk * Hkv * D * 2 + Tq * Hq * 4
    # vector work per (tile, valid row): Muls, the mask, ReduceMax, Adds, Exp (half rate: twice), ReduceSum, the P cast
    # over 128 lanes, the acc update (Muls + Add over D), two 8-lane scalar Exps; per row at the end Duplicate, Div
    # (half rate), Cast over D and an 8-lane Ln; per block and AIV the acc init (32 x 128)
    c.vec = ws_mte3 // (KEY_TILE * 2) * (8 * KEY_TILE + 2 * D + 32) + Tq * Hq * (4 * D + 32)
    c.vec += len(blocks) * Hkv * 2 * 32 * KEY_TILE
    return c


def attention_bwd(seqs: list[list[int]], Hq: int, Hkv: int, D: int, dout_bytes: int = 2, out_bytes: int = 2) -> Cost:
    G, dk, np_ = Hq // Hkv, rup(D, ATTN_K), rup(D, 16)
    Tq = sum(len(p) for p in seqs)
    rows = Tq * Hq
    prep = Cost(mte2=rows * D * (dout_bytes + out_bytes), mte3=rows * (D * 2 + 4))
    prep.vec = rows * 4 * D
    prep.items = rows
    prep.hbm = prep.mte2 + prep.mte3
    # dQ
    dq = Cost()
    tiles = wsr = 0
    blocks = query_blocks(seqs, G)
    dq.items = len(blocks) * Hkv
    for nq, pmax in blocks:
        nt = pmax // KEY_TILE + 1
        tiles += nt * Hkv
        wsr += nt * Hkv * nq * G  # valid rows crossing, per tile
        dq.mte2 += Hkv * 2 * nq * G * D * 2  # Q and dO rows
        for t in range(nt):
            dq.mte2 += Hkv * 2 * min(KEY_TILE, pmax + 1 - t * KEY_TILE) * D * 2  # K, V
    dq.macs = tiles * (2 * ROWS * KEY_TILE * dk + ROWS * np_ * KEY_TILE)
    ws2, ws3, wsf = wsr * KEY_TILE * (2 + 2 * 4), wsr * KEY_TILE * 2, wsr * KEY_TILE * 2 * 4
    dq.mte2 += ws2
    dq.mte3 = ws3
    dq.fix = wsf + rows * D * 4
    dq.ws = ws2 + ws3 + wsf
    dq.vec = wsr * 9 * KEY_TILE
    dq.hbm = dq.mte2 + dq.mte3 + dq.fix - dq.ws
    # dK / dV: key blocks of 64 aligned to key 0 x occupied 128-slot tiles from the block's first key on
    kv = Cost()
    kv_tiles = kv_rows = 0
    for pos in seqs:
        L = max(pos) + 1
        present = sorted(set(pos))
        slots = {}  # tile -> present slot rows in it
        for p in present:
            for g in range(G):
                u = (p * G + g) // BWD_SLOTS
                slots[u] = slots.get(u, 0) + 1
        occupied = sorted(slots)
        for j0 in range(0, L, BWD_KEYS):
            u0 = j0 * G // BWD_SLOTS
            us = [u for u in occupied if u >= u0]
            if not us:
                continue
            nk = min(BWD_KEYS, L - j0)
            kv.mte2 += Hkv * 2 * nk * D * 2  # K, V rows of the block
            kv.fix += Hkv * 2 * nk * D * 4  # dK, dV rows
            for u in us:
                kv.mte2 += Hkv * 2 * slots[u] * D * 2  # Q and dO slot rows
            kv_tiles += len(us) * Hkv
            kv_rows += len(us) * Hkv * nk  # key rows crossing, per tile
            kv.items += Hkv
    kv.macs = kv_tiles * (2 * BWD_KEYS * BWD_SLOTS * dk + 2 * BWD_KEYS * np_ * BWD_SLOTS)
    kws2 = kv_rows * BWD_SLOTS * (2 * 2 + 2 * 4)
    kv.mte2 += kws2
    kv.mte3 = kv_rows * BWD_SLOTS * 2 * 2
    kws_fix = kv_rows * BWD_SLOTS * 2 * 4
    kv.fix += kws_fix
    kv.ws = kws2 + kv.mte3 + kws_fix
    kv.vec = kv_rows * 9 * BWD_SLOTS
    kv.hbm = kv.mte2 + kv.mte3 + kv.fix - kv.ws
    total = Cost().add(prep).add(dq).add(kv)
    total.parts = [prep, dq, kv]
    pairs = sum(p + 1 for pos in seqs for p in pos)
    total.useful_flops = 2.5 * 4.0 * D * Hq * pairs
    Tk = sum(max(p) + 1 for p in seqs)
    total.hbm = rows * D * 2 * 4 + rows * 4 * 2 + 2 * Tk * Hkv * D * 2 + rows * D * 4 + 2 * Tk * Hkv * D * 4
    return total


# ---- a 910B's roofline --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chip:
    name: str
    aic: int
    aiv: int
    ghz: float
    hbm_tbs: float

    @property
    def bf16_tflops(self) -> float:  # 16 x 16 x 16 MACs per cycle per AIC
        return self.aic * 4096 * 2 * self.ghz * 1e9 / 1e12

    @property
    def fp32_tflops(self) -> float:  # 16 x 16 x 4
        return self.aic * 1024 * 2 * self.ghz * 1e9 / 1e12

    @property
    def vec_gops(self) -> float:  # FP32 element-operations per second, 64 per cycle per AIV
        return self.aiv * 64 * self.ghz


B2 = Chip("Ascend910B2", 24, 48, 1.8, 1.6)
B4 = Chip("Ascend910B4", 20, 40, 1.5, 1.6)


# Per-core GM port: the platform config's [AICoreMemoryRates] l2_rate = 110 (read here as bytes per cycle per core;
# the field is not documented) — what one core can move to or from GM (L2) whatever the chip's HBM could give.
L2_PORT_BYTES_PER_CYCLE = 110


def bounds(c: Cost, chip: Chip = B2) -> dict[str, float]:
    """Lower bounds on one kernel's time in microseconds: the Cube (issued MACs on the busy AICs), HBM (unique bytes),
    the busiest core's GM port (issued bytes over the busy cores), the vector unit (busy AIVs)."""
    if c.parts:
        out: dict[str, float] = {}
        for p in c.parts:
            b = bounds(p, chip)
            k = max(b, key=b.get)
            out[k] = out.get(k, 0.0) + b[k]  # the kernels run one after another: each its binding bound
        return out
    busy = max(1, min(c.items or chip.aic, chip.aic))
    per_aic = (chip.fp32_tflops if c.fp32 else chip.bf16_tflops) * 1e12 / chip.aic
    t = {
        "Cube": 2.0 * c.macs / (per_aic * busy),
        "HBM": c.hbm / (chip.hbm_tbs * 1e12),
        "GM port": (c.mte2 + c.mte3 + c.fix) / (busy * L2_PORT_BYTES_PER_CYCLE * chip.ghz * 1e9),
        "vector": c.vec / (2 * busy * 64 * chip.ghz * 1e9),
    }
    return {k: v * 1e6 for k, v in t.items()}


def roofline(c: Cost, chip: Chip = B2) -> tuple[float, str]:
    """The largest bound (microseconds) and its name; for a call of several kernels, their binding bounds summed."""
    b = bounds(c, chip)
    if c.parts:
        return sum(b.values()), " + ".join(f"{k} {v:.3g}" for k, v in b.items())
    k = max(b, key=b.get)
    return b[k], k


# ---- the benchmark shapes (the CUDA cost model's, docs/cuda.md): Qwen3-8B, K = 4096, Hq 32, Hkv 8, D 128 ------------
def bench_cases() -> list[tuple[str, str, Cost]]:
    cases = []
    for N in (4096, 12288):
        for M in (1, 59, 256, 4096):
            cases.append(("det_gemm", f"M {M} N {N} K 4096", gemm(M, N, 4096)))
    for M in (1, 59, 256, 4096):
        cases.append(("lm_head", f"M {M} N 151936 K 4096", gemm(M, 151936, 4096, osz=4)))
    cases.append(("gemm_fp32 (dx, FP32 dy)", "M 256 N 4096 K 4096", gemm(256, 4096, 4096, isz=4, osz=4)))
    cases.append(("attention", "prefill B1 S2048", attention_fwd([list(range(2048))], 32, 8, 128)))
    cases.append(("attention", "decode B32 Skv2048", attention_fwd([[2047]] * 32, 32, 8, 128)))
    cases.append(("attention", "decode B1 Skv32768", attention_fwd([[32767]], 32, 8, 128)))
    cases.append(("attention_bwd", "B1 S2048", attention_bwd([list(range(2048))], 32, 8, 128)))
    return cases


def markdown(chip: Chip = B2) -> str:
    lines = [
        "| kernel | shape | useful GFLOP | issued GMAC (Cube) | GM MB issued (MTE2 + MTE3 + FIX) | "
        "of it workspace MB | HBM MB (unique) | busy AI cores | Cube / HBM / GM port / vector µs | "
        f"roofline ({chip.name}) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, c in bench_cases():
        us, bound = roofline(c, chip)
        gm = (c.mte2 + c.mte3 + c.fix) / 1e6
        b = bounds(
            Cost(**{f: getattr(c, f) for f in ("macs", "mte2", "mte3", "fix", "hbm", "vec", "fp32", "items")}), chip
        )
        busy = "per kernel" if c.parts else str(min(c.items, chip.aic))
        lines.append(
            f"| {name} | {shape} | {c.useful_flops / 1e9:.3g} | {c.macs / 1e9:.4g} | {gm:.4g} | {c.ws / 1e6:.3g} | "
            f"{c.hbm / 1e6:.4g} | {busy} | {b['Cube']:.3g} / {b['HBM']:.3g} / {b['GM port']:.3g} / "
            f"{b['vector']:.3g} | {us:.4g} µs ({bound}) |"
        )
    return "\n".join(lines)


# ---- the emulator check (small shapes) ----------------------------------------------------------------------------
def small_cases():
    """(kernel name in the emulator's counts, call, model) at shapes the emulator runs in well under a second."""
    import torch

    E = torch.ops.ws1_ascend_emu
    g = torch.Generator().manual_seed(0)

    def bf(*s):
        return torch.randn(*s, generator=g).bfloat16()

    x, w = bf(70, 1100), bf(300, 1100) * 0.05
    seqs = [list(range(5)), list(range(150)), [39], list(range(100, 137))]
    lens = [5, 150, 40, 137]
    cu_k = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    pos = [p for s in seqs for p in s]
    cu_q = torch.tensor([0, *torch.tensor([len(s) for s in seqs]).cumsum(0).tolist()])
    Hq, Hkv, D = 4, 2, 64
    q, k, v = bf(len(pos), Hq, D), bf(int(cu_k[-1]), Hkv, D), bf(int(cu_k[-1]), Hkv, D)
    qp = torch.tensor(pos)

    def fwd():
        return E.attention(q, k, v, cu_q, cu_k, qp, 0.125)

    def bwd():
        out, lse = fwd()
        return E.attention_bwd(out, q, k, v, out, lse, cu_q, cu_k, qp, 0.125)

    return [
        ("det_gemm", lambda: E.det_gemm(x, w), gemm(70, 300, 1100)),
        ("lm_head", lambda: E.lm_head(x[:7], w), gemm(7, 300, 1100, osz=4)),
        ("gemm_fp32", lambda: E.gemm(x.float(), w.float(), True), gemm(70, 300, 1100, isz=4, osz=4)),
        ("attention", fwd, attention_fwd(seqs, Hq, Hkv, D)),
        ("attention_bwd", bwd, attention_bwd(seqs, Hq, Hkv, D)),
    ]


BWD_KERNELS = ("attention_bwd_prep", "attention_bwd_dq", "attention_bwd_dkv")


def emulated(name: str, call) -> dict:
    """Run `call` on the emulator and return its counts for `name` (the three backward kernels summed)."""
    import ws1_kernels_ascend_emu as emu

    if name == "attention_bwd":
        call_fwd = call
        emu.op_counts(reset=True)
        call_fwd()
        counts = emu.op_counts(reset=True)
        parts = [counts[k] for k in BWD_KERNELS]
        out = {"mmad_macs": 0, "vec_elems": 0, "MTE2": 0, "MTE3": 0, "FIX": 0}
        for p in parts:
            out["mmad_macs"] += p["mmad_macs"]
            out["vec_elems"] += p["vec_elems"]
            out["MTE2"] += p["gm_read"]["MTE2"]
            out["MTE3"] += p["gm_write"]["MTE3"]
            out["FIX"] += p["gm_write"]["FIX"]
        return out
    emu.op_counts(reset=True)
    call()
    p = emu.op_counts(reset=True)[name]
    return {
        "mmad_macs": p["mmad_macs"],
        "vec_elems": p["vec_elems"],
        "MTE2": p["gm_read"]["MTE2"],
        "MTE3": p["gm_write"]["MTE3"],
        "FIX": p["gm_write"]["FIX"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulate", action="store_true", help="run the emulator at small shapes and print its counts")
    a = ap.parse_args()
    for chip in (B2, B4):
        print(
            f"{chip.name}: {chip.aic} AIC / {chip.aiv} AIV at {chip.ghz} GHz -> "
            f"Cube BF16 {chip.bf16_tflops:.1f} TFLOPS, FP32 {chip.fp32_tflops:.1f}; "
            f"vector FP32 {chip.vec_gops / 1e3:.2f} Tops; HBM {chip.hbm_tbs} TB/s (assumed)"
        )
    print()
    print(markdown(B2))
    if a.emulate:
        print()
        print(
            "| kernel (small shape) | Cube MACs: model / emulator | MTE2 B: model / emulator | MTE3 B | FIX B | vector "
            "element-ops (emulator) |"
        )
        print("|---|---|---|---|---|---|")
        for name, call, model in small_cases():
            e = emulated(name, call)
            print(
                f"| {name} | {model.macs} / {e['mmad_macs']} | {model.mte2} / {e['MTE2']} | "
                f"{model.mte3} / {e['MTE3']} | {model.fix} / {e['FIX']} | {e['vec_elems']} |"
            )


if __name__ == "__main__":
    main()
