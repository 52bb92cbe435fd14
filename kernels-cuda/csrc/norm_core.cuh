// The row-norm core shared by rms_norm.cu and qk_norm.cu (one arithmetic, two nodes: qk_norm's rows are
// the [T*heads, D] (token, head) rows). Shapes: x [rows, H] (BF16 or FP32), weight [H] (BF16 or FP32),
// y [rows, H] BF16, rstd [rows] FP32; backward dy [rows, H] (BF16 or FP32) -> dx [rows, H] FP32,
// dweight [H] FP32.
//
// Forward, ONE BLOCK PER ROW, NT threads (NT fixed per node at compile time: 256 for rms_norm, 128 for
// qk_norm; never chosen from the row count — vLLM changes block size and vector width at 256 tokens,
// the classic trap). Thread t owns the columns h = t, t + NT, t + 2 NT, ... :
//   part_t = fmaf(x_h, x_h, part_t) over its columns, ascending, from +0
//   ss     = block_sum<NT>(part)                    (fixed butterfly tree, ws1_cuda_common.cuh)
//   rstd   = 1 / sqrt(ss / H + eps)                 (IEEE div and sqrt)
//   y_h    = bf16_rne((x_h * rstd) * w_h)
// Backward, one block per row, r = rstd[row]:
//   g_h = dy_h * w_h;  S = block_sum(fmaf(g_h, x_h, part));  c = (S / H) * ((r * r) * r)
//   dx_h = fmaf(-x_h, c, g_h * r)
// dweight: the rows IN THE GIVEN ORDER (the caller passes rows in canonical order) in fixed chunks of
// kDwRows = 256 rows aligned to row 0 of that order (a tiling of the row axis, like a GEMM's k-steps: the
// chunk of a row is a function of its canonical index, never of the row count):
//   part[c, h] = fmaf(dy[row, h], x[row, h] * r[row], part) over the chunk's rows ascending, from +0
//                (norm_dw_kernel: a thread per (chunk, column), chunks and columns in parallel);
//   dw[h]      = (((+0 + part[0, h]) + part[1, h]) + ...) over the chunks ascending (norm_dw_sum_kernel:
//                a thread per column).
// The same canonical row sequence gives the same chunks, the same partials, the same sum. No atomics.
// (Before: one serial chain per column over every row — for qk_norm's [T * heads, 128] rows ONE block of
// 128 threads walked 524288 rows at 16k tokens, on one SM.)
// A row's bits depend on H, NT and its own values only: not on how many rows share the launch, nor
// where the row sits (blockIdx only selects the row).
#pragma once

#include "ws1_cuda_common.cuh"

namespace ws1cu {

template <int NT, class TX, class TW>
__global__ void __launch_bounds__(NT) norm_fwd_kernel(const TX* __restrict__ x, const TW* __restrict__ w,
                                                      uint16_t* __restrict__ y, float* __restrict__ rstd, int H,
                                                      float eps) {
  __shared__ float red[NT / 32];
  const int64_t row = blockIdx.x;
  const TX* xr = x + row * H;
  float part = 0.0f;
  for (int h = threadIdx.x; h < H; h += NT) {
    const float v = ld(xr + h);
    part = fmaf(v, v, part);
  }
  const float ss = block_sum<NT>(part, red);
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(ss, static_cast<float>(H)) + eps));
  if (threadIdx.x == 0) rstd[row] = r;
  uint16_t* yr = y + row * H;
  for (int h = threadIdx.x; h < H; h += NT) yr[h] = bf16_rne((ld(xr + h) * r) * ld(w + h));
}

template <int NT, class TD, class TX, class TW>
__global__ void __launch_bounds__(NT) norm_bwd_kernel(const TD* __restrict__ dy, const TX* __restrict__ x,
                                                      const TW* __restrict__ w, const float* __restrict__ rstd,
                                                      float* __restrict__ dx, int H) {
  __shared__ float red[NT / 32];
  const int64_t row = blockIdx.x;
  const TD* dr = dy + row * H;
  const TX* xr = x + row * H;
  const float r = rstd[row];
  float part = 0.0f;
  for (int h = threadIdx.x; h < H; h += NT) part = fmaf(ld(dr + h) * ld(w + h), ld(xr + h), part);
  const float S = block_sum<NT>(part, red);
  const float c = __fdiv_rn(S, static_cast<float>(H)) * ((r * r) * r);
  float* o = dx + row * H;
  for (int h = threadIdx.x; h < H; h += NT) {
    const float xv = ld(xr + h);
    o[h] = fmaf(-xv, c, (ld(dr + h) * ld(w + h)) * r);
  }
}

constexpr int kDwThreads = 128;  // dweight: columns per block (elementwise in h, no effect on bits)
constexpr int kDwRows = 256;     // dweight: rows per chunk (part of every dweight's order: fixed)

// grid (ceil(H / kDwThreads), min(chunks, 65535)), chunks grid-stride along y: part [chunks, H] FP32, chunk c =
// rows c * kDwRows ... (c + 1) * kDwRows - 1 (which CTA computes a chunk changes nothing in it)
template <class TD, class TX>
__global__ void __launch_bounds__(kDwThreads) norm_dw_kernel(const TD* __restrict__ dy, const TX* __restrict__ x,
                                                             const float* __restrict__ rstd, float* __restrict__ part,
                                                             int64_t rows, int H) {
  const int h = blockIdx.x * kDwThreads + threadIdx.x;
  if (h >= H) return;
  const int64_t chunks = (rows + kDwRows - 1) / kDwRows;
  for (int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    const int64_t r0 = c * kDwRows, r1 = r0 + kDwRows < rows ? r0 + kDwRows : rows;
    float acc = 0.0f;
    for (int64_t row = r0; row < r1; ++row) acc = fmaf(ld(dy + row * H + h), ld(x + row * H + h) * rstd[row], acc);
    part[c * H + h] = acc;
  }
}

// grid ceil(H / kDwThreads): dw[h] = sum of part[c, h] over c ascending, from +0 (no rows: +0). A template only so
// that the two TUs including this header share one definition.
template <int = 0>
__global__ void __launch_bounds__(kDwThreads) norm_dw_sum_kernel(const float* __restrict__ part, float* __restrict__ dw,
                                                                 int64_t chunks, int H) {
  const int h = blockIdx.x * kDwThreads + threadIdx.x;
  if (h >= H) return;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc = __fadd_rn(acc, part[c * H + h]);
  dw[h] = acc;
}

}  // namespace ws1cu

// Explicit instantiations (every dtype combination the entry points launch), so that a device-only
// compile (-DWS1_DEVICE_ONLY) emits, and ptxas reports, every kernel the library can run.
#define WS1_NORM_INSTANTIATE(NT)                                                                                  \
  template __global__ void ws1cu::norm_fwd_kernel<NT, uint16_t, uint16_t>(const uint16_t*, const uint16_t*,     \
                                                                          uint16_t*, float*, int, float);        \
  template __global__ void ws1cu::norm_fwd_kernel<NT, uint16_t, float>(const uint16_t*, const float*, uint16_t*, \
                                                                       float*, int, float);                      \
  template __global__ void ws1cu::norm_fwd_kernel<NT, float, uint16_t>(const float*, const uint16_t*, uint16_t*, \
                                                                       float*, int, float);                      \
  template __global__ void ws1cu::norm_fwd_kernel<NT, float, float>(const float*, const float*, uint16_t*,       \
                                                                    float*, int, float);                         \
  WS1_NORM_BWD_INST(NT, uint16_t, uint16_t) WS1_NORM_BWD_INST(NT, uint16_t, float)                               \
  WS1_NORM_BWD_INST(NT, float, uint16_t) WS1_NORM_BWD_INST(NT, float, float)
#define WS1_NORM_BWD_INST(NT, TD, TX)                                                                            \
  template __global__ void ws1cu::norm_bwd_kernel<NT, TD, TX, uint16_t>(const TD*, const TX*, const uint16_t*,   \
                                                                        const float*, float*, int);              \
  template __global__ void ws1cu::norm_bwd_kernel<NT, TD, TX, float>(const TD*, const TX*, const float*,         \
                                                                     const float*, float*, int);
#define WS1_NORM_DW_INSTANTIATE()                                                                                   \
  template __global__ void ws1cu::norm_dw_kernel<uint16_t, uint16_t>(const uint16_t*, const uint16_t*, const float*, \
                                                                     float*, int64_t, int);                        \
  template __global__ void ws1cu::norm_dw_kernel<uint16_t, float>(const uint16_t*, const float*, const float*,    \
                                                                  float*, int64_t, int);                           \
  template __global__ void ws1cu::norm_dw_kernel<float, uint16_t>(const float*, const uint16_t*, const float*,    \
                                                                  float*, int64_t, int);                           \
  template __global__ void ws1cu::norm_dw_kernel<float, float>(const float*, const float*, const float*, float*,  \
                                                               int64_t, int);                                    \
  template __global__ void ws1cu::norm_dw_sum_kernel<0>(const float*, float*, int64_t, int);

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace norm {

struct Rows {
  int64_t rows;
  int H;
};

inline Rows check(const at::Tensor& x, const at::Tensor& w, const char* op, bool qk) {
  check_cuda(x, op, "x");
  check_same_device(x, w, op, "weight");
  check_float(x, op, "x");
  check_float(w, op, "weight");
  check_contig(x, op, "x");
  check_contig(w, op, "weight");
  if (qk) {
    TORCH_CHECK(x.dim() == 3, op, ": x must have rank 3 [T, n_heads, D], got shape ", x.sizes());
  } else {
    TORCH_CHECK(x.dim() >= 1, op, ": x must have rank >= 1, got shape ", x.sizes());
  }
  TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight must have shape [", x.size(-1), "], got ",
              w.sizes());
  const int64_t H = x.size(-1);
  TORCH_CHECK(H > 0 && H <= (int64_t{1} << 30), op, ": last dim must be in [1, 2^30], got ", H);
  return {x.numel() / H, static_cast<int>(H)};
}

template <class T>
const T* in(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, uint16_t>) return bf16_in(t);
  else return t.data_ptr<float>();
}

// Dispatch on the two dtypes, then call f(TX{}, TW{}) with typed null tags.
template <class F>
void by_dtype(const at::Tensor& a, const at::Tensor& b, F&& f) {
  const bool af = a.scalar_type() == at::kFloat, bf = b.scalar_type() == at::kFloat;
  if (af && bf) f(float{}, float{});
  else if (af) f(float{}, uint16_t{});
  else if (bf) f(uint16_t{}, float{});
  else f(uint16_t{}, uint16_t{});
}

template <int NT>
std::tuple<at::Tensor, at::Tensor> fwd(const at::Tensor& x, const at::Tensor& w, double eps, const char* op, bool qk) {
  const Rows s = check(x, w, op, qk);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
  if (s.rows == 0) return {y, rstd};
  TORCH_CHECK(s.rows < (int64_t{1} << 31), op, ": too many rows (", s.rows, ")");
  by_dtype(x, w, [&](auto tx, auto tw) {
    using TX = decltype(tx);
    using TW = decltype(tw);
    ws1cu::norm_fwd_kernel<NT, TX, TW><<<static_cast<unsigned>(s.rows), NT, 0, stream()>>>(
        in<TX>(x), in<TW>(w), bf16_out(y), rstd.data_ptr<float>(), s.H, static_cast<float>(eps));
  });
  check_launch(op);
  return {y, rstd};
}

template <int NT>
std::tuple<at::Tensor, at::Tensor> bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                       const at::Tensor& rstd, const char* op, bool qk) {
  const Rows s = check(x, w, op, qk);
  check_same_device(x, dy, op, "dy");
  check_same_device(x, rstd, op, "rstd");
  check_float(dy, op, "dy");
  check_contig(dy, op, "dy");
  TORCH_CHECK(dy.sizes() == x.sizes(), op, ": dy must have the shape of x ", x.sizes(), ", got ", dy.sizes());
  check_dtype(rstd, at::kFloat, op, "rstd");
  TORCH_CHECK(rstd.is_contiguous() && rstd.numel() == s.rows, op, ": rstd must be contiguous with ", s.rows,
              " elements (x.shape[:-1]), got shape ", rstd.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  auto opts = x.options().dtype(at::kFloat);
  at::Tensor dx = at::empty(x.sizes(), opts);
  at::Tensor dw = at::empty({s.H}, opts);
  TORCH_CHECK(s.rows < (int64_t{1} << 31), op, ": too many rows (", s.rows, ")");
  const int64_t chunks = ceil_div(s.rows, ws1cu::kDwRows);
  at::Tensor part = at::empty({std::max<int64_t>(chunks, 1) * s.H}, opts);
  by_dtype(dy, x, [&](auto td, auto tx) {
    using TD = decltype(td);
    using TX = decltype(tx);
    if (s.rows > 0) {
      by_dtype(w, w, [&](auto tw, auto) {
        using TW = decltype(tw);
        ws1cu::norm_bwd_kernel<NT, TD, TX, TW><<<static_cast<unsigned>(s.rows), NT, 0, stream()>>>(
            in<TD>(dy), in<TX>(x), in<TW>(w), rstd.data_ptr<float>(), dx.data_ptr<float>(), s.H);
      });
    }
    if (chunks > 0)
      ws1cu::norm_dw_kernel<TD, TX><<<dim3(static_cast<unsigned>(ceil_div(s.H, ws1cu::kDwThreads)),
                                           static_cast<unsigned>(std::min<int64_t>(chunks, 65535))),
                                      ws1cu::kDwThreads, 0, stream()>>>(in<TD>(dy), in<TX>(x), rstd.data_ptr<float>(),
                                                                       part.data_ptr<float>(), s.rows, s.H);
  });
  ws1cu::norm_dw_sum_kernel<0><<<static_cast<unsigned>(ceil_div(s.H, ws1cu::kDwThreads)), ws1cu::kDwThreads, 0, stream()>>>(
      part.data_ptr<float>(), dw.data_ptr<float>(), chunks, s.H);
  check_launch(op);
  return {dx, dw};
}

}  // namespace norm
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
