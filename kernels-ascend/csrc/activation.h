// activation.h — silu and swiglu, forward and backward, in ONE templated kernel (AIV) so that
// silu(x) == swiglu(x, 1) bitwise: `up` is either loaded or Duplicate(1.0f), and u * 1.0f == u exactly.
//
// Per element, in fp32 (every step one vector instruction, the same for every element):
//   e   = Exp(g * -1)        sig = 1 / (1 + e)        s = g * sig
//   y   = bf16_rint(s * u) (or fp32 when the inputs are fp32)
// backward (fp32 outputs):
//   dup   = dy * s
//   dgate = (dy * u) * (sig * (1 + g * (1 - sig)))
// Elementwise: tiles of kTile elements over the flat tensor go to cores by tile % GetBlockNum(); an
// element's bits depend on its own inputs only. The classic TQue pipeline (VECIN -> compute -> VECOUT).
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {

template <class T, bool HAS_UP, bool BWD>
class Activation {
 public:
  __aicore__ inline void Run(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR out0, GM_ADDR out1, int64_t n) {
    gg_.SetGlobalBuffer((__gm__ T*)gate, n);
    if (HAS_UP) ug_.SetGlobalBuffer((__gm__ T*)up, n);
    if (BWD) {
      dyg_.SetGlobalBuffer((__gm__ T*)dy, n);
      o0f_.SetGlobalBuffer((__gm__ float*)out0, n);
      if (HAS_UP) o1f_.SetGlobalBuffer((__gm__ float*)out1, n);
    } else {
      o0_.SetGlobalBuffer((__gm__ T*)out0, n);
    }
    pipe_.InitBuffer(inq_, 1, 3 * kTile * sizeof(float));
    pipe_.InitBuffer(outq_, 1, 2 * kTile * sizeof(float));
    pipe_.InitBuffer(tb_, 3 * kTile * sizeof(float));
    pipe_.InitBuffer(sb_, kTile * sizeof(bfloat16_t));
    const int64_t tiles = (n + kTile - 1) / kTile;
    for (int64_t t = GetBlockIdx(); t < tiles; t += GetBlockNum()) {
      const int64_t t0 = t * kTile;
      const uint32_t len = static_cast<uint32_t>(n - t0 < kTile ? n - t0 : kTile);
      CopyIn(t0, len);
      Compute(len);
      CopyOut(t0, len);
    }
  }

 private:
  __aicore__ inline void CopyIn(int64_t t0, uint32_t len) {
    LocalTensor<float> in = inq_.AllocTensor<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    LoadF32(in, st, gg_[t0], len);
    if (HAS_UP) LoadF32(in[kTile], st, ug_[t0], len);
    else Duplicate(in[kTile], 1.0f, len);
    if (BWD) LoadF32(in[2 * kTile], st, dyg_[t0], len);
    inq_.EnQue(in);
  }
  __aicore__ inline void Compute(uint32_t len) {
    LocalTensor<float> in = inq_.DeQue<float>();
    LocalTensor<float> out = outq_.AllocTensor<float>();
    LocalTensor<float> g = in, u = in[kTile], d = in[2 * kTile];
    LocalTensor<float> sig = tb_.Get<float>(), s = sig[kTile], t = sig[2 * kTile];
    Muls(t, g, -1.0f, len);
    Exp(t, t, len);
    Adds(t, t, 1.0f, len);
    Duplicate(sig, 1.0f, len);
    Div(sig, sig, t, len);  // sig = 1 / (1 + exp(-g))
    Mul(s, g, sig, len);    // s = silu(g)
    if (!BWD) {
      Mul(out, s, u, len);
    } else {
      Mul(out[kTile], d, s, len);  // dup = dy * s
      Duplicate(t, 1.0f, len);
      Sub(t, t, sig, len);         // 1 - sig
      Mul(t, g, t, len);
      Adds(t, t, 1.0f, len);       // 1 + g (1 - sig)
      Mul(t, sig, t, len);
      Mul(out, d, u, len);         // dy * u
      Mul(out, out, t, len);       // dgate
    }
    outq_.EnQue(out);
    inq_.FreeTensor(in);
  }
  __aicore__ inline void CopyOut(int64_t t0, uint32_t len) {
    LocalTensor<float> out = outq_.DeQue<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    if (BWD) {
      StoreF32(o0f_[t0], out, st, len);
      if (HAS_UP) StoreF32(o1f_[t0], out[kTile], st, len);
    } else {
      StoreF32(o0_[t0], out, st, len);
    }
    outq_.FreeTensor(out);
  }
  TPipe pipe_;
  TQue<TPosition::VECIN, 1> inq_;
  TQue<TPosition::VECOUT, 1> outq_;
  TBuf<TPosition::VECCALC> tb_, sb_;
  GlobalTensor<T> gg_, ug_, dyg_, o0_;
  GlobalTensor<float> o0f_, o1f_;
};
}  // namespace ws1a
