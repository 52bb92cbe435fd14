// ws1_ascend_ops.h — the torch ops around the Ascend C kernels: argument checks (one-line errors naming the
// problem), output allocation, the host part of the tiling (sorting ids, inv_freq, seq_of_q), the launch, and
// the self-report (calls per kernel id). Written once, included by two registration files:
//   register_npu.cpp (CANN build): WS1A_LIB ws1_ascend, dispatch key PrivateUse1, launches on
//     c10_npu::getCurrentNPUStream() through at_npu::native::OpCommand's custom handler;
//   emu/csrc/register_emu.cpp (g++ build): WS1A_LIB ws1_ascend_emu, dispatch key CPU, launches through the
//     emulator's block loop.
// Same op names and schemas as ws1_cpu (kernels-cpu), so ws1_ops.backends.ascend mirrors backends/cpu.py.
//
// The including file defines: WS1A_NAME (library name, a string), WS1A_DEVICE_TYPE / WS1A_DEVICE_NAME (the
// device the tensors must be on), WS1A_PATH (the "path" the self-report counts, "npu" or "emulator"),
// s (void* stream) and WS1A_RUN(name, fn) (run fn() on that stream).
#pragma once
#include <torch/library.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "ws1_ascend_launch.h"

namespace ws1a_host {

// ---- the self-report: {"<lib>::<op>": {"<path>": calls}} --------------------------------------------------
inline std::mutex& mu() {
  static std::mutex m;
  return m;
}
inline std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> c;
  return c;
}
inline void count(const char* op) {
  std::lock_guard<std::mutex> g(mu());
  counts()[op] += 1;
}
inline std::string calls_json() {
  std::lock_guard<std::mutex> g(mu());
  std::ostringstream o;
  o << "{";
  bool first = true;
  for (auto& kv : counts()) {
    o << (first ? "" : ", ") << "\"" << kv.first << "\": {\"" << WS1A_PATH << "\": " << kv.second << "}";
    first = false;
  }
  o << "}";
  return o.str();
}

// blockDim of a launch: the SoC's core counts, read once from the device by the including file's
// WS1A_SOC_CORES() -> std::pair<uint32_t, uint32_t> (AIC, AIV): on an NPU, CANN's PlatformAscendCManager
// (GetCoreNumAic / GetCoreNumAiv, register_npu.cpp); in the emulator a parameter (set_soc_cores). Vector kernels
// launch one block per AIV, Cube kernels one per AIC, mixed (Cube + Vector) kernels one per AI core = per AIC (each
// block one AIC and two AIVs). Work items go to blocks by index mod blockDim and no item's instruction sequence
// depends on blockDim, so the count changes no bit (the tests vary it).
struct SocCores {
  uint32_t aic = 0, aiv = 0;
};
inline SocCores& soc() {
  static SocCores s = [] {
    const std::pair<uint32_t, uint32_t> c = WS1A_SOC_CORES();
    TORCH_CHECK(c.first > 0 && c.second > 0, WS1A_NAME, ": the SoC reports ", c.first, " AIC and ", c.second,
                " AIV cores; cannot size a launch");
    return SocCores{c.first, c.second};
  }();
  return s;
}
inline uint32_t vec_blocks() { return soc().aiv; }
inline uint32_t cube_blocks() { return soc().aic; }
inline uint32_t mix_blocks() { return soc().aic; }

#define WS1A_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

inline uint8_t* gm(const at::Tensor& t) { return static_cast<uint8_t*>(const_cast<void*>(t.data_ptr())); }

inline void check_dev(const at::Tensor& t, const char* op, const char* name) {
  WS1A_CHECK(t.device().type() == WS1A_DEVICE_TYPE, op, ": ", name, " must be a ", WS1A_DEVICE_NAME,
             " tensor, got one on ", t.device());
  WS1A_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
}
inline int32_t float_code(const at::Tensor& t, const char* op, const char* name) {
  WS1A_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
             " must be bfloat16 or float32, got ", c10::toString(t.scalar_type()));
  return t.scalar_type() == at::kFloat ? 1 : 0;
}
inline void check_f32(const at::Tensor& t, const char* op, const char* name) {
  WS1A_CHECK(t.scalar_type() == at::kFloat, op, ": ", name, " must be float32, got ", c10::toString(t.scalar_type()));
}
inline void check_ids(const at::Tensor& ids, int64_t V, const char* op, const char* name) {
  WS1A_CHECK(ids.scalar_type() == at::kLong && ids.dim() == 1, op, ": ", name, " must be a 1-D int64 tensor, got ",
             c10::toString(ids.scalar_type()), " ", ids.sizes());
  if (ids.numel() == 0) return;
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  WS1A_CHECK(lo >= 0 && hi < V, op, ": ", name, " out of range [0, ", V, "): min ", lo, ", max ", hi);
}

// ---- embedding ------------------------------------------------------------------------------------------
inline at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) {
  const char* op = "embedding";
  check_dev(ids, op, "ids");
  check_dev(weight, op, "weight");
  WS1A_CHECK(weight.dim() == 2, op, ": weight must be [V, H], got ", weight.sizes());
  const int32_t wf = float_code(weight, op, "weight");
  check_ids(ids, weight.size(0), op, "ids");
  at::Tensor y = at::empty({ids.numel(), weight.size(1)}, weight.options());
  if (ids.numel() == 0 || weight.size(1) == 0) return y;
  count(WS1A_NAME "::embedding");
  WS1A_RUN("ws1_embedding", [=](void* s) {
    ws1_launch_embedding(vec_blocks(), s, gm(ids), gm(weight), gm(y), wf, ids.numel(), weight.size(0),
                         weight.size(1));
  });
  return y;
}

inline at::Tensor embedding_bwd(const at::Tensor& dy_in, const at::Tensor& ids, int64_t V) {
  const char* op = "embedding_bwd";
  check_dev(ids, op, "ids");
  WS1A_CHECK(V > 0, op, ": num_embeddings must be > 0");
  WS1A_CHECK(dy_in.dim() == 2 && dy_in.size(0) == ids.numel(), op, ": dy must be [T, H] with T = ids.numel() = ",
             ids.numel(), ", got ", dy_in.sizes());
  float_code(dy_in, op, "dy");
  check_ids(ids, V, op, "ids");
  at::Tensor dy = dy_in.to(at::kFloat).contiguous();  // bf16 -> fp32 is exact
  check_dev(dy, op, "dy");
  const int64_t T = dy.size(0), H = dy.size(1);
  at::Tensor de = at::zeros({V, H}, dy.options());
  if (T == 0 || H == 0) return de;
  // sorted segments: rows sorted by id, each id's rows kept in the given (canonical) row order. Computed here
  // on the host by std::stable_sort, whose stability the C++ standard guarantees ([alg.sort] stable_sort: equal
  // elements keep their relative order) — not by the device's at::sort(stable=True), which torch_npu does not
  // document as stable. T int64 ids cross to the host once (check_ids already read their min and max).
  at::Tensor ids_host = ids.to(at::kCPU).contiguous();
  const int64_t* idp = ids_host.data_ptr<int64_t>();
  std::vector<int64_t> ord(static_cast<size_t>(T)), starts, segs;
  std::iota(ord.begin(), ord.end(), int64_t{0});
  std::stable_sort(ord.begin(), ord.end(), [idp](int64_t a, int64_t b) { return idp[a] < idp[b]; });
  for (int64_t j = 0; j < T; ++j)
    if (j == 0 || idp[ord[j]] != idp[ord[j - 1]]) starts.push_back(j), segs.push_back(idp[ord[j]]);
  starts.push_back(T);
  auto to_dev = [&](const std::vector<int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(ids.device()).contiguous();
  };
  at::Tensor order = to_dev(ord), seg_id = to_dev(segs), seg_start = to_dev(starts);
  count(WS1A_NAME "::embedding_bwd");
  WS1A_RUN("ws1_embedding_bwd", [=](void* s) {
    ws1_launch_embedding_bwd(vec_blocks(), s, gm(dy), gm(order), gm(seg_start), gm(seg_id), gm(de), T,
                             seg_id.numel(), V, H);
  });
  return de;
}

// ---- rms_norm / qk_norm ---------------------------------------------------------------------------------
using NormLaunch = void (*)(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t,
                            int64_t, float);
inline std::tuple<at::Tensor, at::Tensor> norm_fwd(const at::Tensor& x, const at::Tensor& w, double eps,
                                                   const char* op, const char* id, bool qk, NormLaunch launch) {
  check_dev(x, op, "x");
  check_dev(w, op, "weight");
  const int32_t xf = float_code(x, op, "x"), wf = float_code(w, op, "weight");
  if (qk) WS1A_CHECK(x.dim() == 3, op, ": x must be [T, n_heads, D], got ", x.sizes());
  WS1A_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x must have a non-empty last dim, got ", x.sizes());
  WS1A_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight must be [", x.size(-1), "], got ", w.sizes());
  const int64_t h = x.size(-1), rows = x.numel() / h;
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
  if (rows == 0) return {y, rstd};
  count(id);
  WS1A_RUN(op, [=](void* s) { launch(vec_blocks(), s, gm(x), gm(w), gm(y), gm(rstd), xf, wf, rows, h, (float)eps); });
  return {y, rstd};
}

using NormBwdLaunch = void (*)(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t,
                               int32_t, int64_t, int64_t);
using NormDwLaunch = void (*)(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, int32_t, int32_t, int64_t,
                              int64_t);
inline std::tuple<at::Tensor, at::Tensor> norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                   const at::Tensor& rstd, const char* op, const char* id, bool qk,
                                                   NormBwdLaunch launch, NormDwLaunch launch_dw) {
  check_dev(dy, op, "dy");
  check_dev(x, op, "x");
  check_dev(w, op, "weight");
  check_dev(rstd, op, "rstd");
  const int32_t df = float_code(dy, op, "dy"), xf = float_code(x, op, "x"), wf = float_code(w, op, "weight");
  check_f32(rstd, op, "rstd");
  if (qk) WS1A_CHECK(x.dim() == 3, op, ": x must be [T, n_heads, D], got ", x.sizes());
  WS1A_CHECK(dy.sizes() == x.sizes(), op, ": dy must have the shape of x ", x.sizes(), ", got ", dy.sizes());
  WS1A_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight must be [", x.size(-1), "], got ", w.sizes());
  const int64_t h = x.size(-1), rows = x.numel() / h;
  WS1A_CHECK(rstd.numel() == rows, op, ": rstd must have ", rows, " elements, got ", rstd.sizes());
  at::Tensor dx = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  at::Tensor dw = at::zeros({h}, x.options().dtype(at::kFloat));
  if (rows == 0) return {dx, dw};
  count(id);
  WS1A_RUN(op, [=](void* s) {
    launch(vec_blocks(), s, gm(dy), gm(x), gm(w), gm(rstd), gm(dx), df, xf, wf, rows, h);
    launch_dw(vec_blocks(), s, gm(dy), gm(x), gm(rstd), gm(dw), df, xf, rows, h);
  });
  return {dx, dw};
}

inline std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return norm_fwd(x, w, eps, "rms_norm", WS1A_NAME "::rms_norm", false, ws1_launch_rms_norm);
}
inline std::tuple<at::Tensor, at::Tensor> qk_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return norm_fwd(x, w, eps, "qk_norm", WS1A_NAME "::qk_norm", true, ws1_launch_qk_norm);
}
inline std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                       const at::Tensor& r) {
  return norm_bwd(dy, x, w, r, "rms_norm_bwd", WS1A_NAME "::rms_norm_bwd", false, ws1_launch_rms_norm_bwd,
                  ws1_launch_rms_norm_dw);
}
inline std::tuple<at::Tensor, at::Tensor> qk_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                      const at::Tensor& r) {
  return norm_bwd(dy, x, w, r, "qk_norm_bwd", WS1A_NAME "::qk_norm_bwd", true, ws1_launch_qk_norm_bwd,
                  ws1_launch_qk_norm_dw);
}
// negative control: the UB tile chosen by the row count (see controls.asc)
inline std::tuple<at::Tensor, at::Tensor> variant_rms_norm_small_tile(const at::Tensor& x, const at::Tensor& w,
                                                                      double eps) {
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  return norm_fwd(x, w, eps, "variant_rms_norm_small_tile", WS1A_NAME "::variant_rms_norm_small_tile", false,
                  rows > 64 ? ws1_launch_variant_rms_norm_small_tile : ws1_launch_rms_norm);
}

// ---- GEMMs on the Cube ----------------------------------------------------------------------------------
// The K panel width passed to the Cube GEMMs: kWs1KPanel; the emulator's tests set a smaller one
// (set_gemm_k_panel) to show that the panels change no bit.
inline int64_t& k_panel() {
  static int64_t v = kWs1KPanel;
  return v;
}
// A [rows, K] operand as the kernels read it (cube_gemm.h): unchanged for K <= kp, else its K panels of kp
// columns (the last narrower), each row-major [rows, width], one after another.
inline at::Tensor k_panels(const at::Tensor& t, int64_t kp) {
  if (t.size(1) <= kp) return t;
  std::vector<at::Tensor> parts;
  for (const at::Tensor& p : t.split(kp, 1)) parts.push_back(p.contiguous().view({-1}));
  return at::cat(parts);
}
using GemmLaunch = void (*)(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t);
inline at::Tensor gemm_bf16(const at::Tensor& x, const at::Tensor& w, const char* op, const char* id, bool out_f32,
                            GemmLaunch launch) {
  check_dev(x, op, "x");
  check_dev(w, op, "weight");
  WS1A_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, op,
             ": x and weight must be bfloat16, got ", c10::toString(x.scalar_type()), " and ",
             c10::toString(w.scalar_type()));
  WS1A_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), op, ": need x [M, K] and weight [N, K], got ",
             x.sizes(), " and ", w.sizes());
  const int64_t M = x.size(0), N = w.size(0), K = x.size(1);
  if (K == 0) return at::zeros({M, N}, x.options().dtype(out_f32 ? at::kFloat : at::kBFloat16));
  at::Tensor y = at::empty({M, N}, x.options().dtype(out_f32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return y;
  const int64_t kp = k_panel();
  at::Tensor xp = k_panels(x, kp), wp = k_panels(w, kp);
  count(id);
  WS1A_RUN(op, [=](void* s) { launch(cube_blocks(), s, gm(xp), gm(wp), gm(y), M, N, K, kp); });
  return y;
}
inline at::Tensor det_gemm(const at::Tensor& x, const at::Tensor& w) {
  return gemm_bf16(x, w, "det_gemm", WS1A_NAME "::det_gemm", false, ws1_launch_det_gemm);
}
inline at::Tensor lm_head(const at::Tensor& x, const at::Tensor& w) {
  return gemm_bf16(x, w, "lm_head", WS1A_NAME "::lm_head", true, ws1_launch_lm_head);
}
// negative control: baseK chosen by M (see controls.asc)
inline at::Tensor variant_lm_head_small_k(const at::Tensor& x, const at::Tensor& w) {
  return gemm_bf16(x, w, "variant_lm_head_small_k", WS1A_NAME "::variant_lm_head_small_k", true,
                   x.size(0) < 16 ? ws1_launch_variant_lm_head_small_k : ws1_launch_lm_head);
}
// the general FP32 GEMM of the backward: c[M, N] = a[M, K] · b[N, K]ᵀ (a, b any float dtype and strides; they
// are made FP32-contiguous first, an exact conversion). out_fp32 must be true (the only use).
inline at::Tensor gemm(const at::Tensor& a_in, const at::Tensor& b_in, bool out_fp32) {
  const char* op = "gemm";
  WS1A_CHECK(out_fp32, op, ": only out_fp32=True is implemented (the row-fold VJP's FP32 GEMM)");
  float_code(a_in, op, "a");
  float_code(b_in, op, "b");
  WS1A_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.size(1) == b_in.size(1), op,
             ": need a [M, K] and b [N, K], got ", a_in.sizes(), " and ", b_in.sizes());
  at::Tensor a = a_in.to(at::kFloat).contiguous(), b = b_in.to(at::kFloat).contiguous();
  check_dev(a, op, "a");
  check_dev(b, op, "b");
  const int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  if (K == 0) return at::zeros({M, N}, a.options());
  at::Tensor c = at::empty({M, N}, a.options());
  if (M == 0 || N == 0) return c;
  // K >= 65536 (dW over that many tokens): K panels, the same chunks in the same order (cube_gemm.h)
  const int64_t kp = k_panel();
  at::Tensor ap = k_panels(a, kp), bp = k_panels(b, kp);
  count(WS1A_NAME "::gemm");
  WS1A_RUN("ws1_gemm", [=](void* s) { ws1_launch_gemm_fp32(cube_blocks(), s, gm(ap), gm(bp), gm(c), M, N, K, kp); });
  return c;
}

// ---- rope -----------------------------------------------------------------------------------------------
inline at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, double theta, bool inverse) {
  const char* op = "rope";
  check_dev(x, op, "x");
  check_dev(positions, op, "positions");
  const int32_t xf = float_code(x, op, "x");
  WS1A_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, op, ": x must be [T, n_heads, D] with D even, got ", x.sizes());
  WS1A_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 1 && positions.size(0) == x.size(0), op,
             ": positions must be int64 [", x.size(0), "], got ", c10::toString(positions.scalar_type()), " ",
             positions.sizes());
  if (positions.numel()) WS1A_CHECK(positions.min().item<int64_t>() >= 0, op, ": positions must be >= 0");
  // The vector unit's Sin/Cos take arguments in [-65504, 65504] on A2/A3 (asc-devkit docs: Sin.md / Cos.md,
  // constraints); an angle is position * inv_freq_i with inv_freq_0 = 1, so positions stay <= 65504 (Qwen3's
  // context is 40960). Beyond it the NPU's result is undefined: an error, never a silent rotation.
  if (positions.numel())
    WS1A_CHECK(positions.max().item<int64_t>() <= 65504, op, ": positions must be <= 65504 (the Ascend Sin/Cos input range)");
  const int64_t D = x.size(2), half = D / 2;
  // inv_freq_i = (float)(1 / theta^(2i / D)) in double on the host: a function of (theta, D) only
  at::Tensor inv_cpu = at::empty({half}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t i = 0; i < half; ++i)
    inv_cpu.data_ptr<float>()[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / D));
  at::Tensor inv = inv_cpu.to(x.device());
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  count(WS1A_NAME "::rope");
  WS1A_RUN(op, [=](void* s) {
    ws1_launch_rope(vec_blocks(), s, gm(x), gm(positions), gm(inv), gm(y), xf, x.size(0), x.size(1), D,
                    inverse ? 1 : 0);
  });
  return y;
}

// ---- silu / swiglu --------------------------------------------------------------------------------------
inline at::Tensor swiglu(const at::Tensor& g, const at::Tensor& u) {
  const char* op = "swiglu";
  check_dev(g, op, "gate");
  check_dev(u, op, "up");
  const int32_t f = float_code(g, op, "gate");
  WS1A_CHECK(u.scalar_type() == g.scalar_type() && u.sizes() == g.sizes(), op,
             ": gate and up must have one dtype and shape, got ", g.sizes(), " and ", u.sizes());
  at::Tensor y = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return y;
  count(WS1A_NAME "::swiglu");
  WS1A_RUN(op, [=](void* s) { ws1_launch_swiglu(vec_blocks(), s, gm(g), gm(u), gm(y), f, g.numel()); });
  return y;
}
inline at::Tensor silu(const at::Tensor& x) {
  const char* op = "silu";
  check_dev(x, op, "x");
  const int32_t f = float_code(x, op, "x");
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  count(WS1A_NAME "::silu");
  WS1A_RUN(op, [=](void* s) { ws1_launch_silu(vec_blocks(), s, gm(x), gm(y), f, x.numel()); });
  return y;
}
// backwards: dy, gate, up are made FP32 (exact) and run through the FP32 instantiation
inline std::tuple<at::Tensor, at::Tensor> swiglu_bwd(const at::Tensor& dy_in, const at::Tensor& g_in,
                                                     const at::Tensor& u_in) {
  const char* op = "swiglu_bwd";
  float_code(dy_in, op, "dy");
  float_code(g_in, op, "gate");
  float_code(u_in, op, "up");
  WS1A_CHECK(dy_in.sizes() == g_in.sizes() && u_in.sizes() == g_in.sizes(), op,
             ": dy, gate and up must have one shape, got ", dy_in.sizes(), ", ", g_in.sizes(), ", ", u_in.sizes());
  at::Tensor dy = dy_in.to(at::kFloat).contiguous(), g = g_in.to(at::kFloat).contiguous(),
             u = u_in.to(at::kFloat).contiguous();
  check_dev(dy, op, "dy");
  at::Tensor dg = at::empty(g.sizes(), g.options()), du = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return {dg, du};
  count(WS1A_NAME "::swiglu_bwd");
  WS1A_RUN(op, [=](void* s) {
    ws1_launch_swiglu_bwd(vec_blocks(), s, gm(dy), gm(g), gm(u), gm(dg), gm(du), 1, g.numel());
  });
  return {dg, du};
}
inline at::Tensor silu_bwd(const at::Tensor& dy_in, const at::Tensor& x_in) {
  const char* op = "silu_bwd";
  float_code(dy_in, op, "dy");
  float_code(x_in, op, "x");
  WS1A_CHECK(dy_in.sizes() == x_in.sizes(), op, ": dy and x must have one shape, got ", dy_in.sizes(), " and ",
             x_in.sizes());
  at::Tensor dy = dy_in.to(at::kFloat).contiguous(), x = x_in.to(at::kFloat).contiguous();
  check_dev(dy, op, "dy");
  at::Tensor dx = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return dx;
  count(WS1A_NAME "::silu_bwd");
  WS1A_RUN(op, [=](void* s) { ws1_launch_silu_bwd(vec_blocks(), s, gm(dy), gm(x), gm(dx), 1, x.numel()); });
  return dx;
}

// ---- logprob / batch_invariant_logp -----------------------------------------------------------------------
inline void check_logits(const at::Tensor& l, const char* op) {
  check_dev(l, op, "logits");
  check_f32(l, op, "logits");
  WS1A_CHECK(l.dim() == 2 && l.size(1) > 0, op, ": logits must be [T, V] with V > 0, got ", l.sizes());
}
inline std::tuple<at::Tensor, at::Tensor> logprob(const at::Tensor& logits, const at::Tensor& targets) {
  const char* op = "logprob";
  check_logits(logits, op);
  check_dev(targets, op, "targets");
  WS1A_CHECK(targets.numel() == logits.size(0), op, ": targets must be [", logits.size(0), "], got ", targets.sizes());
  check_ids(targets, logits.size(1), op, "targets");
  const int64_t T = logits.size(0), V = logits.size(1);
  at::Tensor out = at::empty({T}, logits.options()), lse = at::empty({T}, logits.options());
  if (T == 0) return {out, lse};
  count(WS1A_NAME "::logprob");
  WS1A_RUN(op, [=](void* s) { ws1_launch_logprob(vec_blocks(), s, gm(logits), gm(targets), gm(out), gm(lse), T, V); });
  return {out, lse};
}
inline std::tuple<at::Tensor, at::Tensor> batch_invariant_logp(const at::Tensor& logits) {
  const char* op = "batch_invariant_logp";
  check_logits(logits, op);
  const int64_t T = logits.size(0), V = logits.size(1);
  at::Tensor out = at::empty({T, V}, logits.options()), lse = at::empty({T}, logits.options());
  if (T == 0) return {out, lse};
  count(WS1A_NAME "::batch_invariant_logp");
  WS1A_RUN(op, [=](void* s) { ws1_launch_batch_invariant_logp(vec_blocks(), s, gm(logits), gm(out), gm(lse), T, V); });
  return {out, lse};
}
inline at::Tensor logprob_bwd(const at::Tensor& g, const at::Tensor& logits, const at::Tensor& lse,
                              const at::Tensor& targets) {
  const char* op = "logprob_bwd";
  check_logits(logits, op);
  const int64_t T = logits.size(0), V = logits.size(1);
  at::Tensor gc = g.to(at::kFloat).contiguous();
  check_dev(gc, op, "g");
  check_dev(lse, op, "lse");
  check_f32(lse, op, "lse");
  check_dev(targets, op, "targets");
  WS1A_CHECK(gc.numel() == T && lse.numel() == T && targets.numel() == T, op, ": g, lse, targets must have ", T,
             " elements");
  check_ids(targets, V, op, "targets");
  at::Tensor d = at::empty({T, V}, logits.options());
  if (T == 0) return d;
  count(WS1A_NAME "::logprob_bwd");
  WS1A_RUN(op, [=](void* s) {
    ws1_launch_logprob_bwd(vec_blocks(), s, gm(gc), gm(logits), gm(lse), gm(targets), gm(d), T, V);
  });
  return d;
}
inline at::Tensor batch_invariant_logp_bwd(const at::Tensor& g, const at::Tensor& logp) {
  const char* op = "batch_invariant_logp_bwd";
  check_logits(logp, op);
  at::Tensor gc = g.to(at::kFloat).contiguous();
  check_dev(gc, op, "g");
  WS1A_CHECK(gc.sizes() == logp.sizes(), op, ": g must have the shape of logp ", logp.sizes(), ", got ", g.sizes());
  const int64_t T = logp.size(0), V = logp.size(1);
  at::Tensor d = at::empty({T, V}, logp.options());
  if (T == 0) return d;
  count(WS1A_NAME "::batch_invariant_logp_bwd");
  WS1A_RUN(op, [=](void* s) {
    ws1_launch_batch_invariant_logp_bwd(vec_blocks(), s, gm(gc), gm(logp), gm(d), T, V);
  });
  return d;
}

// ---- attention ----------------------------------------------------------------------------------------------
// The host part of the attention tiling (attention.h, attention_bwd.h): shapes checked, the query-block table (per
// sequence, queries in blocks of 64 / G: sequence, first query, count, largest position), and for the backward the
// position -> query table, the occupied 128-slot query tiles per sequence and the 64-key blocks that see any query.
struct AttnMeta {
  int64_t Tq, Hq, D, Tk, Hkv, B, G, nblocks;
  std::vector<int64_t> cq, ck, qpos;  // host copies
  at::Tensor blocks;                  // [nblocks, 4] int64 on the inputs' device
};
inline AttnMeta attn_meta(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos) {
  for (auto* p : {&q, &k, &v, &cu_q, &cu_k, &q_pos}) check_dev(*p, op, "an input");
  WS1A_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16,
             op, ": q, k, v must be bfloat16 (the Cube's operands), got ", c10::toString(q.scalar_type()), ", ",
             c10::toString(k.scalar_type()), ", ", c10::toString(v.scalar_type()));
  WS1A_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(2) == k.size(2), op,
             ": need q [Tq, Hq, D], k and v [Tk, Hkv, D], got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  AttnMeta m{q.size(0), q.size(1), q.size(2), k.size(0), k.size(1), 0, 1, 0, {}, {}, {}, {}};
  WS1A_CHECK(m.Hkv > 0 && m.Hq % m.Hkv == 0, op, ": Hq (", m.Hq, ") must be a multiple of Hkv (", m.Hkv, ")");
  m.G = m.Hq / m.Hkv;
  WS1A_CHECK(m.G <= 64, op, ": Hq / Hkv = ", m.G, " query heads per kv head; at most 64 fit a 64-row block");
  WS1A_CHECK(m.D >= 1 && m.D <= 128, op, ": head_dim ", m.D, " outside [1, 128]");
  WS1A_CHECK(m.Hkv * m.D <= 65535, op, ": Hkv * head_dim = ", m.Hkv * m.D,
             " exceeds the 16-bit GM row stride of the Cube's Nd2Nz copy");
  WS1A_CHECK(cu_q.scalar_type() == at::kLong && cu_k.scalar_type() == at::kLong && q_pos.scalar_type() == at::kLong,
             op, ": cu_seqlens_q, cu_seqlens_k and q_pos must be int64");
  WS1A_CHECK(cu_q.dim() == 1 && cu_k.sizes() == cu_q.sizes() && cu_q.numel() >= 1, op,
             ": cu_seqlens_q and cu_seqlens_k must be [B + 1]");
  WS1A_CHECK(q_pos.numel() == m.Tq, op, ": q_pos must be [", m.Tq, "]");
  m.B = cu_q.numel() - 1;
  auto host = [](const at::Tensor& t) {
    at::Tensor c = t.cpu().contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  };
  m.cq = host(cu_q), m.ck = host(cu_k), m.qpos = host(q_pos);
  WS1A_CHECK(m.cq[0] == 0 && m.cq[m.B] == m.Tq && m.ck[0] == 0 && m.ck[m.B] == m.Tk, op,
             ": cu_seqlens must start at 0 and end at Tq / Tk");
  const int64_t qb = 64 / m.G;
  std::vector<int64_t> blocks;
  for (int64_t b = 0; b < m.B; ++b) {
    const int64_t kl = m.ck[b + 1] - m.ck[b];
    WS1A_CHECK(m.cq[b] <= m.cq[b + 1] && kl >= 0, op, ": cu_seqlens must be non-decreasing");
    for (int64_t i = m.cq[b]; i < m.cq[b + 1]; ++i)
      WS1A_CHECK(m.qpos[i] >= 0 && m.qpos[i] < kl, op, ": q_pos[", i, "] = ", m.qpos[i], " outside its sequence's ", kl,
                 " keys");
    for (int64_t s = m.cq[b]; s < m.cq[b + 1]; s += qb) {
      const int64_t n = std::min(qb, m.cq[b + 1] - s);
      const int64_t pmax = *std::max_element(m.qpos.begin() + s, m.qpos.begin() + s + n);
      blocks.insert(blocks.end(), {b, s, n, pmax});
    }
  }
  m.nblocks = static_cast<int64_t>(blocks.size() / 4);
  m.blocks = at::tensor(blocks, at::TensorOptions().dtype(at::kLong)).to(q.device()).contiguous();
  return m;
}
inline at::Tensor attn_ws(const at::Tensor& like, uint64_t per_core) {
  return at::empty({static_cast<int64_t>(per_core * mix_blocks())}, like.options().dtype(at::kByte));
}

using AttnLaunch = void (*)(uint32_t, void*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*,
                            uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float);
inline std::tuple<at::Tensor, at::Tensor> attention_impl(const char* op, const char* id, AttnLaunch launch,
                                                         const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                         const at::Tensor& cu_q, const at::Tensor& cu_k,
                                                         const at::Tensor& q_pos, double scale) {
  AttnMeta m = attn_meta(op, q, k, v, cu_q, cu_k, q_pos);
  at::Tensor out = at::empty(q.sizes(), q.options()), lse = at::empty({m.Tq, m.Hq}, q.options().dtype(at::kFloat));
  if (m.Tq == 0 || m.Hq == 0) return {out, lse};
  count(id);
  at::Tensor blocks = m.blocks, ws = attn_ws(q, kWs1AttnWsBytes);
  WS1A_RUN(op, [=](void* s) {
    launch(mix_blocks(), s, gm(q), gm(k), gm(v), gm(cu_k), gm(q_pos), gm(blocks), gm(out), gm(lse), gm(ws), m.nblocks,
           m.Tq, m.Tk, m.B, m.Hq, m.Hkv, m.D, (float)scale);
  });
  return {out, lse};
}
inline std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    const at::Tensor& cu_q, const at::Tensor& cu_k,
                                                    const at::Tensor& q_pos, double scale) {
  return attention_impl("attention", WS1A_NAME "::attention", ws1_launch_attention, q, k, v, cu_q, cu_k, q_pos, scale);
}
// negative control: key tiles aligned to the packed buffer (see controls.asc)
inline std::tuple<at::Tensor, at::Tensor> variant_attention_buffer_tiles(const at::Tensor& q, const at::Tensor& k,
                                                                         const at::Tensor& v, const at::Tensor& cu_q,
                                                                         const at::Tensor& cu_k, const at::Tensor& q_pos,
                                                                         double scale) {
  return attention_impl("variant_attention_buffer_tiles", WS1A_NAME "::variant_attention_buffer_tiles",
                        ws1_launch_variant_attention_buffer_tiles, q, k, v, cu_q, cu_k, q_pos, scale);
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse_in, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos, double scale) {
  const char* op = "attention_bwd";
  AttnMeta m = attn_meta(op, q, k, v, cu_q, cu_k, q_pos);
  WS1A_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), op, ": dout and out must have q's shape ", q.sizes());
  check_dev(dout, op, "dout");
  check_dev(out, op, "out");
  const int32_t df = float_code(dout, op, "dout"), of = float_code(out, op, "out");
  WS1A_CHECK(lse_in.numel() == m.Tq * m.Hq, op, ": lse must be [Tq, Hq]");
  at::Tensor lse = lse_in.to(at::kFloat).contiguous();
  check_dev(lse, op, "lse");
  auto f32 = q.options().dtype(at::kFloat);
  // dk, dv zero: keys no query sees (past every position in the call) get no item
  at::Tensor dq = at::empty(q.sizes(), f32), dk = at::zeros(k.sizes(), f32), dv = at::zeros(k.sizes(), f32);
  if (m.Tq == 0 || m.Hq == 0) return {dq, dk, dv};
  // row slots: position -> query (two queries at one position of a sequence would share a slot)
  std::vector<int64_t> slotq(static_cast<size_t>(std::max<int64_t>(m.Tk, 1)), -1), kvb, tiles;
  for (int64_t b = 0; b < m.B; ++b) {
    std::vector<int64_t> us;
    for (int64_t i = m.cq[b]; i < m.cq[b + 1]; ++i) {
      int64_t& slot = slotq[m.ck[b] + m.qpos[i]];
      WS1A_CHECK(slot < 0, op, ": sequence ", b, " has two queries at position ", m.qpos[i], " (queries ", slot, " and ",
                 i, ")");
      slot = i;
      us.push_back(m.qpos[i] * m.G / 128);
      us.push_back((m.qpos[i] * m.G + m.G - 1) / 128);
    }
    std::sort(us.begin(), us.end());
    us.erase(std::unique(us.begin(), us.end()), us.end());
    const int64_t len = m.ck[b + 1] - m.ck[b];
    for (int64_t j0 = 0; j0 < len; j0 += 64) {  // key blocks aligned to key 0; tiles from the one holding slot j0 G
      const int64_t u0 = j0 * m.G / 128, t0 = static_cast<int64_t>(tiles.size());
      for (int64_t u : us)
        if (u >= u0) tiles.push_back(u);
      if (static_cast<int64_t>(tiles.size()) > t0)
        kvb.insert(kvb.end(), {b, j0, std::min<int64_t>(64, len - j0), t0, static_cast<int64_t>(tiles.size())});
    }
  }
  auto dev = [&](const std::vector<int64_t>& x) {
    return at::tensor(x.empty() ? std::vector<int64_t>{0} : x, at::TensorOptions().dtype(at::kLong)).to(q.device());
  };
  at::Tensor t_slot = dev(slotq), t_kvb = dev(kvb), t_tiles = dev(tiles), blocks = m.blocks;
  const int64_t nkv = static_cast<int64_t>(kvb.size() / 5), ntiles = static_cast<int64_t>(tiles.size());
  at::Tensor dob = at::empty(q.sizes(), q.options()), delta = at::empty({m.Tq * m.Hq}, f32);
  at::Tensor ws = attn_ws(q, kWs1AttnBwdWsBytes);
  at::Tensor doc = dout.contiguous(), oc = out.contiguous();
  count(WS1A_NAME "::attention_bwd");
  WS1A_RUN(op, [=](void* s) {
    ws1_launch_attention_bwd_prep(vec_blocks(), s, gm(doc), gm(oc), gm(dob), gm(delta), df, of, m.Tq * m.Hq, m.D);
    ws1_launch_attention_bwd_dq(mix_blocks(), s, gm(q), gm(k), gm(v), gm(dob), gm(lse), gm(delta), gm(cu_k), gm(q_pos),
                                gm(blocks), gm(dq), gm(ws), m.nblocks, m.Tq, m.Tk, m.B, m.Hq, m.Hkv, m.D, (float)scale);
    if (nkv)
      ws1_launch_attention_bwd_dkv(mix_blocks(), s, gm(q), gm(k), gm(v), gm(dob), gm(lse), gm(delta), gm(cu_k),
                                   gm(t_kvb), gm(t_tiles), gm(t_slot), gm(dk), gm(dv), gm(ws), nkv, ntiles, m.Tq, m.Tk,
                                   m.B, m.Hq, m.Hkv, m.D, (float)scale);
  });
  return {dq, dk, dv};
}

inline std::string calls_op() { return calls_json(); }

}  // namespace ws1a_host

// The library: the same names and schemas as ws1_cpu (plus the two negative controls and calls()).
#define WS1A_DEFINE_LIBRARY(m)                                                                                      \
  m.def("embedding(Tensor ids, Tensor weight) -> Tensor");                                                          \
  m.def("embedding_bwd(Tensor dy, Tensor ids, int num_embeddings) -> Tensor");                                      \
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");                                        \
  m.def("rms_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");                       \
  m.def("qk_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");                                         \
  m.def("qk_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");                        \
  m.def("det_gemm(Tensor x, Tensor weight) -> Tensor");                                                             \
  m.def("lm_head(Tensor x, Tensor weight) -> Tensor");                                                              \
  m.def("gemm(Tensor a, Tensor b, bool out_fp32) -> Tensor");                                                       \
  m.def("rope(Tensor x, Tensor positions, float theta, bool inverse) -> Tensor");                                   \
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");                                                                \
  m.def("silu(Tensor x) -> Tensor");                                                                                \
  m.def("swiglu_bwd(Tensor dy, Tensor gate, Tensor up) -> (Tensor, Tensor)");                                       \
  m.def("silu_bwd(Tensor dy, Tensor x) -> Tensor");                                                                 \
  m.def("logprob(Tensor logits, Tensor targets) -> (Tensor, Tensor)");                                              \
  m.def("batch_invariant_logp(Tensor logits) -> (Tensor, Tensor)");                                                 \
  m.def("logprob_bwd(Tensor g, Tensor logits, Tensor lse, Tensor targets) -> Tensor");                              \
  m.def("batch_invariant_logp_bwd(Tensor g, Tensor logp) -> Tensor");                                              \
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, Tensor q_pos, "          \
        "float scale) -> (Tensor, Tensor)");                                                                        \
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "  \
        "Tensor cu_seqlens_k, Tensor q_pos, float scale) -> (Tensor, Tensor, Tensor)");                            \
  m.def("variant_lm_head_small_k(Tensor x, Tensor weight) -> Tensor");                                             \
  m.def("variant_rms_norm_small_tile(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");                     \
  m.def("variant_attention_buffer_tiles(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "  \
        "Tensor q_pos, float scale) -> (Tensor, Tensor)");                                                          \
  m.def("calls() -> str", &ws1a_host::calls_op)

#define WS1A_IMPL_LIBRARY(m)                                                                                        \
  m.impl("embedding", &ws1a_host::embedding);                                                                       \
  m.impl("embedding_bwd", &ws1a_host::embedding_bwd);                                                               \
  m.impl("rms_norm", &ws1a_host::rms_norm);                                                                         \
  m.impl("rms_norm_bwd", &ws1a_host::rms_norm_bwd);                                                                 \
  m.impl("qk_norm", &ws1a_host::qk_norm);                                                                           \
  m.impl("qk_norm_bwd", &ws1a_host::qk_norm_bwd);                                                                   \
  m.impl("det_gemm", &ws1a_host::det_gemm);                                                                         \
  m.impl("lm_head", &ws1a_host::lm_head);                                                                           \
  m.impl("gemm", &ws1a_host::gemm);                                                                                 \
  m.impl("rope", &ws1a_host::rope);                                                                                 \
  m.impl("swiglu", &ws1a_host::swiglu);                                                                             \
  m.impl("silu", &ws1a_host::silu);                                                                                 \
  m.impl("swiglu_bwd", &ws1a_host::swiglu_bwd);                                                                     \
  m.impl("silu_bwd", &ws1a_host::silu_bwd);                                                                         \
  m.impl("logprob", &ws1a_host::logprob);                                                                           \
  m.impl("batch_invariant_logp", &ws1a_host::batch_invariant_logp);                                                 \
  m.impl("logprob_bwd", &ws1a_host::logprob_bwd);                                                                   \
  m.impl("batch_invariant_logp_bwd", &ws1a_host::batch_invariant_logp_bwd);                                         \
  m.impl("attention", &ws1a_host::attention);                                                                       \
  m.impl("attention_bwd", &ws1a_host::attention_bwd);                                                               \
  m.impl("variant_lm_head_small_k", &ws1a_host::variant_lm_head_small_k);                                         \
  m.impl("variant_rms_norm_small_tile", &ws1a_host::variant_rms_norm_small_tile);                                   \
  m.impl("variant_attention_buffer_tiles", &ws1a_host::variant_attention_buffer_tiles)
