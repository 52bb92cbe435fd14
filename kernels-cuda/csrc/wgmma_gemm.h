// The sm_90a tensor-core GEMM (wgmma + TMA, CUTLASS 3.x collectives, warp-specialized, persistent), as a
// torch-free C++ interface: wgmma_gemm_{fwd_bf16,fwd_f32,dx,dw}.cu hold the instantiations (wgmma_gemm.cuh: the
// CUTLASS types); det_gemm.cu / lm_head.cu call it on an sm_90 device through wgmma_host.h (mma_gemm.cuh's
// mma.sync kernel stays the sm_80 path).
//
//   C[M, N] = A[M, K] · B[N, K]^T        A, B BF16; FP32 accumulation; C BF16 (one RNE rounding) or FP32
//
// Numerics of one output element c[m, n] (the invariance argument; docs/cuda.md "The sm_90a GEMM"):
//   one wgmma instruction shape for every configuration, m64n128k16 (BF16 x BF16 -> FP32, both operands
//   from shared memory); the K axis in k-tiles of 64 from k = 0, each tile's four k16 steps ascending,
//   ceil(K / 64) * 4 steps in all (the tail past K is zero-filled by TMA, or by the copy into an aligned
//   buffer: the same zeros); the first step with scale-d = 0 (no accumulator input), every later one
//   accumulating into the same FP32 registers; row m sits in slot (m mod 64) of its m64 instruction and
//   column n in slot (n mod 128) of its n128 instruction, because every tile starts at a multiple of 64
//   rows and 128 columns. Then det_gemm: one conversion to BF16 (cvt.rn.bf16x2.f32: IEEE round to
//   nearest even, the same bits as ws1cu::bf16_rne for every non-NaN value; a NaN stays a NaN); lm_head
//   and the backward: the FP32 accumulator stored as is.
// That sequence is a function of K and of the element's own row of A and column of B. Not of M, not of the
// tile's other rows (an MMA computes row m from row m of A and of the accumulator), not of which CTA or
// which of the two configurations computes the tile:
//   wide    256 x 128 x 64 CTA tile, 2 consumer warpgroups (cooperative), each 128 x 128 = 2 x m64n128k16;
//           cluster 1 x 2 (A tile multicast to the CTA beside it along N)
//   narrow   64 x 128 x 64 CTA tile, 2 consumer warpgroups taking tiles in turn (ping-pong), each tile
//           1 x m64n128k16; no cluster
// Both: TMA loads, a producer warp, persistent CTAs (one per SM) walking the tiles of a fixed schedule,
// each output tile computed whole by one CTA (no split-K, no stream-K, no atomics, no workspace). The
// choice (narrow for few rows: more CTAs stream the weight) changes which CTA computes a tile and how
// many instructions one CTA issues per k16 step, never the instruction, its operands, their order or the
// slots, so every element has the same bits in both — the GPU tests check a row alone against the same
// row among 65 / 130 / 300 / 4096 rows (both sides of every boundary).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstddef>

namespace ws1cu {
namespace sm90 {

// Operand layout: K-major = the reduction axis is contiguous (a row-major A [M, K], a weight [N, K]);
// MN-major = the M (A) or N (B) axis is contiguous (a transposed view). Both are native wgmma layouts for
// 16-bit operands; a layout is a property of the call site (det_gemm's forward, the backward's dx, its dW),
// never of the row count.
enum class Major : int { K = 0, MN = 1 };

struct GemmArgs {
  const void* a;  // BF16. K-major: a[m * lda + k]; MN-major: a[k * lda + m]
  int64_t lda;
  Major a_major;
  const void* b;  // BF16. K-major: b[n * ldb + k]; MN-major: b[k * ldb + n]
  int64_t ldb;
  Major b_major;
  void* c;        // row-major c[m * ldc + n], BF16 (c_bf16) or FP32
  int64_t ldc;
  bool c_bf16;
  int64_t M, N, K;
};

// NarrowN32 is a CANDIDATE, never returned by pick_config: the narrow configuration with 64 x 32 x 64 tiles on
// wgmma m64n32k16 (16 stages of 12 KB), instantiated for det_gemm's forward only (wgmma_gemm_fwd_bf16_n32.cu).
// A decode step (M <= 64) streams the weight through N / 128 CTAs in the narrow configuration — 32 SMs of 132 at
// N 4096, 8 at N 1024 (Qwen3-8B's k_proj and v_proj) —, and through N / 32 with n32. Whether it may replace
// narrow for M <= 64 turns on one fact only a GPU can show: that m64n32k16 gives an element the bits m64n128k16
// gives it (the same operands, k16 steps and order; only the instruction's N width differs). The GPU test
// test_gemm_n32_candidate_bits compares the two on the same rows; benchmarks/bench_cuda.py times it (docs/cuda.md).
enum class Config : int { Wide = 0, Narrow = 1, NarrowN32 = 2 };

// The narrow configuration runs for few rows (a decode step: 64-row tiles, 4x the CTAs of a wide M-tile)
// and whenever the wide tiles would not cover the 132 SMs of an H100/H200 once; wide otherwise (its 256 x
// 128 tile halves the L2 -> SM traffic per FLOP). A pure function of the shape, and speed only: both give
// every element the same bits (above).
constexpr int64_t kNarrowMaxM = 128, kWideMinTiles = 132;
inline Config pick_config(int64_t M, int64_t N) {
  const int64_t wide_tiles = ((M + 255) / 256) * ((N + 127) / 128);
  return (M <= kNarrowMaxM || wide_tiles < kWideMinTiles) ? Config::Narrow : Config::Wide;
}

namespace detail {  // one per translation unit wgmma_gemm_<name>.cu (both configurations each)
const char* launch_fwd_bf16(const GemmArgs&, Config, int device, cudaStream_t);  // A K-major, B K-major, C BF16
const char* launch_fwd_f32(const GemmArgs&, Config, int device, cudaStream_t);   // A K-major, B K-major, C FP32
const char* launch_dx(const GemmArgs&, Config, int device, cudaStream_t);        // A K-major, B N-major, C FP32
const char* launch_dw(const GemmArgs&, Config, int device, cudaStream_t);        // A M-major, B N-major, C FP32
const char* launch_fwd_bf16_n32(const GemmArgs&, int device, cudaStream_t);        // the n32 candidate (det_gemm)
}  // namespace detail

// Why these arguments cannot run on the TMA path, or nullptr. TMA needs every base pointer 16-byte aligned,
// every leading dimension and every contiguous extent a multiple of 16 bytes; the instantiated (layout,
// output) pairs are the four above. The caller copies other operands into aligned, zero-padded, K-major
// buffers first: the same values and the same K reach the same instructions, so the same bits.
inline const char* unsupported(const GemmArgs& g) {
  const auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t c_bytes = g.c_bf16 ? 2 : 4;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0) return "empty problem (the caller handles it)";
  if (g.M >= (int64_t{1} << 31) || g.N >= (int64_t{1} << 31) || g.K >= (int64_t{1} << 31)) return "M, N or K >= 2^31";
  if (!a16(g.a) || !a16(g.b) || !a16(g.c)) return "a base pointer is not 16-byte aligned";
  if (g.lda % 8 || g.ldb % 8 || (g.ldc * c_bytes) % 16) return "a leading dimension is not a multiple of 16 bytes";
  const int64_t a_inner = g.a_major == Major::K ? g.K : g.M, b_inner = g.b_major == Major::K ? g.K : g.N;
  if (a_inner % 8 || b_inner % 8 || (g.N * c_bytes) % 16) return "a contiguous extent is not a multiple of 16 bytes";
  if (g.a_major == Major::MN && g.b_major == Major::K) return "layout (A M-major, B K-major) is not instantiated";
  if (g.c_bf16 && (g.a_major != Major::K || g.b_major != Major::K)) return "BF16 output is instantiated for K-major operands only";
  return nullptr;
}

// Launches C = A · B^T on `stream` (the current device `device`) in the configuration pick_config gives, or in
// `*force` (the tests and benchmarks of the configurations). Returns nullptr when launched, else why not
// (nothing was launched, or the launch failed).
inline const char* gemm(const GemmArgs& g, int device, cudaStream_t stream, Config* used = nullptr,
                        const Config* force = nullptr) {
  if (const char* why = unsupported(g)) return why;
  const Config cfg = force ? *force : pick_config(g.M, g.N);
  if (used) *used = cfg;
  if (cfg == Config::NarrowN32) {
    if (!g.c_bf16 || g.a_major != Major::K || g.b_major != Major::K)
      return "the n32 candidate is instantiated for det_gemm's forward only (K-major operands, BF16 output)";
    return detail::launch_fwd_bf16_n32(g, device, stream);
  }
  if (g.a_major == Major::K && g.b_major == Major::K)
    return g.c_bf16 ? detail::launch_fwd_bf16(g, cfg, device, stream) : detail::launch_fwd_f32(g, cfg, device, stream);
  if (g.a_major == Major::K) return detail::launch_dx(g, cfg, device, stream);
  return detail::launch_dw(g, cfg, device, stream);
}

}  // namespace sm90
}  // namespace ws1cu
