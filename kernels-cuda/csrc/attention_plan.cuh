// The attention kernels' two device-side plans (built by attention_plan.cu on the device from cu_seqlens / q_pos: no
// host sync, so a forward or a backward can be captured in a CUDA graph): their int32 layouts, and the integer
// helpers the kernels that read them share — the warp scan the plans are built with, and the binary searches that
// map a CTA's item or a query row to its sequence. Device code only (no torch).
#pragma once

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

// ---- the backward's key plan (device-side, like the forward's plan: no host sync, so a backward can be captured) ----
// int32 layout, filled with -1 before the kernel runs: [0 .. B] dK/dV item start per sequence (its 64-key blocks;
// [B] = every item), [B+1 .. 2B] the last query position of each sequence (-1: no query), [2B+1] status (-1: valid;
// 0: a query at a position outside its sequence's keys, at a position another query of its sequence holds, or outside
// its cu_seqlens_q range — then every output of the backward is NaN), [2B+2 .. 2B+2+Tk) the table position -> query:
// table[cu_k[b] + p] = i for the query i of sequence b at position p (-1: none). Eager calls check the same on the
// host first (a one-line error), so only a captured call can reach status 0.
__host__ __device__ constexpr int64_t kvplan_size(int64_t B, int64_t Tk) { return 2 * B + 2 + Tk; }

}  // namespace attn
}  // namespace ws1cu
