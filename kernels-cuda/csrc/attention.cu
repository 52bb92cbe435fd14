// attention (ws1_cuda::attention, attention_bwd): causal GQA over packed variable-length sequences; ONE
// kernel family for prefill, chunked prefill and decode.
// Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0, D even, D <= 256), cu_seqlens_q,
// cu_seqlens_k [B+1] int64, q_pos [Tq] int64 (query i of sequence b sits at absolute position q_pos[i] and
// sees its sequence's keys 0..q_pos[i]; key j of sequence b is row cu_seqlens_k[b] + j) ->
// (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32). The signature is kernels-cpu's: K/V arrive packed per sequence
// (ws1-kv gathers a sequence's cache blocks in block-table order before the call), so key j's absolute
// position is its index in its sequence whichever way the cache was paged.
//
// Forward, per (query i, head h) — one warp; a CTA holds the (up to 4) heads of one query that share a kv
// head, so the K/V tile in shared memory serves them all. Keys in tiles of kKT = 32 ALIGNED TO ABSOLUTE KEY 0
// (tile t covers keys 32t .. 32t+31); keys j > p = q_pos[i] are never loaded nor touched. Per tile, FP32:
//   s_j   = scale * dot(q, k_j)    lane j: serial fmaf over d = 0 .. D-1 ascending, from +0
//   m_new = max(m, max_j s_j)      (exact);  alpha = (m == -inf) ? 0 : expf(m - m_new)
//   l     = l * alpha;  acc[d] = acc[d] * alpha
//   for j ascending: p_j = expf(s_j - m_new);  l = l + p_j;  acc[d] = fmaf(p_j, v_j[d], acc[d])
// out = bf16_rne(acc / l), lse = m + logf(l). The operations of a query depend only on p and keys 0..p — not
// on how many queries or sequences share the launch, the chunk it arrived in, or decode vs prefill. No split-KV.
// (This is kernels-cpu/csrc/attention.cpp's order with lanes over keys for the dots and over d for acc.)
// Backward (FP32 out), per sequence, fixed orders, no atomics:
//   phase 1, warp per (i, h): Delta = dot(dout_i, out_i) (lane partials d = lane + 32c ascending, butterfly);
//     s_ij recomputed by the forward's dot; p_ij = expf(s_ij - lse_i); dp_ij = dot(dout_i, v_j);
//     ds_ij = p_ij * (dp_ij - Delta); P, DS stored; dq_i = scale * sum_j ds_ij k_j, j ascending.
//   phase 2, warp per (key row, kv head): dk_j = scale * sum_{h in group asc, i in sequence asc, q_pos_i >= j}
//     ds_ij q_i;  dv_j = sum (same order) p_ij dout_i.
// Memory of the backward: P and DS hold sum_i Hq * (q_pos[i] + 1) floats each (training lengths are short).
#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kKT = 32;        // key tile, aligned to absolute key position 0
constexpr int kDMax = 256;     // largest head_dim (Qwen3: 128)
constexpr int kKStride = kDMax + 2;  // K tile row stride (BF16): odd 32-bit word stride, conflict-free lane-per-key reads
constexpr int kAttnWarps = 4;  // heads per CTA (forward) / (query, head) pairs per CTA (backward)
constexpr int kAttnThreads = 32 * kAttnWarps;
constexpr int kDPerLane = kDMax / 32;

// The sequence of row `i` given cu [B+1] (non-decreasing, cu[0] = 0, cu[B] > i): the b with cu[b] <= i < cu[b+1].
__device__ __forceinline__ int64_t seq_of(const int64_t* __restrict__ cu, int64_t B, int64_t i) {
  int64_t lo = 0, hi = B - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// dot(a, b) over d = 0 .. D-1 ascending, one serial FMA chain from +0 (b: BF16 pairs in shared memory).
__device__ __forceinline__ float dot_q_kshared(const float* __restrict__ q, const uint16_t* __restrict__ k, int D) {
  float s = 0.0f;
  const uint32_t* k2 = reinterpret_cast<const uint32_t*>(k);
  for (int d = 0; d < D; d += 2) {
    const uint32_t w = k2[d / 2];
    s = fmaf(q[d], __uint_as_float(w << 16), s);
    s = fmaf(q[d + 1], __uint_as_float(w & 0xffff0000u), s);
  }
  return s;
}
// The same chain with both rows in global memory (backward): a BF16 or FP32, b BF16.
template <class TA>
__device__ __forceinline__ float dot_global(const TA* __restrict__ a, const uint16_t* __restrict__ b, int D) {
  float s = 0.0f;
  for (int d = 0; d < D; ++d) s = fmaf(ld(a + d), bf16_f32(b[d]), s);
  return s;
}

__global__ void __launch_bounds__(kAttnThreads) attention_fwd_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
    const int64_t* __restrict__ cu_q, const int64_t* __restrict__ cu_k, const int64_t* __restrict__ q_pos, int64_t B,
    int64_t Tk, int Hq, int Hkv, int D, float scale, bool vec, uint16_t* __restrict__ out, float* __restrict__ lse) {
  __shared__ __align__(16) uint16_t Ks[kKT * kKStride];
  __shared__ __align__(16) uint16_t Vs[kKT * kDMax];  // 512-byte rows: 16-byte stores
  __shared__ float Qs[kAttnWarps][kDMax];
  const int64_t i = blockIdx.x;
  const int kh = blockIdx.y, G = Hq / Hkv;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int gi = blockIdx.z * kAttnWarps + w;  // this warp's head within the group
  const bool active = gi < G;
  const int h = kh * G + (active ? gi : 0);
  const int64_t b = seq_of(cu_q, B, i), krow0 = cu_k[b], p = q_pos[i];
  // Inconsistent cu_seqlens / q_pos (only possible when the host check was skipped under graph capture):
  // this query's rows become NaN and nothing outside K/V is read. Uniform over the CTA (one query).
  if (!(cu_q[b] <= i && i < cu_q[b + 1] && krow0 >= 0 && cu_k[b + 1] <= Tk && p >= 0 && p < cu_k[b + 1] - krow0)) {
    if (active) {
      uint16_t* orow = out + (i * Hq + h) * static_cast<int64_t>(D);
      for (int d = lane; d < D; d += 32) orow[d] = 0x7fc0u;
      if (lane == 0) lse[i * Hq + h] = __int_as_float(0x7fc00000);
    }
    return;
  }
  const uint16_t* qrow = q + (i * Hq + h) * static_cast<int64_t>(D);
  for (int d = lane; d < D; d += 32) Qs[w][d] = bf16_f32(qrow[d]);

  float acc[kDPerLane];
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t kvstride = static_cast<int64_t>(Hkv) * D;
  for (int64_t t0 = 0; t0 <= p; t0 += kKT) {
    const int nk = static_cast<int>(p + 1 - t0 < kKT ? p + 1 - t0 : kKT);  // keys t0 .. t0+nk-1, all <= p
    __syncthreads();  // the previous tile is consumed (and Qs is written before the first)
    // The tile into shared memory; vec (D % 8 == 0, 16-byte aligned K/V): 16-byte loads, else 2 x 16-bit.
    // Both write the same bytes, so the choice cannot change a bit.
    if (vec) {
      for (int e = threadIdx.x; e < nk * (D / 8); e += kAttnThreads) {
        const int j = e / (D / 8), c8 = e % (D / 8);
        const int64_t src = (krow0 + t0 + j) * kvstride + static_cast<int64_t>(kh) * D + 8 * c8;
        const uint4 kw = *reinterpret_cast<const uint4*>(k + src);
        uint32_t* kd = reinterpret_cast<uint32_t*>(Ks + j * kKStride) + 4 * c8;  // 4-byte aligned rows (odd word stride)
        kd[0] = kw.x;
        kd[1] = kw.y;
        kd[2] = kw.z;
        kd[3] = kw.w;
        *reinterpret_cast<uint4*>(Vs + j * kDMax + 8 * c8) = *reinterpret_cast<const uint4*>(v + src);
      }
    } else {
      for (int e = threadIdx.x; e < nk * (D / 2); e += kAttnThreads) {
        const int j = e / (D / 2), d2 = e % (D / 2);
        const int64_t src = (krow0 + t0 + j) * kvstride + static_cast<int64_t>(kh) * D + 2 * d2;
        const uint32_t kw = static_cast<uint32_t>(k[src]) | (static_cast<uint32_t>(k[src + 1]) << 16);
        const uint32_t vw = static_cast<uint32_t>(v[src]) | (static_cast<uint32_t>(v[src + 1]) << 16);
        reinterpret_cast<uint32_t*>(Ks + j * kKStride)[d2] = kw;
        reinterpret_cast<uint32_t*>(Vs + j * kDMax)[d2] = vw;
      }
    }
    __syncthreads();
    if (!active) continue;
    const float s = lane < nk ? scale * dot_q_kshared(Qs[w], Ks + lane * kKStride, D) : -INFINITY;
    const float mt = warp_max(s);
    const float mn = m > mt ? m : mt;
    const float alpha = (m == -INFINITY) ? 0.0f : expf(m - mn);
    l = l * alpha;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) acc[c] = acc[c] * alpha;
    const float pl = lane < nk ? expf(s - mn) : 0.0f;
    for (int j = 0; j < nk; ++j) {  // keys ascending
      const float pj = __shfl_sync(0xffffffffu, pl, j);
      l = l + pj;
#pragma unroll
      for (int c = 0; c < kDPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < D) acc[c] = fmaf(pj, bf16_f32(Vs[j * kDMax + d]), acc[c]);
      }
    }
    m = mn;
  }
  if (!active) return;
  uint16_t* orow = out + (i * Hq + h) * static_cast<int64_t>(D);
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < D) orow[d] = bf16_rne(__fdiv_rn(acc[c], l));
  }
  if (lane == 0) lse[i * Hq + h] = m + logf(l);
}

// Phase 1: warp per (query i, head h). off[i] = sum_{i' < i} Hq * (q_pos[i'] + 1); the (i, h) row of P / DS
// starts at off[i] + h * (q_pos[i] + 1).
__global__ void __launch_bounds__(kAttnThreads) attention_bwd_query_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
    const float* __restrict__ dout, const float* __restrict__ o, const float* __restrict__ lse,
    const int64_t* __restrict__ cu_q, const int64_t* __restrict__ cu_k, const int64_t* __restrict__ q_pos,
    const int64_t* __restrict__ off, int64_t B, int64_t Tq, int Hq, int Hkv, int D, float scale, float* __restrict__ P,
    float* __restrict__ DS, float* __restrict__ dq) {
  const int lane = threadIdx.x & 31;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kAttnWarps + (threadIdx.x >> 5);
  if (gw >= Tq * Hq) return;  // whole warps only: no block barrier in this kernel
  const int64_t i = gw / Hq;
  const int h = static_cast<int>(gw % Hq), kh = h / (Hq / Hkv);
  const int64_t b = seq_of(cu_q, B, i), krow0 = cu_k[b], p = q_pos[i];
  const int64_t qo = (i * Hq + h) * static_cast<int64_t>(D), kvstride = static_cast<int64_t>(Hkv) * D;
  float part = 0.0f;
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < D) part = fmaf(dout[qo + d], o[qo + d], part);
  }
  const float delta = warp_sum(part);
  const float ls = lse[i * Hq + h];
  float* Pr = P + off[i] + static_cast<int64_t>(h) * (p + 1);
  float* DSr = DS + off[i] + static_cast<int64_t>(h) * (p + 1);
  float dqa[kDPerLane];
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) dqa[c] = 0.0f;
  for (int64_t t0 = 0; t0 <= p; t0 += 32) {
    const int nk = static_cast<int>(p + 1 - t0 < 32 ? p + 1 - t0 : 32);
    float dsl = 0.0f;
    if (lane < nk) {
      const int64_t kr = (krow0 + t0 + lane) * kvstride + static_cast<int64_t>(kh) * D;
      const float s = scale * dot_global(q + qo, k + kr, D);
      const float pj = expf(s - ls);
      const float dp = dot_global(dout + qo, v + kr, D);
      dsl = pj * (dp - delta);
      Pr[t0 + lane] = pj;
      DSr[t0 + lane] = dsl;
    }
    for (int j = 0; j < nk; ++j) {  // keys ascending
      const float dsj = __shfl_sync(0xffffffffu, dsl, j);
      const uint16_t* kr = k + (krow0 + t0 + j) * kvstride + static_cast<int64_t>(kh) * D;
#pragma unroll
      for (int c = 0; c < kDPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < D) dqa[c] = fmaf(dsj, bf16_f32(kr[d]), dqa[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < D) dq[qo + d] = dqa[c] * scale;
  }
}

// Phase 2: warp per (key row r, kv head kh).
__global__ void __launch_bounds__(kAttnThreads) attention_bwd_key_kernel(
    const uint16_t* __restrict__ q, const float* __restrict__ dout, const float* __restrict__ P,
    const float* __restrict__ DS, const int64_t* __restrict__ cu_q, const int64_t* __restrict__ cu_k,
    const int64_t* __restrict__ q_pos, const int64_t* __restrict__ off, int64_t B, int64_t Tk, int Hq, int Hkv, int D,
    float scale, float* __restrict__ dk, float* __restrict__ dv) {
  const int lane = threadIdx.x & 31;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kAttnWarps + (threadIdx.x >> 5);
  if (gw >= Tk * Hkv) return;
  const int64_t r = gw / Hkv;
  const int kh = static_cast<int>(gw % Hkv), G = Hq / Hkv;
  const int64_t s = seq_of(cu_k, B, r), j = r - cu_k[s];
  float dka[kDPerLane], dva[kDPerLane];
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) dka[c] = dva[c] = 0.0f;
  for (int h = kh * G; h < (kh + 1) * G; ++h) {
    for (int64_t i = cu_q[s]; i < cu_q[s + 1]; ++i) {
      const int64_t p = q_pos[i];
      if (p < j) continue;
      const int64_t row = off[i] + static_cast<int64_t>(h) * (p + 1) + j;
      const float dsv = DS[row], pv = P[row];
      const int64_t qo = (i * Hq + h) * static_cast<int64_t>(D);
#pragma unroll
      for (int c = 0; c < kDPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          dka[c] = fmaf(dsv, bf16_f32(q[qo + d]), dka[c]);
          dva[c] = fmaf(pv, dout[qo + d], dva[c]);
        }
      }
    }
  }
  const int64_t ko = (r * Hkv + kh) * static_cast<int64_t>(D);
#pragma unroll
  for (int c = 0; c < kDPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < D) {
      dk[ko + d] = dka[c] * scale;
      dv[ko + d] = dva[c];
    }
  }
}

}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

#include <vector>

namespace ws1_cuda {
namespace {

struct Meta {
  int64_t Tq, Tk, Hq, Hkv, D, B;
  std::vector<int64_t> qpos;  // host copy (validation; the backward's offsets)
};

// One host sync: cu_seqlens and q_pos are validated as the cpu kernel does (bad input -> one-line error,
// never an out-of-bounds read on the device). Under graph capture (a decode step) the values are not
// copied to the host (capturing()): the forward kernel guards itself (NaN rows); the backward refuses.
Meta check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_q,
                  const at::Tensor& cu_k, const at::Tensor& q_pos, bool need_qpos) {
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_cuda(*t, op, n);
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kBFloat16, op, n);
    check_dim(*t, 3, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have one shape, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(q.size(2) == k.size(2), op, ": head_dim mismatch q ", q.size(2), " k ", k.size(2));
  TORCH_CHECK(q.size(2) % 2 == 0 && q.size(2) > 0 && q.size(2) <= ws1cu::kDMax, op, ": head_dim must be even and in [2, ",
              ws1cu::kDMax, "], got ", q.size(2));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": Hq (", q.size(1), ") must be a multiple of Hkv (", k.size(1), ")");
  for (auto [t, n] : {std::pair{&cu_q, "cu_seqlens_q"}, {&cu_k, "cu_seqlens_k"}, {&q_pos, "q_pos"}}) {
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kLong, op, n);
    check_dim(*t, 1, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(cu_q.numel() == cu_k.numel() && cu_q.numel() >= 2, op, ": cu_seqlens_q/k must both be [B+1]");
  TORCH_CHECK(q_pos.numel() == q.size(0), op, ": q_pos must be [", q.size(0), "]");
  Meta m{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2), cu_q.numel() - 1, {}};
  TORCH_CHECK(m.Tq < (int64_t{1} << 31) && m.Hq < 65536 && m.Hkv < 65536, op, ": shape too large");
  if (capturing()) {
    TORCH_CHECK(!need_qpos, op, " cannot be captured into a CUDA graph: its workspace is sized from q_pos on the host");
    return m;
  }
  at::Tensor host = at::cat({cu_q, cu_k, q_pos}).cpu();
  const int64_t* cq = host.data_ptr<int64_t>();
  const int64_t* ck = cq + (m.B + 1);
  const int64_t* qp = ck + (m.B + 1);
  TORCH_CHECK(cq[0] == 0 && ck[0] == 0 && cq[m.B] == m.Tq && ck[m.B] == m.Tk, op,
              ": cu_seqlens must start at 0 and end at Tq=", m.Tq, ", Tk=", m.Tk);
  for (int64_t b = 0; b < m.B; ++b) {
    TORCH_CHECK(cq[b + 1] >= cq[b] && ck[b + 1] >= ck[b], op, ": cu_seqlens must be non-decreasing");
    const int64_t lk = ck[b + 1] - ck[b];
    for (int64_t i = cq[b]; i < cq[b + 1]; ++i)
      TORCH_CHECK(qp[i] >= 0 && qp[i] < lk, op, ": query ", i, " at position ", qp[i], " but its sequence ", b, " has ", lk,
                  " keys");
  }
  m.qpos.assign(qp, qp + m.Tq);
  return m;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention";
  CallScope call(op);
  const c10::cuda::CUDAGuard guard(q.device());
  const Meta m = check_inputs(op, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_qpos=*/false);
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({m.Tq, m.Hq}, q.options().dtype(at::kFloat));
  if (m.Tq == 0) return {out, lse};
  const int64_t G = m.Hq / m.Hkv;
  const bool vec = m.D % 8 == 0 && reinterpret_cast<uintptr_t>(k.data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(m.Tq), static_cast<unsigned>(m.Hkv),
                  static_cast<unsigned>(ceil_div(G, ws1cu::kAttnWarps)));
  ws1cu::attention_fwd_kernel<<<grid, ws1cu::kAttnThreads, 0, stream()>>>(
      bf16_in(q), bf16_in(k), bf16_in(v), cu_seqlens_q.data_ptr<int64_t>(), cu_seqlens_k.data_ptr<int64_t>(),
      q_pos.data_ptr<int64_t>(), m.B, m.Tk, static_cast<int>(m.Hq), static_cast<int>(m.Hkv), static_cast<int>(m.D),
      static_cast<float>(scale), vec, bf16_out(out), lse.data_ptr<float>());
  check_launch(op);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k,
                                                             const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention_bwd";
  CallScope call(op);
  const c10::cuda::CUDAGuard guard(q.device());
  const Meta m = check_inputs(op, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_qpos=*/true);
  TORCH_CHECK(dout_in.sizes() == q.sizes() && out.sizes() == q.sizes(), op, ": dout and out must have q's shape");
  TORCH_CHECK(lse.numel() == m.Tq * m.Hq, op, ": lse must be [Tq, Hq]");
  for (auto [t, n] : {std::pair{&dout_in, "dout"}, {&out, "out"}, {&lse, "lse"}}) check_same_device(q, *t, op, n);
  at::Tensor dout = dout_in.to(at::kFloat).contiguous(), o = out.to(at::kFloat).contiguous();
  at::Tensor ls = lse.to(at::kFloat).contiguous();
  auto fopts = q.options().dtype(at::kFloat);
  at::Tensor dq = at::empty(q.sizes(), fopts);
  at::Tensor dk = at::zeros(k.sizes(), fopts), dv = at::zeros(k.sizes(), fopts);
  if (m.Tq == 0 && m.Tk == 0) return {dq, dk, dv};
  std::vector<int64_t> off(m.Tq + 1, 0);
  for (int64_t i = 0; i < m.Tq; ++i) off[i + 1] = off[i] + m.Hq * (m.qpos[i] + 1);
  at::Tensor offd = at::tensor(off, at::TensorOptions().dtype(at::kLong)).to(q.device());
  at::Tensor P = at::empty({std::max<int64_t>(off[m.Tq], 1)}, fopts), DS = at::empty_like(P);
  const int Hq = static_cast<int>(m.Hq), Hkv = static_cast<int>(m.Hkv), D = static_cast<int>(m.D);
  const float sc = static_cast<float>(scale);
  const int64_t* cq = cu_seqlens_q.data_ptr<int64_t>();
  const int64_t* ck = cu_seqlens_k.data_ptr<int64_t>();
  if (m.Tq > 0) {
    const int64_t blocks = ceil_div(m.Tq * m.Hq, ws1cu::kAttnWarps);
    TORCH_CHECK(blocks < (int64_t{1} << 31), op, ": too many (query, head) pairs");
    ws1cu::attention_bwd_query_kernel<<<static_cast<unsigned>(blocks), ws1cu::kAttnThreads, 0, stream()>>>(
        bf16_in(q), bf16_in(k), bf16_in(v), dout.data_ptr<float>(), o.data_ptr<float>(), ls.data_ptr<float>(), cq, ck,
        q_pos.data_ptr<int64_t>(), offd.data_ptr<int64_t>(), m.B, m.Tq, Hq, Hkv, D, sc, P.data_ptr<float>(),
        DS.data_ptr<float>(), dq.data_ptr<float>());
    check_launch(op);
  }
  if (m.Tk > 0) {
    const int64_t blocks = ceil_div(m.Tk * m.Hkv, ws1cu::kAttnWarps);
    TORCH_CHECK(blocks < (int64_t{1} << 31), op, ": too many (key, kv head) pairs");
    ws1cu::attention_bwd_key_kernel<<<static_cast<unsigned>(blocks), ws1cu::kAttnThreads, 0, stream()>>>(
        bf16_in(q), dout.data_ptr<float>(), P.data_ptr<float>(), DS.data_ptr<float>(), cq, ck, q_pos.data_ptr<int64_t>(),
        offd.data_ptr<int64_t>(), m.B, m.Tk, Hq, Hkv, D, sc, dk.data_ptr<float>(), dv.data_ptr<float>());
    check_launch(op);
  }
  return {dq, dk, dv};
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
