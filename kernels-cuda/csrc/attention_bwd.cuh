// The attention backward kernels (instantiated in attention_bwd.cu): attention_bwd_prep_kernel<TD>,
// attention_bwd_dq_kernel<DP>, attention_bwd_dkv_kernel<DP>, their arguments and shared-memory configurations. The
// plans they read are attention_plan.cuh's (built by attention_plan.cu); the op and its shapes, attention.cu. Device
// code only (no torch).
//
// BACKWARD (FP32 out: dq [Tq, Hq, D], dk, dv [Tk, Hkv, D]); no atomics, each output element owned by one thread:
//   prep: dO -> BF16 (RNE; the MMA operand), Delta = sum_d bf16(dO) O (lanes d = lane + 32c ascending, serial fmaf,
//     warp butterfly), lse2 = lse * log2 e.
//   dQ kernel (rows as the forward, 64 per CTA): for key tiles of 32 ascending from key 0: S = Q K^T, P = (j <= p ?
//     2^(S scale log2e - lse2) : 0), dP = dO V^T, dS = P (dP - Delta); dQ = mma(bf16(dS), K, dQ) in k16 steps of
//     keys ascending. dq = dQ * scale.
//   dK/dV kernel (64 keys of one sequence and kv head per CTA): query rows R = position * G + g, i.e. ALIGNED TO
//     ABSOLUTE POSITION 0 of the sequence (not to buffer rows: a query's row slot is its position, whatever else is
//     packed or how many queries the call has), in steps of 32 ascending from the first position >= the block's first
//     key: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T as above; dV = mma(bf16(P^T), dO, dV), dK = mma(bf16(dS^T), Q, dK) in
//     k16 steps of rows ascending. dk = dK * scale. Absent positions are zero rows (zero products).
//   plan: the dQ items (the forward's plan kernel) and the dK/dV key plan (attention_bwd_plan_kernel) are built on the
//     device from cu_seqlens / q_pos, so a backward, like a forward, can be captured in a CUDA graph.
#pragma once

#include "attention_plan.cuh"

namespace ws1cu {
namespace attn {

struct BwdArgs {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const uint16_t* dob;    // dO in BF16 [Tq, Hq, D]
  const float* lse2;      // lse * log2 e [Tq, Hq]
  const float* delta;     // sum_d bf16(dO) O [Tq, Hq]
  const int64_t* cu_q;
  const int64_t* cu_k;
  const int64_t* q_pos;
  const int* plan;        // the forward's plan (whole-row mode, 64 rows): dQ items, and plan[0] the cu_seqlens check
  const int* kvplan;      // attention_bwd_plan_kernel's (layout there)
  float* dq;
  float* dk;
  float* dv;
  int64_t Tq, Tk;
  int B, Hq, Hkv, G, D;
  float scale_log2, scale;
};

// Both plans accepted the call: consistent cu_seqlens (the forward plan's status) and valid, distinct positions (the
// key plan's).
__device__ __forceinline__ bool bwd_plan_ok(const BwdArgs& a) { return a.plan[0] == 1 && a.kvplan[2 * a.B + 1] == -1; }

// Refused input (a captured call; eager calls are checked on the host): NaN in every element of dq (the dQ kernel)
// or of dk and dv (the dK/dV kernel), grid-stride over the tokens, this CTA's kv head. Never an out-of-bounds read.
__device__ __forceinline__ void bwd_fill_nan_dq(const BwdArgs& a) {
  for (int64_t i = blockIdx.x; i < a.Tq; i += gridDim.x)
    for (int g = 0; g < a.G; ++g) {
      const int64_t row = i * a.Hq + static_cast<int64_t>(blockIdx.y) * a.G + g;
      for (int d = threadIdx.x; d < a.D; d += blockDim.x) a.dq[row * a.D + d] = __int_as_float(0x7fc00000);
    }
}
__device__ __forceinline__ void bwd_fill_nan_dkv(const BwdArgs& a) {
  for (int64_t j = blockIdx.x; j < a.Tk; j += gridDim.x) {
    const int64_t o = (j * a.Hkv + blockIdx.y) * a.D;
    for (int d = threadIdx.x; d < a.D; d += blockDim.x) a.dk[o + d] = a.dv[o + d] = __int_as_float(0x7fc00000);
  }
}

// warp per (query, head) row: dO -> BF16 (round to nearest even unless it is BF16 already), Delta, lse2.
template <class TD>
__global__ void __launch_bounds__(128) attention_bwd_prep_kernel(const TD* __restrict__ dout, const uint16_t* __restrict__ out,
                                                                 const float* __restrict__ lse, int64_t rows, int D,
                                                                 uint16_t* __restrict__ dob, float* __restrict__ delta,
                                                                 float* __restrict__ lse2) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (row >= rows) return;
  float part = 0.0f;
  for (int d = lane; d < D; d += 32) {
    uint16_t x;
    if constexpr (sizeof(TD) == 2) x = dout[row * D + d];
    else x = bf16_rne(dout[row * D + d]);
    dob[row * D + d] = x;
    part = fmaf(bf16_f32(x), bf16_f32(out[row * D + d]), part);
  }
  const float s = warp_sum(part);
  if (lane == 0) {
    delta[row] = s;
    lse2[row] = __fmul_rn(lse[row], kLog2e);
  }
}

template <int DP>
struct DqCfg {
  static constexpr int BM = 64, S = DP + kPad;
  static constexpr int smem_bytes = (2 * BM * S + 4 * kBNB * S) * 2;  // Q, dO, then K and V in two stages
};

template <int DP>
__global__ void __launch_bounds__(128) attention_bwd_dq_kernel(const BwdArgs a) {
  using C = DqCfg<DP>;
  constexpr int BM = C::BM, S = C::S, C8 = DP / 8, KD = DP / 16, NB = DP / 8, NS = kBNB / 8, NT = 128;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* const Qs = smem;
  uint16_t* const Os = Qs + BM * S;
  uint16_t* const Ks = Os + BM * S;
  uint16_t* const Vs = Ks + 2 * kBNB * S;
  __shared__ int s_pos[BM];
  __shared__ int64_t s_idx[BM];
  __shared__ float s_lse2[BM], s_delta[BM];
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int kh = blockIdx.y, B = a.B;
  if (!bwd_plan_ok(a)) {
    bwd_fill_nan_dq(a);
    return;
  }
  const int items = a.plan[2], item = blockIdx.x;
  if (item >= items) return;
  const int b = item_seq(a.plan + 3, B, item);
  const int qb = item - a.plan[3 + b];
  const int64_t q0 = a.cu_q[b], nq = a.cu_q[b + 1] - q0, k0 = a.cu_k[b];
  for (int r = tid; r < BM; r += NT) {
    const int row = qb * BM + r;  // < Tq * Hq < 2^31 (host check)
    int pos = -1;
    int64_t idx = -1;
    float l2 = 0.0f, de = 0.0f;
    if (row < nq * a.G) {
      const int64_t i = q0 + row / a.G;
      idx = i * a.Hq + static_cast<int64_t>(kh) * a.G + row % a.G;
      pos = static_cast<int>(a.q_pos[i]);
      l2 = a.lse2[idx];
      de = a.delta[idx];
    }
    s_pos[r] = pos;
    s_idx[r] = idx;
    s_lse2[r] = l2;
    s_delta[r] = de;
  }
  __syncthreads();
  int kmax = -1;
  for (int r = 0; r < BM; ++r) kmax = s_pos[r] > kmax ? s_pos[r] : kmax;
  const int r0 = w * 16 + g, r1 = r0 + 8;
  const int pos[2] = {s_pos[r0], s_pos[r1]};
  const float l2r[2] = {s_lse2[r0], s_lse2[r1]}, der[2] = {s_delta[r0], s_delta[r1]};
  const int n_t = kmax >= 0 ? kmax / kBNB + 1 : 0;
  const int64_t kvs = static_cast<int64_t>(a.Hkv) * a.D;

  for (int e = tid; e < BM * C8; e += NT) {
    const int r = e / C8, c = e % C8;
    const bool ok = s_idx[r] >= 0 && c * 8 < a.D;
    const int64_t src = ok ? s_idx[r] * a.D + c * 8 : 0;
    cp_async16(smem_u32(Qs + r * S + c * 8), a.q + src, ok);
    cp_async16(smem_u32(Os + r * S + c * 8), a.dob + src, ok);
  }
  cp_async_commit();
  const auto load_kv = [&](int t, int st) {
    for (int e = tid; e < kBNB * C8; e += NT) {
      const int j = e / C8, c = e % C8, key = t * kBNB + j;
      const bool ok = key <= kmax && c * 8 < a.D;
      const int64_t src = ok ? (k0 + key) * kvs + static_cast<int64_t>(kh) * a.D + c * 8 : 0;
      cp_async16(smem_u32(Ks + (st * kBNB + j) * S + c * 8), a.k + src, ok);
      cp_async16(smem_u32(Vs + (st * kBNB + j) * S + c * 8), a.v + src, ok);
    }
  };
  if (n_t > 0) load_kv(0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[KD][4], of[KD][4];
#pragma unroll
  for (int kd = 0; kd < KD; ++kd) {
    const int off = (w * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + kd * 16 + 8 * (lane >> 4);
    ldsm_x4(qf[kd], smem_u32(Qs + off));
    ldsm_x4(of[kd], smem_u32(Os + off));
  }
  float dqa[NB][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) dqa[nb][e] = 0.0f;

  for (int t = 0; t < n_t; ++t) {
    const int st = t & 1;
    if (t + 1 < n_t) load_kv(t + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* Kt = Ks + st * kBNB * S;
    const uint16_t* Vt = Vs + st * kBNB * S;
    float s[NS][4], dp[NS][4];
#pragma unroll
    for (int nb = 0; nb < NS; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
#pragma unroll
      for (int n2 = 0; n2 < NS / 2; ++n2) {
        const int off = (n2 * 16 + (lane & 7) + 8 * (lane >> 4)) * S + kd * 16 + 8 * ((lane >> 3) & 1);
        uint32_t bk[4], bv[4];
        ldsm_x4(bk, smem_u32(Kt + off));
        ldsm_x4(bv, smem_u32(Vt + off));
        mma16816(s[2 * n2], qf[kd], bk[0], bk[1]);
        mma16816(s[2 * n2 + 1], qf[kd], bk[2], bk[3]);
        mma16816(dp[2 * n2], of[kd], bv[0], bv[1]);
        mma16816(dp[2 * n2 + 1], of[kd], bv[2], bv[3]);
      }
    // dS = P (dP - Delta), P = 2^(S scale log2e - lse2) for keys the row sees, else 0; bf16 fragments for dQ
    uint32_t dsk[NS][2];
#pragma unroll
    for (int nb = 0; nb < NS; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float ds[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int key = t * kBNB + nb * 8 + 2 * tq + j;
          const float p = key <= pos[h] ? exp2f(__fsub_rn(__fmul_rn(s[nb][2 * h + j], a.scale_log2), l2r[h])) : 0.0f;
          ds[j] = __fmul_rn(p, __fsub_rn(dp[nb][2 * h + j], der[h]));
        }
        dsk[nb][h] = pack_bf16(ds[0], ds[1]);
      }
    // dQ += dS K over the tile's keys in k16 steps ascending
#pragma unroll
    for (int kk = 0; kk < kBNB / 16; ++kk) {
      const uint32_t da[4] = {dsk[2 * kk][0], dsk[2 * kk][1], dsk[2 * kk + 1][0], dsk[2 * kk + 1][1]};
#pragma unroll
      for (int n2 = 0; n2 < NB / 2; ++n2) {
        uint32_t bk[4];
        ldsm_x4_t(bk, smem_u32(Kt + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + n2 * 16 + 8 * (lane >> 4)));
        mma16816(dqa[2 * n2], da, bk[0], bk[1]);
        mma16816(dqa[2 * n2 + 1], da, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h ? r1 : r0;
    if (pos[h] < 0) continue;
    const int64_t o = s_idx[r] * a.D;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int d = nb * 8 + 2 * tq;
      if (d < a.D)
        *reinterpret_cast<float2*>(a.dq + o + d) =
            make_float2(plus_zero(__fmul_rn(dqa[nb][2 * h], a.scale)), plus_zero(__fmul_rn(dqa[nb][2 * h + 1], a.scale)));
    }
  }
}

template <int DP>
struct DkvCfg {
  static constexpr int S = DP + kPad;
  static constexpr int smem_bytes = (2 * kBKV * S + 4 * kBMQ * S) * 2;  // K, V, then Q and dO in two stages
};

template <int DP>
__global__ void __launch_bounds__(128) attention_bwd_dkv_kernel(const BwdArgs a) {
  using C = DkvCfg<DP>;
  constexpr int S = C::S, C8 = DP / 8, KD = DP / 16, NB = DP / 8, NR = kBMQ / 8, NT = 128;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* const Ks = smem;
  uint16_t* const Vs = Ks + kBKV * S;
  uint16_t* const Qs = Vs + kBKV * S;          // [2][kBMQ][S]
  uint16_t* const Os = Qs + 2 * kBMQ * S;      // [2][kBMQ][S]
  __shared__ int s_pos[2][kBMQ];               // row position (-1: absent)
  __shared__ int64_t s_idx[2][kBMQ];
  __shared__ float s_lse2[2][kBMQ], s_delta[2][kBMQ];
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int kh = blockIdx.y, B = a.B, G = a.G;
  const int item = blockIdx.x;
  if (!bwd_plan_ok(a)) {
    bwd_fill_nan_dkv(a);
    return;
  }
  if (item >= a.kvplan[B]) return;
  const int b = item_seq(a.kvplan, B, item);
  const int kb = item - a.kvplan[b];
  const int64_t k0 = a.cu_k[b], lk = a.cu_k[b + 1] - k0;
  const int maxpos = a.kvplan[B + 1 + b];
  const int key0 = kb * kBKV;
  const int64_t kvs = static_cast<int64_t>(a.Hkv) * a.D;

  for (int e = tid; e < kBKV * C8; e += NT) {
    const int j = e / C8, c = e % C8;
    const bool ok = key0 + j < lk && c * 8 < a.D;
    const int64_t src = ok ? (k0 + key0 + j) * kvs + static_cast<int64_t>(kh) * a.D + c * 8 : 0;
    cp_async16(smem_u32(Ks + j * S + c * 8), a.k + src, ok);
    cp_async16(smem_u32(Vs + j * S + c * 8), a.v + src, ok);
  }
  cp_async_commit();

  // query row blocks: rows R = position * G + g, blocks of kBMQ aligned to R = 0
  const int rb_lo = key0 * G / kBMQ;
  const int rb_hi = maxpos >= key0 ? ((maxpos + 1) * G - 1) / kBMQ : rb_lo - 1;
  const int n_rb = rb_hi - rb_lo + 1;
  const auto load_rows = [&](int rb, int st) {  // row metadata (plain loads; a barrier follows) then Q / dO rows
    for (int r = tid; r < kBMQ; r += NT) {
      const int R = rb * kBMQ + r, p = R / G;  // < Tk * Hq < 2^31 (host check)
      int pos = -1;
      int64_t idx = -1;
      float l2 = 0.0f, de = 0.0f;
      if (p < lk) {
        const int i = a.kvplan[2 * B + 2 + k0 + p];
        if (i >= 0) {
          pos = static_cast<int>(p);
          idx = static_cast<int64_t>(i) * a.Hq + static_cast<int64_t>(kh) * G + R % G;
          l2 = a.lse2[idx];
          de = a.delta[idx];
        }
      }
      s_pos[st][r] = pos;
      s_idx[st][r] = idx;
      s_lse2[st][r] = l2;
      s_delta[st][r] = de;
    }
    __syncthreads();
    for (int e = tid; e < kBMQ * C8; e += NT) {
      const int r = e / C8, c = e % C8;
      const int64_t idx = s_idx[st][r];
      const bool ok = idx >= 0 && c * 8 < a.D;
      const int64_t src = ok ? idx * a.D + c * 8 : 0;
      cp_async16(smem_u32(Qs + (st * kBMQ + r) * S + c * 8), a.q + src, ok);
      cp_async16(smem_u32(Os + (st * kBMQ + r) * S + c * 8), a.dob + src, ok);
    }
  };
  if (n_rb > 0) load_rows(rb_lo, 0);
  cp_async_commit();

  float dka[NB][4], dva[NB][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[nb][e] = dva[nb][e] = 0.0f;
  const int kr0 = key0 + w * 16 + g;  // this thread's keys: kr0 (accumulator rows g) and kr0 + 8
  const int aoff = (w * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + 8 * (lane >> 4);  // A fragments of K / V

  for (int it = 0; it < n_rb; ++it) {
    const int st = it & 1;
    // the next block's metadata lands in the other stage: every warp is past the previous iteration's reads
    if (it + 1 < n_rb) load_rows(rb_lo + it + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* Qt = Qs + st * kBMQ * S;
    const uint16_t* Ot = Os + st * kBMQ * S;
    float sT[NR][4], dpT[NR][4];
#pragma unroll
    for (int nb = 0; nb < NR; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) sT[nb][e] = dpT[nb][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t ka[4], va[4];
      ldsm_x4(ka, smem_u32(Ks + aoff + kd * 16));
      ldsm_x4(va, smem_u32(Vs + aoff + kd * 16));
#pragma unroll
      for (int n2 = 0; n2 < NR / 2; ++n2) {
        const int off = (n2 * 16 + (lane & 7) + 8 * (lane >> 4)) * S + kd * 16 + 8 * ((lane >> 3) & 1);
        uint32_t bq[4], bo[4];
        ldsm_x4(bq, smem_u32(Qt + off));
        ldsm_x4(bo, smem_u32(Ot + off));
        mma16816(sT[2 * n2], ka, bq[0], bq[1]);
        mma16816(sT[2 * n2 + 1], ka, bq[2], bq[3]);
        mma16816(dpT[2 * n2], va, bo[0], bo[1]);
        mma16816(dpT[2 * n2 + 1], va, bo[2], bo[3]);
      }
    }
    // P^T and dS^T: accumulator rows are keys (kr0, kr0 + 8), columns are query rows of the block
    uint32_t pk[NR][2], dk2[NR][2];
#pragma unroll
    for (int nb = 0; nb < NR; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float p[2], ds[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int col = nb * 8 + 2 * tq + j;
          const int key = kr0 + 8 * h;
          p[j] = key <= s_pos[st][col] ? exp2f(__fsub_rn(__fmul_rn(sT[nb][2 * h + j], a.scale_log2), s_lse2[st][col])) : 0.0f;
          ds[j] = __fmul_rn(p[j], __fsub_rn(dpT[nb][2 * h + j], s_delta[st][col]));
        }
        pk[nb][h] = pack_bf16(p[0], p[1]);
        dk2[nb][h] = pack_bf16(ds[0], ds[1]);
      }
    // dV += P^T dO, dK += dS^T Q over the block's rows in k16 steps ascending
#pragma unroll
    for (int kk = 0; kk < kBMQ / 16; ++kk) {
      const uint32_t pa[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
      const uint32_t da[4] = {dk2[2 * kk][0], dk2[2 * kk][1], dk2[2 * kk + 1][0], dk2[2 * kk + 1][1]};
#pragma unroll
      for (int n2 = 0; n2 < NB / 2; ++n2) {
        const int off = (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + n2 * 16 + 8 * (lane >> 4);
        uint32_t bo[4], bq[4];
        ldsm_x4_t(bo, smem_u32(Ot + off));
        ldsm_x4_t(bq, smem_u32(Qt + off));
        mma16816(dva[2 * n2], pa, bo[0], bo[1]);
        mma16816(dva[2 * n2 + 1], pa, bo[2], bo[3]);
        mma16816(dka[2 * n2], da, bq[0], bq[1]);
        mma16816(dka[2 * n2 + 1], da, bq[2], bq[3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = kr0 + 8 * h;
    if (key >= lk) continue;
    const int64_t o = ((k0 + key) * a.Hkv + kh) * a.D;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int d = nb * 8 + 2 * tq;
      if (d < a.D) {
        *reinterpret_cast<float2*>(a.dk + o + d) =
            make_float2(plus_zero(__fmul_rn(dka[nb][2 * h], a.scale)), plus_zero(__fmul_rn(dka[nb][2 * h + 1], a.scale)));
        *reinterpret_cast<float2*>(a.dv + o + d) = make_float2(plus_zero(dva[nb][2 * h]), plus_zero(dva[nb][2 * h + 1]));
      }
    }
  }
}

}  // namespace attn
}  // namespace ws1cu
