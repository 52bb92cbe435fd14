// logsoftmax.h — the one row-lse routine logprob.asc and batch_invariant_logp.asc share (AIV), and their
// backwards. FP32 logits [T, V]; rows go to cores by t % GetBlockNum(); V is walked in kTile pieces.
//   m   = max over tiles of ReduceMax(x_t)                      (exact, order-free)
//   s   = sum over tiles, ascending, of ReduceSum(Exp(x_t - m)) (Adds -m, Exp, ReduceSum's fixed order)
//   lse = m + Ln(s)
// logprob[t] = x[t, target] - lse;   batch_invariant_logp[t, v] = x[t, v] + (-lse)  (== x - lse in IEEE),
// so logprob(l, tg)[t] == batch_invariant_logp(l)[t, tg[t]] bitwise.
// Backward:  logprob: d[v] = g * (onehot(v) - Exp(x[v] - lse))   (as (-p) * g, and g * (1 - p) at the target)
//            batch_invariant_logp: d[v] = g[v] - Exp(logp[v]) * S,  S = sum of g (ReduceSum tiles ascending)
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {

class LogSoftmax {
 public:
  __aicore__ inline void Init(GM_ADDR logits, int64_t T_, int64_t V) {
    T_rows = T_, V_ = V;
    xg_.SetGlobalBuffer((__gm__ float*)logits, T_ * V);
    pipe_.InitBuffer(xb_, kTile * sizeof(float));
    pipe_.InitBuffer(yb_, kTile * sizeof(float));
    pipe_.InitBuffer(work_, 256 * sizeof(float));
    pipe_.InitBuffer(one_, 8 * sizeof(float));
    pipe_.InitBuffer(sb_, kTile * sizeof(bfloat16_t));
  }
  __aicore__ inline uint32_t Len(int64_t v0) const { return static_cast<uint32_t>(V_ - v0 < kTile ? V_ - v0 : kTile); }
  __aicore__ inline float Lse(int64_t t) {
    LocalTensor<float> xt = xb_.Get<float>(), yt = yb_.Get<float>(), work = work_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    float m = 0.0f;
    for (int64_t v0 = 0; v0 < V_; v0 += kTile) {
      const uint32_t n = Len(v0);
      LoadF32(xt, st, xg_[t * V_ + v0], n);
      ReduceMax(yt, xt, work, n);
      PipeBarrier<PIPE_ALL>();
      const float part = yt.GetValue(0);
      m = (v0 == 0 || part > m || part != part) ? part : m;
    }
    float s = 0.0f;
    for (int64_t v0 = 0; v0 < V_; v0 += kTile) {
      const uint32_t n = Len(v0);
      LoadF32(xt, st, xg_[t * V_ + v0], n);
      Adds(xt, xt, -m, n);
      Exp(xt, xt, n);
      ReduceSum(yt, xt, work, n);
      PipeBarrier<PIPE_ALL>();
      const float part = yt.GetValue(0);
      s = v0 == 0 ? part : s + part;
    }
    return m + VecLn1(one_.Get<float>(), s);
  }
  int64_t T_rows = 0, V_ = 0;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> xb_, yb_, work_, one_, sb_;
  GlobalTensor<float> xg_;
};

__aicore__ inline void LogprobFwd(GM_ADDR logits, GM_ADDR targets, GM_ADDR out, GM_ADDR lse, int64_t T_, int64_t V) {
  LogSoftmax k;
  k.Init(logits, T_, V);
  GlobalTensor<int64_t> tg;
  GlobalTensor<float> og, lg;
  tg.SetGlobalBuffer((__gm__ int64_t*)targets, T_);
  og.SetGlobalBuffer((__gm__ float*)out, T_);
  lg.SetGlobalBuffer((__gm__ float*)lse, T_);
  InvalidateScalarCache(tg);  // targets and the target logit are read on the scalar unit
  for (int64_t t = GetBlockIdx(); t < T_; t += GetBlockNum()) {
    const float l = k.Lse(t);
    const float x = k.xg_.GetValue(t * V + tg.GetValue(t));
    StoreScalar(og[t], k.one_.Get<float>(), x - l);
    StoreScalar(lg[t], k.one_.Get<float>(), l);
  }
}

__aicore__ inline void BilpFwd(GM_ADDR logits, GM_ADDR out, GM_ADDR lse, int64_t T_, int64_t V) {
  LogSoftmax k;
  k.Init(logits, T_, V);
  GlobalTensor<float> og, lg;
  og.SetGlobalBuffer((__gm__ float*)out, T_ * V);
  lg.SetGlobalBuffer((__gm__ float*)lse, T_);
  LocalTensor<float> xt = k.xb_.Get<float>();
  LocalTensor<bfloat16_t> st = k.sb_.Get<bfloat16_t>();
  for (int64_t t = GetBlockIdx(); t < T_; t += GetBlockNum()) {
    const float l = k.Lse(t);
    for (int64_t v0 = 0; v0 < V; v0 += kTile) {
      const uint32_t n = k.Len(v0);
      LoadF32(xt, st, k.xg_[t * V + v0], n);
      Adds(xt, xt, -l, n);
      StoreF32(og[t * V + v0], xt, st, n);
    }
    StoreScalar(lg[t], k.one_.Get<float>(), l);
  }
}

__aicore__ inline void LogprobBwd(GM_ADDR g, GM_ADDR logits, GM_ADDR lse, GM_ADDR targets, GM_ADDR d, int64_t T_,
                                  int64_t V) {
  LogSoftmax k;
  k.Init(logits, T_, V);
  GlobalTensor<float> gg, lg, dg;
  GlobalTensor<int64_t> tg;
  gg.SetGlobalBuffer((__gm__ float*)g, T_);
  lg.SetGlobalBuffer((__gm__ float*)lse, T_);
  dg.SetGlobalBuffer((__gm__ float*)d, T_ * V);
  tg.SetGlobalBuffer((__gm__ int64_t*)targets, T_);
  InvalidateScalarCache(tg);  // g, lse (the forward's output), targets are read on the scalar unit
  LocalTensor<float> xt = k.xb_.Get<float>();
  LocalTensor<bfloat16_t> st = k.sb_.Get<bfloat16_t>();
  for (int64_t t = GetBlockIdx(); t < T_; t += GetBlockNum()) {
    const float gv = gg.GetValue(t), l = lg.GetValue(t);
    const int64_t target = tg.GetValue(t);
    for (int64_t v0 = 0; v0 < V; v0 += kTile) {
      const uint32_t n = k.Len(v0);
      LoadF32(xt, st, k.xg_[t * V + v0], n);
      Adds(xt, xt, -l, n);
      Exp(xt, xt, n);  // p
      if (target >= v0 && target < v0 + n) {
        PipeBarrier<PIPE_ALL>();
        const float p = xt.GetValue(static_cast<uint32_t>(target - v0));
        Muls(xt, xt, -gv, n);
        PipeBarrier<PIPE_ALL>();
        xt.SetValue(static_cast<uint32_t>(target - v0), gv * (1.0f - p));
      } else {
        Muls(xt, xt, -gv, n);
      }
      StoreF32(dg[t * V + v0], xt, st, n);
    }
  }
}

__aicore__ inline void BilpBwd(GM_ADDR g, GM_ADDR logp, GM_ADDR d, int64_t T_, int64_t V) {
  LogSoftmax k;  // its buffers and tile walk; "logits" here are the upstream gradients g
  k.Init(g, T_, V);
  GlobalTensor<float> pg, dg;
  pg.SetGlobalBuffer((__gm__ float*)logp, T_ * V);
  dg.SetGlobalBuffer((__gm__ float*)d, T_ * V);
  LocalTensor<float> xt = k.xb_.Get<float>(), yt = k.yb_.Get<float>(), work = k.work_.Get<float>();
  LocalTensor<bfloat16_t> st = k.sb_.Get<bfloat16_t>();
  for (int64_t t = GetBlockIdx(); t < T_; t += GetBlockNum()) {
    float s = 0.0f;
    for (int64_t v0 = 0; v0 < V; v0 += kTile) {
      const uint32_t n = k.Len(v0);
      LoadF32(xt, st, k.xg_[t * V + v0], n);
      ReduceSum(yt, xt, work, n);
      PipeBarrier<PIPE_ALL>();
      const float part = yt.GetValue(0);
      s = v0 == 0 ? part : s + part;
    }
    for (int64_t v0 = 0; v0 < V; v0 += kTile) {
      const uint32_t n = k.Len(v0);
      LoadF32(yt, st, pg[t * V + v0], n);
      Exp(yt, yt, n);
      Muls(yt, yt, s, n);
      LoadF32(xt, st, k.xg_[t * V + v0], n);
      Sub(xt, xt, yt, n);
      StoreF32(dg[t * V + v0], xt, st, n);
    }
  }
}
}  // namespace ws1a
