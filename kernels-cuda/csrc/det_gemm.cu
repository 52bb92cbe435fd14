// det_gemm (ws1_cuda::det_gemm) and the backward GEMM (ws1_cuda::gemm) of det_gemm and lm_head.
//
// det_gemm: x [M, K] BF16 @ weight [N, K]^T -> [M, N] BF16, FP32 accumulation, one RNE rounding. On an sm_90
// device wgmma_gemm.h (wgmma m64n128k16 + TMA, CUTLASS collectives; its header has the per-element sequence),
// else mma_gemm.cuh (mma.sync, sm_80). calls() says which ran: "sm_90:wgmma" / "sm_80:mma_sync".
//
// gemm: a [M, K] @ b [N, K]^T -> [M, N] (FP32 or BF16 out); a and b each BF16 or FP32 with ANY strides
// (transposed views welcome). The GEMMs of the canonical row-fold VJP (ws1_ops backends/cuda.py):
//   dx = gemm(dy, weight.T)                  (reduction over N, per row of dy)
//   dW = gemm(dy[perm].T, x[perm].T)         (reduction over the rows, in the canonical order `perm`)
// Two kernels, chosen by the operands' DTYPES and the arch (never by a size):
//  * both operands BF16 on sm_90 (det_gemm's backward: dy, weight, x are all BF16) -> wgmma_gemm.h, FP32 C:
//    the same instruction and per-element sequence as the forward, the reduction axis (N for dx, the rows in
//    canonical order for dW) in k16 steps from 0. The products of BF16 values are exact in FP32; the sum is
//    the tensor core's. calls(): "sm_90:wgmma".
//  * any FP32 operand (lm_head's backward: dy is the FP32 logit gradient, never rounded to BF16), or an
//    sm_80 device -> fp32_gemm_kernel below: every output ONE serial chain of FP32 FMAs, k ascending from +0,
//    the cpu kernel's contract (kernels-cpu gives the same bits):
//      acc = fmaf(a[m, k], b[n, k], acc) for k = 0 .. K-1;  c[m, n] = acc (or bf16_rne(acc))
//    CUDA cores, IEEE FP32. calls(): "sm_XX:simt_fp32".
// BF16 output (out_fp32 false) on the wgmma path is the FP32 result rounded once (RNE).
#include "mma_gemm.cuh"

namespace ws1cu {

// The serial-chain SGEMM. Tile 128 x 128 per CTA of 256 threads, each thread an 8 x 8 block of outputs: rows
// 4 ty + i and 64 + 4 ty + i, columns 4 tx + j and 64 + 4 tx + j (i, j < 4; 16-byte shared-memory reads);
// K staged through shared memory in blocks of 16. Standard outer-product tiling keeps each output's chain
// intact: for k = k0 .. k0 + 15 ascending, acc = fmaf(A[k][m], B[k][n], acc), the accumulator in a register
// across blocks, so c[m, n] is the serial chain above whatever the tile, the thread or the block count. How an
// operand is read into shared memory (k-fastest for a K-contiguous one, m-fastest otherwise: coalesced either
// way) moves the same values, never an operation.
constexpr int kFgBM = 128, kFgBN = 128, kFgBK = 16, kFgThreads = 256, kFgTM = 8, kFgTN = 8;

template <class T>
__device__ __forceinline__ void fg_stage(float (*S)[kFgBM + 4], const T* __restrict__ g, int64_t s0, int64_t s1, int64_t rows,
                                         int64_t K, int64_t r0, int64_t k0) {
  // S[kk][r] = g[r0 + r, k0 + kk] (0 outside); 16 x 128 elements, 8 per thread
  const bool kfast = s1 == 1;  // uniform per launch: the K axis contiguous
#pragma unroll
  for (int it = 0; it < kFgBK * kFgBM / kFgThreads; ++it) {
    const int e = threadIdx.x + it * kFgThreads;
    const int kk = kfast ? e % kFgBK : e / kFgBM, r = kfast ? e / kFgBK : e % kFgBM;
    const int64_t gr = r0 + r, gk = k0 + kk;
    S[kk][r] = (gr < rows && gk < K) ? ld(g + gr * s0 + gk * s1) : 0.0f;
  }
}

template <class TA, class TB>
__global__ void __launch_bounds__(kFgThreads) fp32_gemm_kernel(const TA* __restrict__ a, int64_t as0, int64_t as1,
                                                               const TB* __restrict__ b, int64_t bs0, int64_t bs1,
                                                               void* __restrict__ c, bool out_f32, int64_t M, int64_t N,
                                                               int64_t K) {
  __shared__ __align__(16) float As[kFgBK][kFgBM + 4];  // rows of 528 B: 16-byte reads stay aligned
  __shared__ __align__(16) float Bs[kFgBK][kFgBN + 4];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kFgBM, n0 = static_cast<int64_t>(blockIdx.x) * kFgBN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[kFgTM][kFgTN];
#pragma unroll
  for (int i = 0; i < kFgTM; ++i)
#pragma unroll
    for (int j = 0; j < kFgTN; ++j) acc[i][j] = 0.0f;
  // output (i, j) of this thread: row m0 + row_of(i), column n0 + row_of(j)
  auto row_of = [&](int i, int t) { return (i < 4 ? 0 : 64) + 4 * t + (i & 3); };
  for (int64_t k0 = 0; k0 < K; k0 += kFgBK) {
    fg_stage(As, a, as0, as1, M, K, m0, k0);
    fg_stage(Bs, b, bs0, bs1, N, K, n0, k0);
    __syncthreads();
    const int kmax = static_cast<int>(K - k0 < kFgBK ? K - k0 : kFgBK);  // the chain stops at K exactly
    for (int kk = 0; kk < kmax; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][4 * ty]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][64 + 4 * ty]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[kk][64 + 4 * tx]);
      const float av[kFgTM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[kFgTN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < kFgTM; ++i)
#pragma unroll
        for (int j = 0; j < kFgTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kFgTM; ++i)
#pragma unroll
    for (int j = 0; j < kFgTN; ++j) {
      const int64_t gm = m0 + row_of(i, ty), gn = n0 + row_of(j, tx);
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
  return mma::run(x, weight, /*out_f32=*/false, "ws1_cuda::det_gemm", call);
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
  // the kernel is chosen by dtypes and arch only (det_gemm.cu's header); calls() names it
  const bool tensor_core = wg::on_sm90(a) && a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16;
  call.path(tensor_core ? "wgmma" : "simt_fp32");
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  if (tensor_core) {
    if (out_fp32) {
      wg::run(a, b, out, op);
    } else {  // the FP32 result rounded once to nearest even (torch's float -> bfloat16 conversion is RNE)
      at::Tensor c32 = at::empty({M, N}, a.options().dtype(at::kFloat));
      wg::run(a, b, c32, op);
      out.copy_(c32);
    }
    return out;
  }
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
