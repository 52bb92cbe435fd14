// attention and attention_bwd (ws1_cpu::attention, attention_bwd): causal GQA over packed varlen
// sequences; one kernel for prefill, chunked prefill and decode.
//
// Query i (position p = q_pos[i], sequence b, head h, kv head h / (Hq/Hkv)) attends keys j = 0..p of
// its sequence. Keys are reduced in tiles of kKT = 32 aligned to absolute key position 0; only keys
// j <= p are touched (masked keys contribute nothing at all). Per tile, in FP32:
//   s_j    = scale * lane_dot(q, k_j)                (16 lanes by d mod 16, fixed tree)
//   m_new  = max(m, max_j s_j);  alpha = (m == -inf) ? 0 : exp(m - m_new)
//   l      = l * alpha, then l = l + exp(s_j - m_new) for j ascending
//   acc[d] = acc[d] * alpha, then acc = fma(p_j, v_j[d], acc) for j ascending
// out = bf16_rne(acc / l); lse = m + log(l). The sequence of operations for a query depends only on
// p and the keys 0..p, never on how many queries or sequences share the call: prefill, a 7-token
// chunk against the cache, and a decode step give the same bits.
// Backward (fp32): Delta_i = lane_dot(dout_i, out_i); p_ij = exp(s_ij - lse_i) (s_ij recomputed by
// the same dot); dp_ij = lane_dot(dout_i, v_j); ds_ij = p_ij * (dp_ij - Delta_i);
//   dq_i = scale * sum_j ds_ij k_j                               (j ascending)
//   dk_j = scale * sum_{h in group asc, i in sequence asc, q_pos[i] >= j} ds_ij q_i
//   dv_j = sum (same order) p_ij dout_i
// Phase 1 (parallel over query x head) stores p and ds; phase 2 (parallel over sequence x kv head x
// key) sums them in the fixed order above. Per sequence, so packing cannot change bits.
// Memory: phase 1 keeps sum_i Hq * (q_pos[i] + 1) floats twice (training lengths here are short).
#ifndef WS1_KERNEL_BODY
#include "ws1_math.h"

#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <vector>

namespace ws1_attn {
constexpr int64_t kKT = 32;  // key tile (see the top of this file)
}  // namespace ws1_attn
#define WS1_KERNEL_NS ws1_attn
#include "ws1_isa_instances.h"  // the WS1_KERNEL_BODY part below, as ws1_attn::vs / v2 / v5

namespace {

struct Meta {
  int64_t Tq, Tk, Hq, Hkv, D, B;
  std::vector<int64_t> seq_of_q;  // sequence index of each query
  const int64_t *cuq, *cuk, *qpos;
};

Meta check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_q,
                  const at::Tensor& cu_k, const at::Tensor& q_pos) {
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    ws1::check_cpu(*t, op, n);
    ws1::check_dtype(*t, at::kBFloat16, op, n);
    ws1::check_dim(*t, 3, op, n);
    WS1_CHECK(t->is_contiguous(), op, ": ", n, " must be contiguous");
  }
  WS1_CHECK(k.sizes() == v.sizes(), op, ": k and v must have one shape, got ", k.sizes(), " and ", v.sizes());
  WS1_CHECK(q.size(2) == k.size(2), op, ": head_dim mismatch q ", q.size(2), " k ", k.size(2));
  WS1_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": Hq (", q.size(1), ") must be a multiple of Hkv (", k.size(1), ")");
  for (auto [t, n] : {std::pair{&cu_q, "cu_seqlens_q"}, {&cu_k, "cu_seqlens_k"}, {&q_pos, "q_pos"}}) {
    ws1::check_dtype(*t, at::kLong, op, n);
    ws1::check_dim(*t, 1, op, n);
    WS1_CHECK(t->is_contiguous(), op, ": ", n, " must be contiguous");
  }
  WS1_CHECK(cu_q.numel() == cu_k.numel() && cu_q.numel() >= 2, op, ": cu_seqlens_q/k must both be [B+1]");
  WS1_CHECK(q_pos.numel() == q.size(0), op, ": q_pos must be [", q.size(0), "]");
  Meta m{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2), cu_q.numel() - 1, {}, cu_q.data_ptr<int64_t>(),
         cu_k.data_ptr<int64_t>(), q_pos.data_ptr<int64_t>()};
  WS1_CHECK(m.cuq[0] == 0 && m.cuk[0] == 0 && m.cuq[m.B] == m.Tq && m.cuk[m.B] == m.Tk, op,
            ": cu_seqlens must start at 0 and end at Tq=", m.Tq, ", Tk=", m.Tk);
  m.seq_of_q.resize(m.Tq);
  for (int64_t b = 0; b < m.B; ++b) {
    WS1_CHECK(m.cuq[b + 1] >= m.cuq[b] && m.cuk[b + 1] >= m.cuk[b], op, ": cu_seqlens must be non-decreasing");
    const int64_t lk = m.cuk[b + 1] - m.cuk[b];
    for (int64_t i = m.cuq[b]; i < m.cuq[b + 1]; ++i) {
      WS1_CHECK(m.qpos[i] >= 0 && m.qpos[i] < lk, op, ": query ", i, " at position ", m.qpos[i], " but its sequence ", b,
                " has ", lk, " keys");
      m.seq_of_q[i] = b;
    }
  }
  return m;
}

std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos,
                                             double scale) {
  ws1::CallScope call("ws1_cpu::attention");
  Meta m = check_inputs("attention", q, k, v, cu_q, cu_k, q_pos);
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({m.Tq, m.Hq}, q.options().dtype(at::kFloat));
  auto fn = WS1_SELECT(ws1_attn, fwd_one);
  const uint16_t *qp = ws1::bf16_ptr(q), *kp = ws1::bf16_ptr(k), *vp = ws1::bf16_ptr(v);
  uint16_t* op = ws1::bf16_ptr_mut(out);
  float* lp = lse.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, m.Tq * m.Hq, 1, [&](int64_t b, int64_t e) {
    std::vector<float> acc(m.D), s(ws1_attn::kKT);
    for (int64_t w = b; w < e; ++w) {
      const int64_t i = w / m.Hq, h = w % m.Hq, kh = h / (m.Hq / m.Hkv);
      const int64_t k0 = m.cuk[m.seq_of_q[i]];
      fn(qp + (i * m.Hq + h) * m.D, kp + (k0 * m.Hkv + kh) * m.D, vp + (k0 * m.Hkv + kh) * m.D, m.Hkv * m.D, m.qpos[i], m.D, sc,
         acc.data(), s.data(), op + (i * m.Hq + h) * m.D, lp + i * m.Hq + h);
    }
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k,
                                                             const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                                             const at::Tensor& cu_q, const at::Tensor& cu_k,
                                                             const at::Tensor& q_pos, double scale) {
  ws1::CallScope call("ws1_cpu::attention_bwd");
  Meta m = check_inputs("attention_bwd", q, k, v, cu_q, cu_k, q_pos);
  WS1_CHECK(dout_in.sizes() == q.sizes() && out.sizes() == q.sizes(), "attention_bwd: dout and out must have q's shape");
  WS1_CHECK(lse.numel() == m.Tq * m.Hq, "attention_bwd: lse must be [Tq, Hq]");
  at::Tensor dout = dout_in.to(at::kFloat).contiguous(), o = out.to(at::kFloat).contiguous();
  at::Tensor ls = lse.to(at::kFloat).contiguous();
  // offsets of each (query, head) row of p / ds: Hq * (q_pos + 1) floats per query
  std::vector<int64_t> off(m.Tq + 1, 0);
  for (int64_t i = 0; i < m.Tq; ++i) off[i + 1] = off[i] + m.Hq * (m.qpos[i] + 1);
  std::vector<float> P(off[m.Tq]), DS(off[m.Tq]);
  at::Tensor dq = at::empty(q.sizes(), dout.options());
  at::Tensor dk = at::zeros(k.sizes(), dout.options()), dv = at::zeros(k.sizes(), dout.options());
  const uint16_t *qp = ws1::bf16_ptr(q), *kp = ws1::bf16_ptr(k), *vp = ws1::bf16_ptr(v);
  const float *dop = dout.data_ptr<float>(), *oP = o.data_ptr<float>(), *lsp = ls.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  const int64_t group = m.Hq / m.Hkv;
  auto f1 = WS1_SELECT(ws1_attn, bwd_query);
  at::parallel_for(0, m.Tq * m.Hq, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t i = w / m.Hq, h = w % m.Hq, kh = h / group, k0 = m.cuk[m.seq_of_q[i]];
      const int64_t row = off[i] + h * (m.qpos[i] + 1);
      f1(qp + (i * m.Hq + h) * m.D, kp + (k0 * m.Hkv + kh) * m.D, vp + (k0 * m.Hkv + kh) * m.D, m.Hkv * m.D,
         dop + (i * m.Hq + h) * m.D, oP + (i * m.Hq + h) * m.D, lsp[i * m.Hq + h], m.qpos[i], m.D, sc, P.data() + row,
         DS.data() + row, dqp + (i * m.Hq + h) * m.D);
    }
  });
  // phase 2: one task per (sequence, kv head, key)
  std::vector<int64_t> kcount(m.B + 1, 0);
  for (int64_t b = 0; b < m.B; ++b) kcount[b + 1] = kcount[b] + (m.cuk[b + 1] - m.cuk[b]) * m.Hkv;
  auto f2 = WS1_SELECT(ws1_attn, bwd_key);
  at::parallel_for(0, kcount[m.B], 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t s = 0;
      while (kcount[s + 1] <= w) ++s;
      const int64_t local = w - kcount[s], j = local / m.Hkv, kh = local % m.Hkv;
      const int64_t krow = (m.cuk[s] + j) * m.Hkv + kh;
      f2(qp, dop, P.data(), DS.data(), off.data(), m.qpos, m.cuq[s], m.cuq[s + 1], j, kh, group, m.Hq, m.D, sc, dkp + krow * m.D,
         dvp + krow * m.D);
    }
  });
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, Tensor q_pos, float scale)"
        " -> (Tensor, Tensor)", &attention);
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, Tensor q_pos, float scale) -> (Tensor, Tensor, Tensor)", &attention_bwd);
}

#else  // WS1_KERNEL_BODY

// acc[0..D) = acc * a  (a broadcast), lanes over d
inline void scale_row(float* acc, float a, int64_t D) {
  const V A(a);
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) (V::load(acc + d) * A).store(acc + d);
  if (d < D) {
    int t = static_cast<int>(D - d);
    (V::load_tail(acc + d, t) * A).store_tail(acc + d, t);
  }
}

// acc = fma(p, x, acc), lanes over d; X = uint16_t (bf16) or float
template <class X>
inline void axpy_row(float* acc, float p, const X* x, int64_t D) {
  const V Pv(p);
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) fmadd(Pv, V::load(x + d), V::load(acc + d)).store(acc + d);
  if (d < D) {
    int t = static_cast<int>(D - d);
    fmadd(Pv, V::load_tail(x + d, t), V::load_tail(acc + d, t)).store_tail(acc + d, t);
  }
}

void fwd_one(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t kstride, int64_t p, int64_t D, float scale, float* acc,
             float* s, uint16_t* out, float* lse) {
  for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t t0 = 0; t0 <= p; t0 += kKT) {
    const int64_t t1 = std::min(p + 1, t0 + kKT);
    float mt = -INFINITY;
    for (int64_t j = t0; j < t1; ++j) {
      s[j - t0] = scale * lane_dot(q, k + j * kstride, D);
      mt = s[j - t0] > mt ? s[j - t0] : mt;
    }
    const float mn = m > mt ? m : mt;
    const float alpha = (m == -INFINITY) ? 0.0f : vexp(m - mn);
    l = l * alpha;
    scale_row(acc, alpha, D);
    for (int64_t j = t0; j < t1; ++j) {
      const float pj = vexp(s[j - t0] - mn);
      l = l + pj;
      axpy_row(acc, pj, v + j * kstride, D);
    }
    m = mn;
  }
  const V L(l);
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) (V::load(acc + d) / L).store(out + d);
  if (d < D) {
    int t = static_cast<int>(D - d);
    (V::load_tail(acc + d, t) / L).store_tail(out + d, t);
  }
  *lse = m + std::log(l);
}

void bwd_query(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t kstride, const float* dout, const float* o,
               float lse, int64_t p, int64_t D, float scale, float* P, float* DS, float* dq) {
  const float delta = lane_dot(dout, o, D);
  for (int64_t d = 0; d < D; ++d) dq[d] = 0.0f;
  for (int64_t j = 0; j <= p; ++j) {
    const float sj = scale * lane_dot(q, k + j * kstride, D);
    const float pj = vexp(sj - lse);
    const float dp = lane_dot(dout, v + j * kstride, D);
    const float ds = pj * (dp - delta);
    P[j] = pj;
    DS[j] = ds;
    axpy_row(dq, ds, k + j * kstride, D);
  }
  scale_row(dq, scale, D);
}

void bwd_key(const uint16_t* q, const float* dout, const float* P, const float* DS, const int64_t* off, const int64_t* qpos,
             int64_t i0, int64_t i1, int64_t j, int64_t kh, int64_t group, int64_t Hq, int64_t D, float scale, float* dk, float* dv) {
  for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
    for (int64_t i = i0; i < i1; ++i) {
      if (qpos[i] < j) continue;
      const int64_t row = off[i] + h * (qpos[i] + 1);
      axpy_row(dk, DS[row + j], q + (i * Hq + h) * D, D);
      axpy_row(dv, P[row + j], dout + (i * Hq + h) * D, D);
    }
  }
  scale_row(dk, scale, D);
}

#endif  // WS1_KERNEL_BODY
