// The tensor-core GEMM shared by det_gemm.cu and lm_head.cu: C[M, N] = A[M, K] @ W[N, K]^T, A and W BF16,
// FP32 accumulation; det_gemm rounds C once to BF16 (RNE), lm_head keeps FP32.
//
// Numerics of one output element c[m, n] (the whole invariance argument; docs/cuda.md):
//   the accumulator starts at +0; for k-blocks kb = 0, 1, ... ascending (BK = 32, the same for every
//   configuration) and inside each block the two k16 steps ascending: acc = mma16x16x16(A[m16, k16],
//   W[n16, k16], acc), where m16 / n16 are the 16-row / 16-column fragment holding (m, n), aligned to
//   absolute row / column 0 (tiles are multiples of 16 starting at 0).
// That sequence depends on K alone: not on M, not on the row's position in its tile, not on what fills the
// other rows (other tokens, zero rows past M: an MMA computes output row m from row m of A and of the
// accumulator only, with the same datapath for every row), not on which CTA computes the fragment. No
// split-K, no atomics; K zero-padded to the k16 step identically for every row.
//
// Two fixed configurations (4 warps in 2 x 2, WMMA BF16 16x16x16 = mma.sync on sm_80 and sm_90a,
// 3-stage cp.async pipeline, BK 32):
//   Big   64 x 128 CTA tile, each warp 32 x 64 (2 x 4 fragments)   M >  kGemmSmallM
//   Small 32 x  32 CTA tile, each warp 16 x 16 (1 fragment)        M <= kGemmSmallM (decode: 4x the CTAs
//         per weight, so a small M streams the weight with the whole GPU instead of N/128 SMs)
// The choice by M changes only which CTA computes a fragment, never the fragment grid (16-aligned from 0 in
// both), the k order, the MMA instruction or the epilogue — so, by the sequence above, every element's bits
// are the same in both; the GPU tests check rows alone (M = 1, small) against the same rows at M = 65 and 130
// (big). This is the sm_80 path: on an sm_90 device the entry points run wgmma_gemm.h (wgmma + TMA), whose
// per-element sequence is its own (another instruction), fixed per arch; calls() names the kernel that ran.
#pragma once

#include <mma.h>

#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kGemmBK = 32, kGemmStages = 3, kGemmThreads = 128;
constexpr int kGemmLdS = kGemmBK + 8;  // smem row stride (BF16 elements): 80 B rows, 16-B aligned, skewed banks
constexpr int kGemmGroupM = 8;         // tile rasterization group (see mma_gemm_kernel)
constexpr int64_t kGemmSmallM = 64;    // M <= this: the small configuration (same bits, see above)

// WMF x WNF fragments of 16 x 16 per warp, 2 x 2 warps per CTA.
template <int WMF, int WNF>
struct GemmCfg {
  static constexpr int BM = 32 * WMF, BN = 32 * WNF;
  static constexpr int LdC = BN + 4;  // epilogue FP32 tile stride
  static constexpr int StageElems = (BM + BN) * kGemmLdS;
  static constexpr int SmemElems = kGemmStages * StageElems;
  static_assert(SmemElems * 2 <= 48 * 1024, "static shared memory");
  static_assert(BM * LdC * 4 <= SmemElems * 2, "epilogue tile reuses the pipeline buffers");
};
using GemmBig = GemmCfg<2, 4>;    // 64 x 128
using GemmSmall = GemmCfg<1, 1>;  // 32 x 32

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_size = valid ? 16 : 0;  // 0: no global read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_size) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Load rows [r0, r0 + ROWS) x k [k0, k0 + BK) of a row-major BF16 matrix (ld elements per row, `rows` rows,
// K columns) into smem [ROWS][kGemmLdS], zeros outside. VEC: 16-byte cp.async (K % 8 == 0 and 16-byte
// aligned rows); else element loads. Both write the same bytes, so the choice cannot change a bit.
template <int ROWS, bool VEC>
__device__ __forceinline__ void load_tile(uint16_t* s, const uint16_t* __restrict__ g, int64_t ld, int64_t rows, int64_t K,
                                          int64_t r0, int64_t k0) {
  constexpr int kChunks = ROWS * (kGemmBK / 8);
  for (int c = threadIdx.x; c < kChunks; c += kGemmThreads) {
    const int row = c / (kGemmBK / 8), kc = (c % (kGemmBK / 8)) * 8;
    const int64_t gr = r0 + row, gk = k0 + kc;
    uint16_t* dst = s + row * kGemmLdS + kc;
    if (VEC) {
      const bool valid = gr < rows && gk < K;
      cp_async16(dst, valid ? g + gr * ld + gk : g, valid);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = (gr < rows && gk + e < K) ? g[gr * ld + gk + e] : uint16_t{0};
    }
  }
}

template <int WMF, int WNF, bool OUT_F32, bool VEC>
__global__ void __launch_bounds__(kGemmThreads) mma_gemm_kernel(const uint16_t* __restrict__ A, int64_t lda,
                                                                const uint16_t* __restrict__ W, int64_t ldw,
                                                                void* __restrict__ C, int64_t M, int64_t N, int64_t K) {
  using namespace nvcuda;
  using Cfg = GemmCfg<WMF, WNF>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN;
  __shared__ __align__(128) uint16_t smem[Cfg::SmemElems];
  // Tile order (speed only, no effect on any bit): a 1-D grid walked in groups of kGemmGroupM row tiles,
  // row tiles fastest, so consecutive CTAs share a weight tile while it is in L2.
  const int64_t mt = (M + BM - 1) / BM, nt = (N + BN - 1) / BN;
  const int64_t pid = blockIdx.x, per_group = kGemmGroupM * nt;
  const int64_t first_m = (pid / per_group) * kGemmGroupM;
  const int64_t gsize = mt - first_m < kGemmGroupM ? mt - first_m : kGemmGroupM;
  const int64_t m_idx = first_m + (pid % per_group) % gsize, n_idx = (pid % per_group) / gsize;
  const int64_t n0 = n_idx * BN, m0 = m_idx * BM;
  const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[WMF][WNF];
#pragma unroll
  for (int i = 0; i < WMF; ++i)
#pragma unroll
    for (int j = 0; j < WNF; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int64_t nk = (K + kGemmBK - 1) / kGemmBK;
  auto stage_a = [&](int s) { return smem + s * Cfg::StageElems; };
  auto stage_b = [&](int s) { return smem + s * Cfg::StageElems + BM * kGemmLdS; };
  auto load = [&](int s, int64_t kb) {
    load_tile<BM, VEC>(stage_a(s), A, lda, M, K, m0, kb * kGemmBK);
    load_tile<BN, VEC>(stage_b(s), W, ldw, N, K, n0, kb * kGemmBK);
  };

#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < nk) load(s, s);
    cp_async_commit();  // always commit: the group count stays uniform, wait_group<STAGES-2> stays exact
  }
  for (int64_t kb = 0; kb < nk; ++kb) {
    cp_async_wait<kGemmStages - 2>();
    __syncthreads();  // block kb has landed for all threads; everyone is done with block kb - 1's stage
    const int64_t nxt = kb + kGemmStages - 1;
    if (nxt < nk) load(static_cast<int>(nxt % kGemmStages), nxt);
    cp_async_commit();
    const int s = static_cast<int>(kb % kGemmStages);
    const uint16_t* As = stage_a(s);
    const uint16_t* Bs = stage_b(s);
#pragma unroll
    for (int kk = 0; kk < kGemmBK; kk += 16) {  // k16 steps ascending
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[WMF];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[WNF];
#pragma unroll
      for (int i = 0; i < WMF; ++i)
        wmma::load_matrix_sync(a[i], reinterpret_cast<const __nv_bfloat16*>(As + (wm * 16 * WMF + i * 16) * kGemmLdS + kk),
                               kGemmLdS);
#pragma unroll
      for (int j = 0; j < WNF; ++j)  // W tile is [n][k]: column-major B = W^T
        wmma::load_matrix_sync(b[j], reinterpret_cast<const __nv_bfloat16*>(Bs + (wn * 16 * WNF + j * 16) * kGemmLdS + kk),
                               kGemmLdS);
#pragma unroll
      for (int i = 0; i < WMF; ++i)
#pragma unroll
        for (int j = 0; j < WNF; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline buffers are free: reuse them for the FP32 epilogue tile

  float* Cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < WMF; ++i)
#pragma unroll
    for (int j = 0; j < WNF; ++j)
      wmma::store_matrix_sync(Cs + (wm * 16 * WMF + i * 16) * Cfg::LdC + wn * 16 * WNF + j * 16, acc[i][j], Cfg::LdC,
                              wmma::mem_row_major);
  __syncthreads();
  for (int idx = threadIdx.x; idx < BM * BN; idx += kGemmThreads) {
    const int r = idx / BN, c = idx % BN;
    const int64_t gm = m0 + r, gn = n0 + c;
    if (gm >= M || gn >= N) continue;
    const float v = Cs[r * Cfg::LdC + c];
    if (OUT_F32) static_cast<float*>(C)[gm * N + gn] = v;
    else static_cast<uint16_t*>(C)[gm * N + gn] = bf16_rne(v);
  }
}

}  // namespace ws1cu

#define WS1_MMA_GEMM_INST1(WMF, WNF, OUT_F32, VEC)                                                                 \
  template __global__ void ws1cu::mma_gemm_kernel<WMF, WNF, OUT_F32, VEC>(const uint16_t*, int64_t, const uint16_t*, \
                                                                          int64_t, void*, int64_t, int64_t, int64_t);
#define WS1_MMA_GEMM_INSTANTIATE(OUT_F32)                                                                          \
  WS1_MMA_GEMM_INST1(2, 4, OUT_F32, true)                                                                          \
  WS1_MMA_GEMM_INST1(2, 4, OUT_F32, false)                                                                         \
  WS1_MMA_GEMM_INST1(1, 1, OUT_F32, true)                                                                          \
  WS1_MMA_GEMM_INST1(1, 1, OUT_F32, false)

#ifndef WS1_DEVICE_ONLY
#include "wgmma_host.h"
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace mma {

// y = x @ weight.T: x [M, K] BF16, weight [N, K] BF16 (rows may be strided; the K axis must be dense).
// The device's arch picks the kernel: sm_90 -> wgmma_gemm.h (wgmma + TMA), else this file's mma.sync kernel;
// `call` records which ("sm_90:wgmma", "sm_80:mma_sync"). `force`: an sm_90a configuration instead of
// pick_config's (det_gemm_in_config: the tests and benchmarks of the configurations; an error off sm_90).
inline at::Tensor run(const at::Tensor& x_in, const at::Tensor& w_in, bool out_f32, const char* op, CallScope& call,
                      const ws1cu::sm90::Config* force = nullptr) {
  check_cuda(x_in, op, "x");
  check_same_device(x_in, w_in, op, "weight");
  check_dtype(x_in, at::kBFloat16, op, "x");
  check_dtype(w_in, at::kBFloat16, op, "weight");
  check_dim(x_in, 2, op, "x");
  check_dim(w_in, 2, op, "weight");
  const int64_t M = x_in.size(0), K = x_in.size(1), N = w_in.size(0);
  TORCH_CHECK(w_in.size(1) == K, op, ": K mismatch: x has K=", K, " (shape ", x_in.sizes(), "), weight has K=",
              w_in.size(1), " (shape ", w_in.sizes(), ")");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const bool sm90 = wg::on_sm90(x_in);
  TORCH_CHECK(force == nullptr || sm90, op, ": the sm_90a configurations need an sm_90 device; ", x_in.device(),
              " is not one");
  call.path(sm90 ? "wgmma" : "mma_sync");
  at::Tensor out = at::empty({M, N}, x_in.options().dtype(out_f32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  if (sm90) {
    wg::run(x_in, w_in, out, op, force);
    return out;
  }
  at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  at::Tensor w = w_in.stride(1) == 1 ? w_in : w_in.contiguous();
  const auto aligned = [](const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % 8 == 0;
  };
  const bool vec = K % 8 == 0 && aligned(x) && aligned(w);
  // Big or small configuration by M: the same bits either way (mma_gemm.cuh), small M gets more CTAs.
  auto launch = [&](auto cfg, auto kern) {
    using Cfg = decltype(cfg);
    const int64_t tiles = ceil_div(M, Cfg::BM) * ceil_div(N, Cfg::BN);
    TORCH_CHECK(tiles < (int64_t{1} << 31), op, ": M or N too large for the grid (M=", M, ", N=", N, ")");
    kern<<<static_cast<unsigned>(tiles), ws1cu::kGemmThreads, 0, stream()>>>(bf16_in(x), x.stride(0), bf16_in(w), w.stride(0),
                                                                             out.data_ptr(), M, N, K);
  };
  const bool small = M <= ws1cu::kGemmSmallM;
  if (small && out_f32) vec ? launch(ws1cu::GemmSmall{}, ws1cu::mma_gemm_kernel<1, 1, true, true>)
                            : launch(ws1cu::GemmSmall{}, ws1cu::mma_gemm_kernel<1, 1, true, false>);
  else if (small) vec ? launch(ws1cu::GemmSmall{}, ws1cu::mma_gemm_kernel<1, 1, false, true>)
                      : launch(ws1cu::GemmSmall{}, ws1cu::mma_gemm_kernel<1, 1, false, false>);
  else if (out_f32) vec ? launch(ws1cu::GemmBig{}, ws1cu::mma_gemm_kernel<2, 4, true, true>)
                        : launch(ws1cu::GemmBig{}, ws1cu::mma_gemm_kernel<2, 4, true, false>);
  else vec ? launch(ws1cu::GemmBig{}, ws1cu::mma_gemm_kernel<2, 4, false, true>)
           : launch(ws1cu::GemmBig{}, ws1cu::mma_gemm_kernel<2, 4, false, false>);
  check_launch(op);
  return out;
}

}  // namespace mma
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
