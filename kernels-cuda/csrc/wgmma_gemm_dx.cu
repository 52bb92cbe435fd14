// sm_90a GEMM instantiation: the backward's dx = dy [M, N] @ weight [N, K] (B N-major: the weight read as is) -> FP32.
// Both configurations (wide, narrow) of wgmma_gemm.h, whose header comment has the numerics and their proof.
#include "wgmma_gemm.cuh"

WS1_SM90_GEMM_DEFINE(dx, ws1cu::sm90::Major::K, ws1cu::sm90::Major::MN, float)
