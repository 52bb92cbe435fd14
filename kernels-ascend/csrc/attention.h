// attention.h — the attention kernels of attention.asc (and the negative control in controls.asc): causal GQA over
// packed varlen sequences on the Cube and the vector unit together (KERNEL_TYPE_MIX_AIC_1_2: per AI core one AIC and
// two AIVs, "设置Kernel类型.md"), FlashAttention-style; prefill, chunked prefill and decode are one kernel.
//
// Shapes: q [Tq, Hq, D], k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0, G = Hq / Hkv <= 64, D <= 128), cu_seqlens_k [B + 1],
// q_pos [Tq] (query i of sequence b sits at absolute position q_pos[i] and sees keys 0..q_pos[i] of b; key j of b is
// row cu_seqlens_k[b] + j) -> out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32 (natural log).
//
// ROWS AND BLOCKS. A row is a (query, head) pair; a query block is up to QB = 64 / G consecutive queries of ONE
// sequence (the host's block table: sequence, first query, count, largest position), and its rows for kv head hk
// are r = qi * G + g (head hk * G + g) — the G heads sharing a K/V tile sit in one Mmad. Work item (block, hk) ->
// AI core item % GetBlockNum(). Rows of one Mmad never interact: each output element of an Mmad is its own sum
// (docs/ascend.md, the Mmad ASSUMPTION), so which rows share a block — batch, packing, chunking, decode — cannot
// change a row's bits.
//
// PER ROW, for key tiles of KT = 128 keys ALIGNED TO ABSOLUTE KEY 0 (tile t = keys [128 t, 128 t + 128)),
// t = 0 .. floor(p / 128) ascending (the row's position p; later tiles of its block are skipped for it):
//   S   = Q K^T (AIC)   one FP32 L0C tile from +0; Mmad over d in chunks of 64 ascending (d zero-padded to 64·n)
//   s   = S * scale (one rounding);  s = -inf for keys > p (written, never computed)           (AIV, FP32)
//   mt  = ReduceMax(s);  m_new = max(m, mt);  alpha = (m == -inf ? 0 : Exp(m - m_new))
//   p   = Exp(s - m_new);  l = l * alpha + ReduceSum(p)        (ReduceSum over all 128 lanes: masked lanes are +0)
//   P   = bf16_rint(p)   <- the ONE rounding point of P (the PV Mmad's operand); l sums the FP32 p
//   O   = P V (AIC)     FP32 L0C from +0; Mmad over the tile's keys in chunks of 64 ascending
//   acc = acc * alpha + O                                                                        (AIV, FP32)
// then out = bf16_rint(acc / l), lse = m + Ln(l). A row's sequence of operations depends on its p, its q and its
// sequence's keys only — never on the other rows of its block, how many queries or sequences the call has, or
// blockDim. Keys beyond the block's largest position are never loaded (zero-filled tile rows), keys past a row's
// position enter only as P = 0 products with finite V, which change no sum.
//
// AIC <-> AIV. Per AI core a GM workspace (kAttnWsBytes) holds two slots (tile parity) of S [64 x 128] FP32, P [64 x
// 128] BF16 and O [64 x 128] FP32; the AIVs split the rows (AIV v: rows 32 v .. 32 v + 31). The protocol, all mode-2
// CrossCoreSetFlag / CrossCoreWaitFlag (one AI core: "核间同步/关键特性说明.md"), the set on the pipe that last
// touched the slot, as the asc-devkit cross_core_set_wait_flag sample does (Fixpipe -> PIPE_FIX, copy out -> MTE3):
//   AIC: S(g) -> slot g%2, set S_READY[g%2] (FIX)         AIV: wait S_READY, copy S in, set S_FREE (MTE2)
//   AIC: before S(g+2) overwrites the slot, wait S_FREE      AIV: softmax, wait P_FREE (g >= 2), P out, set P_READY (MTE3)
//   AIC: wait P_READY, copy P in, set P_FREE (MTE2), PV     AIV: wait O_READY, copy O in, set O_FREE (MTE2), acc update
//   AIC: before O(g+2) overwrites the slot, wait O_FREE, then O(g) out, set O_READY (FIX)
// The AIC computes S(g+1) before PV(g), so the Cube works on the next tile while the AIVs run the softmax; every
// set is waited exactly once (the last two FREE flags at the end). The emulator's hazard checker verifies every GM
// byte of the workspace against these flags (ws1_emu_hazard.h, MIXED kernels).
// Backward (attention_bwd.h) follows the same pattern.
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {
constexpr uint32_t kAttnRows = 64;   // M of a block's Mmads: (query, head) rows
constexpr uint32_t kAttnHalf = 32;   // rows per AIV
constexpr uint32_t kKeyTile = 128;   // keys per tile, aligned to key 0
constexpr uint32_t kAttnK = 64;      // the Mmad reduction chunk (d for Q K^T, keys for P V)
constexpr uint32_t kAttnMaxD = 128;
// workspace per AI core: 2 slots each of S (FP32), P (BF16), O (FP32), all [64 x 128] (the host allocates
// kWs1AttnWsBytes per AI core, ws1_ascend_launch.h)
constexpr uint64_t kAttnSlotF32 = uint64_t{kAttnRows} * kKeyTile * 4, kAttnSlotB16 = uint64_t{kAttnRows} * kKeyTile * 2;
constexpr uint64_t kAttnWsBytes = 2 * kAttnSlotF32 + 2 * kAttnSlotB16 + 2 * kAttnSlotF32;
static_assert(kAttnWsBytes == kWs1AttnWsBytes, "the host's attention workspace size");
// cross-core flag ids (mode 2; 0-15, none of SyncAll's 11-14 is used by SyncAll here: WS1 never calls it)
constexpr uint16_t kFlagSReady = 0, kFlagSFree = 2, kFlagPReady = 4, kFlagPFree = 6, kFlagOReady = 8, kFlagOFree = 10;

// ---- Cube helpers: operands in L1 as Nz (C0 = 16 bf16 columns per block, `rows` rows per column block) ----------
// L1 -> L0A (Zz) chunk kc (64 columns) of a 64-row Nz matrix: per 16-row block i its 4 fractals, 4 apart in Nz.
__aicore__ inline void LoadA64(const LocalTensor<bfloat16_t>& a2, const LocalTensor<bfloat16_t>& a1, uint32_t kc) {
  for (uint32_t i = 0; i < kAttnRows / 16; ++i)
    LoadData(a2[i * 4 * 256], a1, LoadData2DParams{static_cast<uint16_t>(kc * 4 * 4 + i), 4, 4, 0, 0, false, 0});
}
// L1 -> L0B (Zn of B [k, n]) chunk kc from Nz(B^T) with n = nrows rows: Zn(B) is Nz(B^T) fractal for fractal.
__aicore__ inline void LoadBt(const LocalTensor<bfloat16_t>& b2, const LocalTensor<bfloat16_t>& b1, uint32_t nrows,
                              uint32_t kc) {
  LoadData(b2, b1, LoadData2DParams{static_cast<uint16_t>(kc * 4 * (nrows / 16)), static_cast<uint8_t>(4 * (nrows / 16)),
                                    1, 0, 0, false, 0});
}
// L1 -> L0B (Zn of B [k, n]) chunk kc (64 k rows) from Nz(B) itself (B stored k-major, e.g. V [keys, d]) with
// krows rows: per 16-row k block j its nb fractals (krows / 16 apart), each transposed ("LoadData_2D.md" 分形转置).
__aicore__ inline void LoadBTrans(const LocalTensor<bfloat16_t>& b2, const LocalTensor<bfloat16_t>& b1, uint32_t krows,
                                  uint32_t nb, uint32_t kc) {
  for (uint32_t j = 0; j < 4; ++j)
    LoadData(b2[j * nb * 256], b1, LoadData2DParams{static_cast<uint16_t>(kc * 4 + j), static_cast<uint8_t>(nb),
                                                     static_cast<uint16_t>(krows / 16), 0, 0, true, 0});
}
// zero an L1 tile (MTE2), then the barrier the following Nd2Nz copies into the same bytes need (both MTE2)
template <class T>
__aicore__ inline void ZeroL1(const LocalTensor<T>& t, uint32_t bytes) {
  InitConstValue(t, InitConstValueParams<T>{1, static_cast<uint16_t>(bytes / 32), 0, T{}});
  PipeBarrier<PIPE_MTE2>();
}
__aicore__ inline Nd2NzParams NzRows(uint32_t rows, uint32_t cols, uint32_t src_stride, uint32_t l1_rows) {
  return Nd2NzParams{1, static_cast<uint16_t>(rows), static_cast<uint16_t>(cols), 0, static_cast<uint16_t>(src_stride),
                     static_cast<uint16_t>(l1_rows), 1, 0};
}
// row[a, b) = -inf: the unaligned head by the scalar unit, the 32-byte-aligned rest by Duplicate (vector operands
// start on 32-byte boundaries: "NPU架构版本2201.md", 存储单元规格). Written, never computed: masked lanes hold -inf
// whatever the tile held there.
__aicore__ inline void MaskNegInf(const LocalTensor<float>& row, uint32_t a, uint32_t b) {
  const float neg_inf = F32FromBits(kNegInfBits);
  uint32_t c = a;
  for (; c < b && c % 8 != 0; ++c) row.SetValue(c, neg_inf);
  if (c < b) Duplicate(row[c], neg_inf, static_cast<int32_t>(b - c));
}
// SRC -> DST on this core: every SRC instruction issued so far completes before any later DST one starts
template <HardEvent E>
__aicore__ inline void Sync() {
  const TEventID id = GetTPipePtr()->FetchEventID(E);
  SetFlag<E>(id);
  WaitFlag<E>(id);
}

// The host's block table row: sequence, first query row, query count, largest position.
struct AttnBlock {
  int64_t b, q0, nq, pmax;
};

// ALIGN_TO_BUFFER = true is the negative control (controls.asc): key tiles aligned to the packed K/V buffer's row
// index instead of the sequence's key 0, so where a sequence sits in the batch moves its tile boundaries.
template <bool ALIGN_TO_BUFFER = false>
class Attention {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR cuk, GM_ADDR qpos, GM_ADDR blocks, GM_ADDR out,
                             GM_ADDR lse, GM_ADDR ws, int64_t nblocks, int64_t Tq, int64_t Tk, int64_t B, int64_t Hq,
                             int64_t Hkv, int64_t D, float scale) {
    Hq_ = Hq, Hkv_ = Hkv, D_ = D, G_ = Hq / Hkv, items_ = nblocks * Hkv, scale_ = scale;
    qg_.SetGlobalBuffer((__gm__ bfloat16_t*)q, Tq * Hq * D);
    kg_.SetGlobalBuffer((__gm__ bfloat16_t*)k, Tk * Hkv * D);
    vg_.SetGlobalBuffer((__gm__ bfloat16_t*)v, Tk * Hkv * D);
    og_.SetGlobalBuffer((__gm__ bfloat16_t*)out, Tq * Hq * D);
    lg_.SetGlobalBuffer((__gm__ float*)lse, Tq * Hq);
    ckg_.SetGlobalBuffer((__gm__ int64_t*)cuk, B + 1);
    pg_.SetGlobalBuffer((__gm__ int64_t*)qpos, Tq);
    bg_.SetGlobalBuffer((__gm__ int64_t*)blocks, nblocks * 4);
    InvalidateScalarCache(pg_);  // q_pos, cu_seqlens_k and the block table are read on the scalar unit
    // this AI core's workspace (GetBlockIdx is the AIV's index 2 c + sub-block on an AIV: GetTaskRatio)
    const int64_t core = GetBlockIdx() / GetTaskRatio();
    __gm__ uint8_t* base = ws + core * kAttnWsBytes;
    wsS_.SetGlobalBuffer((__gm__ float*)base, 2 * kAttnRows * kKeyTile);
    wsP_.SetGlobalBuffer((__gm__ bfloat16_t*)(base + 2 * kAttnSlotF32), 2 * kAttnRows * kKeyTile);
    wsO_.SetGlobalBuffer((__gm__ float*)(base + 2 * kAttnSlotF32 + 2 * kAttnSlotB16), 2 * kAttnRows * kKeyTile);
    if ASCEND_IS_AIC { Cube(core); }
    if ASCEND_IS_AIV { Vector(core, GetSubBlockIdx()); }
  }

 private:
  __aicore__ inline AttnBlock Block(int64_t bi) const {
    return AttnBlock{bg_.GetValue(bi * 4), bg_.GetValue(bi * 4 + 1), bg_.GetValue(bi * 4 + 2), bg_.GetValue(bi * 4 + 3)};
  }
  // the key tiles of a block: tile t covers keys [t0, t0 + 128) with t0 = 128 t - shift (shift = 0 but in the
  // negative control); the copy holds keys [j0, j1) at tile rows j0 - t0 .. (keys <= pmax only)
  __aicore__ inline int64_t Shift(int64_t k0) const { return ALIGN_TO_BUFFER ? k0 % kKeyTile : 0; }
  __aicore__ inline int64_t Tiles(int64_t pmax, int64_t shift) const { return (pmax + shift) / kKeyTile + 1; }

  // ---- AIC: S = Q K^T and O = P V per tile ------------------------------------------------------------------
  struct Pending {  // the tile whose P V is still to do
    int64_t g, k0, hk, t0, j0, j1, rows;
  };
  __aicore__ inline void Cube(int64_t core) {
    const uint32_t dk = RoundUp(static_cast<uint32_t>(D_), kAttnK), np = RoundUp(static_cast<uint32_t>(D_), 16);
    pipe_.InitBuffer(qQ_, 1, kAttnRows * dk * 2);
    // two buffers per queue (depth 1: "TQue简介.md", double buffer): the next tile's copy-in overlaps this one's Mmads
    pipe_.InitBuffer(qK_, 2, kKeyTile * dk * 2);
    pipe_.InitBuffer(qP_, 2, kAttnRows * kKeyTile * 2);
    pipe_.InitBuffer(qV_, 2, kKeyTile * np * 2);
    pipe_.InitBuffer(qA2_, 2, kAttnRows * kAttnK * 2);
    pipe_.InitBuffer(qB2_, 2, kAttnK * kKeyTile * 2);
    pipe_.InitBuffer(qS_, 2, kAttnRows * kKeyTile * 4);
    pipe_.InitBuffer(qO_, 1, kAttnRows * np * 4);
    int64_t g = 0;
    bool pending = false;
    Pending pv{};
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const AttnBlock blk = Block(it / Hkv_);
      const int64_t hk = it % Hkv_, k0 = ckg_.GetValue(blk.b), shift = Shift(k0);
      // Q block -> L1, kept for all the block's tiles: query qi's G heads are G contiguous rows of q
      LocalTensor<bfloat16_t> q1 = qQ_.AllocTensor<bfloat16_t>();
      ZeroL1(q1, kAttnRows * dk * 2);
      for (int64_t qi = 0; qi < blk.nq; ++qi)
        DataCopy(q1[static_cast<uint32_t>(qi * G_ * 16)], qg_[((blk.q0 + qi) * Hq_ + hk * G_) * D_],
                 NzRows(static_cast<uint32_t>(G_), static_cast<uint32_t>(D_), static_cast<uint32_t>(D_), kAttnRows));
      qQ_.EnQue(q1);
      q1 = qQ_.DeQue<bfloat16_t>();
      for (int64_t t = 0, nt = Tiles(blk.pmax, shift); t < nt; ++t, ++g) {
        const int64_t t0 = t * kKeyTile - shift, j0 = t0 < 0 ? 0 : t0;
        const int64_t j1 = t0 + kKeyTile < blk.pmax + 1 ? t0 + kKeyTile : blk.pmax + 1;
        Scores(g, q1, k0, hk, t0, j0, j1, dk, blk.nq * G_);
        if (pending) PV(pv, np);
        pv = Pending{g, k0, hk, t0, j0, j1, blk.nq * G_};
        pending = true;
      }
      qQ_.FreeTensor(q1);
    }
    if (pending) PV(pv, np);
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) {  // the last slots' give-backs
      CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + h % 2);
      CrossCoreWaitFlag<2, PIPE_FIX>(kFlagOFree + h % 2);
    }
  }
  // K (or V) tile rows [j0, j1) -> L1 Nz [128 rows x cols], zero elsewhere
  __aicore__ inline void LoadKeys(const LocalTensor<bfloat16_t>& t1, const GlobalTensor<bfloat16_t>& src, int64_t k0,
                                  int64_t hk, int64_t t0, int64_t j0, int64_t j1, uint32_t cols) {
    ZeroL1(t1, kKeyTile * cols * 2);
    DataCopy(t1[static_cast<uint32_t>((j0 - t0) * 16)], src[((k0 + j0) * Hkv_ + hk) * D_],
             NzRows(static_cast<uint32_t>(j1 - j0), static_cast<uint32_t>(D_), static_cast<uint32_t>(Hkv_ * D_),
                    kKeyTile));
  }
  // S of the block's `rows` valid rows -> the workspace slot (the padding rows of the 64-row Mmad never leave L0C)
  __aicore__ inline void Scores(int64_t g, const LocalTensor<bfloat16_t>& q1, int64_t k0, int64_t hk, int64_t t0,
                                int64_t j0, int64_t j1, uint32_t dk, int64_t rows) {
    LocalTensor<bfloat16_t> k1 = qK_.AllocTensor<bfloat16_t>();
    LoadKeys(k1, kg_, k0, hk, t0, j0, j1, dk);
    qK_.EnQue(k1);
    k1 = qK_.DeQue<bfloat16_t>();
    LocalTensor<float> s = qS_.AllocTensor<float>();
    for (uint32_t kc = 0; kc < dk / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, q1, kc);
      LoadBt(b2, k1, kKeyTile, kc);
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kAttnRows, mp.n = kKeyTile, mp.k = kAttnK, mp.cmatrixInitVal = (kc == 0);
      Mmad(s, a2, b2, mp);  // (64/16)(128/16) = 32 >= 10: the Cube orders these Mmads into one L0C itself
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
    qK_.FreeTensor(k1);
    qS_.EnQue(s);
    s = qS_.DeQue<float>();
    if (g >= 2) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + g % 2);  // both AIVs have read S(g - 2)
    FixpipeParamsV220 fp;
    fp.nSize = kKeyTile, fp.mSize = static_cast<uint16_t>(rows), fp.srcStride = kAttnRows, fp.dstStride = kKeyTile;
    Fixpipe<float, float, CFG_ROW_MAJOR>(wsS_[(g % 2) * kAttnRows * kKeyTile], s, fp);
    qS_.FreeTensor(s);
    CrossCoreSetFlag<2, PIPE_FIX>(kFlagSReady + g % 2);
  }
  __aicore__ inline void PV(const Pending& t, uint32_t np) {
    const int64_t slot = t.g % 2;
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagPReady + slot);
    LocalTensor<bfloat16_t> p1 = qP_.AllocTensor<bfloat16_t>();
    if (t.rows < kAttnRows) ZeroL1(p1, kAttnRows * kKeyTile * 2);  // padding rows: P = 0
    DataCopy(p1, wsP_[slot * kAttnRows * kKeyTile],
             NzRows(static_cast<uint32_t>(t.rows), kKeyTile, kKeyTile, kAttnRows));
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagPFree + slot);  // the copy is MTE2's last instruction: P(g) read
    qP_.EnQue(p1);
    p1 = qP_.DeQue<bfloat16_t>();
    LocalTensor<bfloat16_t> v1 = qV_.AllocTensor<bfloat16_t>();
    LoadKeys(v1, vg_, t.k0, t.hk, t.t0, t.j0, t.j1, np);
    qV_.EnQue(v1);
    v1 = qV_.DeQue<bfloat16_t>();
    LocalTensor<float> o = qO_.AllocTensor<float>();
    for (uint32_t kc = 0; kc < kKeyTile / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, p1, kc);
      LoadBTrans(b2, v1, kKeyTile, np / 16, kc);
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kAttnRows, mp.n = static_cast<uint16_t>(np), mp.k = kAttnK, mp.cmatrixInitVal = (kc == 0);
      Mmad(o, a2, b2, mp);
      // below (m/16)(n/16) = 10 the Cube does not order Mmads into one L0C by itself ("Mmad.md" 同步优化说明)
      if ((kAttnRows / 16) * (np / 16) < 10) PipeBarrier<PIPE_M>();
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
    qP_.FreeTensor(p1);
    qV_.FreeTensor(v1);
    qO_.EnQue(o);
    o = qO_.DeQue<float>();
    if (t.g >= 2) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagOFree + slot);  // both AIVs have read O(g - 2)
    FixpipeParamsV220 fp;
    fp.nSize = static_cast<uint16_t>(np), fp.mSize = static_cast<uint16_t>(t.rows), fp.srcStride = kAttnRows;
    fp.dstStride = kKeyTile;
    Fixpipe<float, float, CFG_ROW_MAJOR>(wsO_[slot * kAttnRows * kKeyTile], o, fp);
    qO_.FreeTensor(o);
    CrossCoreSetFlag<2, PIPE_FIX>(kFlagOReady + slot);
  }

  // ---- AIV: the online softmax of rows [32 v, 32 v + 32) ---------------------------------------------------
  __aicore__ inline void Vector(int64_t core, int64_t v) {
    pipe_.InitBuffer(sS_, kAttnHalf * kKeyTile * 4);
    pipe_.InitBuffer(sP_, kAttnHalf * kKeyTile * 2);
    pipe_.InitBuffer(sO_, kAttnHalf * kKeyTile * 4);
    pipe_.InitBuffer(acc_, kAttnHalf * kKeyTile * 4);
    pipe_.InitBuffer(stage_, kAttnHalf * kKeyTile * 2);
    pipe_.InitBuffer(rows_, 4 * kAttnHalf * 4);       // m, l, alpha (two slots) per row
    pipe_.InitBuffer(lseb_, kAttnHalf * 8 * 4);       // one 32-byte block per row: lse at element 0
    pipe_.InitBuffer(tmp_, 8 * 4);
    pipe_.InitBuffer(work_, 64 * 4);
    int64_t g = 0;
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const AttnBlock blk = Block(it / Hkv_);
      const int64_t hk = it % Hkv_, k0 = ckg_.GetValue(blk.b), shift = Shift(k0);
      const int64_t r0 = v * kAttnHalf, rows = blk.nq * G_ - r0;
      n_ = rows < 0 ? 0 : rows > kAttnHalf ? kAttnHalf : rows;
      for (uint32_t lr = 0; lr < n_; ++lr) {
        const int64_t r = r0 + lr;
        qrow_[lr] = blk.q0 + r / G_;
        head_[lr] = hk * G_ + r % G_;
        pos_[lr] = pg_.GetValue(qrow_[lr]);
      }
      LocalTensor<float> st = rows_.Get<float>();
      for (uint32_t lr = 0; lr < n_; ++lr) {
        st.SetValue(lr, F32FromBits(kNegInfBits));  // m
        st.SetValue(kAttnHalf + lr, 0.0f);          // l
      }
      Duplicate(acc_.Get<float>(), 0.0f, kAttnHalf * kKeyTile);
      const int64_t nt = Tiles(blk.pmax, shift);
      for (int64_t t = 0; t < nt; ++t, ++g) {
        Softmax(g, v, t * kKeyTile - shift);
        if (t > 0) Update(g - 1, v, (t - 1) * kKeyTile - shift);
      }
      Update(g - 1, v, (nt - 1) * kKeyTile - shift);
      Finish();
    }
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + h % 2);
  }
  // does row lr take part in the tile starting at key t0? (its keys 0..p reach into the tile)
  __aicore__ inline bool InTile(uint32_t lr, int64_t t0) const { return pos_[lr] >= (t0 < 0 ? 0 : t0); }
  __aicore__ inline void Softmax(int64_t g, int64_t v, int64_t t0) {
    const int64_t slot = g % 2;
    LocalTensor<float> s = sS_.Get<float>(), st = rows_.Get<float>(), tmp = tmp_.Get<float>(), work = work_.Get<float>();
    const float neg_inf = F32FromBits(kNegInfBits);
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagSReady + slot);
    Sync<HardEvent::V_MTE2>();  // the previous tile's vector instructions are done with sS
    // only this AIV's valid rows cross (a decode block has G of 64): S in, P out, O in
    if (n_ > 0) DataCopy(s, wsS_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], n_ * kKeyTile);
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagSFree + slot);
    Sync<HardEvent::MTE2_V>();
    for (uint32_t lr = 0; lr < n_; ++lr) {
      const LocalTensor<float> row = s[lr * kKeyTile];
      if (!InTile(lr, t0)) {  // a tile past the row's position: P = 0, the row's state untouched
        Duplicate(row, 0.0f, kKeyTile);
        continue;
      }
      // keys of the tile the row sees: columns [c0, c1) (c0 > 0 only in the negative control's first tile)
      const int64_t c0 = t0 < 0 ? -t0 : 0, c1e = pos_[lr] + 1 - t0;
      const uint32_t c1 = static_cast<uint32_t>(c1e < kKeyTile ? c1e : kKeyTile);
      Muls(row, row, scale_, kKeyTile);
      MaskNegInf(row, 0, static_cast<uint32_t>(c0));
      MaskNegInf(row, c1, kKeyTile);
      ReduceMax(tmp, row, work, kKeyTile);
      const float mt = tmp.GetValue(0), m = st.GetValue(lr);
      const float m_new = mt > m ? mt : m;
      const float alpha = (m == neg_inf) ? 0.0f : VecExp1(tmp, m - m_new);
      Adds(row, row, -m_new, kKeyTile);
      Exp(row, row, kKeyTile);  // Exp(-inf) = +0: masked keys add nothing below
      ReduceSum(tmp, row, work, kKeyTile);
      const float l = st.GetValue(kAttnHalf + lr) * alpha + tmp.GetValue(0);
      st.SetValue(lr, m_new);
      st.SetValue(kAttnHalf + lr, l);
      st.SetValue((2 + slot) * kAttnHalf + lr, alpha);
    }
    LocalTensor<bfloat16_t> p = sP_.Get<bfloat16_t>();
    Sync<HardEvent::MTE3_V>();  // the previous P copy-out is done reading sP
    if (n_ > 0) Cast(p, s, RoundMode::CAST_RINT, n_ * kKeyTile);  // P = bf16(p): the one rounding point of P
    if (g >= 2) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + slot);  // the AIC has copied P(g - 2) in
    Sync<HardEvent::V_MTE3>();
    if (n_ > 0) DataCopy(wsP_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], p, n_ * kKeyTile);
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagPReady + slot);
  }
  __aicore__ inline void Update(int64_t g, int64_t v, int64_t t0) {
    const int64_t slot = g % 2;
    const uint32_t d = static_cast<uint32_t>(D_);
    LocalTensor<float> o = sO_.Get<float>(), acc = acc_.Get<float>(), st = rows_.Get<float>();
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagOReady + slot);
    Sync<HardEvent::V_MTE2>();  // the previous update's Adds are done with sO
    if (n_ > 0) DataCopy(o, wsO_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], n_ * kKeyTile);
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagOFree + slot);
    Sync<HardEvent::MTE2_V>();
    for (uint32_t lr = 0; lr < n_; ++lr) {
      if (!InTile(lr, t0)) continue;
      Muls(acc[lr * kKeyTile], acc[lr * kKeyTile], st.GetValue((2 + slot) * kAttnHalf + lr), d);
      Add(acc[lr * kKeyTile], acc[lr * kKeyTile], o[lr * kKeyTile], d);
    }
  }
  // out = bf16(acc / l), lse = m + Ln(l)
  __aicore__ inline void Finish() {
    const uint32_t d = static_cast<uint32_t>(D_);
    LocalTensor<float> acc = acc_.Get<float>(), o = sO_.Get<float>(), st = rows_.Get<float>(), tmp = tmp_.Get<float>();
    LocalTensor<float> lb = lseb_.Get<float>();
    LocalTensor<bfloat16_t> y = stage_.Get<bfloat16_t>();
    Sync<HardEvent::MTE3_V>();  // the previous block's copies out of stage / lseb are done
    for (uint32_t lr = 0; lr < n_; ++lr) {
      const float l = st.GetValue(kAttnHalf + lr);
      Duplicate(o[lr * kKeyTile], l, d);
      Div(acc[lr * kKeyTile], acc[lr * kKeyTile], o[lr * kKeyTile], d);
      Cast(y[lr * kKeyTile], acc[lr * kKeyTile], RoundMode::CAST_RINT, d);
      lb.SetValue(lr * 8, st.GetValue(lr) + VecLn1(tmp, l));
    }
    Sync<HardEvent::V_MTE3>();
    for (uint32_t lr = 0; lr < n_; ++lr) {
      const int64_t row = qrow_[lr] * Hq_ + head_[lr];
      DataCopyPad(og_[row * D_], y[lr * kKeyTile], DataCopyExtParams{1, d * 2, 0, 0, 0});
      DataCopyPad(lg_[row], lb[lr * 8], DataCopyExtParams{1, 4, 0, 0, 0});
    }
  }

  int64_t Hq_ = 0, Hkv_ = 0, D_ = 0, G_ = 1, items_ = 0;
  float scale_ = 1.0f;
  uint32_t n_ = 0;                                  // AIV: valid rows of the current block on this AIV
  int64_t qrow_[kAttnHalf], head_[kAttnHalf], pos_[kAttnHalf];
  TPipe pipe_;
  TQue<TPosition::A1, 1> qQ_, qP_;
  TQue<TPosition::B1, 1> qK_, qV_;
  TQue<TPosition::A2, 1> qA2_;
  TQue<TPosition::B2, 1> qB2_;
  TQue<TPosition::CO1, 1> qS_, qO_;
  TBuf<TPosition::VECCALC> sS_, sP_, sO_, acc_, stage_, rows_, lseb_, tmp_, work_;
  GlobalTensor<bfloat16_t> qg_, kg_, vg_, og_, wsP_;
  GlobalTensor<float> lg_, wsS_, wsO_;
  GlobalTensor<int64_t> ckg_, pg_, bg_;
};
}  // namespace ws1a
