// Shared numerics for the non-GEMM ws1_cpu kernels: one 16-lane vector abstraction with three
// implementations, and the reductions / exp written ONCE on top of it.
//
// Why this shape: every reduction in these kernels is "16 lanes by absolute index (k mod 16), lanes
// combined in the fixed tree 16->8->4->2->1, tail = the last partial block whose missing lanes are
// left untouched". The scalar path must give the same bits as the SIMD paths, so the algorithms are
// written once, generically, against a type `V` (16 logical float lanes) and compiled three times:
//
//   ws1::vs::V  - scalar: float[16], every op a plain loop over the 16 lanes (runs on any x86-64)
//   ws1::v2::V  - AVX2+FMA: two __m256 (lanes 0-7, 8-15)
//   ws1::v5::V  - AVX-512F: one __m512
//
// Every lane op is one IEEE operation (add/sub/mul/div/fma, all correctly rounded, -ffp-contract=off
// so nothing is fused behind our back), compares/selects are exact, and the horizontal reductions
// add the same pairs in the same operand order. So the three instantiations are bitwise identical
// by construction; the tests check it anyway (WS1_CPU_ISA=scalar|avx2|avx512).
//
// Compilation trick: GCC only inlines intrinsics into functions compiled for that ISA, and a function
// template defined outside a `#pragma GCC target` region does not pick up the region's ISA (nor do
// lambdas inside it). So the generic part of this header (section B) and the ISA-specific body of
// every kernel .cpp are *textually included* inside each ISA region, in namespace ws1::vs / v2 / v5
// (kernels: <kernel ns>::vs / v2 / v5). Kernel files do this through ws1_isa_instances.h, which
// re-includes the kernel file's WS1_KERNEL_BODY part once per ISA; see that header for the pattern.
//
// exp: ONE implementation (vexp, section B), used in vector form (V) and scalar form (float) with the
// same operation sequence:
//   x clamped to [-104, 89] (NaN passes through the clamps untouched),
//   kf = x*log2e + 1.5*2^23 (mul, then add: rounds x*log2e to nearest-even integer n),  nf = kf - 1.5*2^23,
//   r = fma(nf, -ln2_hi, x);  r = fma(nf, -ln2_lo, r)          (Cody-Waite, Cephes constants),
//   p = Cephes expf minimax polynomial in r (Horner, explicit fma), y = fma(p, r*r, r) + 1,
//   result = (y * 2^n1) * 2^n2, n1 = n>>1, n2 = n-n1, built from integer exponent bits (so 2^n for
//   n in [-150, 128] is exact in two steps: gradual underflow and overflow-to-inf come out right),
//   x < -104 (incl. -inf) -> +0, x > 88.72.. -> +inf, NaN -> the input NaN.
// Max error ~2 ulp over the normal range. log / sqrt / per-row divides are scalar std:: calls.
//
// x86 max semantics are used everywhere for max: vmax(a, b) = (a > b) ? a : b (MAXPS), so the
// scalar emulation is exact, including signed zeros and NaN operands.

#ifndef WS1_MATH_GENERIC_PASS
#ifndef WS1_MATH_H_BASE
#define WS1_MATH_H_BASE

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ws1_cpu.h"

// Function pointer NS::vs::FN / NS::v2::FN / NS::v5::FN according to ws1::dispatch_isa() (WS1_CPU_ISA
// is re-read on every call; pick once per op call, outside the parallel region).
#define WS1_SELECT(NS, ...) ::ws1::pick_isa(&NS::vs::__VA_ARGS__, &NS::v2::__VA_ARGS__, &NS::v5::__VA_ARGS__)

namespace ws1 {
template <class F>
inline F pick_isa(F scalar, F avx2, F avx512) {
  switch (dispatch_isa()) {
    case Isa::amx:         // no matrix-unit arithmetic outside the GEMM: the avx512 code
    case Isa::avx512bf16:
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    default: return scalar;
  }
}
// Typed data pointers: float for fp32 tensors, uint16_t (bf16 bits) for bf16 tensors.
template <class T>
inline const T* cptr(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return bf16_ptr(t);
}
template <class T>
inline T* mptr(at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return bf16_ptr_mut(t);
}
}  // namespace ws1

namespace ws1 {

// ---- section A: scalar float ops with the same names as the vector ops (used by the generic code
// in scalar form, e.g. vexp(float)). Each is one IEEE op.
inline float fmadd(float a, float b, float c) { return std::fma(a, b, c); }
inline float vmax(float a, float b) { return a > b ? a : b; }
inline float neg(float a) {
  uint32_t u;
  std::memcpy(&u, &a, 4);
  u ^= 0x80000000u;
  std::memcpy(&a, &u, 4);
  return a;
}
inline bool lt(float a, float b) { return a < b; }
inline bool is_nan(float a) { return a != a; }
inline float sel(bool m, float a, float b) { return m ? a : b; }
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// y * 2^n where n = bits(kf) - bits(1.5*2^23) (kf is the magic-biased rounded exponent).
inline float scale_pow2(float y, float kf) {
  int32_t n = static_cast<int32_t>(f32_bits(kf)) - static_cast<int32_t>(0x4b400000u);
  int32_t n1 = n >> 1;  // arithmetic shift (floor), same as vpsrad
  int32_t n2 = n - n1;
  float p1 = f32_from_bits(static_cast<uint32_t>(n1 + 127) << 23);
  float p2 = f32_from_bits(static_cast<uint32_t>(n2 + 127) << 23);
  return (y * p1) * p2;
}

constexpr float kExpLo = -104.0f;
constexpr float kExpHi = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23, bits 0x4b400000
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f;
constexpr float kExpP1 = 1.3981999507e-3f;
constexpr float kExpP2 = 8.3334519073e-3f;
constexpr float kExpP3 = 4.1665795894e-2f;
constexpr float kExpP4 = 1.6666665459e-1f;
constexpr float kExpP5 = 5.0000001201e-1f;

// ---- ISA vector types. ------------------------------------------------------------------------
namespace vs {
struct M {
  bool b[16];
};
struct V {
  float v[16];
  V() = default;
  explicit V(float x) {
    for (int i = 0; i < 16; ++i) v[i] = x;
  }
  static V zero() { return V(0.0f); }
  static V load(const float* p) {
    V r;
    for (int i = 0; i < 16; ++i) r.v[i] = p[i];
    return r;
  }
  static V load(const uint16_t* p) {
    V r;
    for (int i = 0; i < 16; ++i) r.v[i] = bf16_bits_to_f32(p[i]);
    return r;
  }
  static V load_tail(const float* p, int n) {
    V r(0.0f);
    for (int i = 0; i < n; ++i) r.v[i] = p[i];
    return r;
  }
  static V load_tail(const uint16_t* p, int n) {
    V r(0.0f);
    for (int i = 0; i < n; ++i) r.v[i] = bf16_bits_to_f32(p[i]);
    return r;
  }
  void store(float* p) const {
    for (int i = 0; i < 16; ++i) p[i] = v[i];
  }
  void store(uint16_t* p) const {
    for (int i = 0; i < 16; ++i) p[i] = f32_to_bf16_bits(v[i]);
  }
  void store_tail(float* p, int n) const {
    for (int i = 0; i < n; ++i) p[i] = v[i];
  }
  void store_tail(uint16_t* p, int n) const {
    for (int i = 0; i < n; ++i) p[i] = f32_to_bf16_bits(v[i]);
  }
};
#define WS1_VS_BIN(NAME, EXPR)            \
  inline V NAME(const V& a, const V& b) { \
    V r;                                  \
    for (int i = 0; i < 16; ++i) {        \
      float x = a.v[i], y = b.v[i];       \
      r.v[i] = (EXPR);                    \
    }                                     \
    return r;                             \
  }
WS1_VS_BIN(operator+, x + y)
WS1_VS_BIN(operator-, x - y)
WS1_VS_BIN(operator*, x * y)
WS1_VS_BIN(operator/, x / y)
WS1_VS_BIN(vmax, x > y ? x : y)
#undef WS1_VS_BIN
inline V fmadd(const V& a, const V& b, const V& c) {
  V r;
  for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline V neg(const V& a) {
  V r;
  for (int i = 0; i < 16; ++i) r.v[i] = ::ws1::neg(a.v[i]);
  return r;
}
inline M lt(const V& a, const V& b) {
  M m;
  for (int i = 0; i < 16; ++i) m.b[i] = a.v[i] < b.v[i];
  return m;
}
inline M is_nan(const V& a) {
  M m;
  for (int i = 0; i < 16; ++i) m.b[i] = a.v[i] != a.v[i];
  return m;
}
inline M tail_mask(int n) {
  M m;
  for (int i = 0; i < 16; ++i) m.b[i] = i < n;
  return m;
}
inline V sel(const M& m, const V& a, const V& b) {
  V r;
  for (int i = 0; i < 16; ++i) r.v[i] = m.b[i] ? a.v[i] : b.v[i];
  return r;
}
inline V scale_pow2(const V& y, const V& kf) {
  V r;
  for (int i = 0; i < 16; ++i) r.v[i] = ::ws1::scale_pow2(y.v[i], kf.v[i]);
  return r;
}
// Fixed tree: 16->8 (i + i+8), 8->4 (i + i+4), 4->2 (i + i+2), 2->1 (0 + 1).
inline float hsum(const V& a) {
  float t[16];
  for (int i = 0; i < 16; ++i) t[i] = a.v[i];
  for (int w = 8; w >= 1; w >>= 1)
    for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
  return t[0];
}
inline float hmax(const V& a) {
  float t[16];
  for (int i = 0; i < 16; ++i) t[i] = a.v[i];
  for (int w = 8; w >= 1; w >>= 1)
    for (int i = 0; i < w; ++i) t[i] = t[i] > t[i + w] ? t[i] : t[i + w];
  return t[0];
}
}  // namespace vs

WS1_BEGIN_AVX2
namespace v2 {
struct M {
  __m256 lo, hi;
};
inline __m256 bf16x8_to_f32(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// f32 -> bf16 bits (RNE, NaN -> quiet NaN), as 32-bit lanes holding the 16-bit result.
inline __m256i f32_to_bf16_lanes(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i nanm = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rnd = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  return _mm256_blendv_epi8(rnd, qn, nanm);
}
struct V {
  __m256 lo, hi;
  V() = default;
  V(__m256 a, __m256 b) : lo(a), hi(b) {}
  explicit V(float x) : lo(_mm256_set1_ps(x)), hi(_mm256_set1_ps(x)) {}
  static V zero() { return V(_mm256_setzero_ps(), _mm256_setzero_ps()); }
  static V load(const float* p) { return V(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
  static V load(const uint16_t* p) { return V(bf16x8_to_f32(p), bf16x8_to_f32(p + 8)); }
  static V load_tail(const float* p, int n) {
    float t[16] = {0};
    for (int i = 0; i < n; ++i) t[i] = p[i];
    return load(t);
  }
  static V load_tail(const uint16_t* p, int n) {
    uint16_t t[16] = {0};
    for (int i = 0; i < n; ++i) t[i] = p[i];
    return load(t);
  }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  void store(uint16_t* p) const {
    __m256i a = f32_to_bf16_lanes(lo), b = f32_to_bf16_lanes(hi);
    __m256i pk = _mm256_packus_epi32(a, b);  // [a0-3 b0-3 | a4-7 b4-7]
    pk = _mm256_permute4x64_epi64(pk, 0xD8);  // [a0-3 a4-7 b0-3 b4-7]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pk);
  }
  void store_tail(float* p, int n) const {
    float t[16];
    store(t);
    for (int i = 0; i < n; ++i) p[i] = t[i];
  }
  void store_tail(uint16_t* p, int n) const {
    uint16_t t[16];
    store(t);
    for (int i = 0; i < n; ++i) p[i] = t[i];
  }
};
inline V operator+(const V& a, const V& b) { return V(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
inline V operator-(const V& a, const V& b) { return V(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)); }
inline V operator*(const V& a, const V& b) { return V(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
inline V operator/(const V& a, const V& b) { return V(_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)); }
inline V vmax(const V& a, const V& b) { return V(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)); }
inline V fmadd(const V& a, const V& b, const V& c) {
  return V(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
inline V neg(const V& a) {
  __m256 s = _mm256_set1_ps(-0.0f);
  return V(_mm256_xor_ps(a.lo, s), _mm256_xor_ps(a.hi, s));
}
inline M lt(const V& a, const V& b) {
  return M{_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ)};
}
inline M is_nan(const V& a) {
  return M{_mm256_cmp_ps(a.lo, a.lo, _CMP_UNORD_Q), _mm256_cmp_ps(a.hi, a.hi, _CMP_UNORD_Q)};
}
inline M tail_mask(int n) {
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i nn = _mm256_set1_epi32(n);
  __m256i lo = _mm256_cmpgt_epi32(nn, idx);
  __m256i hi = _mm256_cmpgt_epi32(nn, _mm256_add_epi32(idx, _mm256_set1_epi32(8)));
  return M{_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi)};
}
inline V sel(const M& m, const V& a, const V& b) {
  return V(_mm256_blendv_ps(b.lo, a.lo, m.lo), _mm256_blendv_ps(b.hi, a.hi, m.hi));
}
inline __m256 scale_pow2_8(__m256 y, __m256 kf) {
  __m256i n = _mm256_sub_epi32(_mm256_castps_si256(kf), _mm256_set1_epi32(0x4b400000));
  __m256i n1 = _mm256_srai_epi32(n, 1);
  __m256i n2 = _mm256_sub_epi32(n, n1);
  __m256i b = _mm256_set1_epi32(127);
  __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, b), 23));
  __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, b), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}
inline V scale_pow2(const V& y, const V& kf) { return V(scale_pow2_8(y.lo, kf.lo), scale_pow2_8(y.hi, kf.hi)); }
inline float hsum8(__m256 s8) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
inline float hmax8(__m256 s8) {
  __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
inline float hsum(const V& a) { return hsum8(_mm256_add_ps(a.lo, a.hi)); }
inline float hmax(const V& a) { return hmax8(_mm256_max_ps(a.lo, a.hi)); }
}  // namespace v2
WS1_END_ISA

WS1_BEGIN_AVX512
namespace v5 {
struct M {
  __mmask16 k;
};
struct V {
  __m512 v;
  V() = default;
  explicit V(__m512 a) : v(a) {}
  explicit V(float x) : v(_mm512_set1_ps(x)) {}
  static V zero() { return V(_mm512_setzero_ps()); }
  static V load(const float* p) { return V(_mm512_loadu_ps(p)); }
  static V load(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return V(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  static V load_tail(const float* p, int n) {
    return V(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p));
  }
  static V load_tail(const uint16_t* p, int n) {
    uint16_t t[16] = {0};
    for (int i = 0; i < n; ++i) t[i] = p[i];
    return load(t);
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store(uint16_t* p) const {
    __m512i u = _mm512_castps_si512(v);
    __m512i absu = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nanm = _mm512_cmpgt_epu32_mask(absu, _mm512_set1_epi32(0x7f800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i rnd =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
    __m512i r = _mm512_mask_blend_epi32(nanm, rnd, qn);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  void store_tail(float* p, int n) const {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
  }
  void store_tail(uint16_t* p, int n) const {
    uint16_t t[16];
    store(t);
    for (int i = 0; i < n; ++i) p[i] = t[i];
  }
};
inline V operator+(const V& a, const V& b) { return V(_mm512_add_ps(a.v, b.v)); }
inline V operator-(const V& a, const V& b) { return V(_mm512_sub_ps(a.v, b.v)); }
inline V operator*(const V& a, const V& b) { return V(_mm512_mul_ps(a.v, b.v)); }
inline V operator/(const V& a, const V& b) { return V(_mm512_div_ps(a.v, b.v)); }
inline V vmax(const V& a, const V& b) { return V(_mm512_max_ps(a.v, b.v)); }
inline V fmadd(const V& a, const V& b, const V& c) { return V(_mm512_fmadd_ps(a.v, b.v, c.v)); }
inline V neg(const V& a) {
  return V(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(static_cast<int>(0x80000000u)))));
}
inline M lt(const V& a, const V& b) { return M{_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline M is_nan(const V& a) { return M{_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
inline M tail_mask(int n) { return M{static_cast<__mmask16>((1u << n) - 1u)}; }
inline V sel(const M& m, const V& a, const V& b) { return V(_mm512_mask_blend_ps(m.k, b.v, a.v)); }
inline V scale_pow2(const V& y, const V& kf) {
  __m512i n = _mm512_sub_epi32(_mm512_castps_si512(kf.v), _mm512_set1_epi32(0x4b400000));
  __m512i n1 = _mm512_srai_epi32(n, 1);
  __m512i n2 = _mm512_sub_epi32(n, n1);
  __m512i b = _mm512_set1_epi32(127);
  __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, b), 23));
  __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, b), 23));
  return V(_mm512_mul_ps(_mm512_mul_ps(y.v, p1), p2));
}
inline __m256 lo8(__m512 a) { return _mm512_castps512_ps256(a); }
inline __m256 hi8(__m512 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }
inline float hsum(const V& a) {
  __m256 s8 = _mm256_add_ps(lo8(a.v), hi8(a.v));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
inline float hmax(const V& a) {
  __m256 s8 = _mm256_max_ps(lo8(a.v), hi8(a.v));
  __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_max_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
}  // namespace v5
WS1_END_ISA

}  // namespace ws1

// ---- section B instantiated per ISA.
#define WS1_MATH_GENERIC_PASS
namespace ws1 {
namespace vs {
#include "ws1_math.h"
}  // namespace vs
}  // namespace ws1
WS1_BEGIN_AVX2
namespace ws1 {
namespace v2 {
#include "ws1_math.h"
}  // namespace v2
}  // namespace ws1
WS1_END_ISA
WS1_BEGIN_AVX512
namespace ws1 {
namespace v5 {
#include "ws1_math.h"
}  // namespace v5
}  // namespace ws1
WS1_END_ISA
#undef WS1_MATH_GENERIC_PASS

#endif  // WS1_MATH_H_BASE
#else   // WS1_MATH_GENERIC_PASS
// ---- section B: generic numerics, compiled once per ISA namespace (V is that namespace's type).
// Element loads: T is float (fp32) or uint16_t (bf16 bits).
using ::ws1::fmadd;
using ::ws1::is_nan;
using ::ws1::lt;
using ::ws1::neg;
using ::ws1::scale_pow2;
using ::ws1::sel;
using ::ws1::vmax;

// The one exp. X = float or V; identical operation sequence for both (see header comment).
template <class X>
inline X vexp(X x) {
  const X lo(::ws1::kExpLo), hi(::ws1::kExpHi), magic(::ws1::kMagic);
  X xc = sel(lt(x, lo), lo, x);
  xc = sel(lt(hi, xc), hi, xc);
  X kf = xc * X(::ws1::kLog2e) + magic;
  X nf = kf - magic;
  X r = fmadd(nf, X(-::ws1::kLn2Hi), xc);
  r = fmadd(nf, X(-::ws1::kLn2Lo), r);
  X p(::ws1::kExpP0);
  p = fmadd(p, r, X(::ws1::kExpP1));
  p = fmadd(p, r, X(::ws1::kExpP2));
  p = fmadd(p, r, X(::ws1::kExpP3));
  p = fmadd(p, r, X(::ws1::kExpP4));
  p = fmadd(p, r, X(::ws1::kExpP5));
  X y = fmadd(p, r * r, r);
  y = y + X(1.0f);
  y = scale_pow2(y, kf);
  y = sel(lt(x, lo), X(0.0f), y);
  return sel(is_nan(x), x, y);
}

// sum_k a[k]*b[k]: lane (k mod 16) accumulates fma(a,b,acc) for k ascending, starting from +0; the
// last partial block updates only its lanes; lanes are combined by hsum's fixed tree.
template <class A, class B>
inline float lane_dot(const A* a, const B* b, int64_t n) {
  V acc = V::zero();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc = fmadd(V::load(a + k), V::load(b + k), acc);
  if (k < n) {
    int t = static_cast<int>(n - k);
    acc = sel(tail_mask(t), fmadd(V::load_tail(a + k, t), V::load_tail(b + k, t), acc), acc);
  }
  return hsum(acc);
}

// sum_k a[k]: lane (k mod 16) accumulates acc + a[k], same tail and tree.
template <class A>
inline float lane_sum(const A* a, int64_t n) {
  V acc = V::zero();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc = acc + V::load(a + k);
  if (k < n) {
    int t = static_cast<int>(n - k);
    acc = sel(tail_mask(t), acc + V::load_tail(a + k, t), acc);
  }
  return hsum(acc);
}

// max_k a[k] (n >= 1): lanes start at -inf, acc = vmax(acc, a[k]); hmax's fixed tree.
inline float lane_max(const float* a, int64_t n) {
  V acc(-INFINITY);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc = vmax(acc, V::load(a + k));
  if (k < n) {
    int t = static_cast<int>(n - k);
    acc = sel(tail_mask(t), vmax(acc, V::load_tail(a + k, t)), acc);
  }
  return hmax(acc);
}

// sum_k exp(a[k] - m): lane (k mod 16) accumulates acc + vexp(a[k] - m); same tail and tree.
inline float lane_sum_exp(const float* a, int64_t n, float m) {
  const V mv(m);
  V acc = V::zero();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc = acc + vexp(V::load(a + k) - mv);
  if (k < n) {
    int t = static_cast<int>(n - k);
    acc = sel(tail_mask(t), acc + vexp(V::load_tail(a + k, t) - mv), acc);
  }
  return hsum(acc);
}

#endif  // WS1_MATH_GENERIC_PASS
