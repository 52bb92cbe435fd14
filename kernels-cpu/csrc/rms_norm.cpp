// rms_norm / qk_norm and their backwards (ws1_cpu::rms_norm, rms_norm_bwd, qk_norm, qk_norm_bwd).
//
// Forward, per row x[0..H) (x fp32 residual stream or bf16; weight bf16 or fp32):
//   ss   = lane_dot(x, x, H)        fixed order: lane (h mod 16) accumulates fma(x_h, x_h, acc) for h
//                                   ascending from +0, the last partial block updates only its lanes,
//                                   lanes combined 16->8->4->2->1 (ws1_math.h)
//   rstd = 1.0f / sqrtf(ss / (float)H + (float)eps)                 (fp32, stored [rows])
//   y_h  = bf16_rne((x_h * rstd) * w_h)                             (two fp32 multiplies, then RNE)
// Backward (dy fp32 or bf16; dx, dw fp32), per row with r = rstd[row]:
//   g_h  = dy_h * w_h
//   S    = fixed-lane sum of g_h * x_h  (lane fma(g_h, x_h, acc), same order/tree as ss)
//   c    = (S / (float)H) * ((r * r) * r)
//   dx_h = fma(-x_h, c, g_h * r)
//   dw_h = serial sum over rows in the GIVEN row order: acc = fma(dy[row,h], x[row,h] * r, acc) from
//          +0. The caller passes rows in its canonical order; parallel over column chunks only.
// qk_norm is the same core on x [T, n_heads, D] with rows = T*n_heads and H = D (its own entry points so
// the node reports its own kernel).
//
// Invariance: a row's y / rstd / dx depend only on that row (rows are independent, parallel over rows);
// every reduction has one order fixed by H alone; dw's order is the given row order; ISA paths are
// bitwise identical (ws1_math.h). Inputs must be contiguous (else error). NaN in a row propagates to
// that row's outputs (and to dw columns it touches).
#ifndef WS1_KERNEL_BODY
#include "ws1_math.h"

#define WS1_KERNEL_NS ws1_rms
#include "ws1_isa_instances.h"  // the WS1_KERNEL_BODY part below, as ws1_rms::vs / v2 / v5

namespace {

constexpr int64_t kColChunk = 256;  // dw column chunk (16 vectors); elementwise in h, does not affect bits

struct Rows {
  int64_t rows, h;
};

void check_in(const at::Tensor& t, const char* op, const char* name, bool allow_f32 = true) {
  ws1::check_cpu(t, op, name);
  bool ok = t.scalar_type() == at::kBFloat16 || (allow_f32 && t.scalar_type() == at::kFloat);
  WS1_CHECK(ok, op, ": ", name, " must be bfloat16", allow_f32 ? " or float32" : "", ", got ",
            c10::toString(t.scalar_type()));
  WS1_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
}

Rows check_x(const at::Tensor& x, const at::Tensor& w, const char* op, bool qk) {
  check_in(x, op, "x");
  check_in(w, op, "weight");
  if (qk) {
    WS1_CHECK(x.dim() == 3, op, ": x must have rank 3 [T, n_heads, D], got shape ", x.sizes());
  } else {
    WS1_CHECK(x.dim() >= 1, op, ": x must have rank >= 1, got shape ", x.sizes());
  }
  WS1_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight must have shape [", x.size(-1), "], got ",
            w.sizes());
  int64_t h = x.size(-1);
  WS1_CHECK(h > 0, op, ": last dim must be > 0");
  return {x.numel() / h, h};
}

template <class T, class W>
void fwd_typed(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, at::Tensor& rstd, Rows s, float eps) {
  const T* xp = ws1::cptr<T>(x);
  const W* wp = ws1::cptr<W>(w);
  uint16_t* yp = ws1::bf16_ptr_mut(y);
  float* rp = rstd.data_ptr<float>();
  auto fn = WS1_SELECT(ws1_rms, fwd_rows<T, W>);
  at::parallel_for(0, s.rows, 1, [&](int64_t b, int64_t e) { fn(xp, wp, yp, rp, s.h, eps, b, e); });
}

std::tuple<at::Tensor, at::Tensor> norm_fwd(const at::Tensor& x, const at::Tensor& w, double eps, const char* op,
                                            bool qk) {
  Rows s = check_x(x, w, op, qk);
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
  bool xf = x.scalar_type() == at::kFloat, wf = w.scalar_type() == at::kFloat;
  float e = static_cast<float>(eps);
  if (xf && wf) fwd_typed<float, float>(x, w, y, rstd, s, e);
  else if (xf) fwd_typed<float, uint16_t>(x, w, y, rstd, s, e);
  else if (wf) fwd_typed<uint16_t, float>(x, w, y, rstd, s, e);
  else fwd_typed<uint16_t, uint16_t>(x, w, y, rstd, s, e);
  return {y, rstd};
}

template <class D, class T, class W>
void bwd_typed(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
               at::Tensor& dx, at::Tensor& dw, Rows s) {
  const D* dyp = ws1::cptr<D>(dy);
  const T* xp = ws1::cptr<T>(x);
  const W* wp = ws1::cptr<W>(w);
  const float* rp = rstd.data_ptr<float>();
  float* dxp = dx.data_ptr<float>();
  float* dwp = dw.data_ptr<float>();
  auto fr = WS1_SELECT(ws1_rms, bwd_rows<D, T, W>);
  at::parallel_for(0, s.rows, 1, [&](int64_t b, int64_t e) { fr(dyp, xp, wp, rp, dxp, s.h, b, e); });
  auto fc = WS1_SELECT(ws1_rms, dw_cols<D, T>);
  int64_t nchunks = (s.h + kColChunk - 1) / kColChunk;
  at::parallel_for(0, nchunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      int64_t c0 = c * kColChunk, c1 = std::min(s.h, c0 + kColChunk);
      fc(dyp, xp, rp, dwp, s.rows, s.h, c0, c1);
    }
  });
}

template <class D, class T>
void bwd_w(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd, at::Tensor& dx,
           at::Tensor& dw, Rows s) {
  if (w.scalar_type() == at::kFloat) bwd_typed<D, T, float>(dy, x, w, rstd, dx, dw, s);
  else bwd_typed<D, T, uint16_t>(dy, x, w, rstd, dx, dw, s);
}

std::tuple<at::Tensor, at::Tensor> norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                            const at::Tensor& rstd, const char* op, bool qk) {
  Rows s = check_x(x, w, op, qk);
  check_in(dy, op, "dy");
  WS1_CHECK(dy.sizes() == x.sizes(), op, ": dy must have the shape of x ", x.sizes(), ", got ", dy.sizes());
  ws1::check_cpu(rstd, op, "rstd");
  ws1::check_dtype(rstd, at::kFloat, op, "rstd");
  WS1_CHECK(rstd.is_contiguous() && rstd.numel() == s.rows, op, ": rstd must be contiguous with ", s.rows,
            " elements (x.shape[:-1]), got shape ", rstd.sizes());
  auto opts = x.options().dtype(at::kFloat);
  at::Tensor dx = at::empty(x.sizes(), opts);
  at::Tensor dw = at::empty({s.h}, opts);
  bool df = dy.scalar_type() == at::kFloat, xf = x.scalar_type() == at::kFloat;
  if (df && xf) bwd_w<float, float>(dy, x, w, rstd, dx, dw, s);
  else if (df) bwd_w<float, uint16_t>(dy, x, w, rstd, dx, dw, s);
  else if (xf) bwd_w<uint16_t, float>(dy, x, w, rstd, dx, dw, s);
  else bwd_w<uint16_t, uint16_t>(dy, x, w, rstd, dx, dw, s);
  return {dx, dw};
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  ws1::CallScope call("ws1_cpu::rms_norm");
  return norm_fwd(x, w, eps, "rms_norm", false);
}
std::tuple<at::Tensor, at::Tensor> qk_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  ws1::CallScope call("ws1_cpu::qk_norm");
  return norm_fwd(x, w, eps, "qk_norm", true);
}
std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                const at::Tensor& rstd) {
  ws1::CallScope call("ws1_cpu::rms_norm_bwd");
  return norm_bwd(dy, x, w, rstd, "rms_norm_bwd", false);
}
std::tuple<at::Tensor, at::Tensor> qk_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                               const at::Tensor& rstd) {
  ws1::CallScope call("ws1_cpu::qk_norm_bwd");
  return norm_bwd(dy, x, w, rstd, "qk_norm_bwd", true);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)", &rms_norm);
  m.def("rms_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)", &rms_norm_bwd);
  m.def("qk_norm(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)", &qk_norm);
  m.def("qk_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)", &qk_norm_bwd);
}

#else  // WS1_KERNEL_BODY: ISA-specific code, compiled once per namespace vs / v2 / v5.

template <class T, class W>
void fwd_rows(const T* x, const W* w, uint16_t* y, float* rstd, int64_t H, float eps, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * H;
    uint16_t* yr = y + r * H;
    float ss = lane_dot(xr, xr, H);
    float rs = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    rstd[r] = rs;
    const V R(rs);
    int64_t h = 0;
    for (; h + 16 <= H; h += 16) ((V::load(xr + h) * R) * V::load(w + h)).store(yr + h);
    if (h < H) {
      int t = static_cast<int>(H - h);
      ((V::load_tail(xr + h, t) * R) * V::load_tail(w + h, t)).store_tail(yr + h, t);
    }
  }
}

template <class D, class T, class W>
void bwd_rows(const D* dy, const T* x, const W* w, const float* rstd, float* dx, int64_t H, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const D* dyr = dy + r * H;
    const T* xr = x + r * H;
    float* dxr = dx + r * H;
    V acc = V::zero();
    int64_t h = 0;
    for (; h + 16 <= H; h += 16) acc = fmadd(V::load(dyr + h) * V::load(w + h), V::load(xr + h), acc);
    int t = static_cast<int>(H - h);
    if (t > 0)
      acc = sel(tail_mask(t), fmadd(V::load_tail(dyr + h, t) * V::load_tail(w + h, t), V::load_tail(xr + h, t), acc),
                acc);
    float S = hsum(acc);
    float rs = rstd[r];
    float c = (S / static_cast<float>(H)) * ((rs * rs) * rs);
    const V C(c), R(rs);
    for (h = 0; h + 16 <= H; h += 16) {
      V G = V::load(dyr + h) * V::load(w + h);
      fmadd(neg(V::load(xr + h)), C, G * R).store(dxr + h);
    }
    if (t > 0) {
      V G = V::load_tail(dyr + h, t) * V::load_tail(w + h, t);
      fmadd(neg(V::load_tail(xr + h, t)), C, G * R).store_tail(dxr + h, t);
    }
  }
}

// dw[c0..c1) (c1 - c0 <= 256): for each column, serial over rows in the given order.
template <class D, class T>
void dw_cols(const D* dy, const T* x, const float* rstd, float* dw, int64_t R, int64_t H, int64_t c0, int64_t c1) {
  V acc[16];
  int64_t n = c1 - c0;
  int nb = static_cast<int>(n / 16);
  int t = static_cast<int>(n % 16);
  for (int b = 0; b < 16; ++b) acc[b] = V::zero();
  for (int64_t r = 0; r < R; ++r) {
    const D* dyr = dy + r * H + c0;
    const T* xr = x + r * H + c0;
    const V RS(rstd[r]);
    for (int b = 0; b < nb; ++b) acc[b] = fmadd(V::load(dyr + 16 * b), V::load(xr + 16 * b) * RS, acc[b]);
    if (t > 0)
      acc[nb] = sel(tail_mask(t), fmadd(V::load_tail(dyr + 16 * nb, t), V::load_tail(xr + 16 * nb, t) * RS, acc[nb]),
                    acc[nb]);
  }
  for (int b = 0; b < nb; ++b) acc[b].store(dw + c0 + 16 * b);
  if (t > 0) acc[nb].store_tail(dw + c0 + 16 * nb, t);
}

#endif  // WS1_KERNEL_BODY
