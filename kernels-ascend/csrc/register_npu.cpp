// register_npu.cpp — the CANN build's torch registration: torch.ops.ws1_ascend.* on NPU tensors (PrivateUse1)
// plus Meta (shape-only) implementations. The kernels themselves are compiled by bisheng from csrc/*.asc into
// libws1_ascend_kernels.so (setup.py); this file is compiled by the host compiler through torch_npu's
// NpuExtension and calls their host launchers (ws1_ascend_launch.h).
//
// Launch: on c10_npu::getCurrentNPUStream(), inside at_npu::native::OpCommand with a custom handler — the
// pattern of Ascend's op-plugin custom-kernel examples — so the launch is ordered with torch_npu's own ops
// (task queue on or off). NOT COMPILED IN THIS REPOSITORY'S CI: no CANN / torch_npu here (docs/ascend.md).
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/OpCommand.h"
#include "tiling/platform/platform_ascendc.h"

#include <utility>

// The SoC's core counts, read once (the first launch) through CANN's PlatformAscendCManager — the documented way for
// kernel-launch (<<<>>>) operators to learn the hardware ("PlatformAscendCManager.md": GetInstance(), then
// GetCoreNumAic / GetCoreNumAiv, "GetCoreNumAic.md": the Cube cores of the separated (A2/A3) architecture; needs
// libtiling_api and libplatform, linked by setup.py). 0 (an unreadable platform) fails the launch with one line.
inline std::pair<uint32_t, uint32_t> ws1a_npu_soc_cores() {
  platform_ascendc::PlatformAscendC* p = platform_ascendc::PlatformAscendCManager::GetInstance();
  if (p == nullptr) return {0u, 0u};
  return {p->GetCoreNumAic(), p->GetCoreNumAiv()};
}
#define WS1A_SOC_CORES() ws1a_npu_soc_cores()

#define WS1A_NAME "ws1_ascend"
#define WS1A_PATH "npu"
#define WS1A_DEVICE_TYPE c10::DeviceType::PrivateUse1
#define WS1A_DEVICE_NAME "NPU"
#define WS1A_RUN(name, fn)                                                           \
  do {                                                                               \
    void* ws1a_stream = static_cast<void*>(c10_npu::getCurrentNPUStream().stream(false)); \
    auto ws1a_fn = (fn);                                                             \
    at_npu::native::OpCommand ws1a_cmd;                                              \
    ws1a_cmd.Name(name);                                                             \
    ws1a_cmd.SetCustomHandler([ws1a_fn, ws1a_stream]() -> int {                      \
      ws1a_fn(ws1a_stream);                                                          \
      return 0;                                                                      \
    });                                                                              \
    ws1a_cmd.Run();                                                                  \
  } while (0)
#include "ws1_ascend_ops.h"

#include <torch/extension.h>

namespace {
// Meta: output shapes and dtypes only (torch.compile / fake tensors); no checks beyond what shapes need.
at::Tensor m_like(const at::Tensor& t, at::ScalarType d) { return at::empty(t.sizes(), t.options().dtype(d)); }
std::tuple<at::Tensor, at::Tensor> m_norm(const at::Tensor& x, const at::Tensor&, double) {
  return {m_like(x, at::kBFloat16), at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat))};
}
std::tuple<at::Tensor, at::Tensor> m_norm_bwd(const at::Tensor&, const at::Tensor& x, const at::Tensor&,
                                              const at::Tensor&) {
  return {m_like(x, at::kFloat), at::empty({x.size(-1)}, x.options().dtype(at::kFloat))};
}
at::Tensor m_gemm(const at::Tensor& x, const at::Tensor& w) { return at::empty({x.size(0), w.size(0)}, x.options()); }
at::Tensor m_lm_head(const at::Tensor& x, const at::Tensor& w) {
  return at::empty({x.size(0), w.size(0)}, x.options().dtype(at::kFloat));
}
at::Tensor m_gemm_general(const at::Tensor& a, const at::Tensor& b, bool) {
  return at::empty({a.size(0), b.size(0)}, a.options().dtype(at::kFloat));
}
at::Tensor m_embedding(const at::Tensor& ids, const at::Tensor& w) { return at::empty({ids.numel(), w.size(1)}, w.options()); }
at::Tensor m_embedding_bwd(const at::Tensor& dy, const at::Tensor&, int64_t V) {
  return at::empty({V, dy.size(1)}, dy.options().dtype(at::kFloat));
}
at::Tensor m_rope(const at::Tensor& x, const at::Tensor&, double, bool) { return m_like(x, x.scalar_type()); }
at::Tensor m_swiglu(const at::Tensor& g, const at::Tensor&) { return m_like(g, g.scalar_type()); }
at::Tensor m_silu(const at::Tensor& x) { return m_like(x, x.scalar_type()); }
std::tuple<at::Tensor, at::Tensor> m_swiglu_bwd(const at::Tensor&, const at::Tensor& g, const at::Tensor&) {
  return {m_like(g, at::kFloat), m_like(g, at::kFloat)};
}
at::Tensor m_silu_bwd(const at::Tensor&, const at::Tensor& x) { return m_like(x, at::kFloat); }
std::tuple<at::Tensor, at::Tensor> m_logprob(const at::Tensor& l, const at::Tensor&) {
  return {at::empty({l.size(0)}, l.options()), at::empty({l.size(0)}, l.options())};
}
std::tuple<at::Tensor, at::Tensor> m_bilp(const at::Tensor& l) { return {m_like(l, at::kFloat), at::empty({l.size(0)}, l.options())}; }
at::Tensor m_logprob_bwd(const at::Tensor&, const at::Tensor& l, const at::Tensor&, const at::Tensor&) {
  return m_like(l, at::kFloat);
}
at::Tensor m_bilp_bwd(const at::Tensor&, const at::Tensor& l) { return m_like(l, at::kFloat); }
std::tuple<at::Tensor, at::Tensor> m_attention(const at::Tensor& q, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, const at::Tensor&, double) {
  return {m_like(q, q.scalar_type()), at::empty({q.size(0), q.size(1)}, q.options().dtype(at::kFloat))};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> m_attention_bwd(const at::Tensor&, const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                double) {
  return {m_like(q, at::kFloat), m_like(k, at::kFloat), m_like(k, at::kFloat)};
}
}  // namespace

TORCH_LIBRARY(ws1_ascend, m) { WS1A_DEFINE_LIBRARY(m); }
TORCH_LIBRARY_IMPL(ws1_ascend, PrivateUse1, m) { WS1A_IMPL_LIBRARY(m); }
TORCH_LIBRARY_IMPL(ws1_ascend, Meta, m) {
  m.impl("embedding", &m_embedding);
  m.impl("embedding_bwd", &m_embedding_bwd);
  m.impl("rms_norm", &m_norm);
  m.impl("qk_norm", &m_norm);
  m.impl("rms_norm_bwd", &m_norm_bwd);
  m.impl("qk_norm_bwd", &m_norm_bwd);
  m.impl("det_gemm", &m_gemm);
  m.impl("lm_head", &m_lm_head);
  m.impl("gemm", &m_gemm_general);
  m.impl("rope", &m_rope);
  m.impl("swiglu", &m_swiglu);
  m.impl("silu", &m_silu);
  m.impl("swiglu_bwd", &m_swiglu_bwd);
  m.impl("silu_bwd", &m_silu_bwd);
  m.impl("logprob", &m_logprob);
  m.impl("batch_invariant_logp", &m_bilp);
  m.impl("logprob_bwd", &m_logprob_bwd);
  m.impl("batch_invariant_logp_bwd", &m_bilp_bwd);
  m.impl("attention", &m_attention);
  m.impl("attention_bwd", &m_attention_bwd);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}  // the ops register through TORCH_LIBRARY
