// GEMM on VDPBF16PS, the avx512bf16 path (ws1_gemm::vb; see gemm.h, contract in gemm.cpp): packing of
// bf16 x bf16 operands into bf16 pairs, the micro-kernel and the small-M streaming path.
//
// Why this path gives the portable paths' bits. Per lane, VDPBF16PS computes (Intel SDM, VDPBF16PS
// "Operation"): acc += a[2i+1]*b[2i+1]; acc += a[2i]*b[2i] -- two FMAs, each rounded RNE, inputs DAZ,
// outputs FTZ, MXCSR not read. A product of two bf16 is exact in FP32, so each step is fl(acc + a*b),
// i.e. fmaf(a, b, acc) with the flush rules. Packing k into the pair's high half and k+1 into the low
// half makes the instruction's order k ascending: the contract's chain, one VDPBF16PS per two k.
// bf16_unit_probe (bf16_probe.cpp) checks the instruction against chain_step on adversarial inputs
// (cancellation, ties, denormal inputs and results) and the tests require zero differences.
//
// C tile (mr x ncols) = [cin or 0] + chain over k; output bf16 (RNE) to bout if non-null, else fp32.
#include "gemm.h"

WS1_BEGIN_AVX512_BF16
namespace ws1_gemm {
namespace vb {

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }  // same 512 bits, read as 32 bf16

// 16 rows (n) x 32 k of bf16 (rows at src + i*ld, k contiguous, kn valid, the rest +0) -> out[q] lane i =
// bf16_pair(b[i, 2q], b[i, 2q+1]): a 32-bit transpose of (k, k+1) units, then a 16-bit rotate puts
// k into the high half.
inline void load_pairs16(const uint16_t* src, int64_t ld, int rows, int64_t kn, __m512i* out) {
  __m512i r[16];
  const __mmask32 lm = kn >= 32 ? 0xFFFFFFFFu : ((1u << kn) - 1u);
  if (kn >= 32 && rows == 16) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * ld);
  } else {
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_epi16(lm, src + i * ld) : _mm512_setzero_si512();
  }
  ::ws1_gemm::v5::transpose16_epi32(r, out);
#pragma GCC unroll 16
  for (int q = 0; q < 16; ++q) out[q] = _mm512_rol_epi32(out[q], 16);
}

void pack_b(const Operand& B, int64_t n0, int nv, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  const uint16_t* p = static_cast<const uint16_t*>(B.p);
  if (B.s1 == 1) {  // weights [N, K]: rows contiguous in k
    for (int g = 0; g < 2; ++g) {
      const int rows = std::max(0, std::min(16, nv - 16 * g));
      for (int64_t kb = 0; kb < kc; kb += 32) {
        __m512i v[16];
        if (rows == 0) {
          for (int q = 0; q < 16; ++q) v[q] = _mm512_setzero_si512();
        } else {
          load_pairs16(p + (n0 + 16 * g) * B.s0 + k0 + kb, B.s0, rows, kc - kb, v);
        }
        const int64_t qn = std::min<int64_t>(16, kp - kb / 2);
        for (int q = 0; q < qn; ++q) _mm512_store_si512(dst + (kb / 2 + q) * NR + 16 * g, v[q]);
      }
    }
    return;
  }
  if (B.s0 == 1) {  // b = W.t() in backward: columns n contiguous; interleave rows k and k+1
    // word 2n of the output is b[n, k+1] (low half), word 2n+1 is b[n, k] (high half)
    alignas(64) uint16_t idx_lo[32], idx_hi[32];
    for (int n = 0; n < 16; ++n) {
      idx_lo[2 * n] = static_cast<uint16_t>(32 + n);  // from the k+1 row (second operand)
      idx_lo[2 * n + 1] = static_cast<uint16_t>(n);   // from the k row
      idx_hi[2 * n] = static_cast<uint16_t>(48 + n);
      idx_hi[2 * n + 1] = static_cast<uint16_t>(16 + n);
    }
    const __m512i il = _mm512_load_si512(idx_lo), ih = _mm512_load_si512(idx_hi);
    const __mmask32 m = nv >= 32 ? 0xFFFFFFFFu : ((1u << nv) - 1u);
    for (int64_t j = 0; j < kp; ++j) {
      const int64_t k = k0 + 2 * j;
      const __m512i r0 = _mm512_maskz_loadu_epi16(m, p + n0 + k * B.s1);
      const __m512i r1 = 2 * j + 1 < kc ? _mm512_maskz_loadu_epi16(m, p + n0 + (k + 1) * B.s1) : _mm512_setzero_si512();
      _mm512_store_si512(dst + j * NR, _mm512_permutex2var_epi16(r0, il, r1));
      _mm512_store_si512(dst + j * NR + 16, _mm512_permutex2var_epi16(r0, ih, r1));
    }
    return;
  }
  for (int64_t j = 0; j < kp; ++j)
    for (int n = 0; n < NR; ++n) {
      uint32_t v = 0;
      if (n < nv) {
        const uint16_t* col = p + (n0 + n) * B.s0 + (k0 + 2 * j) * B.s1;
        v = bf16_pair(col[0], 2 * j + 1 < kc ? col[B.s1] : kPadB);
      }
      dst[j * NR + n] = v;
    }
}

void pack_a(const Operand& A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int MR, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  const uint16_t* p = static_cast<const uint16_t*>(A.p);
  for (int64_t t0 = 0; t0 < mb; t0 += MR) {
    const int64_t mr = std::min<int64_t>(MR, mb - t0);
    uint32_t* d = dst + t0 * kp;
    for (int64_t r = 0; r < mr; ++r) {
      const uint16_t* row = p + (m0 + t0 + r) * A.s0 + k0 * A.s1;
      for (int64_t j = 0; j < kp; ++j)
        d[j * mr + r] = bf16_pair(row[2 * j * A.s1], 2 * j + 1 < kc ? row[(2 * j + 1) * A.s1] : kPadA);
    }
  }
}

template <int MR>
void uk_bf16(int64_t kc, const float* Af, const float* Bf, const Tile& t) {
  const uint32_t* A = reinterpret_cast<const uint32_t*>(Af);
  const uint32_t* B = reinterpret_cast<const uint32_t*>(Bf);
  const int64_t kp = (kc + 1) / 2;
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
  for (int64_t j = 0; j < kp; ++j) {
    const __m512bh b0 = as_bh(_mm512_load_si512(B + j * NR));
    const __m512bh b1 = as_bh(_mm512_load_si512(B + j * NR + 16));
    const uint32_t* a = A + j * MR;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = as_bh(_mm512_set1_epi32(static_cast<int>(a[r])));
      c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
    }
  }
  if (t.bout != nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      _mm256_mask_storeu_epi16(t.bout + r * t.ldb, m0, ::ws1_gemm::v5::cvt_bf16_avx512(c0[r]));
      _mm256_mask_storeu_epi16(t.bout + r * t.ldb + 16, m1, ::ws1_gemm::v5::cvt_bf16_avx512(c1[r]));
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      _mm512_mask_storeu_ps(t.cout + r * t.ldcout, m0, c0[r]);
      _mm512_mask_storeu_ps(t.cout + r * t.ldcout + 16, m1, c1[r]);
    }
  }
}

// Small-M path (M <= 4, B rows contiguous in k): B has no reuse, so it is streamed once: 16 rows x 32 k
// are loaded, turned into pairs in registers and consumed at once by VDPBF16PS (no unpacking to FP32,
// no store). a holds each row's pairs, kPadA-padded to a multiple of 16 pairs; B's tail loads are +0.
// G row groups of 16 are interleaved so that G * MR independent chains hide the latency.
template <int MR, int G>
void small_m_rows(const uint32_t* a, int64_t kpa, int64_t K, const uint16_t* B, int64_t ldb, int64_t n0, int nv,
                  float* outf, uint16_t* outb, int64_t ldo) {
  __m512 acc[MR][G];
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < G; ++g) acc[m][g] = _mm512_setzero_ps();
  int rows[G];
  for (int g = 0; g < G; ++g) rows[g] = std::max(0, std::min(16, nv - 16 * g));
  constexpr int64_t PF = 256;  // software L2 prefetch distance in k (short runs across many rows)
  for (int64_t kb = 0; kb < K; kb += 32) {
    for (int g = 0; g < G; ++g) {
      const uint16_t* gsrc = B + (n0 + 16 * g) * ldb + kb;
      if (rows[g] == 16 && kb + PF < K) {
        for (int i = 0; i < 16; ++i) _mm_prefetch(reinterpret_cast<const char*>(gsrc + i * ldb + PF), _MM_HINT_T1);
      }
      __m512i v[16];
      if (rows[g] == 0) continue;
      load_pairs16(gsrc, ldb, rows[g], K - kb, v);
      const uint32_t* ak = a + kb / 2;
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m)
          acc[m][g] = _mm512_dpbf16_ps(acc[m][g], as_bh(_mm512_set1_epi32(static_cast<int>(ak[m * kpa + q]))),
                                       as_bh(v[q]));
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    if (rows[g] == 0) continue;
    const __mmask16 sm = static_cast<__mmask16>(rows[g] == 16 ? 0xFFFFu : ((1u << rows[g]) - 1u));
    for (int m = 0; m < MR; ++m) {
      if (outb != nullptr)
        _mm256_mask_storeu_epi16(outb + m * ldo + n0 + 16 * g, sm, ::ws1_gemm::v5::cvt_bf16_avx512(acc[m][g]));
      else
        _mm512_mask_storeu_ps(outf + m * ldo + n0 + 16 * g, sm, acc[m][g]);
    }
  }
}

}  // namespace vb
}  // namespace ws1_gemm
WS1_END_ISA

namespace ws1_gemm {
namespace vb {

constexpr int SMALL_G = 2;  // row groups of 16 per call (32 output columns)

void small_m_gemm(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
                  uint16_t* outb) {
  const int64_t kpa = (K + 31) / 32 * 16;  // pairs per row, padded to whole 32-k loads
  FBuf abuf = alloc_floats(M * kpa);
  uint32_t* a = reinterpret_cast<uint32_t*>(abuf.get());
  const uint16_t* pa = static_cast<const uint16_t*>(A.p);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < kpa; ++j) {
      const int64_t k = 2 * j;
      const uint16_t first = k < K ? pa[m * A.s0 + k * A.s1] : kPadA;
      const uint16_t second = k + 1 < K ? pa[m * A.s0 + (k + 1) * A.s1] : kPadA;
      a[m * kpa + j] = bf16_pair(first, second);
    }
  const uint16_t* b = static_cast<const uint16_t*>(B.p);
  constexpr int64_t CW = 16 * SMALL_G;
  const int64_t nchunks = (N + CW - 1) / CW;
  ::ws1::parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n0 = c * CW;
      const int nv = static_cast<int>(std::min<int64_t>(CW, N - n0));
      switch (M) {
        case 1: small_m_rows<1, SMALL_G>(a, kpa, K, b, B.s0, n0, nv, outf, outb, N); break;
        case 2: small_m_rows<2, SMALL_G>(a, kpa, K, b, B.s0, n0, nv, outf, outb, N); break;
        case 3: small_m_rows<3, SMALL_G>(a, kpa, K, b, B.s0, n0, nv, outf, outb, N); break;
        default: small_m_rows<4, SMALL_G>(a, kpa, K, b, B.s0, n0, nv, outf, outb, N); break;
      }
    }
  });
}

UkFn uk(int mr) {
  static const UkFn table[] = {nullptr,      &uk_bf16<1>,  &uk_bf16<2>,  &uk_bf16<3>, &uk_bf16<4>,
                               &uk_bf16<5>,  &uk_bf16<6>,  &uk_bf16<7>,  &uk_bf16<8>, &uk_bf16<9>,
                               &uk_bf16<10>, &uk_bf16<11>, &uk_bf16<12>};
  return table[mr];
}

}  // namespace vb
}  // namespace ws1_gemm
