// sm_90a GEMM instantiation: det_gemm's forward (x [M, K] @ weight [N, K]^T -> BF16) in the n32 CANDIDATE
// configuration (wgmma_gemm.h): 64 x 32 x 64 CTA tiles on wgmma m64n32k16, 16 stages. Never chosen by
// pick_config; reached only through ws1_kernels_cuda._C.det_gemm_in_config, by the GPU test that compares its bits
// with the narrow configuration's and by benchmarks/bench_cuda.py's candidate rows (docs/cuda.md).
#include "wgmma_gemm.cuh"

WS1_SM90_GEMM_DEFINE_N32(fwd_bf16, ws1cu::sm90::Major::K, ws1cu::sm90::Major::K, cutlass::bfloat16_t)
