// rownorm.h — the row-RMS-norm kernels shared by rms_norm.asc and qk_norm.asc (qk_norm is the same
// arithmetic on rows = T * n_heads of length D). AIV only.
//
// Forward, one row x[0..H) (x bf16 or fp32, weight bf16 or fp32), tiles of TILE elements:
//   ss    = sum over tiles, ascending, of ReduceSum(x_t * x_t)     (ReduceSum's fixed order inside a tile)
//   rstd  = 1 / Sqrt(ss / H + eps)                                 (Sqrt on the vector unit)
//   y     = bf16_rint((x * rstd) * w)                              (Muls, Mul, Cast CAST_RINT)
// Backward, one row (dy bf16 or fp32; dx fp32), r = rstd[row]:
//   g = dy * w;  S = sum over tiles of ReduceSum(g * x);  c = (S / H) * ((r * r) * r)
//   dx = g * r - x * c
// dweight[h] = sum over rows IN THE GIVEN ORDER of dy[row, h] * (x[row, h] * r[row]) — a separate kernel
// (rownorm_dw) parallel over column tiles: a core owns whole columns and walks every row serially.
// Invariance: a row's instruction sequence depends on H, TILE and its own values only (rows go to cores by
// row % GetBlockNum()); TILE is the fixed ws1a::kTile — the negative control instantiates another.
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {

template <class TX, class TW, uint32_t TILE>
class RowNormFwd {
 public:
  __aicore__ inline void Run(GM_ADDR x, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, int64_t rows, int64_t h, float eps) {
    xg_.SetGlobalBuffer((__gm__ TX*)x, rows * h);
    wg_.SetGlobalBuffer((__gm__ TW*)w, h);
    yg_.SetGlobalBuffer((__gm__ bfloat16_t*)y, rows * h);
    rg_.SetGlobalBuffer((__gm__ float*)rstd, rows);
    pipe_.InitBuffer(xb_, TILE * sizeof(float));
    pipe_.InitBuffer(wb_, TILE * sizeof(float));
    pipe_.InitBuffer(sb_, TILE * sizeof(bfloat16_t));
    pipe_.InitBuffer(work_, 256 * sizeof(float));
    pipe_.InitBuffer(one_, 8 * sizeof(float));
    for (int64_t r = GetBlockIdx(); r < rows; r += GetBlockNum()) Row(r, h, eps);
  }

 private:
  __aicore__ inline void Row(int64_t r, int64_t h, float eps) {
    LocalTensor<float> xt = xb_.Get<float>(), wt = wb_.Get<float>(), work = work_.Get<float>();
    LocalTensor<float> one = one_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    float ss = 0.0f;
    for (int64_t t0 = 0; t0 < h; t0 += TILE) {
      const uint32_t n = static_cast<uint32_t>(h - t0 < TILE ? h - t0 : TILE);
      LoadF32(xt, st, xg_[r * h + t0], n);
      Mul(xt, xt, xt, n);
      ReduceSum(wt, xt, work, n);
      PipeBarrier<PIPE_ALL>();
      const float part = wt.GetValue(0);
      ss = t0 == 0 ? part : ss + part;
    }
    const float rstd = 1.0f / VecSqrt1(one, ss / static_cast<float>(h) + eps);
    for (int64_t t0 = 0; t0 < h; t0 += TILE) {
      const uint32_t n = static_cast<uint32_t>(h - t0 < TILE ? h - t0 : TILE);
      LoadF32(xt, st, xg_[r * h + t0], n);
      LoadF32(wt, st, wg_[t0], n);
      Muls(xt, xt, rstd, n);
      Mul(xt, xt, wt, n);
      StoreF32(yg_[r * h + t0], xt, st, n);
    }
    StoreScalar(rg_[r], one, rstd);
  }
  TPipe pipe_;
  TBuf<TPosition::VECCALC> xb_, wb_, sb_, work_, one_;
  GlobalTensor<TX> xg_;
  GlobalTensor<TW> wg_;
  GlobalTensor<bfloat16_t> yg_;
  GlobalTensor<float> rg_;
};

template <class TD, class TX, class TW>
class RowNormBwd {
 public:
  __aicore__ inline void Run(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR dx, int64_t rows, int64_t h) {
    dyg_.SetGlobalBuffer((__gm__ TD*)dy, rows * h);
    xg_.SetGlobalBuffer((__gm__ TX*)x, rows * h);
    wg_.SetGlobalBuffer((__gm__ TW*)w, h);
    rg_.SetGlobalBuffer((__gm__ float*)rstd, rows);
    dxg_.SetGlobalBuffer((__gm__ float*)dx, rows * h);
    InvalidateScalarCache(rg_);  // rstd (the forward kernel's output) is read on the scalar unit
    pipe_.InitBuffer(gb_, kTile * sizeof(float));
    pipe_.InitBuffer(xb_, kTile * sizeof(float));
    pipe_.InitBuffer(tb_, kTile * sizeof(float));
    pipe_.InitBuffer(sb_, kTile * sizeof(bfloat16_t));
    pipe_.InitBuffer(work_, 256 * sizeof(float));
    for (int64_t r = GetBlockIdx(); r < rows; r += GetBlockNum()) Row(r, h);
  }

 private:
  __aicore__ inline void Grad(int64_t r, int64_t t0, uint32_t n) {  // gt = dy * w, xt = x
    LocalTensor<float> gt = gb_.Get<float>(), xt = xb_.Get<float>(), tt = tb_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    LoadF32(gt, st, dyg_[r * h_ + t0], n);
    LoadF32(tt, st, wg_[t0], n);
    Mul(gt, gt, tt, n);
    LoadF32(xt, st, xg_[r * h_ + t0], n);
  }
  __aicore__ inline void Row(int64_t r, int64_t h) {
    h_ = h;
    LocalTensor<float> gt = gb_.Get<float>(), xt = xb_.Get<float>(), tt = tb_.Get<float>(), work = work_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    const float rs = rg_.GetValue(r);
    float s = 0.0f;
    for (int64_t t0 = 0; t0 < h; t0 += kTile) {
      const uint32_t n = static_cast<uint32_t>(h - t0 < kTile ? h - t0 : kTile);
      Grad(r, t0, n);
      Mul(tt, gt, xt, n);
      // the sum lands in work[0]: ReduceSum documents dst overlapping its sharedTmpBuffer as allowed, dst
      // overlapping src not (it was tt itself here). Same tree, same bits.
      ReduceSum(work, tt, work, n);
      PipeBarrier<PIPE_ALL>();
      const float part = work.GetValue(0);
      s = t0 == 0 ? part : s + part;
    }
    const float c = (s / static_cast<float>(h)) * ((rs * rs) * rs);
    for (int64_t t0 = 0; t0 < h; t0 += kTile) {
      const uint32_t n = static_cast<uint32_t>(h - t0 < kTile ? h - t0 : kTile);
      Grad(r, t0, n);
      Muls(gt, gt, rs, n);
      Muls(xt, xt, c, n);
      Sub(gt, gt, xt, n);
      StoreF32(dxg_[r * h + t0], gt, st, n);
    }
  }
  int64_t h_ = 0;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> gb_, xb_, tb_, sb_, work_;
  GlobalTensor<TD> dyg_;
  GlobalTensor<TX> xg_;
  GlobalTensor<TW> wg_;
  GlobalTensor<float> rg_, dxg_;
};

// dweight over rows in the given order; column tiles of kTile go to cores by tile % GetBlockNum().
template <class TD, class TX>
class RowNormDw {
 public:
  __aicore__ inline void Run(GM_ADDR dy, GM_ADDR x, GM_ADDR rstd, GM_ADDR dw, int64_t rows, int64_t h) {
    dyg_.SetGlobalBuffer((__gm__ TD*)dy, rows * h);
    xg_.SetGlobalBuffer((__gm__ TX*)x, rows * h);
    rg_.SetGlobalBuffer((__gm__ float*)rstd, rows);
    dwg_.SetGlobalBuffer((__gm__ float*)dw, h);
    InvalidateScalarCache(rg_);  // rstd is read on the scalar unit
    pipe_.InitBuffer(ab_, kTile * sizeof(float));
    pipe_.InitBuffer(db_, kTile * sizeof(float));
    pipe_.InitBuffer(xb_, kTile * sizeof(float));
    pipe_.InitBuffer(sb_, kTile * sizeof(bfloat16_t));
    const int64_t tiles = (h + kTile - 1) / kTile;
    for (int64_t c = GetBlockIdx(); c < tiles; c += GetBlockNum()) {
      const int64_t t0 = c * kTile;
      const uint32_t n = static_cast<uint32_t>(h - t0 < kTile ? h - t0 : kTile);
      LocalTensor<float> acc = ab_.Get<float>(), dt = db_.Get<float>(), xt = xb_.Get<float>();
      LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
      Duplicate(acc, 0.0f, n);
      for (int64_t r = 0; r < rows; ++r) {
        LoadF32(dt, st, dyg_[r * h + t0], n);
        LoadF32(xt, st, xg_[r * h + t0], n);
        Muls(xt, xt, rg_.GetValue(r), n);
        Mul(dt, dt, xt, n);
        Add(acc, acc, dt, n);
      }
      StoreF32(dwg_[t0], acc, st, n);
    }
  }

 private:
  TPipe pipe_;
  TBuf<TPosition::VECCALC> ab_, db_, xb_, sb_;
  GlobalTensor<TD> dyg_;
  GlobalTensor<TX> xg_;
  GlobalTensor<float> rg_, dwg_;
};

// dtype dispatch: codes 0 = bf16, 1 = fp32 (the host passes them; the kernels are instantiated for all).
template <uint32_t TILE>
__aicore__ inline void RowNormFwdAny(int32_t xf, int32_t wf, GM_ADDR x, GM_ADDR w, GM_ADDR y, GM_ADDR rstd,
                                     int64_t rows, int64_t h, float eps) {
  if (xf && wf) { RowNormFwd<float, float, TILE> k; k.Run(x, w, y, rstd, rows, h, eps); }
  else if (xf) { RowNormFwd<float, bfloat16_t, TILE> k; k.Run(x, w, y, rstd, rows, h, eps); }
  else if (wf) { RowNormFwd<bfloat16_t, float, TILE> k; k.Run(x, w, y, rstd, rows, h, eps); }
  else { RowNormFwd<bfloat16_t, bfloat16_t, TILE> k; k.Run(x, w, y, rstd, rows, h, eps); }
}
template <class TD, class TX>
__aicore__ inline void RowNormBwdW(int32_t wf, GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR dx,
                                   int64_t rows, int64_t h) {
  if (wf) { RowNormBwd<TD, TX, float> k; k.Run(dy, x, w, rstd, dx, rows, h); }
  else { RowNormBwd<TD, TX, bfloat16_t> k; k.Run(dy, x, w, rstd, dx, rows, h); }
}
__aicore__ inline void RowNormBwdAny(int32_t df, int32_t xf, int32_t wf, GM_ADDR dy, GM_ADDR x, GM_ADDR w,
                                     GM_ADDR rstd, GM_ADDR dx, int64_t rows, int64_t h) {
  if (df && xf) RowNormBwdW<float, float>(wf, dy, x, w, rstd, dx, rows, h);
  else if (df) RowNormBwdW<float, bfloat16_t>(wf, dy, x, w, rstd, dx, rows, h);
  else if (xf) RowNormBwdW<bfloat16_t, float>(wf, dy, x, w, rstd, dx, rows, h);
  else RowNormBwdW<bfloat16_t, bfloat16_t>(wf, dy, x, w, rstd, dx, rows, h);
}
__aicore__ inline void RowNormDwAny(int32_t df, int32_t xf, GM_ADDR dy, GM_ADDR x, GM_ADDR rstd, GM_ADDR dw,
                                    int64_t rows, int64_t h) {
  if (df && xf) { RowNormDw<float, float> k; k.Run(dy, x, rstd, dw, rows, h); }
  else if (df) { RowNormDw<float, bfloat16_t> k; k.Run(dy, x, rstd, dw, rows, h); }
  else if (xf) { RowNormDw<bfloat16_t, float> k; k.Run(dy, x, rstd, dw, rows, h); }
  else { RowNormDw<bfloat16_t, bfloat16_t> k; k.Run(dy, x, rstd, dw, rows, h); }
}
}  // namespace ws1a
