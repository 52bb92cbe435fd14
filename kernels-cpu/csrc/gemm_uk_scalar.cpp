// GEMM micro-kernel, portable path (ws1_gemm::vs; see gemm.h, contract in gemm.cpp).
// C tile (mr x ncols) = [cin or 0] + sum_k A[k][r] * B[k][j], serial fma over k; output bf16 (RNE) to
// bout if non-null, else fp32 to cout.
#include "gemm.h"

namespace ws1_gemm {
namespace vs {

// Scalar: the reference semantics, literally.
template <int MR>
void uk_scalar(int64_t kc, const float* A, const float* B, const Tile& t) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = (t.cin != nullptr && j < t.ncols) ? t.cin[r * t.ldcin + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k) {
    const float* b = B + k * NR;
    const float* a = A + k * MR;
    if (t.ftz) {  // bf16 x bf16: the BF16 unit's flush rules, written out (gemm.h chain_step)
      for (int r = 0; r < MR; ++r)
        for (int j = 0; j < t.ncols; ++j) acc[r][j] = chain_step(acc[r][j], a[r], b[j]);
    } else {
      for (int r = 0; r < MR; ++r)
        for (int j = 0; j < t.ncols; ++j) acc[r][j] = std::fma(a[r], b[j], acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < t.ncols; ++j) {
      if (t.bout != nullptr) t.bout[r * t.ldb + j] = f32_to_bf16_bits(acc[r][j]);
      else t.cout[r * t.ldcout + j] = acc[r][j];
    }
}

UkFn uk(int mr) {
  static const UkFn table[] = {nullptr, &uk_scalar<1>, &uk_scalar<2>, &uk_scalar<3>, &uk_scalar<4>};
  return table[mr];
}

}  // namespace vs
}  // namespace ws1_gemm
