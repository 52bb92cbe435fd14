// det_gemm (ws1_cuda::det_gemm) and the backward GEMM (ws1_cuda::gemm) of det_gemm and lm_head.
//
// det_gemm: x [M, K] BF16 @ weight [N, K]^T -> [M, N] BF16: mma_gemm.cuh's tensor-core kernel (one fixed
// 64x128x32 configuration for every M), FP32 accumulation, one RNE rounding.
//
// gemm: a [M, K] @ b [N, K]^T -> [M, N] (FP32 or BF16 out); a and b each BF16 or FP32 with ANY strides
// (transposed views welcome). The deterministic FP32-input GEMM of the canonical row-fold VJP:
//   dx = gemm(dy, weight.T)                  (reduction over N, per row of dy)
//   dW = gemm(dy[perm].T, x[perm].T)         (reduction over the rows, in the canonical order `perm`)
// Every output is ONE serial chain of FP32 FMAs, k ascending from +0 — the cpu kernel's contract:
//   acc = fmaf(a[m, k], b[n, k], acc) for k = 0 .. K-1;  c[m, n] = acc (or bf16_rne(acc))
// CUDA cores, IEEE FP32 (exact for BF16 inputs; FP32 gradients are never rounded to BF16 first). Tile 64 x 64,
// 256 threads, each thread 4 x 4 outputs; K staged through shared memory in blocks of 16 without changing
// the chain (the accumulator lives in a register across blocks). Parallel over output tiles only.
#include "mma_gemm.cuh"

namespace ws1cu {

constexpr int kFgBM = 64, kFgBN = 64, kFgBK = 16, kFgThreads = 256;

template <class TA, class TB>
__global__ void __launch_bounds__(kFgThreads) fp32_gemm_kernel(const TA* __restrict__ a, int64_t as0, int64_t as1,
                                                               const TB* __restrict__ b, int64_t bs0, int64_t bs1,
                                                               void* __restrict__ c, bool out_f32, int64_t M, int64_t N,
                                                               int64_t K) {
  __shared__ float As[kFgBK][kFgBM + 1];
  __shared__ float Bs[kFgBK][kFgBN + 1];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kFgBM, n0 = static_cast<int64_t>(blockIdx.x) * kFgBN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // outputs (ty + 16 i, tx + 16 j), i, j < 4
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kFgBK) {
    for (int e = threadIdx.x; e < kFgBK * kFgBM; e += kFgThreads) {
      const int kk = e / kFgBM, r = e % kFgBM;
      const int64_t gm = m0 + r, gk = k0 + kk;
      As[kk][r] = (gm < M && gk < K) ? ld(a + gm * as0 + gk * as1) : 0.0f;
      const int64_t gn = n0 + r;
      Bs[kk][r] = (gn < N && gk < K) ? ld(b + gn * bs0 + gk * bs1) : 0.0f;
    }
    __syncthreads();
    const int kmax = static_cast<int>(K - k0 < kFgBK ? K - k0 : kFgBK);  // the chain stops at K exactly
    for (int kk = 0; kk < kmax; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(As[kk][ty + 16 * i], Bs[kk][tx + 16 * j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
      if (gm >= M || gn >= N) continue;
      if (out_f32) static_cast<float*>(c)[gm * N + gn] = acc[i][j];
      else static_cast<uint16_t*>(c)[gm * N + gn] = bf16_rne(acc[i][j]);
    }
}

}  // namespace ws1cu

WS1_MMA_GEMM_INSTANTIATE(false)
#define WS1_FG_INST(TA, TB)                                                                                      \
  template __global__ void ws1cu::fp32_gemm_kernel<TA, TB>(const TA*, int64_t, int64_t, const TB*, int64_t, int64_t, \
                                                           void*, bool, int64_t, int64_t, int64_t);
WS1_FG_INST(uint16_t, uint16_t)
WS1_FG_INST(uint16_t, float)
WS1_FG_INST(float, uint16_t)
WS1_FG_INST(float, float)

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

at::Tensor det_gemm(const at::Tensor& x, const at::Tensor& weight) {
  CallScope call("ws1_cuda::det_gemm");
  return mma::run(x, weight, /*out_f32=*/false, "ws1_cuda::det_gemm");
}

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, bool out_fp32) {
  const char* op = "ws1_cuda::gemm";
  CallScope call(op);
  check_cuda(a, op, "a");
  check_same_device(a, b, op, "b");
  check_float(a, op, "a");
  check_float(b, op, "b");
  check_dim(a, 2, op, "a");
  check_dim(b, 2, op, "b");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(b.size(1) == K, op, ": K mismatch: a has K=", K, " (shape ", a.sizes(), "), b has K=", b.size(1),
              " (shape ", b.sizes(), ")");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty({M, N}, a.options().dtype(out_fp32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  const int64_t mt = ceil_div(M, ws1cu::kFgBM), nt = ceil_div(N, ws1cu::kFgBN);
  TORCH_CHECK(mt < 65536 && nt < (int64_t{1} << 31), op, ": M or N too large for the grid (M=", M, ", N=", N, ")");
  const dim3 grid(static_cast<unsigned>(nt), static_cast<unsigned>(mt));
  auto launch = [&](auto ta, auto tb) {
    using TA = decltype(ta);
    using TB = decltype(tb);
    ws1cu::fp32_gemm_kernel<TA, TB><<<grid, ws1cu::kFgThreads, 0, stream()>>>(
        static_cast<const TA*>(a.data_ptr()), a.stride(0), a.stride(1), static_cast<const TB*>(b.data_ptr()), b.stride(0),
        b.stride(1), out.data_ptr(), out_fp32, M, N, K);
  };
  const bool af = a.scalar_type() == at::kFloat, bf = b.scalar_type() == at::kFloat;
  if (af && bf) launch(float{}, float{});
  else if (af) launch(float{}, uint16_t{});
  else if (bf) launch(uint16_t{}, float{});
  else launch(uint16_t{}, uint16_t{});
  check_launch(op);
  return out;
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
