// logprob and batch_invariant_logp, forward and backward (ws1_cpu::logprob, logprob_bwd,
// batch_invariant_logp, batch_invariant_logp_bwd). FP32 logits [T, V].
//
// One lse routine per row, shared by both nodes:
//   m   = lane_max(x)                 (16 lanes by v mod 16, fixed tree; max is exact)
//   s   = lane_sum_exp(x, m)          (acc + exp(x[v] - m) per lane, fixed tree, the one ws1 exp)
//   lse = m + log(s)                  (scalar)
// logprob[t] = x[t, target] - lse[t];  batch_invariant_logp[t, v] = x[t, v] - lse[t]
// so logprob(l, t)[i] == batch_invariant_logp(l)[i, t[i]] bitwise (the same subtraction).
// Backward:
//   logprob:               d[v] = g * (onehot(v) - exp(x[v] - lse))
//   batch_invariant_logp:  d[v] = g[v] - exp(logp[v]) * lane_sum(g)
// Rows are independent; parallel over rows only.
#ifndef WS1_KERNEL_BODY
#include "ws1_math.h"

#include <ATen/ops/empty_like.h>

#define WS1_KERNEL_NS ws1_lp
#include "ws1_isa_instances.h"  // the WS1_KERNEL_BODY part below, as ws1_lp::vs / v2 / v5

namespace {

void check_logits(const at::Tensor& l, const char* op) {
  ws1::check_cpu(l, op, "logits");
  ws1::check_dtype(l, at::kFloat, op, "logits");
  ws1::check_dim(l, 2, op, "logits");
  WS1_CHECK(l.size(1) > 0, op, ": logits need at least one column");
}

void check_targets(const at::Tensor& t, int64_t T, int64_t V, const char* op) {
  ws1::check_cpu(t, op, "targets");
  ws1::check_dtype(t, at::kLong, op, "targets");
  WS1_CHECK(t.dim() == 1 && t.size(0) == T, op, ": targets must be [", T, "], got ", t.sizes());
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < T; ++i) WS1_CHECK(p[i] >= 0 && p[i] < V, op, ": target id ", p[i], " at row ", i, " out of range [0, ", V, ")");
}

at::Tensor row_lse(const at::Tensor& l) {
  const int64_t T = l.size(0), V = l.size(1);
  at::Tensor lse = at::empty({T}, l.options());
  const float* x = l.data_ptr<float>();
  float* o = lse.data_ptr<float>();
  auto fn = WS1_SELECT(ws1_lp, lse_range);
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) { fn(x, o, V, b, e); });
  return lse;
}

std::tuple<at::Tensor, at::Tensor> logprob(const at::Tensor& logits, const at::Tensor& targets) {
  ws1::CallScope call("ws1_cpu::logprob");
  check_logits(logits, "logprob");
  at::Tensor l = logits.contiguous(), t = targets.contiguous();
  check_targets(t, l.size(0), l.size(1), "logprob");
  at::Tensor lse = row_lse(l);
  at::Tensor lp = at::empty({l.size(0)}, l.options());
  const float *x = l.data_ptr<float>(), *s = lse.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  float* o = lp.data_ptr<float>();
  for (int64_t i = 0; i < l.size(0); ++i) o[i] = x[i * l.size(1) + tp[i]] - s[i];
  return {lp, lse};
}

std::tuple<at::Tensor, at::Tensor> batch_invariant_logp(const at::Tensor& logits) {
  ws1::CallScope call("ws1_cpu::batch_invariant_logp");
  check_logits(logits, "batch_invariant_logp");
  at::Tensor l = logits.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  at::Tensor lse = at::empty({T}, l.options());
  at::Tensor out = at::empty_like(l);
  const float* x = l.data_ptr<float>();
  float *s = lse.data_ptr<float>(), *o = out.data_ptr<float>();
  // one pass per row (lse, then x - lse while the row is still in cache): same ops as lse_range + sub_range
  auto fl = WS1_SELECT(ws1_lp, lse_range);
  auto fs = WS1_SELECT(ws1_lp, sub_range);
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      fl(x, s, V, r, r + 1);
      fs(x, s, o, V, r, r + 1);
    }
  });
  return {out, lse};
}

at::Tensor logprob_bwd(const at::Tensor& g, const at::Tensor& logits, const at::Tensor& lse, const at::Tensor& targets) {
  ws1::CallScope call("ws1_cpu::logprob_bwd");
  check_logits(logits, "logprob_bwd");
  at::Tensor l = logits.contiguous(), t = targets.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  check_targets(t, T, V, "logprob_bwd");
  WS1_CHECK(g.numel() == T && lse.numel() == T, "logprob_bwd: g and lse must have ", T, " elements");
  at::Tensor gf = g.to(at::kFloat).contiguous(), sf = lse.to(at::kFloat).contiguous();
  at::Tensor d = at::empty_like(l);
  const float *x = l.data_ptr<float>(), *gp = gf.data_ptr<float>(), *sp = sf.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  float* dp = d.data_ptr<float>();
  auto fn = WS1_SELECT(ws1_lp, logprob_bwd_range);
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) { fn(gp, x, sp, tp, dp, V, b, e); });
  return d;
}

at::Tensor batch_invariant_logp_bwd(const at::Tensor& g, const at::Tensor& logp) {
  ws1::CallScope call("ws1_cpu::batch_invariant_logp_bwd");
  check_logits(logp, "batch_invariant_logp_bwd");
  WS1_CHECK(g.sizes() == logp.sizes(), "batch_invariant_logp_bwd: g and logp must have one shape, got ", g.sizes(), " and ",
            logp.sizes());
  at::Tensor gf = g.to(at::kFloat).contiguous(), lp = logp.contiguous();
  at::Tensor d = at::empty_like(lp);
  const int64_t T = lp.size(0), V = lp.size(1);
  const float *gp = gf.data_ptr<float>(), *lpp = lp.data_ptr<float>();
  float* dp = d.data_ptr<float>();
  auto fn = WS1_SELECT(ws1_lp, bilp_bwd_range);
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) { fn(gp, lpp, dp, V, b, e); });
  return d;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("logprob(Tensor logits, Tensor targets) -> (Tensor, Tensor)", &logprob);
  m.def("batch_invariant_logp(Tensor logits) -> (Tensor, Tensor)", &batch_invariant_logp);
  m.def("logprob_bwd(Tensor g, Tensor logits, Tensor lse, Tensor targets) -> Tensor", &logprob_bwd);
  m.def("batch_invariant_logp_bwd(Tensor g, Tensor logp) -> Tensor", &batch_invariant_logp_bwd);
}

#else  // WS1_KERNEL_BODY

void lse_range(const float* x, float* lse, int64_t Vn, int64_t b, int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const float* xr = x + r * Vn;
    const float m = lane_max(xr, Vn);
    lse[r] = m + std::log(lane_sum_exp(xr, Vn, m));
  }
}

void sub_range(const float* x, const float* lse, float* o, int64_t Vn, int64_t b, int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const V L(lse[r]);
    const float *xr = x + r * Vn;
    float* orow = o + r * Vn;
    int64_t v = 0;
    for (; v + 16 <= Vn; v += 16) (V::load(xr + v) - L).store(orow + v);
    if (v < Vn) {
      int t = static_cast<int>(Vn - v);
      (V::load_tail(xr + v, t) - L).store_tail(orow + v, t);
    }
  }
}

void logprob_bwd_range(const float* g, const float* x, const float* lse, const int64_t* tgt, float* d, int64_t Vn, int64_t b,
                       int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const V G(g[r]), L(lse[r]), Z(0.0f);
    const float* xr = x + r * Vn;
    float* dr = d + r * Vn;
    int64_t v = 0;
    for (; v + 16 <= Vn; v += 16) (G * (Z - vexp(V::load(xr + v) - L))).store(dr + v);
    if (v < Vn) {
      int t = static_cast<int>(Vn - v);
      (G * (Z - vexp(V::load_tail(xr + v, t) - L))).store_tail(dr + v, t);
    }
    const int64_t k = tgt[r];
    dr[k] = g[r] * (1.0f - vexp(xr[k] - lse[r]));  // vexp<float>: the same sequence as a lane
  }
}

void bilp_bwd_range(const float* g, const float* lp, float* d, int64_t Vn, int64_t b, int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const float *gr = g + r * Vn, *lr = lp + r * Vn;
    float* dr = d + r * Vn;
    const V S(lane_sum(gr, Vn));
    int64_t v = 0;
    for (; v + 16 <= Vn; v += 16) (V::load(gr + v) - vexp(V::load(lr + v)) * S).store(dr + v);
    if (v < Vn) {
      int t = static_cast<int>(Vn - v);
      (V::load_tail(gr + v, t) - vexp(V::load_tail(lr + v, t)) * S).store_tail(dr + v, t);
    }
  }
}

#endif  // WS1_KERNEL_BODY
