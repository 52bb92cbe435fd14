// Internal header of the GEMM family (det_gemm, lm_head, gemm). The numerical contract every function
// here keeps is at the top of gemm.cpp: one serial chain of FP32 FMAs per output element, k ascending.
//
// Files:
//   gemm.cpp             the ops (det_gemm, lm_head, gemm), argument checks, and the driver: output
//                        tiling, K blocking with the FP32 carry, parallel loop, ISA choice per call
//   gemm_pack.cpp        packing A and B into FP32 panels (exact conversions; layout only)
//   gemm_uk_scalar.cpp   micro-kernel, portable (std::fma)            ws1_gemm::vs
//   gemm_uk_avx2.cpp     micro-kernel, AVX2 + FMA                     ws1_gemm::v2
//   gemm_uk_avx512.cpp   micro-kernel and small-M path, AVX-512       ws1_gemm::v5
//   gemm_uk_avx512bf16.cpp  pair packing, micro-kernel and small-M path on VDPBF16PS   ws1_gemm::vb
//   gemm_amx.cpp         det_gemm / lm_head on AMX tiles (own bits, own arch key)    ws1_gemm::amx
//
// ISA idiom. As in the other kernels, the ISA-specific code sits in namespaces vs / v2 / v5 (here under
// ws1_gemm), is compiled inside WS1_BEGIN_<ISA> ... WS1_END_ISA regions (ws1_isa.h), and the driver
// picks the namespace once per call from dispatch_isa(). Unlike them, the GEMM does not write one body
// and compile it three times (ws1_isa_instances.h over ws1_math.h's 16-lane V), because its three paths
// are deliberately different code that only share the per-element FMA chain:
//  * register blocking differs per ISA: 12 rows x 32 columns in 24 zmm accumulators (AVX-512), 6 rows
//    x 16 columns in 12 ymm, run twice per 32-column panel (AVX2), 4 x 32 floats (scalar); one V type
//    would force one tile shape on all three;
//  * only AVX-512 has the B-transposing packer and the small-M streaming path; they use AVX-512BW/VL
//    (masked 16-bit loads and stores), hence the region WS1_BEGIN_AVX512_BW, not ws1_math's AVX-512F;
//  * the lanes here are 16 different outputs (a[m,k] broadcast times b[n..n+15,k]), never partial sums
//    of one output, so ws1_math's lane reductions (lane_dot, hsum) have no use here.
// Only the functions that execute ISA instructions are inside regions; the per-ISA micro-kernel tables
// (uk(mr)), the AVX2 two-half wrapper and small_m_gemm's parallel loop are default-target code.
#pragma once

// No torch header: the packing and micro-kernel files touch no tensor (ws1_isa.h; its parallel_for is
// at::parallel_for's). gemm.cpp, the GEMM's one torch unit, raises the out-of-memory error.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "ws1_isa.h"

namespace ws1_gemm {

using ::ws1::bf16_bits_to_f32;
using ::ws1::f32_to_bf16_bits;
using ::ws1::Isa;

constexpr int NR = 32;       // columns per packed B panel (2 zmm)
constexpr int KC = 256;      // K block (B panel = KC x NR fp32 = 32 KiB, L1-resident)
constexpr int MR512 = 12;    // rows per AVX-512 micro-kernel: 12 x 32 = 24 zmm accumulators
constexpr int MR256 = 6;     // rows per AVX2 micro-kernel: 6 x 16 = 12 ymm accumulators
constexpr int MRSC = 4;      // rows per scalar micro-kernel
constexpr int64_t MB_MAX = 264;            // rows per output tile (multiple of 12, 6 and 4)
constexpr int64_t NB_PANELS_MAX = 16;      // panels per output tile (512 columns)
constexpr int64_t A_FULLK_BYTES = 1 << 20; // pack A for all of K when it fits (order "J")
constexpr int SMALL_M_MAX = 4;             // AVX-512 bf16 GEMMs with M <= 4 take the small-M path

// A 2-D operand: element (i, k) is at p[i * s0 + k * s1], bf16 or fp32.
struct Operand {
  const void* p;
  int64_t s0, s1;
  bool bf16;
  inline float at(int64_t i, int64_t k) const {
    int64_t off = i * s0 + k * s1;
    if (bf16) return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[off]);
    return static_cast<const float*>(p)[off];
  }
};

// TORCH_CHECK's error "ws1_cpu gemm: out of memory allocating <bytes> bytes" (gemm.cpp).
[[noreturn]] void out_of_memory(size_t bytes);

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using FBuf = std::unique_ptr<float[], AlignedFree>;
inline FBuf alloc_floats(int64_t n) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 16)) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) out_of_memory(bytes);
  return FBuf(static_cast<float*>(p));
}

// A micro-kernel call: C tile (mr x ncols) = [cin or 0] + sum_k A[k][r] * B[k][j], serial fma over k.
// Output: bf16 (RNE) to bout if non-null, else fp32 to cout.
struct Tile {
  const float* cin;  // fp32 partial accumulator to continue (nullptr: start at +0.0f)
  int64_t ldcin;
  float* cout;       // fp32 destination (when bout == nullptr)
  int64_t ldcout;
  uint16_t* bout;    // bf16 destination, rounded RNE
  int64_t ldb;
  int ncols;         // valid columns (<= NR)
  bool ftz;          // bf16 x bf16 chain: the BF16 unit's flush rules (scalar path applies them itself)
};

// ---- the bf16 x bf16 chain's flush rules (gemm.cpp's contract), portable form -------------------
// VDPBF16PS treats denormal inputs as zero (DAZ) and flushes a result that is tiny BEFORE rounding
// (|exact| < FLT_MIN) to a zero of the exact result's sign (FTZ); the vector paths get the same from
// MXCSR.FTZ|DAZ (FlushScope), the scalar path calls chain_step. Probe and measurement: docs/numerics.md.
constexpr float kFltMin = 1.17549435e-38f;  // 2^-126, the smallest normal float

inline float daz(float x) { return std::fabs(x) < kFltMin ? std::copysign(0.0f, x) : x; }

// acc + a*b rounded once (RNE), a*b exact (bf16 x bf16 has <= 16 significant bits), then FTZ with
// tininess detected before rounding: r = +-FLT_MIN is flushed too when the exact sum lies below it,
// which the residual ((acc - r) + a*b), exact in sign in double, tells.
inline float chain_step(float acc, float a, float b) {
  a = daz(a);
  b = daz(b);
  acc = daz(acc);
  const float r = std::fma(a, b, acc);
  const float mag = std::fabs(r);
  if (mag < kFltMin) return std::copysign(0.0f, r);
  if (mag == kFltMin) {
    const double res = (static_cast<double>(acc) - static_cast<double>(r)) + static_cast<double>(a) * b;
    if (res != 0.0 && std::signbit(res) != std::signbit(r)) return std::copysign(0.0f, r);
  }
  return r;
}

// MXCSR.FTZ|DAZ for the scope (this thread), restored on exit: the AVX2 / AVX-512F FMAs then follow
// the BF16 unit's flush rules exactly (checked against VDPBF16PS by bf16_unit_probe).
class FlushScope {
 public:
  explicit FlushScope(bool on) : on_(on) {
    if (on_) {
      old_ = _mm_getcsr();
      _mm_setcsr(old_ | 0x8040u);  // bit 15 FTZ, bit 6 DAZ
    }
  }
  ~FlushScope() {
    if (on_) _mm_setcsr(old_);
  }
  FlushScope(const FlushScope&) = delete;
  FlushScope& operator=(const FlushScope&) = delete;

 private:
  bool on_;
  unsigned old_ = 0;
};

// A pair of bf16 as VDPBF16PS reads it: lane i is computed as acc += hi*hi' then acc += lo*lo' (the
// SDM's order: element 2i+1 first). Packing k into hi and k+1 into lo makes that k ascending.
inline uint32_t bf16_pair(uint16_t first, uint16_t second) {
  return (static_cast<uint32_t>(first) << 16) | second;
}
// K padding of a pair (odd K, tails): A's padding is -0 and B's +0, so a padded product is -0 and
// acc + (-0) == acc for every acc, +0 included: padding adds no operation to the chain.
constexpr uint16_t kPadA = 0x8000u, kPadB = 0x0000u;

// A micro-kernel: uk(kc, packed A of the tile's rows, packed B panel, tile).
using UkFn = void (*)(int64_t, const float*, const float*, const Tile&);

// ---- packing (gemm_pack.cpp); portable, used by every path (AVX-512 packs B with its own fast path)
// A rows [m0, m0+mb) x k [k0, k0+kc) -> dst, grouped in micro-tiles of MR rows: tile t starts at
// dst + t*MR*kc and holds dst[k*mr + r] (mr = rows in that tile).
void pack_a(const Operand& A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int MR, float* dst);
// B columns [n0, n0+nv) x k [k0, k0+kc) -> dst[k*NR + j], columns j >= nv zero. Portable version.
void pack_b_generic(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc, float* dst);

// ---- per-ISA entry points: uk(mr) is the micro-kernel for a tile of mr rows (1 <= mr <= MR of that ISA)
namespace vs {
UkFn uk(int mr);  // gemm_uk_scalar.cpp, mr <= MRSC
}  // namespace vs
namespace v2 {
UkFn uk(int mr);  // gemm_uk_avx2.cpp, mr <= MR256
}  // namespace v2
namespace v5 {
UkFn uk(int mr);  // gemm_uk_avx512.cpp, mr <= MR512
// AVX-512 B packing (gemm_pack.cpp); falls back to pack_b_generic for layouts without a fast path.
void pack_b_avx512(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc, float* dst);
// M <= SMALL_M_MAX, B bf16 with rows contiguous in k (gemm_uk_avx512.cpp).
void small_m_gemm(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
                  uint16_t* outb, bool bf16_chain);
}  // namespace v5
namespace vb {
// the avx512bf16 path (gemm_uk_avx512bf16.cpp): bf16 x bf16 operands only, packed as bf16 pairs.
UkFn uk(int mr);  // mr <= MR512; A and B are the pair panels below (uint32 units)
// A rows [m0, m0+mb) x k [k0, k0+kc) -> dst as pairs, tiles of MR rows: tile t at dst + t*MR*kp
// (kp = (kc+1)/2) holds dst[j*mr + r] = bf16_pair(a[r, k0+2j], a[r, k0+2j+1] or kPadA).
void pack_a(const Operand& A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int MR, uint32_t* dst);
// B columns [n0, n0+nv) x k [k0, k0+kc) -> dst[j*NR + n] = bf16_pair(b[n, k0+2j], b[n, k0+2j+1] or kPadB).
void pack_b(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc, uint32_t* dst);
// M <= SMALL_M_MAX, B rows contiguous in k: B streamed once, as v5::small_m_gemm.
void small_m_gemm(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
                  uint16_t* outb);
}  // namespace vb
namespace amx {
// det_gemm / lm_head on AMX tiles (gemm_amx.cpp; NOT the chain above: its own arch key). A bf16 with
// any strides, W bf16 [N, K] contiguous.
void gemm(const Operand& A, const uint16_t* W, int64_t M, int64_t N, int64_t K, float* outf, uint16_t* outb);
}  // namespace amx

}  // namespace ws1_gemm

// AVX-512 helpers shared by the packer and the micro-kernels.
WS1_BEGIN_AVX512_BW
namespace ws1_gemm {
namespace v5 {

// In-register transpose of a 16 x 16 matrix of 32-bit elements: out[c] lane i = in[i] lane c.
inline void transpose16_epi32(const __m512i* in, __m512i* out) {
  __m512i t[16], s[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // s[4q + c] lane L = rows 4q..4q+3 at column 4L + c
  for (int q = 0; q < 4; ++q) {
    const __m512i a0 = t[4 * q], a1 = t[4 * q + 1], b0 = t[4 * q + 2], b1 = t[4 * q + 3];
    s[4 * q + 0] = _mm512_unpacklo_epi64(a0, b0);
    s[4 * q + 1] = _mm512_unpackhi_epi64(a0, b0);
    s[4 * q + 2] = _mm512_unpacklo_epi64(a1, b1);
    s[4 * q + 3] = _mm512_unpackhi_epi64(a1, b1);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = s[c], s1 = s[4 + c], s2 = s[8 + c], s3 = s[12 + c];
    const __m512i x0 = _mm512_shuffle_i32x4(s0, s1, 0x88);
    const __m512i x1 = _mm512_shuffle_i32x4(s0, s1, 0xDD);
    const __m512i x2 = _mm512_shuffle_i32x4(s2, s3, 0x88);
    const __m512i x3 = _mm512_shuffle_i32x4(s2, s3, 0xDD);
    out[0 + c] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    out[8 + c] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    out[12 + c] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
}

// FP32 -> BF16 RNE, bit-identical to f32_to_bf16_bits (NaN -> quiet NaN, Inf kept).
inline __m256i cvt_bf16_avx512(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i absu = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(absu, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace v5
}  // namespace ws1_gemm
WS1_END_ISA
