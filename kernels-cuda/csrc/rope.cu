// rope (ws1_cuda::rope): rotary embedding, rotate-half convention (HF Qwen3), forward and inverse.
// x [T, n_heads, D] (BF16 or FP32, D even), positions [T] int64 >= 0 -> [T, n_heads, D] in x's dtype.
//
// For token t at position p and pair i < D/2 (x1 = x[i], x2 = x[i + D/2]):
//   inv_freq_i = (float)(1 / pow((double)theta, (double)(2i) / D))      (FP64, then one rounding)
//   angle      = (float)p * inv_freq_i                                  (one FP32 multiply)
//   c = (float)cos((double)angle),  s = (float)sin((double)angle)        (FP64 libdevice, then rounded)
//   forward:  out1 = x1*c - x2*s,  out2 = x2*c + x1*s                    (separate roundings, --fmad=false)
//   inverse:  out1 = x1*c + x2*s,  out2 = x2*c - x1*s                    (the transpose: the backward)
// The formulas of kernels-cpu/csrc/rope.cpp. cos/sin come from (p, i) alone, computed in the thread that
// uses them, so a token rotates identically in prefill, a chunk, or a decode step; no reduction.
#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kRopeThreads = 128;

template <class T>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                            const int64_t* __restrict__ pos, int NH, int D,
                                                            double theta, bool inverse) {
  const int64_t t = blockIdx.x;
  const int half = D / 2;
  const int idx = blockIdx.y * kRopeThreads + threadIdx.x;  // (head, pair) of this token
  if (idx >= NH * half) return;
  const int h = idx / half, i = idx % half;
  const int64_t base = (t * NH + h) * static_cast<int64_t>(D);
  if (pos[t] < 0) {  // only reachable when the host check was skipped under graph capture: NaN, never a rotation
    st(y + base + i, __int_as_float(0x7fc00000));
    st(y + base + half + i, __int_as_float(0x7fc00000));
    return;
  }
  const float inv = static_cast<float>(1.0 / pow(theta, static_cast<double>(2 * i) / D));
  const float ang = static_cast<float>(pos[t]) * inv;
  const float c = static_cast<float>(cos(static_cast<double>(ang)));
  const float s = static_cast<float>(sin(static_cast<double>(ang)));
  const float x1 = ld(x + base + i), x2 = ld(x + base + half + i);
  const float a = x1 * c, b = x2 * s, cc = x2 * c, d = x1 * s;
  st(y + base + i, inverse ? a + b : a - b);
  st(y + base + half + i, inverse ? cc - d : cc + d);
}

}  // namespace ws1cu

template __global__ void ws1cu::rope_kernel<uint16_t>(const uint16_t*, uint16_t*, const int64_t*, int, int, double, bool);
template __global__ void ws1cu::rope_kernel<float>(const float*, float*, const int64_t*, int, int, double, bool);

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

namespace ws1_cuda {

at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, double theta, bool inverse) {
  const char* op = "ws1_cuda::rope";
  CallScope call(op);
  check_cuda(x, op, "x");
  check_same_device(x, positions, op, "positions");
  check_dim(x, 3, op, "x");
  check_float(x, op, "x");
  TORCH_CHECK(x.size(2) % 2 == 0, op, ": head_dim must be even, got ", x.size(2));
  check_dtype(positions, at::kLong, op, "positions");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == x.size(0), op, ": positions must be [", x.size(0), "], got ",
              positions.sizes());
  TORCH_CHECK(theta > 0, op, ": theta must be > 0");
  TORCH_CHECK(x.size(1) * x.size(2) < (int64_t{1} << 30), op, ": n_heads * head_dim too large");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xc = x.contiguous(), pc = positions.contiguous();
  if (pc.numel() > 0 && !capturing()) {  // one host sync: a negative position is an error (capture: NaN, see capturing())
    TORCH_CHECK(pc.min().item<int64_t>() >= 0, op, ": positions must be >= 0");
  }
  at::Tensor y = at::empty_like(xc);
  const int64_t T = xc.size(0);
  const int NH = static_cast<int>(xc.size(1)), D = static_cast<int>(xc.size(2));
  if (T == 0 || NH == 0 || D == 0) return y;
  TORCH_CHECK(T < (int64_t{1} << 31), op, ": too many tokens");
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(ceil_div(int64_t{NH} * (D / 2), ws1cu::kRopeThreads)));
  if (xc.scalar_type() == at::kFloat)
    ws1cu::rope_kernel<float><<<grid, ws1cu::kRopeThreads, 0, stream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                                                         pc.data_ptr<int64_t>(), NH, D, theta, inverse);
  else
    ws1cu::rope_kernel<uint16_t><<<grid, ws1cu::kRopeThreads, 0, stream()>>>(bf16_in(xc), bf16_out(y),
                                                                            pc.data_ptr<int64_t>(), NH, D, theta, inverse);
  check_launch(op);
  return y;
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
