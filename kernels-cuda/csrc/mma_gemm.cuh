// The tensor-core GEMM shared by det_gemm.cu and lm_head.cu: C[M, N] = A[M, K] @ W[N, K]^T, A and W BF16,
// FP32 accumulation; det_gemm rounds C once to BF16 (RNE), lm_head keeps FP32.
//
// ONE fixed configuration for every M (nothing is chosen from M, no autotuning, no split-K):
//   CTA tile BM x BN = 64 x 128, BK = 32, 3-stage cp.async pipeline, 4 warps in 2 x 2, each warp 32 x 64
//   = 2 x 4 WMMA 16x16x16 BF16 fragments with FP32 accumulators (mma.sync on sm_80 and sm_90a).
// Numerics of one output element c[m, n]: the accumulator starts at +0 and takes, for k-blocks kb = 0, 1, ...
// ascending and inside each block the two k16 steps ascending, acc = mma(A[m, k16], W[n, k16], acc). The
// sequence depends on K alone. The row's position in its tile does not matter: a tensor-core MMA computes
// output row m from row m of A and the accumulator's row m only, with the same datapath for every row, and
// rows past M are zeros that feed no other row. So a row's bits are the same whether M is 1, 59 or 4096,
// wherever the row sits, and whatever fills the other rows. K is zero-padded to a multiple of 16 in shared
// memory (adding exact zero products: the same for every row). No atomics; one CTA per output tile.
// What is NOT done: wgmma + TMA on sm_90a (docs/cuda.md): the sm_90a image runs the same mma.sync code.
#pragma once

#include <mma.h>

#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kGemmBM = 64, kGemmBN = 128, kGemmBK = 32, kGemmStages = 3, kGemmThreads = 128;
constexpr int kGemmLdS = kGemmBK + 8;   // smem row stride (BF16 elements): 80 B rows, 16-B aligned, skewed banks
constexpr int kGemmLdC = kGemmBN + 4;   // epilogue FP32 tile stride
constexpr int kGemmGroupM = 8;          // tile rasterization group (see mma_gemm_kernel)
constexpr int kGemmStageElems = (kGemmBM + kGemmBN) * kGemmLdS;
constexpr int kGemmSmemBytes = kGemmStages * kGemmStageElems * 2;
static_assert(kGemmSmemBytes <= 48 * 1024, "static shared memory");
static_assert(kGemmBM * kGemmLdC * 4 <= kGemmSmemBytes, "epilogue tile reuses the pipeline buffers");

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

template <bool OUT_F32, bool VEC>
__global__ void __launch_bounds__(kGemmThreads) mma_gemm_kernel(const uint16_t* __restrict__ A, int64_t lda,
                                                                const uint16_t* __restrict__ W, int64_t ldw,
                                                                void* __restrict__ C, int64_t M, int64_t N, int64_t K) {
  using namespace nvcuda;
  __shared__ __align__(128) uint16_t smem[kGemmStages * kGemmStageElems];
  // Tile order (speed only, no effect on any bit): a 1-D grid walked in groups of kGemmGroupM row tiles,
  // row tiles fastest, so consecutive CTAs share a weight tile while it is in L2 (a weight larger than L2
  // is then streamed from HBM about M / (64 * kGemmGroupM) times instead of M / 64 times).
  const int64_t mt = (M + kGemmBM - 1) / kGemmBM, nt = (N + kGemmBN - 1) / kGemmBN;
  const int64_t pid = blockIdx.x, per_group = kGemmGroupM * nt;
  const int64_t first_m = (pid / per_group) * kGemmGroupM;
  const int64_t gsize = mt - first_m < kGemmGroupM ? mt - first_m : kGemmGroupM;
  const int64_t m_idx = first_m + (pid % per_group) % gsize, n_idx = (pid % per_group) / gsize;
  const int64_t n0 = n_idx * kGemmBN, m0 = m_idx * kGemmBM;
  const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int64_t nk = (K + kGemmBK - 1) / kGemmBK;
  auto stage_a = [&](int s) { return smem + s * kGemmStageElems; };
  auto stage_b = [&](int s) { return smem + s * kGemmStageElems + kGemmBM * kGemmLdS; };
  auto load = [&](int s, int64_t kb) {
    load_tile<kGemmBM, VEC>(stage_a(s), A, lda, M, K, m0, kb * kGemmBK);
    load_tile<kGemmBN, VEC>(stage_b(s), W, ldw, N, K, n0, kb * kGemmBK);
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
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(a[i], reinterpret_cast<const __nv_bfloat16*>(As + (wm * 32 + i * 16) * kGemmLdS + kk), kGemmLdS);
#pragma unroll
      for (int j = 0; j < 4; ++j)  // W tile is [n][k]: column-major B = W^T
        wmma::load_matrix_sync(b[j], reinterpret_cast<const __nv_bfloat16*>(Bs + (wn * 64 + j * 16) * kGemmLdS + kk), kGemmLdS);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline buffers are free: reuse them for the FP32 epilogue tile

  float* Cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kGemmLdC + wn * 64 + j * 16, acc[i][j], kGemmLdC, wmma::mem_row_major);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kGemmBM * kGemmBN; idx += kGemmThreads) {
    const int r = idx / kGemmBN, c = idx % kGemmBN;
    const int64_t gm = m0 + r, gn = n0 + c;
    if (gm >= M || gn >= N) continue;
    const float v = Cs[r * kGemmLdC + c];
    if (OUT_F32) static_cast<float*>(C)[gm * N + gn] = v;
    else static_cast<uint16_t*>(C)[gm * N + gn] = bf16_rne(v);
  }
}

}  // namespace ws1cu

#define WS1_MMA_GEMM_INSTANTIATE(OUT_F32)                                                                          \
  template __global__ void ws1cu::mma_gemm_kernel<OUT_F32, true>(const uint16_t*, int64_t, const uint16_t*, int64_t, \
                                                                 void*, int64_t, int64_t, int64_t);               \
  template __global__ void ws1cu::mma_gemm_kernel<OUT_F32, false>(const uint16_t*, int64_t, const uint16_t*, int64_t, \
                                                                  void*, int64_t, int64_t, int64_t);

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace mma {

// y = x @ weight.T: x [M, K] BF16, weight [N, K] BF16 (rows may be strided; the K axis must be dense).
inline at::Tensor run(const at::Tensor& x_in, const at::Tensor& w_in, bool out_f32, const char* op) {
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
  at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  at::Tensor w = w_in.stride(1) == 1 ? w_in : w_in.contiguous();
  at::Tensor out = at::empty({M, N}, x.options().dtype(out_f32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  const int64_t mt = ceil_div(M, ws1cu::kGemmBM), nt = ceil_div(N, ws1cu::kGemmBN);
  TORCH_CHECK(mt * nt < (int64_t{1} << 31), op, ": M or N too large for the grid (M=", M, ", N=", N, ")");
  const auto aligned = [](const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % 8 == 0;
  };
  const bool vec = K % 8 == 0 && aligned(x) && aligned(w);
  const dim3 grid(static_cast<unsigned>(mt * nt));  // 1-D, grouped rasterization inside the kernel
  auto launch = [&](auto kern) {
    kern<<<grid, ws1cu::kGemmThreads, 0, stream()>>>(bf16_in(x), x.stride(0), bf16_in(w), w.stride(0), out.data_ptr(), M, N, K);
  };
  if (out_f32) vec ? launch(ws1cu::mma_gemm_kernel<true, true>) : launch(ws1cu::mma_gemm_kernel<true, false>);
  else vec ? launch(ws1cu::mma_gemm_kernel<false, true>) : launch(ws1cu::mma_gemm_kernel<false, false>);
  check_launch(op);
  return out;
}

}  // namespace mma
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
