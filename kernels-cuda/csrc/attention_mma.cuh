// Tensor-core building blocks of the attention kernels (attention_*.cuh): the PTX they issue (cp.async, ldmatrix,
// mma.sync m16n8k16 BF16 -> FP32), the fixed tile constants, and the two pieces of arithmetic that MUST be one
// function wherever they run — the merge of two (m, l, acc) partial states and the finalisation — because
// decode == prefill bitwise rests on the split-KV path and the in-CTA path executing them identically.
// Device code only (no torch): compile_check.py compiles it with nvcc alone.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", .bf16): lane = 4 g + t (g = lane / 4, t = lane % 4)
//   A 16x16 (row-major): a0 (row g, cols 2t, 2t+1)  a1 (row g+8, same)  a2 (row g, cols 2t+8, +9)  a3 (row g+8, same)
//   B 16x8  (k x n):     b0 (k 2t, 2t+1; n g)       b1 (k 2t+8, 2t+9; n g)
//   C 16x8  (FP32):      c0, c1 (row g, cols 2t, 2t+1)   c2, c3 (row g+8, same)
// Each b32 register holds two BF16, the lower column in the lower 16 bits. Two adjacent n8 blocks of a C
// accumulator are exactly one k16 A fragment (c0c1 of block 2kk -> a0, c2c3 -> a1, of block 2kk+1 -> a2, a3), so
// softmax probabilities / dS go from the QK^T accumulators to the next MMA without leaving registers.
// Every row of an MMA is computed from that row of A and C alone, with the same datapath for all 16 rows: a
// row's bits cannot depend on the other rows of its fragment (other queries, other heads, padding rows).
#pragma once

#include "ws1_cuda_common.cuh"

namespace ws1cu {
namespace attn {

// ---- fixed tile constants (never chosen by a batch or a length) ------------------------------------------------
constexpr int kBN = 64;        // forward key tile, aligned to absolute key 0 (tile t = keys 64t .. 64t+63)
constexpr int kChunk = 256;    // KV chunk, aligned to absolute key 0: one (m, l, acc) partial per chunk, merged in
                               // ascending chunk order by ONE function (merge_state) on every path
constexpr int kBNB = 32;       // backward dQ key tile (a plain sum in k16 steps: the tile size changes no bit)
constexpr int kBKV = 64;       // backward dK/dV keys per CTA (4 warps x 16)
constexpr int kBMQ = 32;       // backward dK/dV query rows per step, aligned to absolute position 0
constexpr int kPad = 8;        // shared-memory row padding (BF16): row stride (DP + 8) * 2 bytes is an odd multiple of
                               // 16 bytes, so the 8 rows of every ldmatrix 8x8 matrix hit 8 distinct 16-byte bank groups
constexpr int kDMax = 128;     // largest head_dim (Qwen3: 128); D must be a multiple of 8 (16-byte cp.async)
static_assert(kChunk % kBN == 0, "a chunk is whole key tiles");
static_assert(kBN % 16 == 0 && kBNB % 16 == 0 && kBMQ % 16 == 0 && kBKV == 64, "k16 steps");

constexpr float kLog2e = 1.4426950408889634f;  // scores are kept in log2 units: s' = s * (scale * log2 e)
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers -------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, asynchronously; pred false: the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 BF16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d = a * b + d: 16x8x16, BF16 operands, FP32 accumulators (one instruction; its k16 sum is the hardware's, the
// same for every row and every call).
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two FP32 -> two BF16 (lo in the lower half), round to nearest even: the rounding mode is part of the instruction
// (cvt.rn), no flag can change it; for the finite values it gets (probabilities in [0, 1], dS) it is bit for bit
// ws1cu::bf16_rne.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// x + (+0): -0 becomes +0, every other value is unchanged. Applied to every output before it is stored: an exact
// zero's sign is the one bit a masked lane (a zero product 0 * v, v of either sign) could still decide, so no
// output ever carries it.
__device__ __forceinline__ float plus_zero(float x) { return __fadd_rn(x, 0.0f); }

// ---- the shared arithmetic of the split-KV merge (one definition, used by every path) ----------------------------
// A partial state of one row over one chunk: m = max of its scores s' (log2 units), l = sum of its probabilities
// p = 2^(s' - m) (FP32), acc[d] = sum of bf16(p) v[d] (the MMA's). Both states merged here have m finite (each chunk a row is
// merged over holds at least its first key, which the row sees).
struct MergeCoef {
  float m, a, b;  // merged max, weight of the running state, weight of the incoming chunk
};
__device__ __forceinline__ MergeCoef merge_coef(float m_run, float m_new) {
  const float m = fmaxf(m_run, m_new);
  return {m, exp2f(__fsub_rn(m_run, m)), exp2f(__fsub_rn(m_new, m))};
}
// running * a + incoming * b, two products rounded separately, then their sum (no FMA): used for l and each acc[d].
__device__ __forceinline__ float merge_val(float run, float a, float inc, float b) {
  return __fadd_rn(__fmul_rn(run, a), __fmul_rn(inc, b));
}
// out[d] = bf16(acc[d] * (1 / l)) (one IEEE reciprocal per row, then a product per element: no per-element division
// and its slow-path call; +0 for a zero), lse = m ln 2 + ln l (natural log of sum exp(scale s)).
__device__ __forceinline__ float final_inv(float l) { return __fdiv_rn(1.0f, l); }
__device__ __forceinline__ uint16_t final_out(float acc, float inv_l) { return bf16_rne(plus_zero(__fmul_rn(acc, inv_l))); }
__device__ __forceinline__ float final_lse(float m, float l) { return plus_zero(__fadd_rn(__fmul_rn(m, kLn2), logf(l))); }

}  // namespace attn
}  // namespace ws1cu
