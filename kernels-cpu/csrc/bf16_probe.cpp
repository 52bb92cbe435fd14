// The BF16 matrix-unit decision, as a measurement the tests repeat on every host (registers no node):
//
//   ws1_cpu::bf16_unit_probe(n, seed) -> JSON
//
// runs adversarial bf16 pairs (cancellation against the accumulator, ties, underflowing products,
// denormal inputs, accumulators at FLT_MIN) through the instructions and through the portable chain
// (gemm.h chain_step: fmaf with DAZ inputs and FTZ-before-rounding outputs, k ascending) and counts the
// results that differ in any bit (a NaN vs a NaN counts as equal: payloads are not part of the contract).
//   * VDPBF16PS (AVX512_BF16), lanes packed as the GEMM packs them (k in the high half, k+1 low):
//     "differ" must be 0 -- the avx512bf16 path is the portable chain. "differ_order_swapped" is the same
//     comparison with the pair packed the other way round; it must be > 0 (the probe can fail).
//   * the vector paths' FMA under MXCSR.FTZ|DAZ (gemm.h FlushScope) on the same steps: "fma_mxcsr_differ"
//     must be 0 (the AVX2 / AVX-512F GEMMs apply the flush rules through MXCSR).
//   * TDPBF16PS (AMX-BF16) on 16x16 tiles with 32 k per instruction: the SDM's pseudocode is the same
//     sequential chain, but measured on Sapphire Rapids the unit does not follow it; "differ" (vs the
//     chain, k ascending) is > 0, so AMX cannot join the bitwise-equal paths and no AMX GEMM path exists
//     (docs/numerics.md, "BF16 matrix units"). Linux grants tile state only after
//     arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a refusal is reported, never worked around.
//
//   ws1_cpu::variant_gemm_kstep_by_m(x, weight, out_fp32) -> Tensor      (negative control, not a node)
//
// lm_head (out_fp32) / det_gemm with a K-step chosen by M: one row runs the chain k by k; several rows sum each pair of
// products first (fl(fl(a0 b0 + a1 b1) + acc)). Written in portable code, so on every machine its rows
// differ with the batch size -- the invariance tests must catch it.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <random>
#include <sstream>

#include "ws1_cpu.h"
#include "gemm.h"

namespace ws1_probe {
namespace {

using ::ws1_gemm::bf16_pair;
using ::ws1_gemm::chain_step;
using ::ws1::bf16_bits_to_f32;

bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}
bool has_avx512bf16() { return ::ws1::isa_supported(::ws1::Isa::avx512bf16); }
bool has_amx_bf16() { return cpuid_bit(7, 0, 3, 22) && cpuid_bit(7, 0, 3, 24); }  // EDX: AMX-BF16, AMX-TILE

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool same(float a, float b) { return fbits(a) == fbits(b) || (std::isnan(a) && std::isnan(b)); }

// Adversarial values. kind 0: near 1 (ties and cancellation); 1: tiny normals (products underflow);
// 2: bf16 denormals (DAZ); 3: wide exponents; 4: any finite bf16.
struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint16_t bf16(int kind) {
    const uint32_t s = rng() & 1u, man = rng() & 127u;
    int e;
    switch (kind) {
      case 0: e = 127 + static_cast<int>(rng() % 11) - 5; break;
      case 1: e = 1 + static_cast<int>(rng() % 40); break;
      case 2: return static_cast<uint16_t>((s << 15) | man | 1u);
      case 3: e = 127 + static_cast<int>(rng() % 61) - 30; break;
      default: e = 1 + static_cast<int>(rng() % 254); break;
    }
    return static_cast<uint16_t>((s << 15) | (static_cast<uint32_t>(e) << 7) | man);
  }
  float acc(int kind) {
    const uint32_t s = static_cast<uint32_t>(rng() & 0x80000000u), man = static_cast<uint32_t>(rng() & 0x7fffffu);
    switch (kind) {
      case 0: return 0.0f;
      case 1: return from_bits(s | ((1u + rng() % 3) << 23) | man);  // at FLT_MIN .. 4 FLT_MIN
      case 2: return from_bits(s | (static_cast<uint32_t>(127 + rng() % 21 - 10) << 23) | man);
      default: return from_bits(s | (static_cast<uint32_t>(1 + rng() % 254) << 23) | man);
    }
  }
};

// 16 lanes, one pair each: acc[i] with (a[2i], a[2i+1]) . (b[2i], b[2i+1]); sometimes acc[i] is set to
// cancel the first product exactly or nearly (ties at the rounding boundary).
struct Case {
  uint16_t a[32], b[32];
  float acc[16];
};
Case make_case(Gen& g, int64_t it) {
  Case c;
  const int ka = static_cast<int>(it % 5), kb = static_cast<int>((it / 5) % 5), kacc = static_cast<int>((it / 25) % 4);
  for (int i = 0; i < 32; ++i) {
    c.a[i] = g.bf16(ka);
    c.b[i] = g.bf16(kb);
  }
  for (int i = 0; i < 16; ++i) {
    c.acc[i] = g.acc(kacc);
    const float p = ::ws1_gemm::daz(bf16_bits_to_f32(c.a[2 * i])) * ::ws1_gemm::daz(bf16_bits_to_f32(c.b[2 * i]));
    if (it % 7 == 0) c.acc[i] = -p;                                        // exact cancellation
    if (it % 11 == 0) c.acc[i] = std::nextafter(-p, static_cast<float>(g.rng() & 1 ? 1.0 : -1.0));  // near it
  }
  return c;
}
float chain2(float acc, uint16_t a0, uint16_t b0, uint16_t a1, uint16_t b1) {
  acc = chain_step(acc, bf16_bits_to_f32(a0), bf16_bits_to_f32(b0));
  return chain_step(acc, bf16_bits_to_f32(a1), bf16_bits_to_f32(b1));
}

}  // namespace
}  // namespace ws1_probe

WS1_BEGIN_AVX512_BF16
namespace ws1_probe {
namespace {
// dst[i] = VDPBF16PS(acc[i], pa[i], pb[i]) on 16 lanes
void vdp16(const float* acc, const uint32_t* pa, const uint32_t* pb, float* dst) {
  const __m512i a = _mm512_loadu_si512(pa), b = _mm512_loadu_si512(pb);
  _mm512_storeu_ps(dst, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)a, (__m512bh)b));
}
// dst = fma(a, b, acc) twice, under MXCSR.FTZ|DAZ (the avx512 / avx2 GEMMs' FlushScope)
void fma16_mxcsr(const float* acc, const float* a0, const float* b0, const float* a1, const float* b1, float* dst) {
  ::ws1_gemm::FlushScope flush(true);
  __m512 c = _mm512_fmadd_ps(_mm512_loadu_ps(a0), _mm512_loadu_ps(b0), _mm512_loadu_ps(acc));
  c = _mm512_fmadd_ps(_mm512_loadu_ps(a1), _mm512_loadu_ps(b1), c);
  _mm512_storeu_ps(dst, c);
}
}  // namespace
}  // namespace ws1_probe
WS1_END_ISA

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
namespace ws1_probe {
namespace {
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// C[16][16] += A[16][32 k] . B, B as AMX wants it: B[k/2][n][2] (pairs along k, k in the LOW half)
void amx_tile(float* C, const uint16_t* A, const uint16_t* B) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 3; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  asm volatile("" : : "r"(&cfg) : "memory");  // LDTILECFG reads cfg: keep the stores above
  _tile_loadconfig(&cfg);
  _tile_loadd(0, C, 64);
  _tile_loadd(1, A, 64);
  _tile_loadd(2, B, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, C, 64);
  _tile_release();
}
}  // namespace
}  // namespace ws1_probe
#pragma GCC pop_options

namespace ws1_probe {
namespace {

std::string probe(int64_t n, int64_t seed) {
  TORCH_CHECK(n > 0 && n <= (1 << 24), "ws1_cpu::bf16_unit_probe: n must be in [1, 2^24], got ", n);
  std::ostringstream js;
  js << "{";
  // ---- VDPBF16PS and the MXCSR-flushed FMA, against chain_step
  {
    Gen g(static_cast<uint64_t>(seed));
    int64_t lanes = 0, differ = 0, differ_swapped = 0, mx_differ = 0;
    const bool avail = has_avx512bf16();
    for (int64_t it = 0; lanes < n; ++it) {
      Case c = make_case(g, it);
      float model[16], model_sw[16];
      for (int i = 0; i < 16; ++i) {
        model[i] = chain2(c.acc[i], c.a[2 * i], c.b[2 * i], c.a[2 * i + 1], c.b[2 * i + 1]);
        model_sw[i] = chain2(c.acc[i], c.a[2 * i + 1], c.b[2 * i + 1], c.a[2 * i], c.b[2 * i]);
      }
      if (avail) {
        uint32_t pa[16], pb[16];
        for (int i = 0; i < 16; ++i) {  // as the GEMM packs: k (here 2i) first, in the high half
          pa[i] = bf16_pair(c.a[2 * i], c.a[2 * i + 1]);
          pb[i] = bf16_pair(c.b[2 * i], c.b[2 * i + 1]);
        }
        float hw[16];
        vdp16(c.acc, pa, pb, hw);
        for (int i = 0; i < 16; ++i) {
          differ += !same(hw[i], model[i]);
          differ_swapped += !same(hw[i], model_sw[i]);
        }
      }
      if (::ws1::isa_supported(::ws1::Isa::avx512)) {
        float a0[16], b0[16], a1[16], b1[16], mx[16];
        for (int i = 0; i < 16; ++i) {
          a0[i] = bf16_bits_to_f32(c.a[2 * i]);
          b0[i] = bf16_bits_to_f32(c.b[2 * i]);
          a1[i] = bf16_bits_to_f32(c.a[2 * i + 1]);
          b1[i] = bf16_bits_to_f32(c.b[2 * i + 1]);
        }
        fma16_mxcsr(c.acc, a0, b0, a1, b1, mx);
        for (int i = 0; i < 16; ++i) mx_differ += !same(mx[i], model[i]);
      }
      lanes += 16;
    }
    js << "\"vdpbf16ps\": {\"available\": " << (avail ? "true" : "false") << ", \"lanes\": " << lanes
       << ", \"differ\": " << differ << ", \"differ_order_swapped\": " << differ_swapped << "}";
    js << ", \"fma_mxcsr\": {\"available\": " << (::ws1::isa_supported(::ws1::Isa::avx512) ? "true" : "false")
       << ", \"lanes\": " << lanes << ", \"differ\": " << mx_differ << "}";
  }
  // ---- TDPBF16PS: 16 x 16 outputs, 32 k per instruction, against the chain (k ascending)
  {
    std::string why;
    bool avail = has_amx_bf16();
    if (!avail) why = "the CPU has no AMX-BF16";
    if (avail) {
      // Linux: request the tile data state for this process; refused -> report, run nothing
      const long r = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
      if (r != 0) {
        avail = false;
        why = "arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) refused by the kernel";
      }
    }
    int64_t elems = 0, differ = 0;
    if (avail) {
      Gen g(static_cast<uint64_t>(seed) + 1);
      alignas(64) float C[256], C0[256];
      alignas(64) uint16_t A[16 * 32], B[16 * 32];
      for (int64_t it = 0; elems < n; ++it) {
        const int ka = static_cast<int>(it % 2 == 0 ? 0 : 3);  // normal values: no flush rule involved
        for (int i = 0; i < 16 * 32; ++i) {
          A[i] = g.bf16(ka);
          B[i] = g.bf16(ka);
        }
        for (int i = 0; i < 256; ++i) C0[i] = C[i] = g.acc(it % 2 == 0 ? 0 : 2);
        amx_tile(C, A, B);
        for (int m = 0; m < 16; ++m)
          for (int j = 0; j < 16; ++j) {
            float acc = C0[m * 16 + j];
            for (int k = 0; k < 32; ++k)
              acc = chain_step(acc, bf16_bits_to_f32(A[m * 32 + k]), bf16_bits_to_f32(B[(k / 2) * 32 + j * 2 + (k & 1)]));
            differ += !same(acc, C[m * 16 + j]);
            ++elems;
          }
      }
    }
    js << ", \"tdpbf16ps\": {\"available\": " << (avail ? "true" : "false") << ", \"why_not\": \"" << why
       << "\", \"elements\": " << elems << ", \"differ\": " << differ << "}";
  }
  js << "}";
  return js.str();
}

// variant_gemm_kstep_by_m: see the header comment. x [M, K], w [N, K] bf16 -> [M, N] fp32 or bf16.
at::Tensor variant_kstep_by_m(const at::Tensor& x, const at::Tensor& w, bool out_fp32) {
  const char* op = "ws1_cpu::variant_gemm_kstep_by_m";
  ::ws1::CallScope call(op);
  ::ws1::check_cpu(x, op, "x");
  ::ws1::check_cpu(w, op, "weight");
  ::ws1::check_dtype(x, at::kBFloat16, op, "x");
  ::ws1::check_dtype(w, at::kBFloat16, op, "weight");
  ::ws1::check_dim(x, 2, op, "x");
  ::ws1::check_dim(w, 2, op, "weight");
  WS1_CHECK(x.size(1) == w.size(1), op, ": K mismatch: x ", x.sizes(), ", weight ", w.sizes());
  const at::Tensor xc = x.contiguous(), wc = w.contiguous();
  const int64_t M = xc.size(0), N = wc.size(0), K = xc.size(1);
  at::Tensor out = at::empty({M, N}, x.options().dtype(out_fp32 ? at::kFloat : at::kBFloat16));
  const uint16_t* px = ::ws1::bf16_ptr(xc);
  const uint16_t* pw = ::ws1::bf16_ptr(wc);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      const uint16_t* a = px + m * K;
      const uint16_t* b = pw + j * K;
      if (M == 1) {
        for (int64_t k = 0; k < K; ++k) acc = chain_step(acc, bf16_bits_to_f32(a[k]), bf16_bits_to_f32(b[k]));
      } else {
        int64_t k = 0;
        for (; k + 1 < K; k += 2) {
          const float pair = chain_step(bf16_bits_to_f32(a[k]) * bf16_bits_to_f32(b[k]), bf16_bits_to_f32(a[k + 1]),
                                        bf16_bits_to_f32(b[k + 1]));
          acc = chain_step(acc, pair, 1.0f);
        }
        if (k < K) acc = chain_step(acc, bf16_bits_to_f32(a[k]), bf16_bits_to_f32(b[k]));
      }
      if (out_fp32) out.data_ptr<float>()[m * N + j] = acc;
      else ::ws1::bf16_ptr_mut(out)[m * N + j] = ::ws1::f32_to_bf16_bits(acc);
    }
  return out;
}

}  // namespace
}  // namespace ws1_probe

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("bf16_unit_probe(int n, int seed) -> str", &ws1_probe::probe);
  m.def("variant_gemm_kstep_by_m(Tensor x, Tensor weight, bool out_fp32) -> Tensor", &ws1_probe::variant_kstep_by_m);
}
