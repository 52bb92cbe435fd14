// sm_90a GEMM instantiation: the forward of lm_head: x [M, K] @ weight [V, K]^T -> FP32 logits.
// Both configurations (wide, narrow) of wgmma_gemm.h, whose header comment has the numerics and their proof.
#include "wgmma_gemm.cuh"

WS1_SM90_GEMM_DEFINE(fwd_f32, ws1cu::sm90::Major::K, ws1cu::sm90::Major::K, float)
