// swiglu (ws1_cuda::swiglu, swiglu_bwd): gate, up [..., I] (BF16 or FP32, one dtype) -> silu(gate) * up in that
// dtype; backward -> (dgate, dup) FP32. The one code path shared with silu is activation.cuh.
#include "activation.cuh"

WS1_ACT_INSTANTIATE(true)

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  CallScope call("ws1_cuda::swiglu");
  return act::fwd<true>(gate, &up, "ws1_cuda::swiglu");
}

std::tuple<at::Tensor, at::Tensor> swiglu_bwd(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up) {
  CallScope call("ws1_cuda::swiglu_bwd");
  return act::bwd<true>(dy, gate, &up, "ws1_cuda::swiglu_bwd");
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
