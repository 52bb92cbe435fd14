// GEMM family for the ws1_cpu kernels: det_gemm (bf16 out), lm_head (fp32 out) and the general
// strided/mixed-dtype gemm used by backward passes. All three share one core.
//
// NUMERICAL CONTRACT (the point of this file). Every output element is
//
//     acc = +0.0f;
//     for (k = 0; k < K; ++k) acc = fmaf(float(a[m, k]), float(b[n, k]), acc);   // ascending k
//     c[m, n] = out_fp32 ? acc : bf16_rne(acc);
//
// i.e. one serial chain of single-rounded FP32 FMAs per output element, whose order depends only
// on K. Nothing else in the code below may change that sequence:
//  * the micro-kernel is the classic outer-product kernel: a broadcast of a[m, k] times a vector
//    of b[n..n+15, k], FMA'd into an accumulator whose lanes are 16 *different outputs*. There is
//    no horizontal reduction and no split of K across lanes, threads or partial sums;
//  * K is blocked (KC) only with the FP32 partial accumulator carried across blocks: stored as
//    FP32 and reloaded (exact), so the chain is the same as without blocking;
//  * parallelism (at::parallel_for, honouring torch.set_num_threads) is over output tiles only;
//  * edge tiles: the B panel is zero-padded to NR columns (the padded lanes are never stored) and
//    the M edge uses a micro-kernel instantiated for the exact row count (same chain per element);
//  * inputs are converted to FP32 exactly (bf16 -> fp32 is a 16-bit shift) when they are packed;
//  * scalar (std::fma), AVX2 (_mm256_fmadd_ps) and AVX-512 (_mm512_fmadd_ps) paths execute the
//    same IEEE-754 operations, and the build uses -ffp-contract=off, so all give the same bits.
// Consequence: results are bitwise independent of M, of the row position, of padding / tiling,
// of the thread count, and of the ISA path.
//
// Special values: NaN and Inf propagate as IEEE FMA says (e.g. Inf * 0 = NaN). Empty M or N
// returns an empty [M, N] tensor; K = 0 returns zeros.
#include "ws1_cpu.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

namespace ws1 {
namespace {

constexpr int NR = 32;       // columns per packed B panel (2 zmm)
constexpr int KC = 256;      // K block (B panel = KC x NR fp32 = 32 KiB, L1-resident)
constexpr int MR512 = 12;    // rows per AVX-512 micro-kernel: 12 x 32 = 24 zmm accumulators
constexpr int MR256 = 6;     // rows per AVX2 micro-kernel: 6 x 16 = 12 ymm accumulators
constexpr int MRSC = 4;      // rows per scalar micro-kernel
constexpr int64_t MB_MAX = 264;            // rows per output tile (multiple of 12, 6 and 4)
constexpr int64_t NB_PANELS_MAX = 16;      // panels per output tile (512 columns)
constexpr int64_t A_FULLK_BYTES = 1 << 20; // pack A for all of K when it fits (order "J")

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

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using FBuf = std::unique_ptr<float[], AlignedFree>;
FBuf alloc_floats(int64_t n) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 16)) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  TORCH_CHECK(p != nullptr, "ws1_cpu gemm: out of memory allocating ", bytes, " bytes");
  return FBuf(static_cast<float*>(p));
}

// ------------------------------------------------------------------------------------------
// Packing (exact conversions; layout only affects speed, never values)
// ------------------------------------------------------------------------------------------

// A rows [m0, m0+mb) x k [k0, k0+kc) -> dst, grouped in micro-tiles of MR rows: tile t starts at
// dst + t*MR*kc and holds dst[k*mr + r] (mr = rows in that tile).
void pack_a(const Operand& A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int MR, float* dst) {
  for (int64_t t0 = 0; t0 < mb; t0 += MR) {
    const int64_t mr = std::min<int64_t>(MR, mb - t0);
    float* d = dst + t0 * kc;
    const bool k_inner = std::llabs(A.s1) <= std::llabs(A.s0);
    if (A.bf16) {
      const uint16_t* p = static_cast<const uint16_t*>(A.p);
      if (k_inner) {
        for (int64_t r = 0; r < mr; ++r) {
          const uint16_t* row = p + (m0 + t0 + r) * A.s0 + k0 * A.s1;
          for (int64_t k = 0; k < kc; ++k) d[k * mr + r] = bf16_bits_to_f32(row[k * A.s1]);
        }
      } else {
        for (int64_t k = 0; k < kc; ++k) {
          const uint16_t* col = p + (m0 + t0) * A.s0 + (k0 + k) * A.s1;
          for (int64_t r = 0; r < mr; ++r) d[k * mr + r] = bf16_bits_to_f32(col[r * A.s0]);
        }
      }
    } else {
      const float* p = static_cast<const float*>(A.p);
      if (k_inner) {
        for (int64_t r = 0; r < mr; ++r) {
          const float* row = p + (m0 + t0 + r) * A.s0 + k0 * A.s1;
          for (int64_t k = 0; k < kc; ++k) d[k * mr + r] = row[k * A.s1];
        }
      } else {
        for (int64_t k = 0; k < kc; ++k) {
          const float* col = p + (m0 + t0) * A.s0 + (k0 + k) * A.s1;
          for (int64_t r = 0; r < mr; ++r) d[k * mr + r] = col[r * A.s0];
        }
      }
    }
  }
}

// B columns [n0, n0+nv) x k [k0, k0+kc) -> dst[k*NR + j], columns j >= nv zero. Portable version.
void pack_b_generic(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc, float* dst) {
  if (nv < NR) {
    for (int64_t k = 0; k < kc; ++k)
      for (int j = nv; j < NR; ++j) dst[k * NR + j] = 0.0f;
  }
  const bool n_inner = std::llabs(B.s0) <= std::llabs(B.s1);
  if (n_inner) {
    for (int64_t k = 0; k < kc; ++k)
      for (int j = 0; j < nv; ++j) dst[k * NR + j] = B.at(n0 + j, k0 + k);
  } else {
    for (int j = 0; j < nv; ++j)
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = B.at(n0 + j, k0 + k);
  }
}

#define WS1_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define WS1_AVX2 __attribute__((target("avx2,fma")))

// In-register transpose of a 16 x 16 matrix of 32-bit elements: out[c] lane i = in[i] lane c.
WS1_AVX512 inline void transpose16_epi32(const __m512i* in, __m512i* out) {
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

// AVX-512 B packing; falls back to the generic packer for layouts without a fast path.
WS1_AVX512 void pack_b_avx512(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc,
                              float* dst) {
  if (B.s1 == 1 && B.bf16) {
    // rows of B are contiguous in k: load 16 rows x 32 bf16, transpose (k, k+1) pairs as 32-bit
    // units, then split each pair into two fp32 vectors with a shift / mask.
    const uint16_t* p = static_cast<const uint16_t*>(B.p);
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int g = 0; g < 2; ++g) {
      const int rows = std::max(0, std::min(16, nv - 16 * g));
      if (rows == 0) {
        for (int64_t k = 0; k < kc; ++k) _mm512_storeu_ps(dst + k * NR + 16 * g, _mm512_setzero_ps());
        continue;
      }
      for (int64_t kb = 0; kb < kc; kb += 32) {
        const int64_t kn = std::min<int64_t>(32, kc - kb);
        const __mmask32 lm = kn == 32 ? 0xFFFFFFFFu : ((1u << kn) - 1u);
        __m512i r[16], v[16];
        for (int i = 0; i < 16; ++i) {
          if (i < rows) {
            const uint16_t* src = p + (n0 + 16 * g + i) * B.s0 + k0 + kb;
            r[i] = kn == 32 ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi16(lm, src);
          } else {
            r[i] = _mm512_setzero_si512();
          }
        }
        transpose16_epi32(r, v);
        float* d = dst + kb * NR + 16 * g;
        if (kn == 32) {
          for (int q = 0; q < 16; ++q) {
            _mm512_storeu_ps(d + (2 * q) * NR, _mm512_castsi512_ps(_mm512_slli_epi32(v[q], 16)));
            _mm512_storeu_ps(d + (2 * q + 1) * NR, _mm512_castsi512_ps(_mm512_and_si512(v[q], hi_mask)));
          }
        } else {
          for (int q = 0; q < 16; ++q) {
            if (2 * q < kn)
              _mm512_storeu_ps(d + (2 * q) * NR, _mm512_castsi512_ps(_mm512_slli_epi32(v[q], 16)));
            if (2 * q + 1 < kn)
              _mm512_storeu_ps(d + (2 * q + 1) * NR,
                               _mm512_castsi512_ps(_mm512_and_si512(v[q], hi_mask)));
          }
        }
      }
    }
    return;
  }
  if (B.s1 == 1 && !B.bf16) {
    const float* p = static_cast<const float*>(B.p);
    for (int g = 0; g < 2; ++g) {
      const int rows = std::max(0, std::min(16, nv - 16 * g));
      if (rows == 0) {
        for (int64_t k = 0; k < kc; ++k) _mm512_storeu_ps(dst + k * NR + 16 * g, _mm512_setzero_ps());
        continue;
      }
      for (int64_t kb = 0; kb < kc; kb += 16) {
        const int64_t kn = std::min<int64_t>(16, kc - kb);
        const __mmask16 lm = static_cast<__mmask16>(kn == 16 ? 0xFFFFu : ((1u << kn) - 1u));
        __m512i r[16], v[16];
        for (int i = 0; i < 16; ++i) {
          if (i < rows) {
            const float* src = p + (n0 + 16 * g + i) * B.s0 + k0 + kb;
            r[i] = _mm512_castps_si512(_mm512_maskz_loadu_ps(lm, src));
          } else {
            r[i] = _mm512_setzero_si512();
          }
        }
        transpose16_epi32(r, v);
        float* d = dst + kb * NR + 16 * g;
        for (int q = 0; q < kn; ++q) _mm512_storeu_ps(d + q * NR, _mm512_castsi512_ps(v[q]));
      }
    }
    return;
  }
  if (B.s0 == 1) {
    // columns of B are contiguous in n: one (masked) vector load per k.
    const __mmask16 m0 = static_cast<__mmask16>(nv >= 16 ? 0xFFFFu : ((1u << nv) - 1u));
    const __mmask16 m1 =
        static_cast<__mmask16>(nv >= 32 ? 0xFFFFu : (nv > 16 ? ((1u << (nv - 16)) - 1u) : 0u));
    if (B.bf16) {
      const uint16_t* p = static_cast<const uint16_t*>(B.p) + n0;
      for (int64_t k = 0; k < kc; ++k) {
        const uint16_t* src = p + (k0 + k) * B.s1;
        const __m256i h0 = _mm256_maskz_loadu_epi16(m0, src);
        const __m256i h1 = _mm256_maskz_loadu_epi16(m1, src + 16);
        _mm512_storeu_ps(dst + k * NR,
                         _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16)));
        _mm512_storeu_ps(dst + k * NR + 16,
                         _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16)));
      }
    } else {
      const float* p = static_cast<const float*>(B.p) + n0;
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = p + (k0 + k) * B.s1;
        _mm512_storeu_ps(dst + k * NR, _mm512_maskz_loadu_ps(m0, src));
        _mm512_storeu_ps(dst + k * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
    }
    return;
  }
  pack_b_generic(B, n0, nv, k0, kc, dst);
}

// ------------------------------------------------------------------------------------------
// Micro-kernels. C tile (mr x ncols) = [cin or 0] + sum_k A[k][r] * B[k][j], serial fma over k.
// Output: bf16 (RNE) to bout if non-null, else fp32 to cout.
// ------------------------------------------------------------------------------------------
struct Tile {
  const float* cin;  // fp32 partial accumulator to continue (nullptr: start at +0.0f)
  int64_t ldcin;
  float* cout;       // fp32 destination (when bout == nullptr)
  int64_t ldcout;
  uint16_t* bout;    // bf16 destination, rounded RNE
  int64_t ldb;
  int ncols;         // valid columns (<= NR)
};

// Scalar: the reference semantics, literally.
template <int MR>
void uk_scalar(int64_t kc, const float* A, const float* B, const Tile& t) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = (t.cin != nullptr && j < t.ncols) ? t.cin[r * t.ldcin + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k) {
    const float* b = B + k * NR;
    const float* a = A + k * MR;
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < t.ncols; ++j) acc[r][j] = std::fma(a[r], b[j], acc[r][j]);
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < t.ncols; ++j) {
      if (t.bout != nullptr) t.bout[r * t.ldb + j] = f32_to_bf16_bits(acc[r][j]);
      else t.cout[r * t.ldcout + j] = acc[r][j];
    }
}

// AVX2: MR rows x 16 columns (half a panel; called twice per panel).
template <int MR>
WS1_AVX2 void uk_avx2_half(int64_t kc, const float* A, const float* B, const Tile& t, int half) {
  const int nc = std::max(0, std::min(16, t.ncols - 16 * half));
  if (nc == 0) return;
  const int c0 = 16 * half;
  __m256 acc0[MR], acc1[MR];
  alignas(32) float tmp[16];
  for (int r = 0; r < MR; ++r) {
    if (t.cin != nullptr) {
      for (int j = 0; j < 16; ++j) tmp[j] = j < nc ? t.cin[r * t.ldcin + c0 + j] : 0.0f;
      acc0[r] = _mm256_load_ps(tmp);
      acc1[r] = _mm256_load_ps(tmp + 8);
    } else {
      acc0[r] = _mm256_setzero_ps();
      acc1[r] = _mm256_setzero_ps();
    }
  }
  const float* b = B + c0;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * NR);
    const __m256 b1 = _mm256_loadu_ps(b + k * NR + 8);
    const float* a = A + k * MR;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_store_ps(tmp, acc0[r]);
    _mm256_store_ps(tmp + 8, acc1[r]);
    if (t.bout != nullptr) {
      for (int j = 0; j < nc; ++j) t.bout[r * t.ldb + c0 + j] = f32_to_bf16_bits(tmp[j]);
    } else {
      for (int j = 0; j < nc; ++j) t.cout[r * t.ldcout + c0 + j] = tmp[j];
    }
  }
}

template <int MR>
void uk_avx2(int64_t kc, const float* A, const float* B, const Tile& t) {
  uk_avx2_half<MR>(kc, A, B, t, 0);
  uk_avx2_half<MR>(kc, A, B, t, 1);
}

// FP32 -> BF16 RNE, bit-identical to f32_to_bf16_bits (NaN -> quiet NaN, Inf kept).
WS1_AVX512 inline __m256i cvt_bf16_avx512(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i absu = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(absu, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

template <int MR>
WS1_AVX512 void uk_avx512(int64_t kc, const float* A, const float* B, const Tile& t) {
  const int nc = t.ncols;
  const __mmask16 m0 = static_cast<__mmask16>(nc >= 16 ? 0xFFFFu : ((1u << nc) - 1u));
  const __mmask16 m1 =
      static_cast<__mmask16>(nc >= 32 ? 0xFFFFu : (nc > 16 ? ((1u << (nc - 16)) - 1u) : 0u));
  __m512 c0[MR], c1[MR];
  if (t.cin != nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      c0[r] = _mm512_maskz_loadu_ps(m0, t.cin + r * t.ldcin);
      c1[r] = _mm512_maskz_loadu_ps(m1, t.cin + r * t.ldcin + 16);
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      c0[r] = _mm512_setzero_ps();
      c1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(B + k * NR);
    const __m512 b1 = _mm512_load_ps(B + k * NR + 16);
    const float* a = A + k * MR;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  if (t.bout != nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      _mm256_mask_storeu_epi16(t.bout + r * t.ldb, m0, cvt_bf16_avx512(c0[r]));
      _mm256_mask_storeu_epi16(t.bout + r * t.ldb + 16, m1, cvt_bf16_avx512(c1[r]));
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      _mm512_mask_storeu_ps(t.cout + r * t.ldcout, m0, c0[r]);
      _mm512_mask_storeu_ps(t.cout + r * t.ldcout + 16, m1, c1[r]);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Small-M path (M <= 4, B = bf16 rows contiguous in k, AVX-512): B has no reuse, so instead of
// packing it we stream it once: load 16 rows x 32 k, transpose (k, k+1) bf16 pairs in registers
// (lanes = 16 output columns), and FMA straight from registers. Each output element still gets
// acc = +0; for k ascending: acc = fma(a[m,k], b[n,k], acc) -- the identical chain as the packed
// path (the K tail issues only the FMAs for k < K), so the bits are the same.
// G row groups of 16 are interleaved so that G * MR independent chains hide the FMA latency.
// ------------------------------------------------------------------------------------------
template <int MR, int G>
WS1_AVX512 void small_m_rows(const float* a, int64_t K, const uint16_t* B, int64_t ldb, int64_t n0,
                             int nv, float* outf, uint16_t* outb, int64_t ldo) {
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  // bt[k][g]: 16 fp32 values b[n0 + 16g + i, kb + k] of the current SKB-k block (L1-resident).
  // Each row is read in runs of SKB contiguous bf16 with a software L2 prefetch two runs ahead:
  // short runs across many rows otherwise defeat the hardware prefetcher (measured).
  constexpr int SKB = 64;
  alignas(64) float bt[SKB][G][16];
  __m512 acc[MR][G];
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < G; ++g) acc[m][g] = _mm512_setzero_ps();
  int rows[G];
  for (int g = 0; g < G; ++g) rows[g] = std::max(0, std::min(16, nv - 16 * g));
  for (int64_t kb = 0; kb < K; kb += SKB) {
    const int64_t kn = std::min<int64_t>(SKB, K - kb);
    for (int g = 0; g < G; ++g) {
      const uint16_t* gsrc = B + (n0 + 16 * g) * ldb;
      if (kb + 2 * SKB < K && rows[g] == 16) {  // L2 prefetch two blocks ahead
        for (int i = 0; i < 16; ++i)
          for (int l = 0; l < SKB; l += 32)
            _mm_prefetch(reinterpret_cast<const char*>(gsrc + i * ldb + kb + 2 * SKB + l), _MM_HINT_T1);
      }
      for (int64_t ks = 0; ks < kn; ks += 32) {
        const int64_t kk = std::min<int64_t>(32, kn - ks);
        const __mmask32 lm = kk == 32 ? 0xFFFFFFFFu : ((1u << kk) - 1u);
        __m512i r[16], v[16];
        const uint16_t* src = gsrc + kb + ks;
        if (kk == 32 && rows[g] == 16) {
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * ldb);
        } else {
          for (int i = 0; i < 16; ++i)
            r[i] = i < rows[g] ? _mm512_maskz_loadu_epi16(lm, src + i * ldb) : _mm512_setzero_si512();
        }
        transpose16_epi32(r, v);
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) {
          _mm512_store_ps(bt[ks + 2 * q][g], _mm512_castsi512_ps(_mm512_slli_epi32(v[q], 16)));
          _mm512_store_ps(bt[ks + 2 * q + 1][g], _mm512_castsi512_ps(_mm512_and_si512(v[q], hi_mask)));
        }
      }
    }
    const float* ak = a + kb;
    for (int64_t k = 0; k < kn; ++k) {
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const __m512 av = _mm512_set1_ps(ak[m * K + k]);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) acc[m][g] = _mm512_fmadd_ps(av, _mm512_load_ps(bt[k][g]), acc[m][g]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    if (rows[g] == 0) continue;
    const __mmask16 sm = static_cast<__mmask16>(rows[g] == 16 ? 0xFFFFu : ((1u << rows[g]) - 1u));
    for (int m = 0; m < MR; ++m) {
      if (outb != nullptr)
        _mm256_mask_storeu_epi16(outb + m * ldo + n0 + 16 * g, sm, cvt_bf16_avx512(acc[m][g]));
      else
        _mm512_mask_storeu_ps(outf + m * ldo + n0 + 16 * g, sm, acc[m][g]);
    }
  }
}

constexpr int SMALL_M_MAX = 4;
constexpr int SMALL_G = 2;  // row groups of 16 per call (32 output columns)

void small_m_gemm(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
                  uint16_t* outb) {
  FBuf abuf = alloc_floats(M * K);  // A rows as fp32, row-major (exact conversion)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) abuf[m * K + k] = A.at(m, k);
  const float* a = abuf.get();
  const uint16_t* b = static_cast<const uint16_t*>(B.p);
  constexpr int64_t CW = 16 * SMALL_G;
  const int64_t nchunks = (N + CW - 1) / CW;
  at::parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n0 = c * CW;
      const int nv = static_cast<int>(std::min<int64_t>(CW, N - n0));
      switch (M) {
        case 1: small_m_rows<1, SMALL_G>(a, K, b, B.s0, n0, nv, outf, outb, N); break;
        case 2: small_m_rows<2, SMALL_G>(a, K, b, B.s0, n0, nv, outf, outb, N); break;
        case 3: small_m_rows<3, SMALL_G>(a, K, b, B.s0, n0, nv, outf, outb, N); break;
        default: small_m_rows<4, SMALL_G>(a, K, b, B.s0, n0, nv, outf, outb, N); break;
      }
    }
  });
}

using UkFn = void (*)(int64_t, const float*, const float*, const Tile&);

#define WS1_UK_TABLE(fn, ...)                                                    \
  static const UkFn table[] = {nullptr, __VA_ARGS__};                            \
  return table[mr];

UkFn pick_uk(Isa isa, int mr) {
  if (isa == Isa::avx512) {
    WS1_UK_TABLE(fn, &uk_avx512<1>, &uk_avx512<2>, &uk_avx512<3>, &uk_avx512<4>, &uk_avx512<5>,
                 &uk_avx512<6>, &uk_avx512<7>, &uk_avx512<8>, &uk_avx512<9>, &uk_avx512<10>,
                 &uk_avx512<11>, &uk_avx512<12>)
  } else if (isa == Isa::avx2) {
    WS1_UK_TABLE(fn, &uk_avx2<1>, &uk_avx2<2>, &uk_avx2<3>, &uk_avx2<4>, &uk_avx2<5>, &uk_avx2<6>)
  } else {
    WS1_UK_TABLE(fn, &uk_scalar<1>, &uk_scalar<2>, &uk_scalar<3>, &uk_scalar<4>)
  }
}

// ------------------------------------------------------------------------------------------
// Driver
// ------------------------------------------------------------------------------------------
// out: fp32 (outf) or bf16 (outb), contiguous [M, N].
void gemm_core(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
               uint16_t* outb) {
  const Isa isa = dispatch_isa();
  if (isa == Isa::avx512 && M <= SMALL_M_MAX && B.bf16 && B.s1 == 1) {
    small_m_gemm(A, B, M, N, K, outf, outb);
    return;
  }
  const int MR = isa == Isa::avx512 ? MR512 : (isa == Isa::avx2 ? MR256 : MRSC);
  UkFn uks[MR512 + 1];
  for (int r = 1; r <= MR; ++r) uks[r] = pick_uk(isa, r);
  auto pack_b = [&](int64_t n0, int nv, int64_t k0, int64_t kc, float* dst) {
    if (isa == Isa::avx512) pack_b_avx512(B, n0, nv, k0, kc, dst);
    else pack_b_generic(B, n0, nv, k0, kc, dst);
  };

  // Output tiling (affects speed only): row blocks of <= MB_MAX, column blocks of whole panels,
  // with enough tiles for the threads to balance.
  const int64_t nthreads = std::max(1, at::get_num_threads());
  const int64_t mblocks = (M + MB_MAX - 1) / MB_MAX;
  const int64_t MB = (M + mblocks - 1) / mblocks;  // balanced row blocks
  const int64_t npanels = (N + NR - 1) / NR;
  int64_t nb_panels = NB_PANELS_MAX;
  const int64_t want_tiles = 4 * nthreads;
  if (mblocks * ((npanels + nb_panels - 1) / nb_panels) < want_tiles) {
    const int64_t ncb = std::max<int64_t>(1, (want_tiles + mblocks - 1) / mblocks);
    nb_panels = std::max<int64_t>(1, (npanels + ncb - 1) / ncb);
  }
  const int64_t nblocks = (npanels + nb_panels - 1) / nb_panels;
  const int64_t ntiles = mblocks * nblocks;
  const int64_t nkb = (K + KC - 1) / KC;
  const bool full_k = MB * K * static_cast<int64_t>(sizeof(float)) <= A_FULLK_BYTES;
  const bool need_carry_buf = outb != nullptr && nkb > 1;

  at::parallel_for(0, ntiles, 1, [&](int64_t t_begin, int64_t t_end) {
    FBuf bbuf = alloc_floats(static_cast<int64_t>(KC) * NR);
    FBuf abuf = alloc_floats(MB * (full_k ? K : std::min<int64_t>(K, KC)));
    FBuf cbuf = need_carry_buf ? alloc_floats(MB * (full_k ? NR : nb_panels * NR)) : FBuf();
    for (int64_t tile = t_begin; tile < t_end; ++tile) {
      const int64_t mb_i = tile / nblocks, nb_i = tile % nblocks;
      const int64_t m0 = mb_i * MB, mb = std::min(MB, M - m0);
      const int64_t p0 = nb_i * nb_panels, p1 = std::min(npanels, p0 + nb_panels);
      const int64_t tile_n0 = p0 * NR;

      // Run the micro-kernels of one (K block, panel) over all row micro-tiles of the tile.
      // a_blk: packed A of this K block (rows m0.., tile layout). cacc: fp32 accumulator of the
      // panel's column 0 / row m0 (ld cld) for the bf16-out case, else the fp32 output.
      auto run_panel = [&](const float* a_blk, int64_t kb, int64_t kc, int64_t n0, int nv,
                           float* cacc, int64_t cld) {
        const bool first = kb == 0, last = kb == nkb - 1;
        for (int64_t r0 = 0; r0 < mb; r0 += MR) {
          const int mr = static_cast<int>(std::min<int64_t>(MR, mb - r0));
          Tile t;
          t.ncols = nv;
          t.cin = (first || cacc == nullptr) ? nullptr : cacc + r0 * cld;
          t.ldcin = cld;
          t.cout = cacc != nullptr ? cacc + r0 * cld : nullptr;
          t.ldcout = cld;
          t.bout = (last && outb != nullptr) ? outb + (m0 + r0) * N + n0 : nullptr;
          t.ldb = N;
          uks[mr](kc, a_blk + r0 * kc, bbuf.get(), t);
        }
      };

      if (full_k) {
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
          pack_a(A, m0, mb, k0, kc, MR, abuf.get() + k0 * mb);
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n0 = p * NR;
          const int nv = static_cast<int>(std::min<int64_t>(NR, N - n0));
          float* cacc = outb != nullptr ? cbuf.get() : outf + m0 * N + n0;
          const int64_t cld = outb != nullptr ? NR : N;
          for (int64_t kb = 0; kb < nkb; ++kb) {
            const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
            pack_b(n0, nv, k0, kc, bbuf.get());
            run_panel(abuf.get() + k0 * mb, kb, kc, n0, nv, cacc, cld);
          }
        }
      } else {
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
          pack_a(A, m0, mb, k0, kc, MR, abuf.get());
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t n0 = p * NR;
            const int nv = static_cast<int>(std::min<int64_t>(NR, N - n0));
            float* cacc = outb != nullptr ? cbuf.get() + (n0 - tile_n0) : outf + m0 * N + n0;
            const int64_t cld = outb != nullptr ? nb_panels * NR : N;
            pack_b(n0, nv, k0, kc, bbuf.get());
            run_panel(abuf.get(), kb, kc, n0, nv, cacc, cld);
          }
        }
      }
    }
  });
}

Operand make_operand(const at::Tensor& t) {
  Operand o;
  o.bf16 = t.scalar_type() == at::kBFloat16;
  o.p = t.data_ptr();
  o.s0 = t.stride(0);
  o.s1 = t.stride(1);
  return o;
}

void check_operand(const at::Tensor& t, const char* op, const char* name, bool allow_fp32) {
  check_cpu(t, op, name);
  if (allow_fp32) {
    WS1_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be BFloat16 or Float, got ", c10::toString(t.scalar_type()));
  } else {
    check_dtype(t, at::kBFloat16, op, name);
  }
  check_dim(t, 2, op, name);
}

at::Tensor run_gemm(const char* op, const at::Tensor& a, const at::Tensor& b, bool out_fp32,
                    const char* an, const char* bn) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  WS1_CHECK(b.size(1) == K, op, ": K mismatch: ", an, " has K=", K, " (shape ", a.sizes(), "), ", bn,
            " has K=", b.size(1), " (shape ", b.sizes(), ")");
  at::Tensor out = at::empty({M, N}, a.options().dtype(out_fp32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  const Operand A = make_operand(a), B = make_operand(b);
  if (out_fp32) gemm_core(A, B, M, N, K, out.data_ptr<float>(), nullptr);
  else gemm_core(A, B, M, N, K, nullptr, bf16_ptr_mut(out));
  return out;
}

}  // namespace
}  // namespace ws1

// y = x @ weight.T, bf16 in, fp32 serial-fma accumulation, one RNE rounding to bf16.
static at::Tensor det_gemm(const at::Tensor& x, const at::Tensor& weight) {
  const char* op = "ws1_cpu::det_gemm";
  ws1::CallScope call(op);
  ws1::check_operand(x, op, "x", false);
  ws1::check_operand(weight, op, "weight", false);
  return ws1::run_gemm(op, x, weight, false, "x", "weight");
}

// logits = x @ weight.T in fp32 (same core, no final rounding).
static at::Tensor lm_head(const at::Tensor& x, const at::Tensor& weight) {
  const char* op = "ws1_cpu::lm_head";
  ws1::CallScope call(op);
  ws1::check_operand(x, op, "x", false);
  ws1::check_operand(weight, op, "weight", false);
  return ws1::run_gemm(op, x, weight, true, "x", "weight");
}

// C = a @ b.T; a [M,K], b [N,K], each bf16 or fp32 with arbitrary strides (transposed views ok).
static at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, bool out_fp32) {
  const char* op = "ws1_cpu::gemm";
  ws1::CallScope call(op);
  ws1::check_operand(a, op, "a", true);
  ws1::check_operand(b, op, "b", true);
  return ws1::run_gemm(op, a, b, out_fp32, "a", "b");
}

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("det_gemm(Tensor x, Tensor weight) -> Tensor", &det_gemm);
  m.def("lm_head(Tensor x, Tensor weight) -> Tensor", &lm_head);
  m.def("gemm(Tensor a, Tensor b, bool out_fp32) -> Tensor", &gemm);
}
