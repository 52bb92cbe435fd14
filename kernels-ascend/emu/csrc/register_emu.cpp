// register_emu.cpp — the emulator build: the SAME kernels-ascend/csrc/*.asc sources compiled by g++ against
// WS1's kernel_operator.h (emu/include), with the shared host layer (ws1_ascend_ops.h), registered as
// torch.ops.ws1_ascend_emu.* on CPU tensors. Never ascend_bf16 evidence: its self-report path is "emulator"
// and its ids are ws1_ascend_emu::<op>.
#include "kernel_operator.h"

#include <sstream>

#include "attention.asc"
#include "batch_invariant_logp.asc"
#include "controls.asc"
#include "det_gemm.asc"
#include "embedding.asc"
#include "lm_head.asc"
#include "logprob.asc"
#include "qk_norm.asc"
#include "rms_norm.asc"
#include "rope.asc"
#include "silu.asc"
#include "swiglu.asc"

#define WS1A_NAME "ws1_ascend_emu"
#define WS1A_PATH "emulator"
#define WS1A_DEVICE_TYPE c10::DeviceType::CPU
#define WS1A_DEVICE_NAME "CPU (emulator)"
#define WS1A_RUN(name, fn) (fn)(nullptr)
// The emulator's "SoC": 20 AIC / 40 AIV (the core counts of the Atlas A2 SKUs with 20 AI cores) unless a test sets
// others (set_soc_cores); on an NPU register_npu.cpp reads the real ones.
#define WS1A_SOC_CORES() std::pair<uint32_t, uint32_t>(20u, 40u)
#include "ws1_ascend_ops.h"

#include "hazard_probes.h"
#include "legacy_gemm.h"

namespace {
// test hook: the SoC's core counts the host sizes launches from (0, 0 restores 20 AIC / 40 AIV): vector kernels get
// aiv blocks, Cube kernels aic, mixed kernels aic AI cores (one AIC + two AIVs each)
void set_soc_cores(int64_t aic, int64_t aiv) {
  TORCH_CHECK(aic >= 0 && aiv >= 0 && aic <= 4096 && aiv <= 4096 && (aic == 0) == (aiv == 0),
              "set_soc_cores: counts must be in [1, 4096] (or both 0 for the default)");
  ws1a_host::soc() = ws1a_host::SocCores{aic ? static_cast<uint32_t>(aic) : 20u, aiv ? static_cast<uint32_t>(aiv) : 40u};
}
// the emulator's operation counts per kernel name since the last reset (ws1emu::Counts), as JSON
std::string op_counts(bool reset) {
  std::lock_guard<std::mutex> g(ws1emu::counts_mu());
  std::ostringstream o;
  o << "{";
  bool first = true;
  static const char* pn[ws1emu::NPIPE] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
  for (auto& kv : ws1emu::counts_registry()) {
    const ws1emu::Counts& c = kv.second;
    o << (first ? "" : ", ") << "\"" << kv.first << "\": {\"launches\": " << c.launches << ", \"blocks\": " << c.blocks
      << ", \"mmad_macs\": " << c.mmad_macs << ", \"vec_elems\": " << c.vec_elems << ", \"cross_flags\": "
      << c.cross_flags;
    for (const char* what : {"instr", "gm_read", "gm_write", "local_write"}) {
      const uint64_t* v = std::string(what) == "instr" ? c.instr : std::string(what) == "gm_read" ? c.gm_read
                          : std::string(what) == "gm_write" ? c.gm_write : c.local_write;
      o << ", \"" << what << "\": {";
      for (int p = 0; p < ws1emu::NPIPE; ++p) o << (p ? ", " : "") << "\"" << pn[p] << "\": " << v[p];
      o << "}";
    }
    o << "}";
    first = false;
  }
  o << "}";
  if (reset) ws1emu::counts_registry().clear();
  return o.str();
}
// the single-buffered Cube GEMM this checkout's cube_gemm.h replaced (legacy_gemm.h): kind 0 = det_gemm (bf16 out),
// 1 = lm_head (fp32 out), 2 = gemm_fp32; a [M, K] and b [N, K] as the kernels take them (bf16, or fp32 for kind 2)
at::Tensor legacy_gemm(const at::Tensor& a_in, const at::Tensor& b_in, int64_t kind) {
  TORCH_CHECK(kind >= 0 && kind <= 2, "legacy_gemm: kind 0, 1 or 2");
  const auto dt = kind == 2 ? at::kFloat : at::kBFloat16;
  at::Tensor a = a_in.to(dt).contiguous(), b = b_in.to(dt).contiguous();
  const int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  const int64_t kp = ws1a_host::k_panel();
  at::Tensor ap = ws1a_host::k_panels(a, kp), bp = ws1a_host::k_panels(b, kp);
  at::Tensor c = at::empty({M, N}, a.options().dtype(kind == 0 ? at::kBFloat16 : at::kFloat));
  const uint32_t nb = ws1a_host::cube_blocks();
  ws1emu::launch(nb, "legacy_cube_gemm", [&] {
    legacy_cube_gemm(ws1a_host::gm(ap), ws1a_host::gm(bp), ws1a_host::gm(c), static_cast<int32_t>(kind), M, N, K, kp);
  });
  return c;
}
// test hook: the Cube GEMMs' K panel width (0 restores kWs1KPanel); a positive multiple of 64, at most kWs1KPanel
void set_gemm_k_panel(int64_t kp) {
  TORCH_CHECK(kp == 0 || (kp > 0 && kp % 64 == 0 && kp <= kWs1KPanel),
              "set_gemm_k_panel: a positive multiple of 64 up to ", kWs1KPanel, " (or 0), got ", kp);
  ws1a_host::k_panel() = kp ? kp : kWs1KPanel;
}
// the hazard checker's probes (hazard_probes.h): "name\texpected failure ('' = runs clean)" per line
std::string hazard_probes() {
  std::string s;
  for (auto& kv : ws1probe::probes()) s += kv.first + "\t" + kv.second.second + "\n";
  return s;
}
// run one probe on one block; returns the probe's 16-float GM output buffer
at::Tensor hazard_probe(const std::string& name) {
  auto it = ws1probe::probes().find(name);
  TORCH_CHECK(it != ws1probe::probes().end(), "hazard_probe: no probe named ", name);
  ws1probe::Gm g;
  if (name.rfind("mix_", 0) == 0) ws1emu::launch_mix(1, it->first.c_str(), [&] { it->second.first(g); });
  else ws1emu::launch(1, it->first.c_str(), [&] { it->second.first(g); });
  return at::tensor(g.out, at::TensorOptions().dtype(at::kFloat));
}
}  // namespace

TORCH_LIBRARY(ws1_ascend_emu, m) {
  WS1A_DEFINE_LIBRARY(m);
  m.def("set_soc_cores(int aic, int aiv) -> ()", &set_soc_cores);
  m.def("op_counts(bool reset) -> str", &op_counts);
  m.def("legacy_gemm(Tensor a, Tensor b, int kind) -> Tensor", &legacy_gemm);
  m.def("set_gemm_k_panel(int kp) -> ()", &set_gemm_k_panel);
  m.def("hazard_probes() -> str", &hazard_probes);
  m.def("hazard_probe(str name) -> Tensor", &hazard_probe);
}
TORCH_LIBRARY_IMPL(ws1_ascend_emu, CPU, m) { WS1A_IMPL_LIBRARY(m); }

#include <torch/extension.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}  // the Python module is empty: the ops register through TORCH_LIBRARY
