// lm_head (ws1_cuda::lm_head): x [M, K] BF16 @ weight [V, K]^T -> logits [M, V] FP32. det_gemm's tensor-core
// kernel (mma_gemm.cuh: one fixed 64x128x32 configuration, K ascending, FP32 accumulation) without the final
// rounding. Its backward is det_gemm.cu's `gemm` with an FP32 dy (dx and dW, the FP32 logit gradient kept exact:
// on sm_90 split exactly into three BF16 parts on the wgmma kernel, on sm_80 the CUDA-core serial chain).
#include "mma_gemm.cuh"

WS1_MMA_GEMM_INSTANTIATE(true)

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

at::Tensor lm_head(const at::Tensor& x, const at::Tensor& weight) {
  CallScope call("ws1_cuda::lm_head");
  return mma::run(x, weight, /*out_f32=*/true, "ws1_cuda::lm_head", call);
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
