// swiglu / silu and their backwards (ws1_cpu::swiglu, silu, swiglu_bwd, silu_bwd).
//
// Exact formulas (every op one IEEE fp32 operation, same sequence on every ISA path):
//   e   = exp(-g)            (ws1 vexp; -g is an exact sign flip)
//   sig = 1 / (1 + e)
//   s   = g * sig            (= silu(g))
//   y   = bf16_rne(s * u)    (forward; silu uses u = 1.0f, and s*1.0f == s exactly)
// backward (fp32 outputs):
//   dup   = dy * s
//   dgate = (dy * u) * (sig * fma(g, 1 - sig, 1))      (silu_bwd: u = 1.0f, dy*1.0f == dy exactly)
// silu(x) == swiglu(x, ones) and silu_bwd(dy, x) == swiglu_bwd(dy, x, ones).dgate bitwise: both go
// through the same template, with `up` either loaded or the constant 1.0f.
//
// Invariance: purely elementwise, so the value of an element depends only on its own inputs; the
// parallel split (fixed-size element chunks) cannot change bits; no reductions.
// Inputs must be contiguous (non-contiguous -> error). gate/up: bf16 or fp32 (same dtype; output has
// that dtype); dy: bf16 or fp32. NaN in any input propagates to the outputs of that element.
// Edge: g = -inf gives sig = 0, s = -inf*0 = NaN (as torch's silu).
#ifndef WS1_KERNEL_BODY
#include "ws1_math.h"

#include <ATen/ops/empty_like.h>

#define WS1_KERNEL_NS ws1_act
#include "ws1_isa_instances.h"  // the WS1_KERNEL_BODY part below, as ws1_act::vs / v2 / v5

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk (does not affect bits)

void check_float_input(const at::Tensor& t, const char* op, const char* name) {
  ws1::check_cpu(t, op, name);
  WS1_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
            " must be bfloat16 or float32, got ", c10::toString(t.scalar_type()));
  WS1_CHECK(t.dim() >= 1, op, ": ", name, " must have rank >= 1, got shape ", t.sizes());
  WS1_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* op, const char* na, const char* nb,
                bool same_dtype) {
  WS1_CHECK(a.sizes() == b.sizes(), op, ": ", na, " and ", nb, " must have the same shape, got ", a.sizes(),
            " and ", b.sizes());
  if (same_dtype)
    WS1_CHECK(a.scalar_type() == b.scalar_type(), op, ": ", na, " and ", nb, " must have the same dtype, got ",
              c10::toString(a.scalar_type()), " and ", c10::toString(b.scalar_type()));
}

template <class T, bool UP>
at::Tensor fwd_typed(const at::Tensor& g, const at::Tensor* u) {
  at::Tensor y = at::empty_like(g);
  const T* gp = ws1::cptr<T>(g);
  const T* up = UP ? ws1::cptr<T>(*u) : nullptr;
  T* yp = ws1::mptr<T>(y);
  auto fn = WS1_SELECT(ws1_act, fwd_range<T, UP>);
  at::parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) { fn(gp, up, yp, b, e); });
  return y;
}

template <class T, class D, bool UP>
void bwd_typed(const at::Tensor& dy, const at::Tensor& g, const at::Tensor* u, at::Tensor& dg, at::Tensor* du) {
  const D* dyp = ws1::cptr<D>(dy);
  const T* gp = ws1::cptr<T>(g);
  const T* up = UP ? ws1::cptr<T>(*u) : nullptr;
  float* dgp = dg.data_ptr<float>();
  float* dup = UP ? du->data_ptr<float>() : nullptr;
  auto fn = WS1_SELECT(ws1_act, bwd_range<T, D, UP>);
  at::parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) { fn(dyp, gp, up, dgp, dup, b, e); });
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  ws1::CallScope call("ws1_cpu::swiglu");
  check_float_input(gate, "swiglu", "gate");
  check_float_input(up, "swiglu", "up");
  check_same(gate, up, "swiglu", "gate", "up", true);
  if (gate.scalar_type() == at::kFloat) return fwd_typed<float, true>(gate, &up);
  return fwd_typed<uint16_t, true>(gate, &up);
}

at::Tensor silu(const at::Tensor& x) {
  ws1::CallScope call("ws1_cpu::silu");
  check_float_input(x, "silu", "x");
  if (x.scalar_type() == at::kFloat) return fwd_typed<float, false>(x, nullptr);
  return fwd_typed<uint16_t, false>(x, nullptr);
}

template <bool UP>
void bwd_any(const at::Tensor& dy, const at::Tensor& g, const at::Tensor* u, at::Tensor& dg, at::Tensor* du) {
  bool gf = g.scalar_type() == at::kFloat, df = dy.scalar_type() == at::kFloat;
  if (gf && df) bwd_typed<float, float, UP>(dy, g, u, dg, du);
  else if (gf) bwd_typed<float, uint16_t, UP>(dy, g, u, dg, du);
  else if (df) bwd_typed<uint16_t, float, UP>(dy, g, u, dg, du);
  else bwd_typed<uint16_t, uint16_t, UP>(dy, g, u, dg, du);
}

std::tuple<at::Tensor, at::Tensor> swiglu_bwd(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up) {
  ws1::CallScope call("ws1_cpu::swiglu_bwd");
  check_float_input(dy, "swiglu_bwd", "dy");
  check_float_input(gate, "swiglu_bwd", "gate");
  check_float_input(up, "swiglu_bwd", "up");
  check_same(gate, up, "swiglu_bwd", "gate", "up", true);
  check_same(dy, gate, "swiglu_bwd", "dy", "gate", false);
  auto opts = gate.options().dtype(at::kFloat);
  at::Tensor dg = at::empty(gate.sizes(), opts), du = at::empty(gate.sizes(), opts);
  bwd_any<true>(dy, gate, &up, dg, &du);
  return {dg, du};
}

at::Tensor silu_bwd(const at::Tensor& dy, const at::Tensor& x) {
  ws1::CallScope call("ws1_cpu::silu_bwd");
  check_float_input(dy, "silu_bwd", "dy");
  check_float_input(x, "silu_bwd", "x");
  check_same(dy, x, "silu_bwd", "dy", "x", false);
  at::Tensor dg = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  bwd_any<false>(dy, x, nullptr, dg, nullptr);
  return dg;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor", &swiglu);
  m.def("silu(Tensor x) -> Tensor", &silu);
  m.def("swiglu_bwd(Tensor dy, Tensor gate, Tensor up) -> (Tensor, Tensor)", &swiglu_bwd);
  m.def("silu_bwd(Tensor dy, Tensor x) -> Tensor", &silu_bwd);
}

#else  // WS1_KERNEL_BODY: ISA-specific code, compiled once per namespace vs / v2 / v5.

template <class T, bool UP>
void fwd_range(const T* g, const T* u, T* y, int64_t b, int64_t e) {
  const V one(1.0f);
  auto block = [&](V G, V U) {
    V ex = vexp(neg(G));
    V sig = one / (one + ex);
    V s = G * sig;
    return s * U;
  };
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    V U = UP ? V::load(u + i) : one;
    block(V::load(g + i), U).store(y + i);
  }
  if (i < e) {
    int t = static_cast<int>(e - i);
    V U = UP ? V::load_tail(u + i, t) : one;
    block(V::load_tail(g + i, t), U).store_tail(y + i, t);
  }
}

template <class T, class D, bool UP>
void bwd_range(const D* dy, const T* g, const T* u, float* dg, float* du, int64_t b, int64_t e) {
  const V one(1.0f);
  auto block = [&](V DY, V G, V U, V& dgate, V& dupv) {
    V ex = vexp(neg(G));
    V sig = one / (one + ex);
    V s = G * sig;
    dupv = DY * s;
    V t = DY * U;
    V inner = fmadd(G, one - sig, one);
    dgate = t * (sig * inner);
  };
  int64_t i = b;
  V dgv, duv;
  for (; i + 16 <= e; i += 16) {
    V U = UP ? V::load(u + i) : one;
    block(V::load(dy + i), V::load(g + i), U, dgv, duv);
    dgv.store(dg + i);
    if (UP) duv.store(du + i);
  }
  if (i < e) {
    int t = static_cast<int>(e - i);
    V U = UP ? V::load_tail(u + i, t) : one;
    block(V::load_tail(dy + i, t), V::load_tail(g + i, t), U, dgv, duv);
    dgv.store_tail(dg + i, t);
    if (UP) duv.store_tail(du + i, t);
  }
}

#endif  // WS1_KERNEL_BODY
