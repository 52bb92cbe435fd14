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
// cos/sin are computed once per token (scalar libm, shared by its heads); the rotation is elementwise
// in 16-lane vectors (ws1_math.h), the same IEEE ops on every ISA path, so all paths give the same bits.
// Non-contiguous x / positions are made contiguous (a copy); positions must be >= 0.
#ifndef WS1_KERNEL_BODY
#include "ws1_math.h"

#include <ATen/ops/empty_like.h>
#include <cmath>
#include <vector>

#define WS1_KERNEL_NS ws1_rope
#include "ws1_isa_instances.h"  // the WS1_KERNEL_BODY part below, as ws1_rope::vs / v2 / v5
namespace {

template <class T>
void run(const T* x, T* y, const int64_t* pos, int64_t Tn, int64_t NH, int64_t D, double theta, bool inverse) {
  const int64_t half = D / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) inv[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / D));
  auto fn = WS1_SELECT(ws1_rope, rotate_token<T>);
  at::parallel_for(0, Tn, 1, [&](int64_t b, int64_t e) {
    std::vector<float> c(half), s(half);
    for (int64_t t = b; t < e; ++t) {
      const float pf = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float ang = pf * inv[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(ang)));
        s[i] = static_cast<float>(std::sin(static_cast<double>(ang)));
      }
      fn(x + t * NH * D, y + t * NH * D, c.data(), s.data(), NH, D, inverse);
    }
  });
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, double theta, bool inverse) {
  ws1::CallScope call("ws1_cpu::rope");
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

#else  // WS1_KERNEL_BODY: ISA-specific code, compiled once per namespace vs / v2 / v5.

// One token: all heads. a = x1*c, b = x2*s, cc = x2*c, d = x1*s (separate roundings, no FMA);
// forward out1 = a - b, out2 = cc + d; inverse out1 = a + b, out2 = cc - d.
template <class T>
void rotate_token(const T* x, T* y, const float* c, const float* s, int64_t NH, int64_t D, bool inverse) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < NH; ++h) {
    const T* xr = x + h * D;
    T* yr = y + h * D;
    int64_t i = 0;
    for (; i < half; i += 16) {
      const int n = static_cast<int>(std::min<int64_t>(16, half - i));
      V X1, X2, C, S;
      if (n == 16) {
        X1 = V::load(xr + i), X2 = V::load(xr + half + i), C = V::load(c + i), S = V::load(s + i);
      } else {
        X1 = V::load_tail(xr + i, n), X2 = V::load_tail(xr + half + i, n), C = V::load_tail(c + i, n),
        S = V::load_tail(s + i, n);
      }
      const V a = X1 * C, b = X2 * S, cc = X2 * C, d = X1 * S;
      const V o1 = inverse ? a + b : a - b;
      const V o2 = inverse ? cc - d : cc + d;
      if (n == 16) {
        o1.store(yr + i);
        o2.store(yr + half + i);
      } else {
        o1.store_tail(yr + i, n);
        o2.store_tail(yr + half + i, n);
      }
    }
  }
}

#endif  // WS1_KERNEL_BODY
