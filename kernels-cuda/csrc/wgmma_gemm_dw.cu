// sm_90a GEMM instantiation: the backward's dW = dy^T @ x over the rows in canonical order (both operands M/N-major) -> FP32.
// Both configurations (wide, narrow) of wgmma_gemm.h, whose header comment has the numerics and their proof.
#include "wgmma_gemm.cuh"

WS1_SM90_GEMM_DEFINE(dw, ws1cu::sm90::Major::MN, ws1cu::sm90::Major::MN, float)
