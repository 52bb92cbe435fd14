// The one registration file of ws1_cuda: the op schemas (TORCH_LIBRARY(ws1_cuda)) — exactly kernels-cpu's
// signatures — their CUDA implementations (the entry points of the per-node .cu files), their Meta
// implementations (shapes and dtypes only, for fake tensors and torch.compile), and the self-report
// ws1_cuda::calls(): how often each entry point ran to completion, by the device arch ("sm_90", "sm_80"), and
// for the GEMMs by the kernel that ran ("sm_90:wgmma", "sm_90:wgmma_bf16x3", "sm_80:mma_sync", "sm_80:simt_fp32").
#include <torch/extension.h>
#include <torch/library.h>

#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "ws1_cuda_host.h"
#include "ws1_cuda_ops.h"

namespace ws1_cuda {

namespace {
std::mutex g_mu;
std::map<std::string, std::map<std::string, int64_t>> g_calls;  // kernel id -> arch -> calls

std::string arch_name() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "unknown";
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return "sm_" + std::to_string(major) + std::to_string(minor);
}
}  // namespace

CallScope::CallScope(const char* kernel_id) : id_(kernel_id), uncaught_(std::uncaught_exceptions()) {}

CallScope::~CallScope() {
  if (std::uncaught_exceptions() > uncaught_) return;  // the entry point raised: it did not run
  std::string arch = arch_name();  // the current device, which the entry point's guard selected
  if (kernel_ != nullptr) arch += std::string(":") + kernel_;
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_calls[id_][arch];
}

std::string calls_json() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string out = "{";
  for (const auto& [id, paths] : g_calls) {
    if (out.size() > 1) out += ", ";
    out += "\"" + id + "\": {";
    bool first = true;
    for (const auto& [path, n] : paths) {
      if (!first) out += ", ";
      first = false;
      out += "\"" + path + "\": " + std::to_string(n);
    }
    out += "}";
  }
  return out + "}";
}

namespace meta {
using at::Tensor;
Tensor f32(const Tensor& like, at::IntArrayRef sizes) { return at::empty(sizes, like.options().dtype(at::kFloat)); }

Tensor embedding(const Tensor& ids, const Tensor& w) { return at::empty({ids.numel(), w.size(1)}, w.options()); }
Tensor embedding_bwd(const Tensor& dy, const Tensor&, int64_t V) { return f32(dy, {V, dy.size(1)}); }
T2 norm(const Tensor& x, const Tensor&, double) {
  return {at::empty(x.sizes(), x.options().dtype(at::kBFloat16)), f32(x, x.sizes().slice(0, x.dim() - 1))};
}
T2 norm_bwd(const Tensor&, const Tensor& x, const Tensor& w, const Tensor&) { return {f32(x, x.sizes()), f32(x, w.sizes())}; }
Tensor det_gemm(const Tensor& x, const Tensor& w) { return at::empty({x.size(0), w.size(0)}, x.options()); }
Tensor lm_head(const Tensor& x, const Tensor& w) { return f32(x, {x.size(0), w.size(0)}); }
Tensor gemm(const Tensor& a, const Tensor& b, bool out_fp32) {
  return at::empty({a.size(0), b.size(0)}, a.options().dtype(out_fp32 ? at::kFloat : at::kBFloat16));
}
Tensor rope(const Tensor& x, const Tensor&, double, bool) { return at::empty(x.sizes(), x.options()); }
T2 attention(const Tensor& q, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double) {
  return {at::empty(q.sizes(), q.options()), f32(q, {q.size(0), q.size(1)})};
}
T3 attention_bwd(const Tensor&, const Tensor& q, const Tensor& k, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                 const Tensor&, const Tensor&, double) {
  return {f32(q, q.sizes()), f32(k, k.sizes()), f32(k, k.sizes())};
}
Tensor swiglu(const Tensor& g, const Tensor&) { return at::empty(g.sizes(), g.options()); }
T2 swiglu_bwd(const Tensor&, const Tensor& g, const Tensor&) { return {f32(g, g.sizes()), f32(g, g.sizes())}; }
Tensor silu(const Tensor& x) { return at::empty(x.sizes(), x.options()); }
Tensor silu_bwd(const Tensor&, const Tensor& x) { return f32(x, x.sizes()); }
T2 logprob(const Tensor& l, const Tensor&) { return {f32(l, {l.size(0)}), f32(l, {l.size(0)})}; }
Tensor logprob_bwd(const Tensor&, const Tensor& l, const Tensor&, const Tensor&) { return f32(l, l.sizes()); }
T2 batch_invariant_logp(const Tensor& l) { return {f32(l, l.sizes()), f32(l, {l.size(0)})}; }
Tensor batch_invariant_logp_bwd(const Tensor&, const Tensor& lp) { return f32(lp, lp.sizes()); }
}  // namespace meta

}  // namespace ws1_cuda

static std::string calls_op() { return ws1_cuda::calls_json(); }

TORCH_LIBRARY(ws1_cuda, m) {
  m.def("embedding(Tensor ids, Tensor weight) -> Tensor");
  m.def("embedding_bwd(Tensor dy, Tensor ids, int num_embeddings) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
  m.def("qk_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("qk_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
  m.def("det_gemm(Tensor x, Tensor weight) -> Tensor");
  m.def("lm_head(Tensor x, Tensor weight) -> Tensor");
  m.def("gemm(Tensor a, Tensor b, bool out_fp32) -> Tensor");
  m.def("rope(Tensor x, Tensor positions, float theta, bool inverse) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, Tensor q_pos, float scale)"
        " -> (Tensor, Tensor)");
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, Tensor q_pos, float scale) -> (Tensor, Tensor, Tensor)");
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");
  m.def("swiglu_bwd(Tensor dy, Tensor gate, Tensor up) -> (Tensor, Tensor)");
  m.def("silu(Tensor x) -> Tensor");
  m.def("silu_bwd(Tensor dy, Tensor x) -> Tensor");
  m.def("logprob(Tensor logits, Tensor targets) -> (Tensor, Tensor)");
  m.def("logprob_bwd(Tensor g, Tensor logits, Tensor lse, Tensor targets) -> Tensor");
  m.def("batch_invariant_logp(Tensor logits) -> (Tensor, Tensor)");
  m.def("batch_invariant_logp_bwd(Tensor g, Tensor logp) -> Tensor");
  m.def("calls() -> str", &calls_op);  // no tensor argument: a catch-all kernel
}

#define WS1_IMPLS(NS)                                           \
  m.impl("embedding", &NS::embedding);                          \
  m.impl("embedding_bwd", &NS::embedding_bwd);                  \
  m.impl("det_gemm", &NS::det_gemm);                            \
  m.impl("lm_head", &NS::lm_head);                              \
  m.impl("gemm", &NS::gemm);                                    \
  m.impl("rope", &NS::rope);                                    \
  m.impl("attention", &NS::attention);                          \
  m.impl("attention_bwd", &NS::attention_bwd);                  \
  m.impl("swiglu", &NS::swiglu);                                \
  m.impl("swiglu_bwd", &NS::swiglu_bwd);                        \
  m.impl("silu", &NS::silu);                                    \
  m.impl("silu_bwd", &NS::silu_bwd);                            \
  m.impl("logprob", &NS::logprob);                              \
  m.impl("logprob_bwd", &NS::logprob_bwd);                      \
  m.impl("batch_invariant_logp", &NS::batch_invariant_logp);    \
  m.impl("batch_invariant_logp_bwd", &NS::batch_invariant_logp_bwd);

TORCH_LIBRARY_IMPL(ws1_cuda, CUDA, m) {
  WS1_IMPLS(ws1_cuda)
  m.impl("rms_norm", &ws1_cuda::rms_norm);
  m.impl("rms_norm_bwd", &ws1_cuda::rms_norm_bwd);
  m.impl("qk_norm", &ws1_cuda::qk_norm);
  m.impl("qk_norm_bwd", &ws1_cuda::qk_norm_bwd);
}

TORCH_LIBRARY_IMPL(ws1_cuda, Meta, m) {
  WS1_IMPLS(ws1_cuda::meta)
  m.impl("rms_norm", &ws1_cuda::meta::norm);
  m.impl("rms_norm_bwd", &ws1_cuda::meta::norm_bwd);
  m.impl("qk_norm", &ws1_cuda::meta::norm);
  m.impl("qk_norm_bwd", &ws1_cuda::meta::norm_bwd);
}

// The ops are reached through torch.ops.ws1_cuda. The Python module holds one function that is not an op (nothing
// in ws1_ops calls it): det_gemm in a named sm_90a configuration, for the GPU tests and benchmarks that compare the
// configurations' bits and times (wgmma_gemm.h). Its handle is `py`, not `m`: the tests and tools read this file's
// m-dot-def calls as the op schemas.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, py) {
  py.def("det_gemm_in_config", &ws1_cuda::det_gemm_in_config, pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("config"),
        "det_gemm(x, weight) in the sm_90a configuration 'narrow', 'wide' or 'narrow_n32' (the candidate); "
        "an error off sm_90. For tests and benchmarks: the ops choose their configuration themselves.");
}
