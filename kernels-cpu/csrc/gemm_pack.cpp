// Packing for the GEMM family (see gemm.h, contract in gemm.cpp): A and B are copied into FP32 panels
// the micro-kernels read. bf16 -> fp32 is exact (a 16-bit shift), so packing changes only the layout,
// never a value; padded B columns are zero and never stored.
#include "gemm.h"

namespace ws1_gemm {

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

}  // namespace ws1_gemm

WS1_BEGIN_AVX512_BW
namespace ws1_gemm {
namespace v5 {

// AVX-512 B packing; falls back to the generic packer for layouts without a fast path.
void pack_b_avx512(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc,
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

}  // namespace v5
}  // namespace ws1_gemm
WS1_END_ISA
