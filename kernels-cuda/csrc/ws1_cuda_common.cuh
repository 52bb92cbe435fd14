// Device numerics shared by every ws1_cuda kernel. No torch header: with -DWS1_DEVICE_ONLY each .cu
// compiles its kernels with nvcc alone (ci: kernels-cuda/tools/compile_check.py), so the resource report
// needs no torch install.
//
// Conventions every kernel keeps (docs/cuda.md has the invariance argument):
//  * FP32 arithmetic, BF16 only at the storage points; BF16 rounding is one integer RNE (bf16_rne), the
//    same bits as kernels-cpu's f32_to_bf16_bits, never a cvt whose rounding mode a flag could change;
//  * the build passes --fmad=false: nvcc never contracts a*b+c into an FMA behind the source's back;
//    every FMA is an explicit fmaf(). Division and square root are IEEE (__fdiv_rn, __fsqrt_rn), exp and
//    log are CUDA's full-precision expf/logf (no --use_fast_math, no __expf);
//  * reductions across threads go through one fixed tree (block_sum / block_max below), whose shape
//    depends only on the block size, which every op fixes at compile time (never chosen by row count);
//  * no atomics anywhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace ws1cu {

// ---- BF16 <-> FP32 --------------------------------------------------------------------------------
__device__ __forceinline__ float bf16_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays a (quiet) NaN. Integer ops only: identical on every arch.
__device__ __forceinline__ uint16_t bf16_rne(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Typed element access: uint16_t is BF16 bits, float is FP32.
__device__ __forceinline__ float ld(const uint16_t* p) { return bf16_f32(*p); }
__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ void st(uint16_t* p, float v) { *p = bf16_rne(v); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }

// ---- fixed-tree reductions -------------------------------------------------------------------------
// Warp: xor butterfly 16, 8, 4, 2, 1. a + b == b + a bitwise, so after each step both partners hold the
// same value and every lane ends with the same sum; the tree is fixed, whatever the data.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block of NT threads (a compile-time constant, multiple of 32, <= 1024): each warp's butterfly, then
// warp 0 folds the NT/32 warp results with the same butterfly (missing lanes hold the identity).
// Every thread returns the block's value. `red` is NT/32 floats of shared memory; the function starts
// and ends with a barrier so it can be called back to back.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* red) {
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  constexpr int NW = NT / 32;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < NW ? red[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}
template <int NT>
__device__ __forceinline__ float block_max(float v, float* red) {
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  constexpr int NW = NT / 32;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < NW ? red[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

}  // namespace ws1cu
