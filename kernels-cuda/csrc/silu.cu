// silu (ws1_cuda::silu, silu_bwd): x [...] (BF16 or FP32) -> silu(x) in x's dtype; backward -> dx FP32.
// swiglu's code path (activation.cuh) with up the constant 1.0f: silu(x) == swiglu(x, 1) bitwise.
#include "activation.cuh"

WS1_ACT_INSTANTIATE(false)

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

at::Tensor silu(const at::Tensor& x) {
  CallScope call("ws1_cuda::silu");
  return act::fwd<false>(x, nullptr, "ws1_cuda::silu");
}

at::Tensor silu_bwd(const at::Tensor& dy, const at::Tensor& x) {
  CallScope call("ws1_cuda::silu_bwd");
  return std::get<0>(act::bwd<false>(dy, x, nullptr, "ws1_cuda::silu_bwd"));
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
