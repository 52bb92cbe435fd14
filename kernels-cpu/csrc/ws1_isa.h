// ISA selection, the per-call self-report, ISA regions, BF16 <-> FP32 bits and a torch-free
// at::parallel_for: the part of ws1_cpu.h that needs no torch header (ws1_cpu.h includes it). Files
// that touch no tensor (the GEMM's packing and micro-kernels, gemm.h) include only this and the C++
// library, so they compile in a second or two without parsing a torch header. Implemented in isa.cpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace ws1 {

// avx512bf16 (the default on AMD CPUs that have AVX512_BF16, else WS1_CPU_ISA=avx512bf16; isa.cpp
// detect() says why) is the avx512 path with the GEMM family's bf16 x bf16 products on VDPBF16PS;
// every other kernel runs its avx512 code. All four paths give the same bits (gemm.cpp's contract;
// why the BF16 unit can be matched and AMX cannot: docs/numerics.md "BF16 matrix units").
//
// amx (only when asked for: WS1_CPU_ISA=amx) runs det_gemm and lm_head on AMX-BF16 tiles and every
// other kernel (the backward `gemm` included) on its avx512 code. Its GEMM bits are NOT the other
// paths' (the tile unit's accumulation is not the chain and cannot be reproduced): it is batch-invariant
// within itself, and its records carry their own arch key, "amx" (gemm_amx.cpp).
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3, amx = 4 };
constexpr int kNumIsa = 5;

// Whether this CPU can run the path.
bool isa_supported(Isa isa);

// The ISA path to use: the default (avx512bf16 on AMD, else avx512, avx2 or scalar: the fastest the
// CPU supports), or WS1_CPU_ISA if set (an unsupported request is an error, never a silent downgrade).
Isa active_isa();
const char* isa_name(Isa isa);

// Self-report: what the package itself ran, so evidence never rests on a Python label alone.
// Every op opens a CallScope with its kernel id (e.g. "ws1_cpu::det_gemm"); the ISA selection goes
// through dispatch_isa(), which notes the path in the open scope, so the path counted is the path that
// ran. The call is counted when the op returns (an op that throws is not counted); ops that dispatch on
// no ISA (embedding's row copies, empty shapes) count as path "generic". torch.ops.ws1_cpu.calls()
// returns the totals since load as JSON {kernel id: {path: calls}}.
class CallScope {
 public:
  explicit CallScope(const char* kernel_id);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  void took(Isa isa) { paths_ |= 1u << static_cast<int>(isa); }

 private:
  const char* id_;
  unsigned paths_ = 0;
  int uncaught_;
  CallScope* prev_;
};

// active_isa(), noted as the path taken by the op open on this thread. Call it on the op's own thread,
// outside parallel regions (as every kernel selects its path once per call).
Isa dispatch_isa();

// at::parallel_for(begin, end, grain, f) for the files that include no torch header (the GEMM's
// small-M paths and amx): isa.cpp calls at::parallel_for with the same range and grain, so the chunks,
// the threads and the exception handling are torch's (same rule as everywhere: parallel only across
// independent outputs). f is called through a function pointer, once per chunk.
using RangeFn = void (*)(const void* f, int64_t begin, int64_t end);
void parallel_for_erased(int64_t begin, int64_t end, int64_t grain, RangeFn call, const void* f);
template <class F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  parallel_for_erased(begin, end, grain, [](const void* g, int64_t b, int64_t e) { (*static_cast<const F*>(g))(b, e); },
                      &f);
}

// ISA regions: functions defined between WS1_BEGIN_<ISA> and WS1_END_ISA are compiled for that ISA
// (GCC target pragmas) and are only called once dispatch_isa() has chosen that path. Include library
// headers (std, ATen) BEFORE a region: an inline function or template defined inside one carries its ISA.
// Non-GEMM kernels use these through ws1_isa_instances.h; the GEMM files use them directly (gemm.h).
#define WS1_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define WS1_BEGIN_AVX512 _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx2,fma\")")
// The GEMM's AVX-512 code also uses AVX-512BW/VL (masked 16-bit loads and stores), so the avx512
// path is chosen only on avx512f + avx512bw + avx512vl + fma (isa.cpp).
#define WS1_BEGIN_AVX512_BW _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,fma\")")
// VDPBF16PS (the avx512bf16 path's GEMM micro-kernels, gemm_uk_avx512bf16.cpp).
#define WS1_BEGIN_AVX512_BF16 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512bf16,fma\")")
#define WS1_END_ISA _Pragma("GCC pop_options")

// FP32 -> BF16 with round-to-nearest-even; NaN stays NaN (quiet), Inf stays Inf.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace ws1
