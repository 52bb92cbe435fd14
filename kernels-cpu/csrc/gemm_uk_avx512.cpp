// GEMM micro-kernel and small-M path, AVX-512 (ws1_gemm::v5; see gemm.h, contract in gemm.cpp).
// C tile (mr x ncols) = [cin or 0] + sum_k A[k][r] * B[k][j], serial fma over k (lanes = columns);
// output bf16 (RNE) to bout if non-null, else fp32 to cout.
#include "gemm.h"

WS1_BEGIN_AVX512_BW
namespace ws1_gemm {
namespace v5 {

template <int MR>
void uk_avx512(int64_t kc, const float* A, const float* B, const Tile& t) {
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
void small_m_rows(const float* a, int64_t K, const uint16_t* B, int64_t ldb, int64_t n0,
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

}  // namespace v5
}  // namespace ws1_gemm
WS1_END_ISA

namespace ws1_gemm {
namespace v5 {

constexpr int SMALL_G = 2;  // row groups of 16 per call (32 output columns)

void small_m_gemm(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
                  uint16_t* outb, bool bf16_chain) {
  FBuf abuf = alloc_floats(M * K);  // A rows as fp32, row-major (exact conversion)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) abuf[m * K + k] = A.at(m, k);
  const float* a = abuf.get();
  const uint16_t* b = static_cast<const uint16_t*>(B.p);
  constexpr int64_t CW = 16 * SMALL_G;
  const int64_t nchunks = (N + CW - 1) / CW;
  ::ws1::parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
    FlushScope flush(bf16_chain);  // bf16 x bf16: MXCSR.FTZ|DAZ, the BF16 unit's flush rules
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

UkFn uk(int mr) {
  static const UkFn table[] = {nullptr,         &uk_avx512<1>, &uk_avx512<2>,  &uk_avx512<3>,  &uk_avx512<4>,
                               &uk_avx512<5>,   &uk_avx512<6>, &uk_avx512<7>,  &uk_avx512<8>,  &uk_avx512<9>,
                               &uk_avx512<10>,  &uk_avx512<11>, &uk_avx512<12>};
  return table[mr];
}

}  // namespace v5
}  // namespace ws1_gemm
