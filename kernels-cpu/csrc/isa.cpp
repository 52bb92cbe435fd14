// ISA selection shared by every ws1_cpu kernel, the ws1_cpu::isa() op that reports it, and the
// self-report ws1_cpu::calls(): how often each op ran, by the ISA path it took (see ws1_isa.h); and
// ws1_isa.h's parallel_for for the torch-free files. It touches no tensor, so it includes ws1_isa.h and
// the headers of what it calls (TORCH_CHECK, at::parallel_for, TORCH_LIBRARY_FRAGMENT), not ws1_cpu.h.
// The Python module is module.cpp.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "ws1_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>

namespace ws1 {

// AMX-BF16 and AMX-TILE in CPUID, and Linux's permission for the tile data state, asked for once:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). A refusal makes the amx path unsupported.
static bool amx_usable() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;  // EDX: AMX-BF16, AMX-TILE
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  }();
  return ok;
}

bool isa_supported(Isa isa) {
  __builtin_cpu_init();
  // the avx512 path's GEMM uses AVX-512BW/VL (masked 16-bit loads and stores): a CPU with AVX-512F
  // alone (Xeon Phi) takes the AVX2 path rather than an illegal instruction
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::amx: return avx512 && amx_usable();
    case Isa::avx512bf16: return avx512 && __builtin_cpu_supports("avx512bf16");
    case Isa::avx512: return avx512;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

// The default path: the fastest measured, among paths that all give the same bits (so the choice
// is speed only; the records name it). avx512bf16 on AMD (Zen 4 and later): there VDPBF16PS runs the
// GEMM 1.6-1.9x faster than the avx512 FMA chain (2-core EPYC, benchmarks/bench_cpu_gemm.py: M=59
// K=N=4096 7.1 ms vs 11.4; torch BF16 6.0). avx512 on Intel: on Sapphire Rapids VDPBF16PS issues about
// once per cycle, the FLOPs of the two FP32 FMAs the avx512 GEMM issues, and its packing costs more
// (measured 0.6-0.9x of avx512). amx is never a default: its bits are its own.
static Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd") && isa_supported(Isa::avx512bf16)) return Isa::avx512bf16;
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::amx: return "amx";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "scalar";
  }
}

Isa active_isa() {
  // Read the environment on every call (cheap) so tests can switch paths in one process.
  const char* env = std::getenv("WS1_CPU_ISA");
  if (env == nullptr || *env == '\0') return detect();
  std::string want(env);
  Isa req;
  if (want == "scalar") req = Isa::scalar;
  else if (want == "avx2") req = Isa::avx2;
  else if (want == "avx512") req = Isa::avx512;
  else if (want == "avx512bf16") req = Isa::avx512bf16;
  else if (want == "amx") req = Isa::amx;
  else TORCH_CHECK(false, "WS1_CPU_ISA=", want, ": unknown ISA (expected scalar, avx2, avx512, avx512bf16 or amx)");
  TORCH_CHECK(isa_supported(req), "WS1_CPU_ISA=", want, req == Isa::amx
              ? ": no AMX-BF16 here, or Linux refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)"
              : ": this CPU does not support it", " (default path here: ", isa_name(detect()), ")");
  return req;
}

// ---- self-report -----------------------------------------------------------------------------
namespace {
thread_local CallScope* t_open = nullptr;  // the op running on this thread (ops never nest today)
std::mutex g_mu;
std::map<std::string, std::map<std::string, int64_t>> g_calls;  // kernel id -> path -> calls

std::string path_name(unsigned paths) {
  if (paths == 0) return "generic";
  std::string out;
  for (int i = 0; i < kNumIsa; ++i) {
    if (!(paths & (1u << i))) continue;
    if (!out.empty()) out += "+";
    out += isa_name(static_cast<Isa>(i));
  }
  return out;
}
}  // namespace

CallScope::CallScope(const char* kernel_id) : id_(kernel_id), uncaught_(std::uncaught_exceptions()), prev_(t_open) {
  t_open = this;
}

CallScope::~CallScope() {
  t_open = prev_;
  if (std::uncaught_exceptions() > uncaught_) return;  // the op raised: it did not run to completion
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_calls[id_][path_name(paths_)];
}

Isa dispatch_isa() {
  Isa isa = active_isa();
  if (t_open != nullptr) t_open->took(isa);
  return isa;
}

void parallel_for_erased(int64_t begin, int64_t end, int64_t grain, RangeFn call, const void* f) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { call(f, b, e); });
}

}  // namespace ws1

static std::string isa_op() { return ws1::isa_name(ws1::active_isa()); }

// {"ws1_cpu::det_gemm": {"avx2": 12}, ...}: ids and path names are plain identifiers (no escaping needed).
static std::string calls_op() {
  std::lock_guard<std::mutex> lock(ws1::g_mu);
  std::string out = "{";
  for (const auto& [id, paths] : ws1::g_calls) {
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

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("isa() -> str", &isa_op);
  m.def("calls() -> str", &calls_op);
}
