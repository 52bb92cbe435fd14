// rms_norm (ws1_cuda::rms_norm, rms_norm_bwd): x [T, H] (or any [..., H]) -> (y BF16, rstd FP32 [...]).
// The arithmetic and its invariance argument are in norm_core.cuh (shared with qk_norm): one block of 256
// threads per row whatever the row count, fixed per-thread column stride, one fixed reduction tree.
#include "norm_core.cuh"

namespace {
constexpr int kThreads = 256;  // rms_norm's block size (H = 4096: 16 columns per thread)
}  // namespace

WS1_NORM_INSTANTIATE(kThreads)
WS1_NORM_DW_INSTANTIATE()

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  CallScope call("ws1_cuda::rms_norm");
  return norm::fwd<kThreads>(x, weight, eps, "ws1_cuda::rms_norm", false);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                                const at::Tensor& rstd) {
  CallScope call("ws1_cuda::rms_norm_bwd");
  return norm::bwd<kThreads>(dy, x, weight, rstd, "ws1_cuda::rms_norm_bwd", false);
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
