// ISA selection shared by every ws1_cpu kernel, and the ws1_cpu::isa() op that reports it.
#include "ws1_cpu.h"

#include <cstdlib>

namespace ws1 {

static Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
  return Isa::scalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "scalar";
  }
}

Isa active_isa() {
  // Read the environment on every call (cheap) so tests can switch paths in one process.
  Isa best = detect();
  const char* env = std::getenv("WS1_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  std::string want(env);
  Isa req;
  if (want == "scalar") req = Isa::scalar;
  else if (want == "avx2") req = Isa::avx2;
  else if (want == "avx512") req = Isa::avx512;
  else TORCH_CHECK(false, "WS1_CPU_ISA=", want, ": unknown ISA (expected scalar, avx2 or avx512)");
  TORCH_CHECK(static_cast<int>(req) <= static_cast<int>(best), "WS1_CPU_ISA=", want,
              ": this CPU supports at most ", isa_name(best));
  return req;
}

}  // namespace ws1

static std::string isa_op() { return ws1::isa_name(ws1::active_isa()); }

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("isa() -> str", &isa_op);
}

// The Python module is empty: the ops are reached through torch.ops.ws1_cpu.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
