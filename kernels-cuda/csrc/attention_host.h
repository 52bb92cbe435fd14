// Host side of the attention op shared by its translation units (torch; never included with WS1_DEVICE_ONLY): the
// checked shapes of a call (Meta) and the launchers. Each launcher is defined in the translation unit that
// instantiates the kernels it launches (attention_plan.cu, attention_fwd.cu, attention_bwd.cu), never elsewhere:
// nvcc gives a template kernel's host stub internal linkage, so a launch from another TU would not link, and a
// kernel launched from two TUs would be compiled twice. attention.cu (the entry points) launches no kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "attention_mma.cuh"
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace attn_host {
namespace A = ws1cu::attn;

struct Meta {
  int64_t Tq, Tk, Hq, Hkv, D, B;
  bool checked = false;               // the values were validated on the host (an eager call)
  std::vector<int64_t> cq, ck, qpos;  // host copies (eager backward: its repeated-position check)
};

template <class Kern>
void set_smem(Kern kern, int bytes, const char* op) {
  const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  TORCH_CHECK(e == cudaSuccess, op, ": cannot give the kernel ", bytes, " bytes of shared memory: ", cudaGetErrorString(e));
}

// attention_plan.cu: the forward's plan (also the backward's dQ items) and the backward's key plan.
at::Tensor make_plan(const char* op, const Meta& m, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos,
                     int bm, bool split_ok, int64_t cap);
at::Tensor make_kvplan(const char* op, const Meta& m, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos);

// attention_fwd.cu (DP = 64, 128): the launch configuration, the plan, the forward kernel and, in chunk mode, the merge.
template <int DP>
void run_forward(const char* op, const Meta& m, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos, double scale, at::Tensor& out,
                 at::Tensor& lse);

// The backward's tensors as the entry point prepares them: q, k, v 16-byte aligned; out BF16, lse FP32 and dout
// (BF16 or FP32) contiguous; dob (dO in BF16), delta, lse2 (the prep kernel's outputs) and dq, dk, dv allocated.
struct BwdTensors {
  at::Tensor q, k, v, out, lse, dout, dob, delta, lse2, dq, dk, dv;
};

// attention_bwd.cu (DP = 64, 128): the prep kernel, both plans, the dQ and dK/dV kernels.
template <int DP>
void run_backward(const char* op, const Meta& m, BwdTensors& t, const at::Tensor& cu_q, const at::Tensor& cu_k,
                  const at::Tensor& q_pos, double scale);

}  // namespace attn_host
}  // namespace ws1_cuda
