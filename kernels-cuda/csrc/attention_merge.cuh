// The split-KV merge of the attention forward (attention_merge_kernel<DP>; instantiated in attention_fwd.cu): chunk
// mode's partials (m, l, acc), one per (row, chunk), merged in ascending chunk order with the merge and finalisation
// functions of attention_mma.cuh that the whole-row CTA runs in registers (attention_fwd.cuh's header has the order
// and why decode == prefill rests on it). Device code only (no torch).
#pragma once

#include "attention_fwd.cuh"

namespace ws1cu {
namespace attn {

// Chunk mode: one warp per (query i, head h) whose row spans more than one chunk merges the partials of chunks
// 0, 1, ..., p / kChunk in that order with merge_coef / merge_val, then finalises with final_out / final_lse — the
// operations the whole-row CTA performs in registers.
template <int DP>
__global__ void __launch_bounds__(128) attention_merge_kernel(const FwdArgs a) {
  constexpr int PER = DP / 32;  // elements per lane: d = PER * lane + j
  if (a.plan[0] != 1 || a.plan[1] != 1) return;
  const int lane = threadIdx.x & 31;
  const int gw = static_cast<int>(blockIdx.x) * 4 + (threadIdx.x >> 5);  // < Tq * Hq < 2^31 (host check)
  if (gw >= a.Tq * a.Hq) return;
  const int64_t i = gw / a.Hq;
  const int h = gw % a.Hq, kh = h / a.G, g = h % a.G;
  const int B = a.B;
  const int b = static_cast<int>(seq_of(a.cu_q, B, i));
  const int64_t q0 = a.cu_q[b], lk = a.cu_k[b + 1] - a.cu_k[b], p = a.q_pos[i];
  if (!(p >= 0 && p < lk) || p < kChunk) return;  // NaN row or a single chunk: written by the chunk-0 CTA
  const int nchr = static_cast<int>(p / kChunk) + 1;
  const int row = static_cast<int>(i - q0) * a.G + g;
  const int qb = row / 16, r = row % 16;
  const int item0 = a.plan[4 + B + b] + qb * a.plan[5 + 2 * B + b];
  const auto slot = [&](int c) { return (static_cast<int64_t>(item0 + c) * a.Hkv + kh) * 16 + r; };  // split CTAs: 16 rows
  float acc[PER];
  const float2 ml0 = *reinterpret_cast<const float2*>(a.ws_ml + slot(0) * 2);
  float Mm = ml0.x, Ml = ml0.y;
#pragma unroll
  for (int j = 0; j < PER; ++j) acc[j] = a.ws_acc[slot(0) * DP + PER * lane + j];
  for (int c = 1; c < nchr; ++c) {
    const float2 ml = *reinterpret_cast<const float2*>(a.ws_ml + slot(c) * 2);
    const MergeCoef mc = merge_coef(Mm, ml.x);
#pragma unroll
    for (int j = 0; j < PER; ++j) acc[j] = merge_val(acc[j], mc.a, a.ws_acc[slot(c) * DP + PER * lane + j], mc.b);
    Ml = merge_val(Ml, mc.a, ml.y, mc.b);
    Mm = mc.m;
  }
  const int64_t o = (i * a.Hq + h) * a.D;
  const float il = final_inv(Ml);
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int d = PER * lane + j;
    if (d < a.D) a.out[o + d] = final_out(acc[j], il);
  }
  if (lane == 0) a.lse[i * a.Hq + h] = final_lse(Mm, Ml);
}

}  // namespace attn
}  // namespace ws1cu
