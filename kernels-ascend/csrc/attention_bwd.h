// attention_bwd.h — the attention backward of attention.asc: FlashAttention-2-style recomputation on the Cube and the
// vector unit (KERNEL_TYPE_MIX_AIC_1_2), no P / dS buffer in GM beyond two tile slots per AI core, no atomics.
// Inputs as the forward (q, k, v BF16) plus out, lse (the forward's) and dout; outputs dq [Tq, Hq, D], dk, dv
// [Tk, Hkv, D] FP32. Workspace: dO in BF16 and Delta (O(T·H·D)), the position -> query table and the key-block and
// query-tile lists (O(T)), and kWs1AttnBwdWsBytes per AI core — never O(T²).
//
//   prep (AIV), per row (i, h):  dOb = bf16_rint(dO) (the Mmads' operand; exact when dO is BF16 already),
//                                Delta = ReduceSum(float(dOb) * O) over d
//   dQ (MIX), rows and blocks as the forward (query blocks of one sequence, rows qi * G + g, key tiles of 128
//     ALIGNED TO KEY 0, tiles 0 .. floor(p / 128) for a row at p):
//     S = Q K^T, dP = dO V^T (AIC, FP32 L0C, d in chunks of 64 ascending)
//     P = Exp(S * scale - lse) (keys > p: -inf, so P = +0); dS = bf16_rint(P * (dP - Delta) * scale)    (AIV)
//     dQ += dS K (AIC: L0C accumulator over the row's tiles ascending, each tile's keys in chunks of 64 ascending)
//   dK/dV (MIX), items (sequence, kv head, key block of 64 keys aligned to key 0); the query side in ROW SLOTS
//     R = position * G + g — aligned to absolute position 0 of the sequence, whatever else the call packs or how
//     many queries it has — in tiles of 128 slots ascending (tile u = slots [128 u, 128 u + 128)), from the tile of
//     the block's first key on; absent positions are zero rows (lse = +inf: P = 0) and tiles with no query at all are
//     skipped (they would add exact zeros):
//     S^T = K Q^T, dP^T = V dO^T (AIC); P^T = Exp(S^T scale - lse_R) (key > position: -inf), dS^T as above (AIV)
//     dV += bf16(P^T) dO, dK += dS^T Q (AIC: L0C accumulators over the tiles ascending, slots in chunks of 64)
// dq, dk, dv leave the L0C by Fixpipe (FP32) straight into their rows. The scale is folded into dS before its BF16
// rounding (one rounding point per value, the same in both kernels). Each output element is one L0C accumulator
// of one AI core, reduced in an order fixed by absolute positions only: packing, padding rows, batch and blockDim
// cannot change a bit. Cross-core protocol as the forward's (attention.h): S / dP slot -> AIV (S_READY, S_FREE),
// dS (and P^T) slot -> AIC (P_READY, P_FREE), two slots by tile parity.
#pragma once
#include "attention.h"

namespace ws1a {
constexpr uint32_t kBwdKeys = 64;     // keys per dK/dV block (M of its Mmads)
constexpr uint32_t kBwdSlots = 128;   // row slots per query tile (N of S^T)
// workspace per AI core: 2 slots of S and dP (FP32 [64 x 128]) and of two BF16 [64 x 128] operands
constexpr uint64_t kBwdWsBytes = 4 * kAttnSlotF32 + 4 * kAttnSlotB16;
static_assert(kBwdWsBytes == kWs1AttnBwdWsBytes, "the host's backward workspace size");

// ---- prep (AIV): dO -> BF16 and Delta = sum_d bf16(dO) O, one (query, head) row per item -------------------------
template <class TD, class TO>
__aicore__ inline void AttnBwdPrep(GM_ADDR dout, GM_ADDR out, GM_ADDR dob, GM_ADDR delta, int64_t rows, int64_t D) {
  GlobalTensor<TD> dg;
  GlobalTensor<TO> og;
  GlobalTensor<bfloat16_t> bg;
  GlobalTensor<float> lg;
  dg.SetGlobalBuffer((__gm__ TD*)dout, rows * D);
  og.SetGlobalBuffer((__gm__ TO*)out, rows * D);
  bg.SetGlobalBuffer((__gm__ bfloat16_t*)dob, rows * D);
  lg.SetGlobalBuffer((__gm__ float*)delta, rows);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb, ob, sb, yb, tb, wb;
  const uint32_t d = static_cast<uint32_t>(D), dp = RoundUp(d, 16);
  pipe.InitBuffer(xb, dp * 4);
  pipe.InitBuffer(ob, dp * 4);
  pipe.InitBuffer(sb, dp * 2);
  pipe.InitBuffer(yb, dp * 2);
  pipe.InitBuffer(tb, 8 * 4);
  pipe.InitBuffer(wb, 64 * 4);
  LocalTensor<float> x = xb.Get<float>(), o = ob.Get<float>(), t = tb.Get<float>();
  LocalTensor<bfloat16_t> st = sb.Get<bfloat16_t>(), y = yb.Get<bfloat16_t>();
  for (int64_t r = GetBlockIdx(); r < rows; r += GetBlockNum()) {
    LoadF32(x, st, dg[r * D], d);
    LoadF32(o, st, og[r * D], d);
    Sync<HardEvent::MTE3_V>();  // the previous row's copy out of y is done
    Cast(y, x, RoundMode::CAST_RINT, d);  // dOb: round to nearest even (exact for BF16 dO)
    Cast(x, y, RoundMode::CAST_NONE, d);  // float(dOb), exact
    Mul(x, x, o, d);
    ReduceSum(t, x, wb.Get<float>(), d);
    Sync<HardEvent::V_MTE3>();
    DataCopyPad(bg[r * D], y, DataCopyExtParams{1, d * 2, 0, 0, 0});
    StoreScalar(lg[r], o, t.GetValue(0));
  }
}

// ---- dQ (MIX) --------------------------------------------------------------------------------------------------
class AttnBwdQ {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR dob, GM_ADDR lse, GM_ADDR delta, GM_ADDR cuk,
                             GM_ADDR qpos, GM_ADDR blocks, GM_ADDR dq, GM_ADDR ws, int64_t nblocks, int64_t Tq,
                             int64_t Tk, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
    Hq_ = Hq, Hkv_ = Hkv, D_ = D, G_ = Hq / Hkv, items_ = nblocks * Hkv, scale_ = scale;
    qg_.SetGlobalBuffer((__gm__ bfloat16_t*)q, Tq * Hq * D);
    dog_.SetGlobalBuffer((__gm__ bfloat16_t*)dob, Tq * Hq * D);
    kg_.SetGlobalBuffer((__gm__ bfloat16_t*)k, Tk * Hkv * D);
    vg_.SetGlobalBuffer((__gm__ bfloat16_t*)v, Tk * Hkv * D);
    dqg_.SetGlobalBuffer((__gm__ float*)dq, Tq * Hq * D);
    lg_.SetGlobalBuffer((__gm__ float*)lse, Tq * Hq);
    dlg_.SetGlobalBuffer((__gm__ float*)delta, Tq * Hq);
    ckg_.SetGlobalBuffer((__gm__ int64_t*)cuk, B + 1);
    pg_.SetGlobalBuffer((__gm__ int64_t*)qpos, Tq);
    bg_.SetGlobalBuffer((__gm__ int64_t*)blocks, nblocks * 4);
    InvalidateScalarCache(pg_);  // q_pos, cu_seqlens_k, the block table, lse and Delta (earlier kernels) on the scalar unit
    const int64_t core = GetBlockIdx() / GetTaskRatio();
    __gm__ uint8_t* base = ws + core * kBwdWsBytes;
    wsS_.SetGlobalBuffer((__gm__ float*)base, 2 * kAttnRows * kKeyTile);
    wsDP_.SetGlobalBuffer((__gm__ float*)(base + 2 * kAttnSlotF32), 2 * kAttnRows * kKeyTile);
    wsDS_.SetGlobalBuffer((__gm__ bfloat16_t*)(base + 4 * kAttnSlotF32), 2 * kAttnRows * kKeyTile);
    if ASCEND_IS_AIC { Cube(core); }
    if ASCEND_IS_AIV { Vector(core, GetSubBlockIdx()); }
  }

 private:
  __aicore__ inline AttnBlock Block(int64_t bi) const {
    return AttnBlock{bg_.GetValue(bi * 4), bg_.GetValue(bi * 4 + 1), bg_.GetValue(bi * 4 + 2), bg_.GetValue(bi * 4 + 3)};
  }
  struct Pending {
    int64_t g;
    LocalTensor<bfloat16_t> k1;  // the tile's K, still in L1 for dQ += dS K
    bool first, last;            // the item's first / last tile
    AttnBlock blk;
    int64_t hk;
  };
  __aicore__ inline void Cube(int64_t core) {
    const uint32_t dk = RoundUp(static_cast<uint32_t>(D_), kAttnK), np = RoundUp(static_cast<uint32_t>(D_), 16);
    pipe_.InitBuffer(qQ_, 2, kAttnRows * dk * 2);   // Q and dO of the block
    pipe_.InitBuffer(qK_, 2, kKeyTile * dk * 2);    // K tiles: held until their dQ Mmads
    pipe_.InitBuffer(qV_, 2, kKeyTile * dk * 2);
    pipe_.InitBuffer(qP_, 2, kAttnRows * kKeyTile * 2);
    pipe_.InitBuffer(qA2_, 2, kAttnRows * kAttnK * 2);
    pipe_.InitBuffer(qB2_, 2, kAttnK * kKeyTile * 2);
    pipe_.InitBuffer(qS_, 2, kAttnRows * kKeyTile * 4);  // S and dP
    pipe_.InitBuffer(qC_, 1, kAttnRows * np * 4);         // the dQ accumulator
    int64_t g = 0;
    bool pending = false;
    Pending pd{};
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const AttnBlock blk = Block(it / Hkv_);
      const int64_t hk = it % Hkv_, k0 = ckg_.GetValue(blk.b);
      LocalTensor<bfloat16_t> q1 = qQ_.AllocTensor<bfloat16_t>(), o1 = qQ_.AllocTensor<bfloat16_t>();
      LoadRows(q1, qg_, blk, hk, dk);
      LoadRows(o1, dog_, blk, hk, dk);
      qQ_.EnQue(q1);
      q1 = qQ_.DeQue<bfloat16_t>();
      qQ_.EnQue(o1);  // depth 1: one EnQue / DeQue at a time
      o1 = qQ_.DeQue<bfloat16_t>();
      for (int64_t t = 0, nt = blk.pmax / kKeyTile + 1; t < nt; ++t, ++g) {
        const int64_t t0 = t * kKeyTile, j1 = t0 + kKeyTile < blk.pmax + 1 ? t0 + kKeyTile : blk.pmax + 1;
        LocalTensor<bfloat16_t> k1 = qK_.AllocTensor<bfloat16_t>(), v1 = qV_.AllocTensor<bfloat16_t>();
        Keys(k1, kg_, k0, hk, t0, j1, dk);
        Keys(v1, vg_, k0, hk, t0, j1, dk);
        qK_.EnQue(k1);
        k1 = qK_.DeQue<bfloat16_t>();
        qV_.EnQue(v1);
        v1 = qV_.DeQue<bfloat16_t>();
        LocalTensor<float> s = qS_.AllocTensor<float>(), dp = qS_.AllocTensor<float>();
        Product(s, q1, k1, dk);  // S = Q K^T
        Product(dp, o1, v1, dk);  // dP = dO V^T
        qV_.FreeTensor(v1);
        qS_.EnQue(s);
        s = qS_.DeQue<float>();
        qS_.EnQue(dp);
        dp = qS_.DeQue<float>();
        if (g >= 2) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + g % 2);
        FixpipeParamsV220 fp;  // the block's valid rows only
        fp.nSize = kKeyTile, fp.mSize = static_cast<uint16_t>(blk.nq * G_), fp.srcStride = kAttnRows;
        fp.dstStride = kKeyTile;
        Fixpipe<float, float, CFG_ROW_MAJOR>(wsS_[(g % 2) * kAttnRows * kKeyTile], s, fp);
        Fixpipe<float, float, CFG_ROW_MAJOR>(wsDP_[(g % 2) * kAttnRows * kKeyTile], dp, fp);
        qS_.FreeTensor(s);
        qS_.FreeTensor(dp);
        CrossCoreSetFlag<2, PIPE_FIX>(kFlagSReady + g % 2);
        if (pending) DQ(pd, np);
        pd = Pending{g, k1, t == 0, t == nt - 1, blk, hk};
        pending = true;
      }
      qQ_.FreeTensor(q1);
      qQ_.FreeTensor(o1);
    }
    if (pending) DQ(pd, np);
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + h % 2);
  }
  // the block's rows (query qi: its G heads of kv head hk, contiguous in GM) -> L1 Nz [64 x dk], zero elsewhere
  __aicore__ inline void LoadRows(const LocalTensor<bfloat16_t>& t1, const GlobalTensor<bfloat16_t>& src,
                                  const AttnBlock& blk, int64_t hk, uint32_t dk) {
    ZeroL1(t1, kAttnRows * dk * 2);
    for (int64_t qi = 0; qi < blk.nq; ++qi)
      DataCopy(t1[static_cast<uint32_t>(qi * G_ * 16)], src[((blk.q0 + qi) * Hq_ + hk * G_) * D_],
               NzRows(static_cast<uint32_t>(G_), static_cast<uint32_t>(D_), static_cast<uint32_t>(D_), kAttnRows));
  }
  __aicore__ inline void Keys(const LocalTensor<bfloat16_t>& t1, const GlobalTensor<bfloat16_t>& src, int64_t k0,
                              int64_t hk, int64_t t0, int64_t j1, uint32_t dk) {
    ZeroL1(t1, kKeyTile * dk * 2);
    DataCopy(t1, src[((k0 + t0) * Hkv_ + hk) * D_],
             NzRows(static_cast<uint32_t>(j1 - t0), static_cast<uint32_t>(D_), static_cast<uint32_t>(Hkv_ * D_), kKeyTile));
  }
  // c [64 x 128] = a (64 rows, Nz) b^T (128 rows, Nz), d in chunks of 64 ascending from +0
  __aicore__ inline void Product(const LocalTensor<float>& c, const LocalTensor<bfloat16_t>& a1,
                                 const LocalTensor<bfloat16_t>& b1, uint32_t dk) {
    for (uint32_t kc = 0; kc < dk / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, a1, kc);
      LoadBt(b2, b1, kKeyTile, kc);
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kAttnRows, mp.n = kKeyTile, mp.k = kAttnK, mp.cmatrixInitVal = (kc == 0);
      Mmad(c, a2, b2, mp);
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
  }
  __aicore__ inline void DQ(Pending& t, uint32_t np) {
    const int64_t slot = t.g % 2;
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagPReady + slot);
    LocalTensor<bfloat16_t> p1 = qP_.AllocTensor<bfloat16_t>();
    const int64_t rows = t.blk.nq * G_;
    if (rows < kAttnRows) ZeroL1(p1, kAttnRows * kKeyTile * 2);  // padding rows: dS = 0
    DataCopy(p1, wsDS_[slot * kAttnRows * kKeyTile], NzRows(static_cast<uint32_t>(rows), kKeyTile, kKeyTile, kAttnRows));
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagPFree + slot);
    qP_.EnQue(p1);
    p1 = qP_.DeQue<bfloat16_t>();
    if (t.first) acc_ = qC_.AllocTensor<float>();
    for (uint32_t kc = 0; kc < kKeyTile / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, p1, kc);
      LoadBTrans(b2, t.k1, kKeyTile, np / 16, kc);  // B = K tile [keys, d], stored key-major
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kAttnRows, mp.n = static_cast<uint16_t>(np), mp.k = kAttnK, mp.cmatrixInitVal = (t.first && kc == 0);
      Mmad(acc_, a2, b2, mp);
      if ((kAttnRows / 16) * (np / 16) < 10) PipeBarrier<PIPE_M>();
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
    qP_.FreeTensor(p1);
    qK_.FreeTensor(t.k1);
    if (!t.last) return;
    qC_.EnQue(acc_);
    acc_ = qC_.DeQue<float>();
    for (int64_t qi = 0; qi < t.blk.nq; ++qi) {  // query qi's G rows -> dq rows (i, hk G .. hk G + G - 1)
      FixpipeParamsV220 fp;
      fp.nSize = static_cast<uint16_t>(D_), fp.mSize = static_cast<uint16_t>(G_), fp.srcStride = kAttnRows;
      fp.dstStride = static_cast<uint32_t>(D_);
      Fixpipe<float, float, CFG_ROW_MAJOR>(dqg_[((t.blk.q0 + qi) * Hq_ + t.hk * G_) * D_],
                                           acc_[static_cast<uint32_t>(qi * G_ * 16)], fp);
    }
    qC_.FreeTensor(acc_);
  }

  __aicore__ inline void Vector(int64_t core, int64_t v) {
    pipe_.InitBuffer(sS_, kAttnHalf * kKeyTile * 4);
    pipe_.InitBuffer(sD_, kAttnHalf * kKeyTile * 4);
    pipe_.InitBuffer(sP_, kAttnHalf * kKeyTile * 2);
    int64_t g = 0;
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const AttnBlock blk = Block(it / Hkv_);
      const int64_t hk = it % Hkv_, r0 = v * kAttnHalf, rows = blk.nq * G_ - r0;
      n_ = rows < 0 ? 0 : rows > kAttnHalf ? kAttnHalf : rows;
      for (uint32_t lr = 0; lr < n_; ++lr) {
        const int64_t r = r0 + lr, i = blk.q0 + r / G_, row = i * Hq_ + hk * G_ + r % G_;
        pos_[lr] = pg_.GetValue(i);
        lse_[lr] = lg_.GetValue(row);
        dlt_[lr] = dlg_.GetValue(row);
      }
      for (int64_t t = 0, nt = blk.pmax / kKeyTile + 1; t < nt; ++t, ++g) DS(g, v, t * kKeyTile);
    }
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + h % 2);
  }
  __aicore__ inline void DS(int64_t g, int64_t v, int64_t t0) {
    const int64_t slot = g % 2;
    LocalTensor<float> s = sS_.Get<float>(), dp = sD_.Get<float>();
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagSReady + slot);
    Sync<HardEvent::V_MTE2>();
    if (n_ > 0) {  // this AIV's valid rows only
      DataCopy(s, wsS_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], n_ * kKeyTile);
      DataCopy(dp, wsDP_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], n_ * kKeyTile);
    }
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagSFree + slot);
    Sync<HardEvent::MTE2_V>();
    for (uint32_t lr = 0; lr < n_; ++lr) {
      const LocalTensor<float> row = s[lr * kKeyTile], drow = dp[lr * kKeyTile];
      if (pos_[lr] < t0) {  // a tile past the row's position: dS = 0
        Duplicate(row, 0.0f, kKeyTile);
        continue;
      }
      const int64_t c1e = pos_[lr] + 1 - t0;
      Muls(row, row, scale_, kKeyTile);
      MaskNegInf(row, static_cast<uint32_t>(c1e < kKeyTile ? c1e : kKeyTile), kKeyTile);
      Adds(row, row, -lse_[lr], kKeyTile);
      Exp(row, row, kKeyTile);            // P (keys > p: +0)
      Adds(drow, drow, -dlt_[lr], kKeyTile);
      Mul(row, row, drow, kKeyTile);      // P (dP - Delta)
      Muls(row, row, scale_, kKeyTile);   // dS scale, rounded once to BF16 below
    }
    LocalTensor<bfloat16_t> p = sP_.Get<bfloat16_t>();
    Sync<HardEvent::MTE3_V>();
    if (n_ > 0) Cast(p, s, RoundMode::CAST_RINT, n_ * kKeyTile);
    if (g >= 2) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + slot);
    Sync<HardEvent::V_MTE3>();
    if (n_ > 0) DataCopy(wsDS_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kKeyTile], p, n_ * kKeyTile);
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagPReady + slot);
  }

  int64_t Hq_ = 0, Hkv_ = 0, D_ = 0, G_ = 1, items_ = 0;
  float scale_ = 1.0f;
  uint32_t n_ = 0;
  int64_t pos_[kAttnHalf];
  float lse_[kAttnHalf], dlt_[kAttnHalf];
  LocalTensor<float> acc_;
  TPipe pipe_;
  TQue<TPosition::A1, 1> qQ_, qP_;
  TQue<TPosition::B1, 1> qK_, qV_;
  TQue<TPosition::A2, 1> qA2_;
  TQue<TPosition::B2, 1> qB2_;
  TQue<TPosition::CO1, 1> qS_, qC_;
  TBuf<TPosition::VECCALC> sS_, sD_, sP_;
  GlobalTensor<bfloat16_t> qg_, dog_, kg_, vg_, wsDS_;
  GlobalTensor<float> dqg_, lg_, dlg_, wsS_, wsDP_;
  GlobalTensor<int64_t> ckg_, pg_, bg_;
};

// ---- dK / dV (MIX) ---------------------------------------------------------------------------------------------
// The host's tables: kvblocks [n, 5] = (sequence, first key of the block relative to the sequence, keys in the block,
// first and end index into `tiles` — the sequence's occupied query tiles u >= the block's first one, ascending);
// slotq [Tk] = the query at position j of sequence b (row cu_seqlens_k[b] + j), or -1.
class AttnBwdKV {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR dob, GM_ADDR lse, GM_ADDR delta, GM_ADDR cuk,
                             GM_ADDR kvblocks, GM_ADDR tiles, GM_ADDR slotq, GM_ADDR dk, GM_ADDR dv, GM_ADDR ws,
                             int64_t nkv, int64_t ntiles, int64_t Tq, int64_t Tk, int64_t B, int64_t Hq, int64_t Hkv,
                             int64_t D, float scale) {
    Hq_ = Hq, Hkv_ = Hkv, D_ = D, G_ = Hq / Hkv, items_ = nkv * Hkv, scale_ = scale;
    qg_.SetGlobalBuffer((__gm__ bfloat16_t*)q, Tq * Hq * D);
    dog_.SetGlobalBuffer((__gm__ bfloat16_t*)dob, Tq * Hq * D);
    kg_.SetGlobalBuffer((__gm__ bfloat16_t*)k, Tk * Hkv * D);
    vg_.SetGlobalBuffer((__gm__ bfloat16_t*)v, Tk * Hkv * D);
    dkg_.SetGlobalBuffer((__gm__ float*)dk, Tk * Hkv * D);
    dvg_.SetGlobalBuffer((__gm__ float*)dv, Tk * Hkv * D);
    lg_.SetGlobalBuffer((__gm__ float*)lse, Tq * Hq);
    dlg_.SetGlobalBuffer((__gm__ float*)delta, Tq * Hq);
    ckg_.SetGlobalBuffer((__gm__ int64_t*)cuk, B + 1);
    kbg_.SetGlobalBuffer((__gm__ int64_t*)kvblocks, nkv * 5);
    tlg_.SetGlobalBuffer((__gm__ int64_t*)tiles, ntiles);
    sqg_.SetGlobalBuffer((__gm__ int64_t*)slotq, Tk);
    InvalidateScalarCache(sqg_);
    const int64_t core = GetBlockIdx() / GetTaskRatio();
    __gm__ uint8_t* base = ws + core * kBwdWsBytes;
    wsS_.SetGlobalBuffer((__gm__ float*)base, 2 * kAttnRows * kKeyTile);
    wsDP_.SetGlobalBuffer((__gm__ float*)(base + 2 * kAttnSlotF32), 2 * kAttnRows * kKeyTile);
    wsP_.SetGlobalBuffer((__gm__ bfloat16_t*)(base + 4 * kAttnSlotF32), 4 * kAttnRows * kKeyTile);  // P^T, dS^T pairs
    if ASCEND_IS_AIC { Cube(core); }
    if ASCEND_IS_AIV { Vector(core, GetSubBlockIdx()); }
  }

 private:
  struct KvBlock {
    int64_t b, j0, nk, u0, u1;
  };
  __aicore__ inline KvBlock Item(int64_t e) const {
    return KvBlock{kbg_.GetValue(e * 5), kbg_.GetValue(e * 5 + 1), kbg_.GetValue(e * 5 + 2), kbg_.GetValue(e * 5 + 3),
                   kbg_.GetValue(e * 5 + 4)};
  }
  // the query at position p of the sequence (keys k0 .. k0 + len), or -1
  __aicore__ inline int64_t QueryAt(int64_t k0, int64_t len, int64_t p) const {
    return p < len ? sqg_.GetValue(k0 + p) : -1;
  }
  struct Pending {
    int64_t g;
    LocalTensor<bfloat16_t> q1, o1;  // the tile's Q and dO rows, still in L1 for dK, dV
    bool first, last;
    KvBlock kb;
    int64_t hk, k0;
  };
  __aicore__ inline void Cube(int64_t core) {
    const uint32_t dk = RoundUp(static_cast<uint32_t>(D_), kAttnK), np = RoundUp(static_cast<uint32_t>(D_), 16);
    pipe_.InitBuffer(qKV_, 2, kBwdKeys * dk * 2);        // K and V of the key block
    pipe_.InitBuffer(qQ_, 2, kBwdSlots * dk * 2);        // Q tiles: held until their dK Mmads
    pipe_.InitBuffer(qO_, 2, kBwdSlots * dk * 2);        // dO tiles
    pipe_.InitBuffer(qP_, 2, kBwdKeys * kBwdSlots * 2);  // P^T and dS^T
    pipe_.InitBuffer(qA2_, 2, kBwdKeys * kAttnK * 2);
    pipe_.InitBuffer(qB2_, 2, kAttnK * kBwdSlots * 2);
    pipe_.InitBuffer(qS_, 2, kBwdKeys * kBwdSlots * 4);  // S^T and dP^T
    pipe_.InitBuffer(qC_, 2, kBwdKeys * np * 4);         // the dK and dV accumulators
    int64_t g = 0;
    bool pending = false;
    Pending pd{};
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const KvBlock kb = Item(it / Hkv_);
      const int64_t hk = it % Hkv_, k0 = ckg_.GetValue(kb.b);
      LocalTensor<bfloat16_t> k1 = qKV_.AllocTensor<bfloat16_t>(), v1 = qKV_.AllocTensor<bfloat16_t>();
      KeyRows(k1, kg_, k0 + kb.j0, hk, kb.nk, dk);
      KeyRows(v1, vg_, k0 + kb.j0, hk, kb.nk, dk);
      qKV_.EnQue(k1);
      k1 = qKV_.DeQue<bfloat16_t>();
      qKV_.EnQue(v1);
      v1 = qKV_.DeQue<bfloat16_t>();
      const int64_t len = ckg_.GetValue(kb.b + 1) - k0;
      for (int64_t ti = kb.u0; ti < kb.u1; ++ti, ++g) {
        const int64_t u = tlg_.GetValue(ti);
        LocalTensor<bfloat16_t> q1 = qQ_.AllocTensor<bfloat16_t>(), o1 = qO_.AllocTensor<bfloat16_t>();
        SlotRows(q1, qg_, k0, len, u, hk, dk);
        SlotRows(o1, dog_, k0, len, u, hk, dk);
        qQ_.EnQue(q1);
        q1 = qQ_.DeQue<bfloat16_t>();
        qO_.EnQue(o1);
        o1 = qO_.DeQue<bfloat16_t>();
        LocalTensor<float> s = qS_.AllocTensor<float>(), dp = qS_.AllocTensor<float>();
        Product(s, k1, q1, dk);   // S^T = K Q^T
        Product(dp, v1, o1, dk);  // dP^T = V dO^T
        qS_.EnQue(s);
        s = qS_.DeQue<float>();
        qS_.EnQue(dp);
        dp = qS_.DeQue<float>();
        if (g >= 2) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + g % 2);
        FixpipeParamsV220 fp;
        fp.nSize = kBwdSlots, fp.mSize = static_cast<uint16_t>(kb.nk), fp.srcStride = kBwdKeys, fp.dstStride = kBwdSlots;
        Fixpipe<float, float, CFG_ROW_MAJOR>(wsS_[(g % 2) * kAttnRows * kKeyTile], s, fp);
        Fixpipe<float, float, CFG_ROW_MAJOR>(wsDP_[(g % 2) * kAttnRows * kKeyTile], dp, fp);
        qS_.FreeTensor(s);
        qS_.FreeTensor(dp);
        CrossCoreSetFlag<2, PIPE_FIX>(kFlagSReady + g % 2);
        if (pending) DKV(pd, np);
        pd = Pending{g, q1, o1, ti == kb.u0, ti == kb.u1 - 1, kb, hk, k0};
        pending = true;
      }
      qKV_.FreeTensor(k1);
      qKV_.FreeTensor(v1);
    }
    if (pending) DKV(pd, np);
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) CrossCoreWaitFlag<2, PIPE_FIX>(kFlagSFree + h % 2);
  }
  // keys [k, k + n) of kv head hk -> L1 Nz [64 x dk]
  __aicore__ inline void KeyRows(const LocalTensor<bfloat16_t>& t1, const GlobalTensor<bfloat16_t>& src, int64_t k,
                                 int64_t hk, int64_t n, uint32_t dk) {
    ZeroL1(t1, kBwdKeys * dk * 2);
    DataCopy(t1, src[(k * Hkv_ + hk) * D_],
             NzRows(static_cast<uint32_t>(n), static_cast<uint32_t>(D_), static_cast<uint32_t>(Hkv_ * D_), kBwdKeys));
  }
  // row slots [128 u, 128 u + 128) of the sequence -> L1 Nz [128 x dk]: slot R = p G + g holds head hk G + g of the
  // query at position p (zero when there is none)
  __aicore__ inline void SlotRows(const LocalTensor<bfloat16_t>& t1, const GlobalTensor<bfloat16_t>& src, int64_t k0,
                                  int64_t len, int64_t u, int64_t hk, uint32_t dk) {
    ZeroL1(t1, kBwdSlots * dk * 2);
    const int64_t R0 = u * kBwdSlots, R1 = R0 + kBwdSlots;
    for (int64_t p = R0 / G_; p * G_ < R1; ++p) {
      const int64_t i = QueryAt(k0, len, p);
      if (i < 0) continue;
      const int64_t a = p * G_ < R0 ? R0 : p * G_, e = p * G_ + G_ < R1 ? p * G_ + G_ : R1;
      DataCopy(t1[static_cast<uint32_t>((a - R0) * 16)], src[(i * Hq_ + hk * G_ + (a - p * G_)) * D_],
               NzRows(static_cast<uint32_t>(e - a), static_cast<uint32_t>(D_), static_cast<uint32_t>(D_), kBwdSlots));
    }
  }
  // c [64 x 128] = a (64 rows) b^T (128 rows), d in chunks of 64 ascending from +0
  __aicore__ inline void Product(const LocalTensor<float>& c, const LocalTensor<bfloat16_t>& a1,
                                 const LocalTensor<bfloat16_t>& b1, uint32_t dk) {
    for (uint32_t kc = 0; kc < dk / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, a1, kc);
      LoadBt(b2, b1, kBwdSlots, kc);
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kBwdKeys, mp.n = kBwdSlots, mp.k = kAttnK, mp.cmatrixInitVal = (kc == 0);
      Mmad(c, a2, b2, mp);
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
  }
  // acc [64 x np] (+)= a (64 x 128, Nz) b (128 slots x d, Nz, loaded transposed), slots in chunks of 64 ascending
  __aicore__ inline void Accumulate(const LocalTensor<float>& acc, const LocalTensor<bfloat16_t>& a1,
                                    const LocalTensor<bfloat16_t>& b1, uint32_t np, bool first) {
    for (uint32_t kc = 0; kc < kBwdSlots / kAttnK; ++kc) {
      LocalTensor<bfloat16_t> a2 = qA2_.AllocTensor<bfloat16_t>(), b2 = qB2_.AllocTensor<bfloat16_t>();
      LoadA64(a2, a1, kc);
      LoadBTrans(b2, b1, kBwdSlots, np / 16, kc);
      qA2_.EnQue(a2);
      qB2_.EnQue(b2);
      a2 = qA2_.DeQue<bfloat16_t>();
      b2 = qB2_.DeQue<bfloat16_t>();
      MmadParams mp;
      mp.m = kBwdKeys, mp.n = static_cast<uint16_t>(np), mp.k = kAttnK, mp.cmatrixInitVal = (first && kc == 0);
      Mmad(acc, a2, b2, mp);
      if ((kBwdKeys / 16) * (np / 16) < 10) PipeBarrier<PIPE_M>();
      qA2_.FreeTensor(a2);
      qB2_.FreeTensor(b2);
    }
  }
  __aicore__ inline void DKV(Pending& t, uint32_t np) {
    const int64_t slot = t.g % 2;
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagPReady + slot);
    LocalTensor<bfloat16_t> p1 = qP_.AllocTensor<bfloat16_t>(), s1 = qP_.AllocTensor<bfloat16_t>();
    const uint32_t nk = static_cast<uint32_t>(t.kb.nk);
    if (nk < kBwdKeys) {  // key rows past the sequence: P^T = dS^T = 0
      InitConstValue(p1, InitConstValueParams<bfloat16_t>{1, static_cast<uint16_t>(kBwdKeys * kBwdSlots * 2 / 32), 0,
                                                           bfloat16_t{}});
      InitConstValue(s1, InitConstValueParams<bfloat16_t>{1, static_cast<uint16_t>(kBwdKeys * kBwdSlots * 2 / 32), 0,
                                                           bfloat16_t{}});
      PipeBarrier<PIPE_MTE2>();
    }
    DataCopy(p1, wsP_[(2 * slot) * kAttnRows * kKeyTile], NzRows(nk, kBwdSlots, kBwdSlots, kBwdKeys));
    DataCopy(s1, wsP_[(2 * slot + 1) * kAttnRows * kKeyTile], NzRows(nk, kBwdSlots, kBwdSlots, kBwdKeys));
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagPFree + slot);
    qP_.EnQue(p1);
    p1 = qP_.DeQue<bfloat16_t>();
    qP_.EnQue(s1);
    s1 = qP_.DeQue<bfloat16_t>();
    if (t.first) {
      dv_ = qC_.AllocTensor<float>();
      dk_ = qC_.AllocTensor<float>();
    }
    Accumulate(dv_, p1, t.o1, np, t.first);  // dV += P^T dO
    Accumulate(dk_, s1, t.q1, np, t.first);  // dK += dS^T Q
    qP_.FreeTensor(p1);
    qP_.FreeTensor(s1);
    qQ_.FreeTensor(t.q1);
    qO_.FreeTensor(t.o1);
    if (!t.last) return;
    FixpipeParamsV220 fp;
    fp.nSize = static_cast<uint16_t>(D_), fp.mSize = static_cast<uint16_t>(t.kb.nk), fp.srcStride = kBwdKeys;
    fp.dstStride = static_cast<uint32_t>(Hkv_ * D_);
    const int64_t row = ((t.k0 + t.kb.j0) * Hkv_ + t.hk) * D_;
    qC_.EnQue(dv_);
    dv_ = qC_.DeQue<float>();
    Fixpipe<float, float, CFG_ROW_MAJOR>(dvg_[row], dv_, fp);
    qC_.FreeTensor(dv_);
    qC_.EnQue(dk_);
    dk_ = qC_.DeQue<float>();
    Fixpipe<float, float, CFG_ROW_MAJOR>(dkg_[row], dk_, fp);
    qC_.FreeTensor(dk_);
  }

  // AIV v: key rows [32 v, 32 v + 32) of the block
  __aicore__ inline void Vector(int64_t core, int64_t v) {
    pipe_.InitBuffer(sS_, kAttnHalf * kBwdSlots * 4);
    pipe_.InitBuffer(sD_, kAttnHalf * kBwdSlots * 4);
    pipe_.InitBuffer(sP_, 2 * kAttnHalf * kBwdSlots * 2);
    pipe_.InitBuffer(sL_, 2 * kBwdSlots * 4);  // lse and Delta per slot of the tile
    int64_t g = 0;
    for (int64_t it = core; it < items_; it += GetBlockNum()) {
      const KvBlock kb = Item(it / Hkv_);
      const int64_t hk = it % Hkv_, k0 = ckg_.GetValue(kb.b), len = ckg_.GetValue(kb.b + 1) - k0;
      for (int64_t ti = kb.u0; ti < kb.u1; ++ti, ++g) DS(g, v, kb, hk, k0, len, tlg_.GetValue(ti));
    }
    for (int64_t h = g - 2 < 0 ? 0 : g - 2; h < g; ++h) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + h % 2);
  }
  __aicore__ inline void DS(int64_t g, int64_t v, const KvBlock& kb, int64_t hk, int64_t k0, int64_t len, int64_t u) {
    const int64_t slot = g % 2, R0 = u * kBwdSlots;
    LocalTensor<float> s = sS_.Get<float>(), dp = sD_.Get<float>(), lv = sL_.Get<float>(), dv = lv[kBwdSlots];
    // lse and Delta of the tile's slots (absent: lse = +inf, so P = 0; Delta = 0)
    const float pos_inf = F32FromBits(0x7f800000u);
    for (uint32_t c = 0; c < kBwdSlots; ++c) {
      const int64_t R = R0 + c, i = QueryAt(k0, len, R / G_);
      const int64_t row = i * Hq_ + hk * G_ + R % G_;
      lv.SetValue(c, i < 0 ? pos_inf : lg_.GetValue(row));
      dv.SetValue(c, i < 0 ? 0.0f : dlg_.GetValue(row));
    }
    CrossCoreWaitFlag<2, PIPE_MTE2>(kFlagSReady + slot);
    Sync<HardEvent::V_MTE2>();
    // this AIV's key rows of the block that exist (the last block of a sequence may have fewer than 64)
    const int64_t left = kb.nk - v * kAttnHalf;
    const uint32_t n = static_cast<uint32_t>(left < 0 ? 0 : left > kAttnHalf ? kAttnHalf : left);
    if (n > 0) {
      DataCopy(s, wsS_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kBwdSlots], n * kBwdSlots);
      DataCopy(dp, wsDP_[slot * kAttnRows * kKeyTile + v * kAttnHalf * kBwdSlots], n * kBwdSlots);
    }
    CrossCoreSetFlag<2, PIPE_MTE2>(kFlagSFree + slot);
    Sync<HardEvent::MTE2_V>();
    for (uint32_t lr = 0; lr < n; ++lr) {
      const LocalTensor<float> row = s[lr * kBwdSlots], drow = dp[lr * kBwdSlots];
      const int64_t j = kb.j0 + v * kAttnHalf + lr;  // the key (position in the sequence)
      // slots of positions < j do not see key j: columns [0, j G - R0)
      const int64_t cm = j * G_ - R0;
      Muls(row, row, scale_, kBwdSlots);
      Sub(row, row, lv, kBwdSlots);
      MaskNegInf(row, 0, static_cast<uint32_t>(cm < 0 ? 0 : cm > kBwdSlots ? kBwdSlots : cm));
      Exp(row, row, kBwdSlots);          // P^T
      Sub(drow, drow, dv, kBwdSlots);
      Mul(drow, row, drow, kBwdSlots);   // P^T (dP^T - Delta)
      Muls(drow, drow, scale_, kBwdSlots);
    }
    LocalTensor<bfloat16_t> p = sP_.Get<bfloat16_t>();
    Sync<HardEvent::MTE3_V>();
    if (n > 0) {
      Cast(p, s, RoundMode::CAST_RINT, n * kBwdSlots);
      Cast(p[kAttnHalf * kBwdSlots], dp, RoundMode::CAST_RINT, n * kBwdSlots);
    }
    if (g >= 2) CrossCoreWaitFlag<2, PIPE_MTE3>(kFlagPFree + slot);
    Sync<HardEvent::V_MTE3>();
    if (n > 0) {
      DataCopy(wsP_[(2 * slot) * kAttnRows * kKeyTile + v * kAttnHalf * kBwdSlots], p, n * kBwdSlots);
      DataCopy(wsP_[(2 * slot + 1) * kAttnRows * kKeyTile + v * kAttnHalf * kBwdSlots], p[kAttnHalf * kBwdSlots],
               n * kBwdSlots);
    }
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagPReady + slot);
  }

  int64_t Hq_ = 0, Hkv_ = 0, D_ = 0, G_ = 1, items_ = 0;
  float scale_ = 1.0f;
  LocalTensor<float> dk_, dv_;
  TPipe pipe_;
  TQue<TPosition::A1, 1> qKV_, qP_;
  TQue<TPosition::B1, 1> qQ_, qO_;
  TQue<TPosition::A2, 1> qA2_;
  TQue<TPosition::B2, 1> qB2_;
  TQue<TPosition::CO1, 1> qS_, qC_;
  TBuf<TPosition::VECCALC> sS_, sD_, sP_, sL_;
  GlobalTensor<bfloat16_t> qg_, dog_, kg_, vg_, wsP_;
  GlobalTensor<float> dkg_, dvg_, lg_, dlg_, wsS_, wsDP_;
  GlobalTensor<int64_t> ckg_, kbg_, tlg_, sqg_;
};
}  // namespace ws1a
