// ws1_ascend_launch.h — the host launchers every .asc file defines (ws1_launch_<kernel>): blockDim, stream,
// then the kernel's arguments (GM addresses as uint8_t*). Compiled by bisheng with the kernels on an NPU
// host; in the emulator build the .asc files are compiled into the same translation unit.
#pragma once
#include <cstdint>

// The K panel width of the Cube GEMMs' operands (cube_gemm.h): the widest multiple of 64 (every baseK) that
// Nd2NzParams' 16-bit srcDValue holds, 1023 chunks of 64. The host cuts a [rows, K] operand with K above it into
// row-major panels [rows, width]; the kernels' last argument is the width used.
constexpr int64_t kWs1KPanel = 65472;

// The attention kernels' GM workspace per AI core (attention.h, attention_bwd.h: two tile slots of S, P, O, resp. of
// S, dP and two BF16 operands, [64 x 128] each). The host allocates blockDim times this.
constexpr uint64_t kWs1AttnWsBytes = 163840, kWs1AttnBwdWsBytes = 196608;

void ws1_launch_embedding(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int32_t, int64_t, int64_t, int64_t);
void ws1_launch_embedding_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t,
                              int64_t, int64_t);
void ws1_launch_rms_norm(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t, int64_t,
                         float);
void ws1_launch_rms_norm_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t,
                             int32_t, int64_t, int64_t);
void ws1_launch_rms_norm_dw(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t,
                            int64_t);
void ws1_launch_qk_norm(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t, int64_t,
                        float);
void ws1_launch_qk_norm_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t,
                            int32_t, int64_t, int64_t);
void ws1_launch_qk_norm_dw(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t,
                           int64_t);
void ws1_launch_det_gemm(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t);
void ws1_launch_lm_head(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t);
void ws1_launch_gemm_fp32(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t);
void ws1_launch_rope(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int64_t, int64_t, int64_t,
                     int32_t);
void ws1_launch_swiglu(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int32_t, int64_t);
void ws1_launch_swiglu_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int64_t);
void ws1_launch_silu(uint32_t, void*, uint8_t*, uint8_t*, int32_t, int64_t);
void ws1_launch_silu_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int32_t, int64_t);
void ws1_launch_logprob(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t);
void ws1_launch_logprob_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t);
void ws1_launch_batch_invariant_logp(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t);
void ws1_launch_batch_invariant_logp_bwd(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t);
void ws1_launch_attention(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*,
                          uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float);
void ws1_launch_attention_bwd_prep(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t,
                                   int64_t);
void ws1_launch_attention_bwd_dq(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*,
                                 uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, float);
void ws1_launch_attention_bwd_dkv(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*,
                                  uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, float);
void ws1_launch_variant_attention_buffer_tiles(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*,
                                               uint8_t*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, float);
void ws1_launch_variant_lm_head_small_k(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t,
                                         int64_t);
void ws1_launch_variant_rms_norm_small_tile(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t,
                                            int64_t, int64_t, float);
