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
// Three kernels, chosen by the operands' DTYPES and the arch (never by a size):
//  * both operands BF16 on sm_90 (det_gemm's backward: dy, weight, x are all BF16) -> wgmma_gemm.h, FP32 C:
//    the same instruction and per-element sequence as the forward, the reduction axis (N for dx, the rows in
//    canonical order for dW) in k16 steps from 0. The products of BF16 values are exact in FP32; the sum is
//    the tensor core's. calls(): "sm_90:wgmma".
//  * a FP32 and b BF16 on sm_90 (lm_head's backward: dy is the FP32 logit gradient, never rounded to BF16)
//    -> the exact three-way BF16 split on the same wgmma kernel, calls(): "sm_90:wgmma_bf16x3":
//      a = hi + mid + lo,  hi = bf16(a), mid = bf16(a - hi), lo = a - hi - mid     (each RNE; split3_part)
//    8 + 8 + 8 significand bits hold FP32's 24, so the three BF16 parts sum to a EXACTLY (for |a| >= 2^-103,
//    where lo is still a normal number; below that lo loses bits under 2^-133, an absolute error the FP32
//    sum cannot see). Then
//      c = (C(lo) + C(mid)) + C(hi),   C(p) = the wgmma GEMM of the BF16 part p with b, FP32 out
//    each C(p) the BF16 path's per-element sequence over the whole K (products of BF16 values exact in FP32),
//    the two FP32 additions elementwise in that fixed order, small parts first. A row of c is a function of
//    that row of a and of b alone, as on the BF16 path: the batch, the rows beside it and the chunking of M
//    below change no bit. Cost: three BF16 tensor-core GEMMs (~3x the BF16 backward's time) instead of one
//    IEEE FP32 chain on the CUDA cores (~12x at the datasheet's 67 vs 790 TFLOP/s). The same split and order
//    as triton_cuda_bf16's SPLIT_A (ws1_ops/triton/_gemm.py), there per 64-wide k-block into one accumulator.
//  * any other FP32 operand, or an sm_80 device -> fp32_gemm_kernel below: every output ONE serial chain of
//    FP32 FMAs, k ascending from +0, the cpu kernel's contract (kernels-cpu gives the same bits):
//      acc = fmaf(a[m, k], b[n, k], acc) for k = 0 .. K-1;  c[m, n] = acc (or bf16_rne(acc))
//    CUDA cores, IEEE FP32. calls(): "sm_XX:simt_fp32".
// BF16 output (out_fp32 false) on the wgmma paths is the FP32 result rounded once (RNE).
#include <algorithm>

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

// The j-th BF16 part of x in the exact split x = hi + mid + lo (part 2 = hi, 1 = mid, 0 = lo). Each
// subtraction is exact (Sterbenz: hi is x rounded to 8 significand bits, so x - hi holds x's low 16 bits; mid
// its top 8 of those, so r - mid holds the last 8, a BF16 value); --fmad=false keeps them plain subtractions.
__device__ __forceinline__ uint16_t split3_part(float x, int part) {
  const uint16_t hi = bf16_rne(x);
  if (part == 2) return hi;
  const float r = x - bf16_f32(hi);
  const uint16_t mid = bf16_rne(r);
  if (part == 1) return mid;
  return bf16_rne(r - bf16_f32(mid));  // exact: the conversion rounds nothing
}

// p[r * C + c] = split3_part(a[r * s_r + c], part) for r < R, c < C: a strided FP32 matrix whose inner axis is
// contiguous, written as a dense BF16 matrix of the same orientation (reads and writes coalesced). Grid-stride
// over rows (y) and columns (x), no division per element. Elementwise: which thread computes an element
// changes nothing.
constexpr int kSplitThreads = 256;
__global__ void __launch_bounds__(kSplitThreads) split3_kernel(const float* __restrict__ a, int64_t s_r, int64_t R,
                                                                 int64_t C, int part, uint16_t* __restrict__ p) {
  for (int64_t r = blockIdx.y; r < R; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * kSplitThreads + threadIdx.x; c < C;
         c += static_cast<int64_t>(gridDim.x) * kSplitThreads)
      p[r * C + c] = split3_part(a[r * s_r + c], part);
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

at::Tensor det_gemm_in_config(const at::Tensor& x, const at::Tensor& weight, const std::string& config) {
  const char* op = "ws1_kernels_cuda._C.det_gemm_in_config";
  ws1cu::sm90::Config cfg{};
  TORCH_CHECK(wg::config_named(config, &cfg), op, ": unknown configuration '", config,
              "' (expected narrow, wide or narrow_n32)");
  CallScope call(op);
  return mma::run(x, weight, /*out_f32=*/false, op, call, &cfg);
}

namespace {

// Transient memory of the split path: one BF16 part of a (2 bytes per element of the chunk) and one FP32
// partial product (4 per element of the chunk's C) at most this size each. A larger call runs in chunks of
// output rows (a row of c depends only on its own row of a, so chunking changes no bit); the count balances
// the chunks, whose height is a multiple of 256 (the wide tile's).
constexpr int64_t kSplitBudgetBytes = int64_t{2} << 30;
constexpr int64_t kSplitMaxBlocksX = 64, kSplitMaxBlocksY = 4096;  // split3_kernel's grid (grid-stride beyond)

// out[M, N] (FP32, contiguous) = a @ b^T for an FP32 a with any strides and a BF16 b [N, K], on sm_90:
// out = (C(lo) + C(mid)) + C(hi), this file's header. a's orientation is kept for the parts (a K-contiguous
// dy for dx, an M-contiguous dy^T view for dW), so the split reads and writes coalesced and the wgmma kernel
// gets the layout it would get from a BF16 operand at the same call site.
void split3_gemm(const at::Tensor& a_in, const at::Tensor& b, at::Tensor& out, const char* op) {
  at::Tensor a = a_in;
  const bool k_contig = a.stride(1) == 1 || a.size(1) == 1, m_contig = a.stride(0) == 1 || a.size(0) == 1;
  if (!k_contig && !m_contig) a = a.contiguous();  // neither axis contiguous: copied K-major
  const bool k_major = k_contig || !m_contig;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  const int64_t chunks = std::max<int64_t>({int64_t{1}, ceil_div(2 * M * K, kSplitBudgetBytes), ceil_div(4 * M * N, kSplitBudgetBytes)});
  const int64_t rows = std::min(M, ceil_div(ceil_div(M, chunks), 256) * 256);
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    const int64_t mc = std::min(rows, M - m0);
    const at::Tensor ac = a.narrow(0, m0, mc);
    // the part as a dense [R, C] BF16 matrix: K-major [mc, K], or M-major [K, mc] used as its transpose
    const int64_t R = k_major ? mc : K, C = k_major ? K : mc, s_r = k_major ? ac.stride(0) : ac.stride(1);
    at::Tensor buf = at::empty({R, C}, a.options().dtype(at::kBFloat16));
    const at::Tensor part = k_major ? buf : buf.t();
    at::Tensor oc = out.narrow(0, m0, mc);  // contiguous rows of the contiguous out
    at::Tensor tmp = at::empty({mc, N}, out.options());
    const dim3 grid(static_cast<unsigned>(std::min(kSplitMaxBlocksX, ceil_div(C, ws1cu::kSplitThreads))),
                    static_cast<unsigned>(std::min(kSplitMaxBlocksY, R)));
    for (int j = 0; j < 3; ++j) {  // lo, mid, hi: small parts first
      ws1cu::split3_kernel<<<grid, ws1cu::kSplitThreads, 0, stream()>>>(static_cast<const float*>(ac.data_ptr()), s_r, R, C,
                                                                          j, bf16_out(buf));
      check_launch(op);
      // the stream orders this GEMM's reads of buf before the next part overwrites it
      if (j == 0) {
        wg::run(part, b, oc, op);
      } else {
        wg::run(part, b, tmp, op);
        oc.add_(tmp);  // IEEE FP32 addition, elementwise: (C(lo) + C(mid)) + C(hi)
      }
    }
  }
}

}  // namespace

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
  // the kernel is chosen by dtypes and arch only (this file's header); calls() names it
  const bool sm90 = wg::on_sm90(a), b_bf16 = b.scalar_type() == at::kBFloat16;
  const bool tensor_core = sm90 && b_bf16 && a.scalar_type() == at::kBFloat16;
  const bool split3 = sm90 && b_bf16 && a.scalar_type() == at::kFloat;
  call.path(tensor_core ? "wgmma" : split3 ? "wgmma_bf16x3" : "simt_fp32");
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  if (tensor_core || split3) {
    // BF16 out: the FP32 result rounded once to nearest even (torch's float -> bfloat16 conversion is RNE)
    at::Tensor c32 = out_fp32 ? out : at::empty({M, N}, a.options().dtype(at::kFloat));
    if (tensor_core) wg::run(a, b, c32, op);
    else split3_gemm(a, b, c32, op);
    if (!out_fp32) out.copy_(c32);
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
