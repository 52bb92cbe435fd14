// qk_norm (ws1_cuda::qk_norm, qk_norm_bwd): x [T, n_heads, D] -> (y BF16 [T, n_heads, D], rstd FP32 [T, n_heads]).
// The rms_norm core (norm_core.cuh) on the [T * n_heads, D] (token, head) rows: one block of 128 threads
// per (token, head) row (D = 128: one column per thread), fixed whatever T is. Its own entry points, so the
// node reports its own kernel id.
#include "norm_core.cuh"

namespace {
constexpr int kThreads = 128;  // qk_norm's block size
}  // namespace

WS1_NORM_INSTANTIATE(kThreads)

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

std::tuple<at::Tensor, at::Tensor> qk_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  CallScope call("ws1_cuda::qk_norm");
  return norm::fwd<kThreads>(x, weight, eps, "ws1_cuda::qk_norm", true);
}

std::tuple<at::Tensor, at::Tensor> qk_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                               const at::Tensor& rstd) {
  CallScope call("ws1_cuda::qk_norm_bwd");
  return norm::bwd<kThreads>(dy, x, weight, rstd, "ws1_cuda::qk_norm_bwd", true);
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
