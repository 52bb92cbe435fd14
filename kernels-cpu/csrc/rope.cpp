// rope (ws1_cpu::rope): rotary embedding, rotate-half convention (HF Qwen3), forward and inverse.
//
// For token t at position p and pair index i < D/2 (values x1 = x[i], x2 = x[i + D/2]):
//   inv_freq_i = (float)(1 / pow((double)theta, (double)(2i) / D))
//   angle      = (float)p * inv_freq_i                      (one fp32 multiply)
//   c = (float)cos((double)angle),  s = (float)sin((double)angle)
//   forward:  out1 = x1*c - x2*s,  out2 = x2*c + x1*s      (two multiplies, one add/sub; no FMA)
//   inverse:  out1 = x1*c + x2*s,  out2 = x2*c - x1*s      (the transpose: the backward)
// cos/sin depend on (p, i) only — never on where the token sits in the batch — so prefill, chunked
// prefill and decode rotate a token identically. Output dtype = input dtype (bf16 rounded RNE once).
#include "ws1_cpu.h"

#include <cmath>
#include <vector>

namespace {

template <class T>
inline float ld(const T* p, int64_t i);
template <>
inline float ld<float>(const float* p, int64_t i) { return p[i]; }
template <>
inline float ld<uint16_t>(const uint16_t* p, int64_t i) { return ws1::bf16_bits_to_f32(p[i]); }
inline void st(float* p, int64_t i, float v) { p[i] = v; }
inline void st(uint16_t* p, int64_t i, float v) { p[i] = ws1::f32_to_bf16_bits(v); }

template <class T>
void run(const T* x, T* y, const int64_t* pos, int64_t Tn, int64_t NH, int64_t D, double theta, bool inverse) {
  const int64_t half = D / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) inv[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / D));
  at::parallel_for(0, Tn, 1, [&](int64_t b, int64_t e) {
    std::vector<float> c(half), s(half);
    for (int64_t t = b; t < e; ++t) {
      const float pf = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float ang = pf * inv[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(ang)));
        s[i] = static_cast<float>(std::sin(static_cast<double>(ang)));
      }
      for (int64_t h = 0; h < NH; ++h) {
        const T* xr = x + (t * NH + h) * D;
        T* yr = y + (t * NH + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = ld(xr, i), x2 = ld(xr, i + half);
          const float a = x1 * c[i], bb = x2 * s[i], cc = x2 * c[i], d = x1 * s[i];
          st(yr, i, inverse ? a + bb : a - bb);
          st(yr, i + half, inverse ? cc - d : cc + d);
        }
      }
    }
  });
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, double theta, bool inverse) {
  ws1::check_cpu(x, "rope", "x");
  ws1::check_dim(x, 3, "rope", "x");
  WS1_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "rope: x must be bfloat16 or float32, got ",
            c10::toString(x.scalar_type()));
  WS1_CHECK(x.size(2) % 2 == 0, "rope: head_dim must be even, got ", x.size(2));
  ws1::check_dtype(positions, at::kLong, "rope", "positions");
  WS1_CHECK(positions.dim() == 1 && positions.size(0) == x.size(0), "rope: positions must be [", x.size(0), "], got ",
            positions.sizes());
  WS1_CHECK(theta > 0, "rope: theta must be > 0");
  at::Tensor xc = x.contiguous(), pc = positions.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t* p = pc.data_ptr<int64_t>();
  for (int64_t t = 0; t < pc.numel(); ++t) WS1_CHECK(p[t] >= 0, "rope: position ", p[t], " at row ", t, " is negative");
  if (xc.scalar_type() == at::kFloat)
    run<float>(xc.data_ptr<float>(), y.data_ptr<float>(), p, xc.size(0), xc.size(1), xc.size(2), theta, inverse);
  else
    run<uint16_t>(ws1::bf16_ptr(xc), ws1::bf16_ptr_mut(y), p, xc.size(0), xc.size(1), xc.size(2), theta, inverse);
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) { m.def("rope(Tensor x, Tensor positions, float theta, bool inverse) -> Tensor", &rope); }
