// attention (ws1_cuda::attention, attention_bwd): causal GQA over packed variable-length sequences on tensor cores
// (mma.sync m16n8k16, BF16 operands, FP32 accumulation; sm_80 and sm_90a); ONE kernel family for prefill, chunked
// prefill and decode, whose output bits do not depend on which of them ran.
// Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0, G = Hq / Hkv; D a multiple of 8, D <= 128),
// cu_seqlens_q, cu_seqlens_k [B+1] int64, q_pos [Tq] int64 (query i of sequence b sits at absolute position q_pos[i]
// and sees its sequence's keys 0..q_pos[i]; key j of sequence b is row cu_seqlens_k[b] + j) ->
// (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32, natural log). The signature is kernels-cpu's: K/V arrive packed per
// sequence (ws1-kv gathers a sequence's cache blocks in block-table order), so key j's absolute position is its
// index in its sequence however the cache was paged.
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
// Memory: the forward's split workspace is (items x Hkv x 16 rows) x (D + 2) floats; the backward needs no P / dS
// buffer (recomputed from lse), only dO in BF16, Delta, lse2 and an int32 table position -> query.
// Fixed launch configurations, no autotuning, no floating-point atomics (no output value is ever summed by an
// atomic); the backward's key plan claims its table slots with an integer atomicCAS (one writer per slot: a second
// claimant is refused input) and takes each sequence's last position with an integer atomicMax (order-free).
// docs/cuda.md has the proof and the cost model.
#include "attention_mma.cuh"

namespace ws1cu {
namespace attn {

// ---- the plan: which CTA runs which rows (no host sync, so a forward can be captured in a CUDA graph) ------------
// int32 layout: [0] status (1 ok, 0 inconsistent cu_seqlens), [1] mode (0 whole rows per CTA, 1 one chunk per CTA),
// [2] items, [3 .. 3+B] item start per sequence (whole-row mode), [4+B .. 4+2B] item start (chunk mode),
// [5+2B .. 5+3B) chunks per query block of each sequence (chunk mode). A sequence's items are its query blocks of
// `bm` rows (whole-row mode), or (query block, chunk) pairs, block-major (chunk mode).
constexpr int kPlanThreads = 256;
__host__ __device__ constexpr int64_t plan_size(int64_t B) { return 5 + 3 * B; }

__device__ __forceinline__ int clamp32(int64_t x) { return static_cast<int>(x < 0x7fffffff ? x : 0x7fffffff); }

__device__ __forceinline__ int64_t warp_incl_scan(int64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;  // integers: exact, any order
  }
  return v;
}

__global__ void __launch_bounds__(kPlanThreads) attention_plan_kernel(const int64_t* __restrict__ cu_q,
                                                                      const int64_t* __restrict__ cu_k,
                                                                      const int64_t* __restrict__ q_pos, int B, int64_t Tq,
                                                                      int64_t Tk, int G, int bm, int split_ok, int64_t cap,
                                                                      int* __restrict__ plan) {
  __shared__ int64_t wtot[2][kPlanThreads / 32];
  __shared__ int64_t carry[2];
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  int bad = 0;
  if (tid == 0) {
    bad = !(cu_q[0] == 0 && cu_k[0] == 0 && cu_q[B] == Tq && cu_k[B] == Tk);
    carry[0] = carry[1] = 0;
  }
  __syncthreads();
  int* start_f = plan + 3;
  int* start_s = plan + 4 + B;
  int* nch_out = plan + 5 + 2 * B;
  for (int base = 0; base < B; base += kPlanThreads) {
    const int b = base + tid;
    int64_t nf = 0, ns = 0;
    if (b < B) {
      const int64_t q0 = cu_q[b], q1 = cu_q[b + 1], k0 = cu_k[b], k1 = cu_k[b + 1];
      if (!(0 <= q0 && q0 <= q1 && q1 <= Tq && 0 <= k0 && k0 <= k1 && k1 <= Tk)) {
        bad = 1;
        nch_out[b] = 0;
      } else {
        const int64_t nq = q1 - q0;
        nf = (nq * G + bm - 1) / bm;
        int64_t nch = 0;
        if (nq > 0 && split_ok) {  // chunk mode is only considered for decode-sized calls (few queries)
          int64_t mp = -1;
          for (int64_t i = q0; i < q1; ++i) {
            const int64_t p = q_pos[i];
            if (p >= 0 && p < k1 - k0 && p > mp) mp = p;
          }
          nch = mp >= 0 ? mp / kChunk + 1 : 1;  // a sequence whose positions are all invalid still gets a CTA (NaN rows)
        }
        ns = nf * nch;
        nch_out[b] = clamp32(nch);
      }
    }
    // exclusive block scan of (nf, ns), carried over the loop
    const int64_t inf_ = warp_incl_scan(nf), ins = warp_incl_scan(ns);
    if (lane == 31) {
      wtot[0][wid] = inf_;
      wtot[1][wid] = ins;
    }
    __syncthreads();
    int64_t pf = carry[0], ps = carry[1];
    for (int w2 = 0; w2 < wid; ++w2) {
      pf += wtot[0][w2];
      ps += wtot[1][w2];
    }
    if (b < B) {
      start_f[b] = clamp32(pf + inf_ - nf);
      start_s[b] = clamp32(ps + ins - ns);
    }
    __syncthreads();
    if (tid == kPlanThreads - 1) {
      carry[0] = pf + inf_;
      carry[1] = ps + ins;
    }
    __syncthreads();
  }
  const int anybad = __syncthreads_or(bad);
  if (tid == 0) {
    const int64_t tf = carry[0], ts = carry[1];
    start_f[B] = clamp32(tf);
    start_s[B] = clamp32(ts);
    const int mode = (split_ok && ts <= cap) ? 1 : 0;
    const int64_t items = mode ? ts : tf;
    plan[0] = (!anybad && items <= cap) ? 1 : 0;
    plan[1] = mode;
    plan[2] = clamp32(items);
  }
}

// The largest b with start[b] <= w (start non-decreasing, start[0] = 0 <= w < start[B]): the sequence of item w.
__device__ __forceinline__ int item_seq(const int* __restrict__ start, int B, int w) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= w) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The sequence of row `i` given cu [B+1] (non-decreasing, cu[0] = 0, cu[B] > i).
__device__ __forceinline__ int64_t seq_of(const int64_t* __restrict__ cu, int64_t B, int64_t i) {
  int64_t lo = 0, hi = B - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

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

// ---- backward -----------------------------------------------------------------------------------------------------
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

// ---- the backward's key plan (device-side, like the forward's plan: no host sync, so a backward can be captured) ----
// int32 layout, filled with -1 before the kernel runs: [0 .. B] dK/dV item start per sequence (its 64-key blocks;
// [B] = every item), [B+1 .. 2B] the last query position of each sequence (-1: no query), [2B+1] status (-1: valid;
// 0: a query at a position outside its sequence's keys, at a position another query of its sequence holds, or outside
// its cu_seqlens_q range — then every output of the backward is NaN), [2B+2 .. 2B+2+Tk) the table position -> query:
// table[cu_k[b] + p] = i for the query i of sequence b at position p (-1: none). Eager calls check the same on the
// host first (a one-line error), so only a captured call can reach status 0.
__host__ __device__ constexpr int64_t kvplan_size(int64_t B, int64_t Tk) { return 2 * B + 2 + Tk; }
__device__ __forceinline__ bool bwd_plan_ok(const BwdArgs& a) { return a.plan[0] == 1 && a.kvplan[2 * a.B + 1] == -1; }

// grid max(1, ceil(Tq / 256)) x 256 threads: a thread per query claims its table slot; block 0 also scans the key
// blocks. Integer atomics only, and no value depends on their order: a slot has one claimant unless two queries share
// a position (refused: status 0), and a max is order-free.
__global__ void __launch_bounds__(kPlanThreads) attention_bwd_plan_kernel(const int64_t* __restrict__ cu_q,
                                                                          const int64_t* __restrict__ cu_k,
                                                                          const int64_t* __restrict__ q_pos, int B,
                                                                          int64_t Tq, int64_t Tk, int* __restrict__ kvplan) {
  __shared__ int64_t wtot[kPlanThreads / 32];
  __shared__ int64_t carry;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kPlanThreads + tid;
  if (i < Tq) {
    const int64_t b = seq_of(cu_q, B, i);  // an index in [0, B) whatever cu_q holds; checked against it below
    const int64_t q0 = cu_q[b], q1 = cu_q[b + 1], k0 = cu_k[b], k1 = cu_k[b + 1], p = q_pos[i];
    bool ok = q0 <= i && i < q1 && 0 <= k0 && k0 <= k1 && k1 <= Tk && 0 <= p && p < k1 - k0;
    if (ok) ok = atomicCAS(kvplan + 2 * B + 2 + k0 + p, -1, static_cast<int>(i)) == -1;
    if (ok) atomicMax(kvplan + B + 1 + b, static_cast<int>(p));
    else atomicExch(kvplan + 2 * B + 1, 0);
  }
  if (blockIdx.x != 0) return;
  // exclusive scan of the key blocks per sequence, carried over the loop (inconsistent offsets count 0 blocks: the
  // forward plan's status, plan[0], refuses them)
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < B; base += kPlanThreads) {
    const int b = base + tid;
    int64_t n = 0;
    if (b < B) {
      const int64_t k0 = cu_k[b], k1 = cu_k[b + 1];
      if (0 <= k0 && k0 <= k1 && k1 <= Tk) n = (k1 - k0 + kBKV - 1) / kBKV;
    }
    const int64_t inc = warp_incl_scan(n);
    if (lane == 31) wtot[wid] = inc;
    __syncthreads();
    int64_t pre = carry;
    for (int w2 = 0; w2 < wid; ++w2) pre += wtot[w2];
    if (b < B) kvplan[b] = clamp32(pre + inc - n);
    __syncthreads();
    if (tid == kPlanThreads - 1) carry = pre + inc;
    __syncthreads();
  }
  if (tid == 0) kvplan[B] = clamp32(carry);
}

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

// ---- explicit instantiations (compile_check compiles exactly these) -----------------------------------------------
#define WS1_ATTN_INST(DP)                                                                  \
  template __global__ void attention_fwd_kernel<DP, 4, 2>(const FwdArgs);                \
  template __global__ void attention_fwd_kernel<DP, 4, 1>(const FwdArgs);                \
  template __global__ void attention_fwd_kernel<DP, 1, 1>(const FwdArgs);                \
  template __global__ void attention_merge_kernel<DP>(const FwdArgs);                    \
  template __global__ void attention_bwd_dq_kernel<DP>(const BwdArgs);                   \
  template __global__ void attention_bwd_dkv_kernel<DP>(const BwdArgs);
WS1_ATTN_INST(64)
WS1_ATTN_INST(128)
#undef WS1_ATTN_INST
template __global__ void attention_bwd_prep_kernel<uint16_t>(const uint16_t*, const uint16_t*, const float*, int64_t, int,
                                                             uint16_t*, float*, float*);
template __global__ void attention_bwd_prep_kernel<float>(const float*, const uint16_t*, const float*, int64_t, int,
                                                          uint16_t*, float*, float*);

}  // namespace attn
}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace ws1_cuda {
namespace {
namespace A = ws1cu::attn;

struct Meta {
  int64_t Tq, Tk, Hq, Hkv, D, B;
  bool checked = false;               // the values were validated on the host (an eager call)
  std::vector<int64_t> cq, ck, qpos;  // host copies (eager backward: its repeated-position check)
};

// One host sync: cu_seqlens and q_pos are validated as the cpu kernel does (bad input -> one-line error, never an
// out-of-bounds read on the device). Under graph capture the values are not copied to the host (capturing()): the
// device plans and the kernels guard themselves (NaN rows in the forward, NaN outputs in the backward).
Meta check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_q,
                  const at::Tensor& cu_k, const at::Tensor& q_pos, bool need_host) {
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_cuda(*t, op, n);
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kBFloat16, op, n);
    check_dim(*t, 3, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have one shape, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(q.size(2) == k.size(2), op, ": head_dim mismatch q ", q.size(2), " k ", k.size(2));
  TORCH_CHECK(q.size(2) % 8 == 0 && q.size(2) >= 8 && q.size(2) <= A::kDMax, op,
              ": head_dim must be a multiple of 8 in [8, ", A::kDMax, "] (the tensor-core tiles), got ", q.size(2));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": Hq (", q.size(1), ") must be a multiple of Hkv (", k.size(1), ")");
  for (auto [t, n] : {std::pair{&cu_q, "cu_seqlens_q"}, {&cu_k, "cu_seqlens_k"}, {&q_pos, "q_pos"}}) {
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kLong, op, n);
    check_dim(*t, 1, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(cu_q.numel() == cu_k.numel() && cu_q.numel() >= 2, op, ": cu_seqlens_q/k must both be [B+1]");
  TORCH_CHECK(q_pos.numel() == q.size(0), op, ": q_pos must be [", q.size(0), "]");
  Meta m{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2), cu_q.numel() - 1, false, {}, {}, {}};
  TORCH_CHECK(m.Hq < 65536 && m.Hkv < 65536 && m.B < (int64_t{1} << 28) && m.Tq * m.Hq < (int64_t{1} << 31) &&
                  m.Tk * m.Hq < (int64_t{1} << 31),
              op, ": shape too large (Tq * Hq and Tk * Hq must be < 2^31)");
  if (capturing()) return m;
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
  m.checked = true;
  if (need_host) {
    m.cq.assign(cq, cq + m.B + 1);
    m.ck.assign(ck, ck + m.B + 1);
    m.qpos.assign(qp, qp + m.Tq);
  }
  return m;
}

// cp.async reads 16-byte pieces: a tensor whose storage is not 16-byte aligned (a view at an odd offset) is copied
// once into a fresh (aligned) buffer. Same bytes, so the same bits.
at::Tensor aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone(at::MemoryFormat::Contiguous);
}

// A device attribute (multiprocessors, opt-in shared memory per block), cached per device; a query, no sync.
int device_attr(const at::Tensor& t, cudaDeviceAttr attr, int which) {
  static std::atomic<int> cache[2][64];
  const int dev = t.device().index();
  if (dev >= 0 && dev < 64 && cache[which][dev].load(std::memory_order_relaxed) > 0)
    return cache[which][dev].load(std::memory_order_relaxed);
  int n = 0;
  const cudaError_t e = cudaDeviceGetAttribute(&n, attr, dev);
  TORCH_CHECK(e == cudaSuccess && n > 0, "ws1_cuda::attention: cannot read a device attribute: ", cudaGetErrorString(e));
  if (dev >= 0 && dev < 64) cache[which][dev].store(n, std::memory_order_relaxed);
  return n;
}
int sm_count(const at::Tensor& t) { return device_attr(t, cudaDevAttrMultiProcessorCount, 0); }
int smem_optin(const at::Tensor& t) { return device_attr(t, cudaDevAttrMaxSharedMemoryPerBlockOptin, 1); }

template <class Kern>
void set_smem(Kern kern, int bytes, const char* op) {
  const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  TORCH_CHECK(e == cudaSuccess, op, ": cannot give the kernel ", bytes, " bytes of shared memory: ", cudaGetErrorString(e));
}

// The plan (device-side: no host sync, so a captured forward plans each replay from its own cu_seqlens / q_pos).
at::Tensor make_plan(const char* op, const Meta& m, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos,
                     int bm, bool split_ok, int64_t cap) {
  at::Tensor plan = at::empty({A::plan_size(m.B)}, cu_q.options().dtype(at::kInt));
  A::attention_plan_kernel<<<1, A::kPlanThreads, 0, stream()>>>(
      cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(), q_pos.data_ptr<int64_t>(), static_cast<int>(m.B), m.Tq, m.Tk,
      static_cast<int>(m.Hq / m.Hkv), bm, split_ok ? 1 : 0, cap, plan.data_ptr<int>());
  check_launch(op);
  return plan;
}

template <int DP>
void run_forward(const char* op, const Meta& m, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos, double scale, at::Tensor& out,
                 at::Tensor& lse) {
  const int64_t G = m.Hq / m.Hkv;
  // Chunk mode (one KV chunk per 1-warp CTA of 16 rows, then the merge kernel) for decode-sized calls, whose rows
  // alone would leave most SMs idle; whole rows per 4-warp CTA otherwise (128 rows where the device's shared memory
  // holds the running state, else 64). Choices of speed only: every configuration gives the same bits.
  const bool split = m.Tq * m.Hq < int64_t{64} * sm_count(q);
  const bool mw2 = !split && A::FwdCfg<DP, 4, 2>::smem_bytes <= smem_optin(q);
  const int bm = split ? 16 : mw2 ? 128 : 64;
  int64_t cap = ceil_div(m.Tq * G, bm) + m.B;
  if (split) cap = std::max(cap, ceil_div(m.Tk, A::kChunk) + m.B);
  TORCH_CHECK(cap < (int64_t{1} << 31) - 1, op, ": too many (query block, chunk) items");
  // Short chunk-mode calls (B <= 32, Tk <= kChunk: the fixture pack, short decode steps) plan inside their CTAs
  // (self_plan: the same items, one launch instead of plan + kernel); a choice by the shapes, no bit moves.
  const bool self_planned = split && m.B <= 32 && m.Tk <= A::kChunk;
  at::Tensor plan;
  if (!self_planned) plan = make_plan(op, m, cu_q, cu_k, q_pos, bm, split, cap);
  A::FwdArgs args{bf16_in(q), bf16_in(k), bf16_in(v), cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(),
                  q_pos.data_ptr<int64_t>(), self_planned ? nullptr : plan.data_ptr<int>(), bf16_out(out),
                  lse.data_ptr<float>(), nullptr, nullptr, m.Tq, m.Tk, static_cast<int>(m.B), static_cast<int>(m.Hq),
                  static_cast<int>(m.Hkv), static_cast<int>(G), static_cast<int>(m.D),
                  static_cast<float>(scale) * A::kLog2e};
  const dim3 grid(static_cast<unsigned>(cap), static_cast<unsigned>(m.Hkv));
  if (split) {
    auto fo = q.options().dtype(at::kFloat);
    at::Tensor ws_acc = at::empty({cap * m.Hkv * 16 * DP}, fo), ws_ml = at::empty({cap * m.Hkv * 16 * 2}, fo);
    args.ws_acc = ws_acc.data_ptr<float>();
    args.ws_ml = ws_ml.data_ptr<float>();
    using C = A::FwdCfg<DP, 1, 1>;
    set_smem(A::attention_fwd_kernel<DP, 1, 1>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 1, 1><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
    // With Tk <= kChunk every valid position is < kChunk: each row is finalised by its chunk-0 CTA and the merge
    // kernel would return for every row, so it is not launched (one launch fewer for short packs; no bit moves).
    if (m.Tk > A::kChunk) {
      A::attention_merge_kernel<DP><<<static_cast<unsigned>(ceil_div(m.Tq * m.Hq, 4)), 128, 0, stream()>>>(args);
      check_launch(op);
    }
  } else if (mw2) {  // 32 rows per warp (H100 / H200: 227 KB of shared memory per block)
    using C = A::FwdCfg<DP, 4, 2>;
    set_smem(A::attention_fwd_kernel<DP, 4, 2>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 4, 2><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
  } else {  // 16 rows per warp, running state in registers (A100: 163 KB)
    using C = A::FwdCfg<DP, 4, 1>;
    set_smem(A::attention_fwd_kernel<DP, 4, 1>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 4, 1><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
}

// The two plans (on the device: no host sync), then the dQ and dK/dV kernels. The grids are bounds that depend on
// the shapes only (a captured call cannot read cu_seqlens); CTAs past a plan's item count return at once.
template <int DP>
void run_backward(const char* op, const Meta& m, const A::BwdArgs& base, const at::Tensor& cu_q, const at::Tensor& cu_k,
                  const at::Tensor& q_pos) {
  A::BwdArgs args = base;
  const int64_t G = m.Hq / m.Hkv;
  const int64_t cap = ceil_div(m.Tq * G, 64) + m.B;       // dQ items: query blocks of 64 rows per sequence
  const int64_t kv_cap = ceil_div(m.Tk, A::kBKV) + m.B;  // dK/dV items: sum_b ceil(lk_b / 64) <= Tk / 64 + B
  TORCH_CHECK(cap < (int64_t{1} << 31) - 1 && kv_cap < (int64_t{1} << 31) - 1, op, ": too many query or key blocks");
  at::Tensor plan = make_plan(op, m, cu_q, cu_k, q_pos, 64, false, cap);
  at::Tensor kvplan = at::full({A::kvplan_size(m.B, m.Tk)}, -1, cu_q.options().dtype(at::kInt));
  A::attention_bwd_plan_kernel<<<static_cast<unsigned>(std::max<int64_t>(1, ceil_div(m.Tq, A::kPlanThreads))),
                                 A::kPlanThreads, 0, stream()>>>(cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(),
                                                                 q_pos.data_ptr<int64_t>(), static_cast<int>(m.B), m.Tq,
                                                                 m.Tk, kvplan.data_ptr<int>());
  check_launch(op);
  args.plan = plan.data_ptr<int>();
  args.kvplan = kvplan.data_ptr<int>();
  if (m.Tq > 0) {
    set_smem(A::attention_bwd_dq_kernel<DP>, A::DqCfg<DP>::smem_bytes, op);
    A::attention_bwd_dq_kernel<DP><<<dim3(static_cast<unsigned>(cap), static_cast<unsigned>(m.Hkv)), 128,
                                     A::DqCfg<DP>::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
  if (m.Tk > 0) {
    set_smem(A::attention_bwd_dkv_kernel<DP>, A::DkvCfg<DP>::smem_bytes, op);
    A::attention_bwd_dkv_kernel<DP><<<dim3(static_cast<unsigned>(kv_cap), static_cast<unsigned>(m.Hkv)), 128,
                                      A::DkvCfg<DP>::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention";
  CallScope call(op);
  check_cuda(q_in, op, "q");  // before the guard: a CPU q is a one-line error, not a CUDAGuard failure
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Meta m = check_inputs(op, q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_host=*/false);
  at::Tensor out = at::empty_like(q_in);
  at::Tensor lse = at::empty({m.Tq, m.Hq}, q_in.options().dtype(at::kFloat));
  if (m.Tq == 0) return {out, lse};
  const at::Tensor q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  if (m.D <= 64) run_forward<64>(op, m, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale, out, lse);
  else run_forward<128>(op, m, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale, out, lse);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                             const at::Tensor& k_in, const at::Tensor& v_in,
                                                             const at::Tensor& out_in, const at::Tensor& lse_in,
                                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention_bwd";
  CallScope call(op);
  check_cuda(q_in, op, "q");  // before the guard (as above)
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Meta m = check_inputs(op, q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_host=*/true);
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), op, ": dout and out must have q's shape");
  TORCH_CHECK(lse_in.numel() == m.Tq * m.Hq, op, ": lse must be [Tq, Hq]");
  for (auto [t, n] : {std::pair{&dout_in, "dout"}, {&out_in, "out"}, {&lse_in, "lse"}}) check_same_device(q_in, *t, op, n);
  check_float(dout_in, op, "dout");
  check_float(out_in, op, "out");
  auto fopts = q_in.options().dtype(at::kFloat);
  at::Tensor dq = at::empty(q_in.sizes(), fopts), dk = at::empty(k_in.sizes(), fopts), dv = at::empty(k_in.sizes(), fopts);
  if (m.Tq == 0 && m.Tk == 0) return {dq, dk, dv};

  // Row slots of the dK/dV kernel are positions, so two queries of one sequence may not share a position: a one-line
  // error in an eager call (the host has the values); a captured call's device plan refuses it (NaN outputs).
  if (m.checked) {
    std::vector<int64_t> seen(static_cast<size_t>(m.Tk), -1);
    for (int64_t b = 0; b < m.B; ++b)
      for (int64_t i = m.cq[b]; i < m.cq[b + 1]; ++i) {
        int64_t& slot = seen[static_cast<size_t>(m.ck[b] + m.qpos[i])];
        TORCH_CHECK(slot < 0, op, ": sequence ", b, " has two queries at position ", m.qpos[i], " (queries ", slot, " and ",
                    i, ")");
        slot = i;
      }
  }

  const at::Tensor q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  const at::Tensor out = out_in.scalar_type() == at::kBFloat16 ? out_in.contiguous() : out_in.to(at::kBFloat16).contiguous();
  const at::Tensor lse = lse_in.to(at::kFloat).contiguous(), dout = dout_in.contiguous();
  at::Tensor dob = at::empty(q_in.sizes(), q_in.options());  // BF16, fresh: 16-byte aligned
  at::Tensor delta = at::empty({m.Tq, m.Hq}, fopts), lse2 = at::empty({m.Tq, m.Hq}, fopts);
  const int64_t rows = m.Tq * m.Hq;
  if (rows > 0) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, 4));
    if (dout.scalar_type() == at::kBFloat16)
      A::attention_bwd_prep_kernel<uint16_t><<<blocks, 128, 0, stream()>>>(
          bf16_in(dout), bf16_in(out), lse.data_ptr<float>(), rows, static_cast<int>(m.D), bf16_out(dob),
          delta.data_ptr<float>(), lse2.data_ptr<float>());
    else
      A::attention_bwd_prep_kernel<float><<<blocks, 128, 0, stream()>>>(
          dout.data_ptr<float>(), bf16_in(out), lse.data_ptr<float>(), rows, static_cast<int>(m.D), bf16_out(dob),
          delta.data_ptr<float>(), lse2.data_ptr<float>());
    check_launch(op);
  }
  const A::BwdArgs args{bf16_in(q), bf16_in(k), bf16_in(v), bf16_in(dob), lse2.data_ptr<float>(), delta.data_ptr<float>(),
                        cu_seqlens_q.data_ptr<int64_t>(), cu_seqlens_k.data_ptr<int64_t>(), q_pos.data_ptr<int64_t>(),
                        nullptr, nullptr, dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>(), m.Tq, m.Tk,
                        static_cast<int>(m.B), static_cast<int>(m.Hq), static_cast<int>(m.Hkv),
                        static_cast<int>(m.Hq / m.Hkv), static_cast<int>(m.D), static_cast<float>(scale) * A::kLog2e,
                        static_cast<float>(scale)};
  if (m.D <= 64) run_backward<64>(op, m, args, cu_seqlens_q, cu_seqlens_k, q_pos);
  else run_backward<128>(op, m, args, cu_seqlens_q, cu_seqlens_k, q_pos);
  return {dq, dk, dv};
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
