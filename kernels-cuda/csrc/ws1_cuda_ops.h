// The entry points of the ws1_cuda kernels, one per op, each defined in its node's .cu file (the op name is
// the function name: C2 checks that the manifest's source defines it). Registered in ws1_cuda.cpp.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <tuple>

namespace ws1_cuda {

using T2 = std::tuple<at::Tensor, at::Tensor>;
using T3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// embedding.cu
at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight);
at::Tensor embedding_bwd(const at::Tensor& dy, const at::Tensor& ids, int64_t num_embeddings);
// rms_norm.cu, qk_norm.cu
T2 rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
T2 rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd);
T2 qk_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
T2 qk_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd);
// det_gemm.cu (det_gemm, and gemm: the backward GEMM of det_gemm and lm_head), lm_head.cu
at::Tensor det_gemm(const at::Tensor& x, const at::Tensor& weight);
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, bool out_fp32);
at::Tensor lm_head(const at::Tensor& x, const at::Tensor& weight);
// Not an op: det_gemm in a named sm_90a configuration ("narrow", "wide", "narrow_n32": wgmma_gemm.h), a Python
// function of ws1_kernels_cuda._C for the GPU tests and benchmarks of the configurations (ws1_cuda.cpp).
at::Tensor det_gemm_in_config(const at::Tensor& x, const at::Tensor& weight, const std::string& config);
// rope.cu
at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, double theta, bool inverse);
// attention.cu
T2 attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
             const at::Tensor& cu_seqlens_k, const at::Tensor& q_pos, double scale);
T3 attention_bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                 const at::Tensor& lse, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                 const at::Tensor& q_pos, double scale);
// swiglu.cu, silu.cu
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);
T2 swiglu_bwd(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up);
at::Tensor silu(const at::Tensor& x);
at::Tensor silu_bwd(const at::Tensor& dy, const at::Tensor& x);
// logprob.cu, batch_invariant_logp.cu
T2 logprob(const at::Tensor& logits, const at::Tensor& targets);
at::Tensor logprob_bwd(const at::Tensor& g, const at::Tensor& logits, const at::Tensor& lse, const at::Tensor& targets);
T2 batch_invariant_logp(const at::Tensor& logits);
at::Tensor batch_invariant_logp_bwd(const at::Tensor& g, const at::Tensor& logp);

}  // namespace ws1_cuda
