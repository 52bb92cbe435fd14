// GEMM micro-kernel, AVX2 + FMA path (ws1_gemm::v2; see gemm.h, contract in gemm.cpp).
// C tile (mr x ncols) = [cin or 0] + sum_k A[k][r] * B[k][j], serial fma over k (lanes = columns);
// output bf16 (RNE) to bout if non-null, else fp32 to cout.
#include "gemm.h"

WS1_BEGIN_AVX2
namespace ws1_gemm {
namespace v2 {

// AVX2: MR rows x 16 columns (half a panel; called twice per panel).
template <int MR>
void uk_avx2_half(int64_t kc, const float* A, const float* B, const Tile& t, int half) {
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

}  // namespace v2
}  // namespace ws1_gemm
WS1_END_ISA

namespace ws1_gemm {
namespace v2 {

template <int MR>
void uk_avx2(int64_t kc, const float* A, const float* B, const Tile& t) {
  uk_avx2_half<MR>(kc, A, B, t, 0);
  uk_avx2_half<MR>(kc, A, B, t, 1);
}

UkFn uk(int mr) {
  static const UkFn table[] = {nullptr, &uk_avx2<1>, &uk_avx2<2>, &uk_avx2<3>, &uk_avx2<4>, &uk_avx2<5>, &uk_avx2<6>};
  return table[mr];
}

}  // namespace v2
}  // namespace ws1_gemm
