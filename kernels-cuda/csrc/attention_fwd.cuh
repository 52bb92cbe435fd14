// The attention forward kernel (attention_fwd_kernel<DP, NWM, MW>; instantiated in attention_fwd.cu): its arguments,
// launch configurations and body. The split-KV merge that chunk mode ends with is attention_merge.cuh; the plan it
// reads, attention_plan.cuh; the op and its shapes, attention.cu. Device code only (no torch).
//
// FORWARD. Rows are (query, head) pairs of one sequence and one kv head: row r = qi * G + g (qi the query's index in
// its sequence, head kv_head * G + g), so the G heads that share a K/V tile sit in one MMA fragment. A CTA holds
// 16 * NWM rows (NWM = 4 for prefill-sized calls, 1 for decode-sized ones: split-KV), a warp 16. Per row, in order:
//   key tiles of kBN = 64 ALIGNED TO ABSOLUTE KEY 0, grouped in chunks of kChunk = 256 keys aligned to key 0; for each
//   chunk c the row needs (c * 256 <= its position p), from m = -inf, l = +0, acc = +0, for its tiles ascending:
//     S   = Q K^T                one FP32 accumulator from +0, mma.sync over d in k16 steps ascending (D is zero-padded
//                                to 64 / 128: the same zero steps for every row and call)
//     s'  = S * (scale log2 e)   (one rounding); s' = -inf for keys > p (a select, never arithmetic)
//     mt  = max over the tile: the thread's 2 x 8 columns ascending, then lanes xor 1, xor 2 (exact)
//     m_new = max(m, mt); mu = (m_new == -inf ? 0 : m_new); alpha = 2^(m - mu)
//     p   = 2^(s' - mu) (FP32);  l = l * alpha, then + p over the thread's columns ascending (thread-partial)
//     P   = bf16_rne(p)                    <- the ONE rounding point of P (the PV MMA's operand only)
//     acc = acc * alpha, then acc = mma(P, V, acc) over the tile's keys in k16 steps ascending
//   then l = (l_t0 + l_t1) + (l_t2 + l_t3) (lanes xor 1, xor 2). The chunk's (m, l, acc) is merged into the row's
//   running state in ascending chunk order: chunk 0's state IS the running state; chunk c > 0:
//     m' = max(M, m);  a = 2^(M - m'), b = 2^(m - m');  L = L a + l b;  ACC = ACC a + acc b  (merge_state: products
//     rounded, then summed; no FMA).  out = bf16_rne(ACC / L) (+0 for zero), lse = m' ln 2 + ln L.
// Where the chunks run: a prefill CTA (NWM = 4) loops over every chunk its rows need and merges in registers; the
// split kernel (NWM = 1, decode-sized calls: few rows, long keys) runs ONE chunk per CTA and writes (m, l, acc) to a
// workspace, and attention_merge_kernel merges them in ascending chunk order with the same merge_state. A row whose
// keys fit in one chunk is finalised by its chunk-0 CTA on both paths. So decode == chunked prefill == prefill bit for
// bit: every path runs, per row, the same tiles (aligned to key 0), the same chunks (aligned to key 0), the same merge.
// Why a row cannot see the rest of its CTA: rows of an MMA are independent; a CTA runs the tiles up to its LARGEST
// row position, and for a row at p those extra tiles are exact no-ops (every s' = -inf: m stays, alpha = 2^0 = 1,
// p = +0, acc gains only zero products); chunks a row does not need are not merged for it (a select by p). Keys
// beyond the CTA's largest position are never loaded (zero-filled); keys past a row's position contribute zero
// products 0 * v, which change no sum (K/V finite) — the only bit they could still decide is the sign of an exact zero,
// and plus_zero() removes it from every output.
#pragma once

#include "attention_plan.cuh"

namespace ws1cu {
namespace attn {

constexpr uint16_t kNaNBf16 = 0x7fc0u;

struct FwdArgs {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int64_t* cu_q;
  const int64_t* cu_k;
  const int64_t* q_pos;
  const int* plan;  // attention_plan_kernel's; nullptr: a self-planned call (self_plan below)
  uint16_t* out;
  float* lse;
  float* ws_acc;  // chunk mode: [items][Hkv][16][DP] FP32
  float* ws_ml;   // chunk mode: [items][Hkv][16][2] (m, l)
  int64_t Tq, Tk;
  int B, Hq, Hkv, G, D;
  float scale_log2;
};

// A self-planned call: chunk mode (1-warp CTAs of 16 rows) with B <= 32 sequences and Tk <= kChunk, chosen by the
// host from those shapes. Every valid position is then < kChunk, so every sequence with queries has ONE chunk and
// the plan kernel's item list is the prefix of ceil(nq_b G / 16) query blocks per sequence (mode 1, chunk 0); the
// CTA's warp computes that here, lane b for sequence b, instead of reading it from a plan kernel launched before
// (one launch fewer: what a short pack or a short decode step costs is mostly launches). The same checks as the
// plan kernel: false for inconsistent cu_seqlens (the caller writes NaN rows). Sets items and, for a CTA within
// them, (b, qb) of item = items - 1 - blockIdx.x (b = -1 past them).
__device__ __forceinline__ bool self_plan(const FwdArgs& a, int& items, int& b, int& qb) {
  const int lane = threadIdx.x & 31;
  int64_t nf = 0;
  int bad = 0;
  if (lane < a.B) {
    const int64_t q0 = a.cu_q[lane], q1 = a.cu_q[lane + 1], k0 = a.cu_k[lane], k1 = a.cu_k[lane + 1];
    if (0 <= q0 && q0 <= q1 && q1 <= a.Tq && 0 <= k0 && k0 <= k1 && k1 <= a.Tk) nf = ((q1 - q0) * a.G + 15) / 16;
    else bad = 1;
  }
  if (lane == 0) bad |= !(a.cu_q[0] == 0 && a.cu_k[0] == 0 && a.cu_q[a.B] == a.Tq && a.cu_k[a.B] == a.Tk);
  const int64_t inc = warp_incl_scan(nf);  // integers: exact
  const int64_t total = __shfl_sync(0xffffffffu, inc, 31);
  if (__any_sync(0xffffffffu, bad) || total > static_cast<int64_t>(gridDim.x)) return false;
  items = static_cast<int>(total);
  b = -1;
  if (static_cast<int64_t>(blockIdx.x) >= total) return true;
  const int64_t item = total - 1 - blockIdx.x;  // reverse, as the planned path
  const unsigned hit = __ballot_sync(0xffffffffu, lane < a.B && inc - nf <= item && item < inc);
  b = __ffs(static_cast<int>(hit)) - 1;  // the one sequence whose blocks hold the item
  qb = static_cast<int>(item - __shfl_sync(0xffffffffu, inc - nf, b));
  return true;
}

// Inconsistent cu_seqlens (possible only when the host check was skipped under graph capture): every output row NaN,
// nothing read from K/V. CTA (x, kv head) covers queries x, x + gridDim.x, ...
__device__ __forceinline__ void fill_nan_rows(const FwdArgs& a) {
  for (int64_t i = blockIdx.x; i < a.Tq; i += gridDim.x)
    for (int g = 0; g < a.G; ++g) {
      const int64_t row = i * a.Hq + static_cast<int64_t>(blockIdx.y) * a.G + g;
      for (int d = threadIdx.x; d < a.D; d += blockDim.x) a.out[row * a.D + d] = kNaNBf16;
      if (threadIdx.x == 0) a.lse[row] = __int_as_float(0x7fc00000);
    }
}

// NWM warps along M, MW m16 fragments per warp (rows w * 16 MW + 16 mw + {g, g + 8}); the merged (running) state of
// whole-row mode lives in registers for MW = 1 and in shared memory for MW = 2 (one slot per thread and element, so
// no two threads share a word): 32 rows per warp let one K / V fragment load from shared memory feed two MMAs, the
// shared-memory traffic per MMA FlashAttention-2 has; the registers hold the chunk accumulators of both fragments.
template <int DP, int NWM, int MW>
struct FwdCfg {
  static constexpr int NT = 32 * NWM, BM = 16 * MW * NWM, S = DP + kPad, C8 = DP / 8, KD = DP / 16, NB = DP / 8, NS = kBN / 8;
  static constexpr bool kMsmem = MW > 1;
  // Q, K / V in two stages, then (MW > 1) the running state: acc [MW][NB][4][NT], (m, l) [MW][2][2][NT]
  static constexpr int smem_bytes = (BM * S + 4 * kBN * S) * 2 + (kMsmem ? (BM * DP + 4 * MW * NT) * 4 : 0);
};

template <int DP, int NWM, int MW>
__device__ __forceinline__ void fwd_body(const FwdArgs& a);

template <int DP, int NWM, int MW>
__global__ void __launch_bounds__(32 * NWM) attention_fwd_kernel(const FwdArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // a configuration whose shared memory no sm_80 device has: the host never launches it there (it checks the
  // device's opt-in limit); the image is a trap, not code that would spill
  constexpr int kSm80SmemOptin = 166912;  // 163 KB: the most shared memory an sm_80 block can opt into (A100)
  if constexpr (FwdCfg<DP, NWM, MW>::smem_bytes > kSm80SmemOptin) __trap();
  else fwd_body<DP, NWM, MW>(a);
#else
  fwd_body<DP, NWM, MW>(a);
#endif
}

template <int DP, int NWM, int MW>
__device__ __forceinline__ void fwd_body(const FwdArgs& a) {
  using C = FwdCfg<DP, NWM, MW>;
  constexpr int NT = C::NT, BM = C::BM, S = C::S, C8 = C::C8, KD = C::KD, NB = C::NB, NS = C::NS;
  constexpr bool MSMEM = C::kMsmem;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* const Qs = smem;
  uint16_t* const Ks = smem + BM * S;
  uint16_t* const Vs = Ks + 2 * kBN * S;
  // running acc [MW][NB][4][NT] and (m, l) [MW][2][2][NT] when MSMEM; volatile keeps each chunk-end load / merge /
  // store in program order (the compiler would otherwise batch the loads while all accumulators are live: spills)
  volatile float* const Ms = reinterpret_cast<float*>(Vs + 2 * kBN * S);
  volatile float* const Mml = Ms + MW * NB * 4 * NT;
  __shared__ int s_pos[BM];       // row position; -1 no row (past the sequence's queries), -2 invalid position (NaN)
  __shared__ int64_t s_idx[BM];   // i * Hq + h of the row (out / lse row), -1 none

  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int kh = blockIdx.y;
  int mode, item, b, qb, chunk = 0;
  if (NWM == 1 && a.plan == nullptr) {  // self-planned (1-warp CTAs only: self_plan's lanes are its sequences)
    int items;
    if (!self_plan(a, items, b, qb)) {
      fill_nan_rows(a);
      return;
    }
    if (b < 0) return;
    mode = 1;
    item = items - 1 - static_cast<int>(blockIdx.x);
  } else {
    if (a.plan[0] != 1) {
      fill_nan_rows(a);
      return;
    }
    const int B = a.B, items = a.plan[2];
    mode = a.plan[1];
    if (static_cast<int>(blockIdx.x) >= items) return;
    // Items in reverse: the last query blocks of a sequence see the most keys; starting them first shortens the tail.
    item = items - 1 - static_cast<int>(blockIdx.x);
    const int* start = a.plan + (mode ? 4 + B : 3);
    b = item_seq(start, B, item);
    qb = item - start[b];
    if (mode) {
      const int nch = a.plan[5 + 2 * B + b];
      chunk = qb % nch;
      qb = qb / nch;
    }
  }
  const int64_t q0 = a.cu_q[b], nq = a.cu_q[b + 1] - q0, k0 = a.cu_k[b], lk = a.cu_k[b + 1] - k0;
  for (int r = tid; r < BM; r += NT) {
    const int row = qb * BM + r;  // < Tq * Hq < 2^31 (host check): 32-bit division, no 64-bit division call
    int pos = -1;
    int64_t idx = -1;
    if (row < nq * a.G) {
      const int64_t i = q0 + row / a.G;
      const int64_t p = a.q_pos[i];
      idx = i * a.Hq + static_cast<int64_t>(kh) * a.G + row % a.G;
      pos = (p >= 0 && p < lk) ? static_cast<int>(p) : -2;
    }
    s_pos[r] = pos;
    s_idx[r] = idx;
  }
  __syncthreads();
  int kmax = -1;  // the CTA's largest valid position: keys beyond it are never loaded
  for (int r = 0; r < BM; ++r) kmax = s_pos[r] > kmax ? s_pos[r] : kmax;

  // this thread's rows: fragment mw, half h -> row w * 16 MW + 16 mw + g + 8 h (positions re-read from s_pos)
  const auto rowi = [&](int mw, int h) { return w * 16 * MW + 16 * mw + g + 8 * h; };
  const auto pos = [&](int mw, int h) { return s_pos[rowi(mw, h)]; };

  int t_begin = 0, t_end = kmax / kBN + 1;  // kmax = -1: no tile
  if (kmax < 0) t_end = 0;
  if (mode) {
    if (chunk * kChunk > kmax) {  // no row of this block needs this chunk (or no valid row at all)
      t_end = t_begin = 0;
      if (chunk != 0) return;
    } else {
      t_begin = chunk * (kChunk / kBN);
      const int ce = (chunk + 1) * (kChunk / kBN);
      t_end = t_end < ce ? t_end : ce;
    }
  }

  const int64_t kvs = static_cast<int64_t>(a.Hkv) * a.D;
  const auto load_q = [&]() {
    for (int e = tid; e < BM * C8; e += NT) {
      const int r = e / C8, c = e % C8;
      const bool ok = s_idx[r] >= 0 && c * 8 < a.D;
      cp_async16(smem_u32(Qs + r * S + c * 8), ok ? a.q + s_idx[r] * a.D + c * 8 : a.q, ok);
    }
  };
  const auto load_kv = [&](int t, int st) {
    for (int e = tid; e < kBN * C8; e += NT) {
      const int j = e / C8, c = e % C8, key = t * kBN + j;
      const bool ok = key <= kmax && c * 8 < a.D;
      const int64_t src = ok ? (k0 + key) * kvs + static_cast<int64_t>(kh) * a.D + c * 8 : 0;
      cp_async16(smem_u32(Ks + (st * kBN + j) * S + c * 8), a.k + src, ok);
      cp_async16(smem_u32(Vs + (st * kBN + j) * S + c * 8), a.v + src, ok);
    }
  };
  // cp.async groups: one per stage, committed even when empty, so wait_group<1> always means "all but the newest"
  load_q();
  cp_async_commit();
  if (t_begin < t_end) load_kv(t_begin, 0);
  cp_async_commit();
  // Q stays in shared memory: its A fragments are re-read per tile (registers go to the accumulators)
  const uint32_t qaddr = smem_u32(Qs + (w * 16 * MW + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + 8 * (lane >> 4));

  // chunk state (this chunk) and running state (merged chunks; whole-row mode)
  float acc[MW][NB][4], Mreg[MSMEM ? 1 : MW][NB][4], MMLreg[MSMEM ? 1 : MW][2][2];
  float m[MW][2], l[MW][2];
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[mw][h] = -INFINITY;
      l[mw][h] = 0.0f;
    }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mw][nb][e] = 0.0f;
  }
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) Mreg[0][nb][e] = 0.0f;
  MMLreg[0][0][0] = MMLreg[0][0][1] = MMLreg[0][1][0] = MMLreg[0][1][1] = 0.0f;
  // the running state of (fragment mw, block nb, element e) and (fragment mw, half h): m (j = 0), l (j = 1); set at
  // chunk 0 before any read (every valid row needs chunk 0)
  const auto Mget = [&](int mw, int nb, int e) -> float {
    if constexpr (MSMEM) return Ms[((mw * NB + nb) * 4 + e) * NT + tid];
    else return Mreg[mw][nb][e];
  };
  const auto Mset = [&](int mw, int nb, int e, float x) {
    if constexpr (MSMEM) Ms[((mw * NB + nb) * 4 + e) * NT + tid] = x;
    else Mreg[mw][nb][e] = x;
  };
  const auto MMLget = [&](int mw, int h, int j) -> float {
    if constexpr (MSMEM) return Mml[((mw * 2 + h) * 2 + j) * NT + tid];
    else return MMLreg[mw][h][j];
  };
  const auto MMLset = [&](int mw, int h, int j, float x) {
    if constexpr (MSMEM) Mml[((mw * 2 + h) * 2 + j) * NT + tid] = x;
    else MMLreg[mw][h][j] = x;
  };

  const float sl2 = a.scale_log2;
  int c_cur = t_begin * kBN / kChunk;
  for (int t = t_begin; t < t_end; ++t) {
    const int st = (t - t_begin) & 1;
    if (t + 1 < t_end) load_kv(t + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* Kt = Ks + st * kBN * S;
    const uint16_t* Vt = Vs + st * kBN * S;

    // per fragment: S = Q K^T over d in k16 steps ascending, then its online-softmax step (the fragments one after the
    // other keeps one S tile live; the V fragments below are shared)
    uint32_t pk[MW][NS][2];
#pragma unroll
    for (int mw = 0; mw < MW; ++mw) {
      float s[NS][4];
#pragma unroll
      for (int nb = 0; nb < NS; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nb][e] = 0.0f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        uint32_t qf[4];
        ldsm_x4(qf, qaddr + (mw * 16 * S + kd * 16) * 2);
#pragma unroll
        for (int n2 = 0; n2 < NS / 2; ++n2) {
          uint32_t bk[4];
          ldsm_x4(bk, smem_u32(Kt + (n2 * 16 + (lane & 7) + 8 * (lane >> 4)) * S + kd * 16 + 8 * ((lane >> 3) & 1)));
          mma16816(s[2 * n2], qf, bk[0], bk[1]);
          mma16816(s[2 * n2 + 1], qf, bk[2], bk[3]);
        }
      }
      // scale, mask by absolute key position, tile max per row
      float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < NS; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = t * kBN + nb * 8 + 2 * tq + (e & 1);
          const float x = __fmul_rn(s[nb][e], sl2);
          s[nb][e] = key <= pos(mw, e >> 1) ? x : -INFINITY;
          mt[e >> 1] = fmaxf(mt[e >> 1], s[nb][e]);
        }
      float alpha[2], mu[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
        mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
        const float mn = fmaxf(m[mw][h], mt[h]);
        mu[h] = mn == -INFINITY ? 0.0f : mn;
        alpha[h] = exp2f(__fsub_rn(m[mw][h], mu[h]));
        m[mw][h] = mn;
        l[mw][h] = __fmul_rn(l[mw][h], alpha[h]);
      }
      // p = 2^(s' - mu); l += p in FP32 (thread's columns ascending); P = bf16(p): the PV MMA's operand
#pragma unroll
      for (int nb = 0; nb < NS; ++nb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = exp2f(__fsub_rn(s[nb][2 * h], mu[h])), p1 = exp2f(__fsub_rn(s[nb][2 * h + 1], mu[h]));
          l[mw][h] = __fadd_rn(l[mw][h], p0);
          l[mw][h] = __fadd_rn(l[mw][h], p1);
          pk[mw][nb][h] = pack_bf16(p0, p1);
        }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mw][nb][e] = __fmul_rn(acc[mw][nb][e], alpha[e >> 1]);
    }
    // acc += P V over the tile's keys in k16 steps ascending (one V fragment load feeds the MW fragments)
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < NB / 2; ++n2) {
        uint32_t bv[4];
        ldsm_x4_t(bv, smem_u32(Vt + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + n2 * 16 + 8 * (lane >> 4)));
#pragma unroll
        for (int mw = 0; mw < MW; ++mw) {
          const uint32_t pa[4] = {pk[mw][2 * kk][0], pk[mw][2 * kk][1], pk[mw][2 * kk + 1][0], pk[mw][2 * kk + 1][1]};
          mma16816(acc[mw][2 * n2], pa, bv[0], bv[1]);
          mma16816(acc[mw][2 * n2 + 1], pa, bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with stage st before the next iteration's load overwrites it

    if ((t + 1) * kBN % kChunk == 0 || t + 1 == t_end) {  // end of chunk c_cur
#pragma unroll
      for (int mw = 0; mw < MW; ++mw)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          l[mw][h] = __fadd_rn(l[mw][h], __shfl_xor_sync(0xffffffffu, l[mw][h], 1));
          l[mw][h] = __fadd_rn(l[mw][h], __shfl_xor_sync(0xffffffffu, l[mw][h], 2));
        }
      if (!mode) {
#pragma unroll
        for (int mw = 0; mw < MW; ++mw)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const bool need = pos(mw, h) >= c_cur * kChunk;
            const bool first = c_cur == 0;
            const float Mm = MMLget(mw, h, 0), Ml = MMLget(mw, h, 1);
            const MergeCoef mc = merge_coef(Mm, m[mw][h]);
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const float inc = acc[mw][nb][2 * h + j];
                if (need) Mset(mw, nb, 2 * h + j, first ? inc : merge_val(Mget(mw, nb, 2 * h + j), mc.a, inc, mc.b));
              }
            if (need) {
              MMLset(mw, h, 1, first ? l[mw][h] : merge_val(Ml, mc.a, l[mw][h], mc.b));
              MMLset(mw, h, 0, first ? m[mw][h] : mc.m);
            }
          }
      } else {
#pragma unroll
        for (int mw = 0; mw < MW; ++mw)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = rowi(mw, h), pr = s_pos[r];
            if (pr < c_cur * kChunk) continue;  // the row does not reach this chunk
            if (pr < kChunk) {                  // its only chunk: finalised here, as the whole-row path would
              const int64_t o = s_idx[r] * a.D;
              const float il = final_inv(l[mw][h]);
#pragma unroll
              for (int nb = 0; nb < NB; ++nb) {
                const int d = nb * 8 + 2 * tq;
                if (d < a.D) {
                  const uint32_t v2 = static_cast<uint32_t>(final_out(acc[mw][nb][2 * h], il)) |
                                      (static_cast<uint32_t>(final_out(acc[mw][nb][2 * h + 1], il)) << 16);
                  *reinterpret_cast<uint32_t*>(a.out + o + d) = v2;
                }
              }
              if (tq == 0) a.lse[s_idx[r]] = final_lse(m[mw][h], l[mw][h]);
            } else {  // a partial of a longer row: the merge kernel combines the chunks in ascending order
              const int64_t slot = (static_cast<int64_t>(item) * a.Hkv + kh) * BM + r;
#pragma unroll
              for (int nb = 0; nb < NB; ++nb) {
                const int d = nb * 8 + 2 * tq;
                *reinterpret_cast<float2*>(a.ws_acc + slot * DP + d) =
                    make_float2(acc[mw][nb][2 * h], acc[mw][nb][2 * h + 1]);
              }
              if (tq == 0) *reinterpret_cast<float2*>(a.ws_ml + slot * 2) = make_float2(m[mw][h], l[mw][h]);
            }
          }
      }
      ++c_cur;
#pragma unroll
      for (int mw = 0; mw < MW; ++mw) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          m[mw][h] = -INFINITY;
          l[mw][h] = 0.0f;
        }
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mw][nb][e] = 0.0f;
      }
    }
  }
  cp_async_wait<0>();

  // whole-row mode: finalise every valid row; both modes: invalid positions give NaN rows (chunk 0's CTA)
#pragma unroll
  for (int mw = 0; mw < MW; ++mw)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rowi(mw, h), pr = s_pos[r];
      if (pr == -2 && (!mode || chunk == 0)) {
        const int64_t o = s_idx[r] * a.D;
        for (int d = 2 * tq; d < a.D; d += 8) *reinterpret_cast<uint32_t*>(a.out + o + d) = 0x7fc07fc0u;
        if (tq == 0) a.lse[s_idx[r]] = __int_as_float(0x7fc00000);
      } else if (pr >= 0 && !mode) {
        const int64_t o = s_idx[r] * a.D;
        const float il = final_inv(MMLget(mw, h, 1));
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int d = nb * 8 + 2 * tq;
          if (d < a.D) {
            const uint32_t v2 = static_cast<uint32_t>(final_out(Mget(mw, nb, 2 * h), il)) |
                                (static_cast<uint32_t>(final_out(Mget(mw, nb, 2 * h + 1), il)) << 16);
            *reinterpret_cast<uint32_t*>(a.out + o + d) = v2;
          }
        }
        if (tq == 0) a.lse[s_idx[r]] = final_lse(MMLget(mw, h, 0), MMLget(mw, h, 1));
      }
    }
}

}  // namespace attn
}  // namespace ws1cu
