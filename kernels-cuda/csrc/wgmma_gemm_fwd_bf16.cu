// sm_90a GEMM instantiation: the forward of det_gemm: x [M, K] @ weight [N, K]^T -> BF16.
// Both configurations (wide, narrow) of wgmma_gemm.h, whose header comment has the numerics and their proof.
#include "wgmma_gemm.cuh"

WS1_SM90_GEMM_DEFINE(fwd_bf16, ws1cu::sm90::Major::K, ws1cu::sm90::Major::K, cutlass::bfloat16_t)
