// attention.h — the attention kernels of attention.asc (and the negative control in controls.asc): causal GQA over packed varlen sequences — prefill, chunked prefill and
// decode are one kernel (AIV), and its backward (two kernels, FP32).
//
// q [Tq, Hq, D], k, v [Tk, Hkv, D] (bf16 or fp32, one dtype, code f), cu_seqlens_q/k [B + 1], q_pos [Tq]
// (absolute position of each query in its sequence), seq_of_q [Tq] (host: the sequence of each query).
// Work item (query i, head h) -> core (i * Hq + h) % GetBlockNum(). Query i at position p attends keys
// j = 0..p of its sequence (kv head h / (Hq / Hkv)), in tiles of KT = 32 keys ALIGNED TO ABSOLUTE KEY 0;
// keys past p are never touched. Per tile, FP32:
//   s_j   = scale * ReduceSum(q * k_j)              (Mul, ReduceSum over D; Muls scale over the tile)
//   m_new = max(m, ReduceMax(s));  alpha = m == -inf ? 0 : Exp(m - m_new)
//   p_j   = Exp(s_j - m_new);  l = l * alpha + ReduceSum(p)
//   acc   = acc * alpha, then acc = acc + p_j * v_j for j ascending (Muls, Add)
// out = acc / l (Div; cast to the input dtype), lse = m + Ln(l). A query's sequence of operations depends on
// p and its keys only — never on how many queries, sequences or chunks share the launch.
// Backward (all FP32; the host widens q, k, v, out, dout exactly): phase 1, item (query i, head h):
//   Delta = ReduceSum(dout * out);  for j = 0..p ascending:  s_j = scale * ReduceSum(q * k_j),
//   p_j = Exp(s_j - lse), dp_j = ReduceSum(dout * v_j), ds_j = p_j * (dp_j - Delta)  (p_j, ds_j to a GM
//   workspace at off[i] * Hq + h * (p + 1) + j);  dq = scale * (sum_j ds_j k_j, j ascending)
// phase 2, item (key row r of sequence b, kv head hk): for h in the group ascending, for i in the sequence's
//   queries ascending with q_pos[i] >= j:  dk += ds_ij q_i,  dv += p_ij dout_i;  dk *= scale.
// Per sequence and in a fixed (head, query) order, so packing, batch size and blockDim cannot change bits.
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {
constexpr uint32_t kKeyTile = 32;

// ALIGN_TO_BUFFER = true is the negative control (controls.asc): key tiles aligned to the packed K/V buffer's
// row index instead of the sequence's key 0, so where a sequence sits in the batch moves its tile boundaries.
template <class T, bool ALIGN_TO_BUFFER = false>
class Attention {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR cuk, GM_ADDR qpos, GM_ADDR seq, GM_ADDR out,
                             GM_ADDR lse, int64_t Tq, int64_t Tk, int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
                             float scale) {
    qg_.SetGlobalBuffer((__gm__ T*)q, Tq * Hq * D);
    kg_.SetGlobalBuffer((__gm__ T*)k, Tk * Hkv * D);
    vg_.SetGlobalBuffer((__gm__ T*)v, Tk * Hkv * D);
    og_.SetGlobalBuffer((__gm__ T*)out, Tq * Hq * D);
    lg_.SetGlobalBuffer((__gm__ float*)lse, Tq * Hq);
    ckg_.SetGlobalBuffer((__gm__ int64_t*)cuk, B + 1);
    pg_.SetGlobalBuffer((__gm__ int64_t*)qpos, Tq);
    sg_.SetGlobalBuffer((__gm__ int64_t*)seq, Tq);
    InvalidateScalarCache(pg_);  // q_pos, cu_seqlens_k, seq_of_q are read on the scalar unit
    const uint32_t d = static_cast<uint32_t>(D);
    pipe_.InitBuffer(qb_, d * sizeof(float));
    pipe_.InitBuffer(kb_, d * sizeof(float));
    pipe_.InitBuffer(ab_, d * sizeof(float));
    pipe_.InitBuffer(cb_, kKeyTile * sizeof(float));
    pipe_.InitBuffer(tb_, 8 * sizeof(float));
    pipe_.InitBuffer(work_, 256 * sizeof(float));
    pipe_.InitBuffer(sb_, d * sizeof(bfloat16_t));
    const int64_t group = Hq / Hkv;
    for (int64_t it = GetBlockIdx(); it < Tq * Hq; it += GetBlockNum()) Item(it / Hq, it % Hq, group, Hkv, D, Hq, scale);
  }

 private:
  __aicore__ inline void Item(int64_t i, int64_t h, int64_t group, int64_t Hkv, int64_t D, int64_t Hq, float scale) {
    LocalTensor<float> qf = qb_.Get<float>(), kf = kb_.Get<float>(), acc = ab_.Get<float>(), sc = cb_.Get<float>();
    LocalTensor<float> tmp = tb_.Get<float>(), work = work_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    const uint32_t d = static_cast<uint32_t>(D);
    const int64_t p = pg_.GetValue(i), k0 = ckg_.GetValue(sg_.GetValue(i)), hk = h / group;
    LoadF32(qf, st, qg_[(i * Hq + h) * D], d);
    Duplicate(acc, 0.0f, d);
    const float neg_inf = F32FromBits(kNegInfBits);
    float m = neg_inf, l = 0.0f;
    const int64_t shift = ALIGN_TO_BUFFER ? k0 % kKeyTile : 0;  // 0: tiles start at the sequence's key 0
    for (int64_t t0 = -shift; t0 <= p; t0 += kKeyTile) {
      const int64_t j0 = t0 < 0 ? 0 : t0, e = t0 + kKeyTile < p + 1 ? t0 + kKeyTile : p + 1;
      const uint32_t n = static_cast<uint32_t>(e - j0);
      for (uint32_t jj = 0; jj < n; ++jj) {
        LoadF32(kf, st, kg_[((k0 + j0 + jj) * Hkv + hk) * D], d);
        Mul(kf, kf, qf, d);
        ReduceSum(tmp, kf, work, d);
        PipeBarrier<PIPE_ALL>();
        sc.SetValue(jj, tmp.GetValue(0));
      }
      PipeBarrier<PIPE_ALL>();
      Muls(sc, sc, scale, n);
      ReduceMax(tmp, sc, work, n);
      PipeBarrier<PIPE_ALL>();
      const float mt = tmp.GetValue(0);
      const float m_new = mt > m ? mt : m;
      const float alpha = (m == neg_inf) ? 0.0f : VecExp1(tmp, m - m_new);
      Adds(sc, sc, -m_new, n);
      Exp(sc, sc, n);
      ReduceSum(tmp, sc, work, n);
      PipeBarrier<PIPE_ALL>();
      l = l * alpha + tmp.GetValue(0);
      Muls(acc, acc, alpha, d);
      for (uint32_t jj = 0; jj < n; ++jj) {
        LoadF32(kf, st, vg_[((k0 + j0 + jj) * Hkv + hk) * D], d);
        Muls(kf, kf, sc.GetValue(jj), d);
        Add(acc, acc, kf, d);
      }
      m = m_new;
    }
    Duplicate(kf, l, d);
    Div(acc, acc, kf, d);
    StoreF32(og_[(i * Hq + h) * D], acc, st, d);
    StoreScalar(lg_[i * Hq + h], tmp, m + VecLn1(tmp, l));
  }
  TPipe pipe_;
  TBuf<TPosition::VECCALC> qb_, kb_, ab_, cb_, tb_, work_, sb_;
  GlobalTensor<T> qg_, kg_, vg_, og_;
  GlobalTensor<float> lg_;
  GlobalTensor<int64_t> ckg_, pg_, sg_;
};

class AttentionBwd {
 public:
  __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR dout, GM_ADDR cuq, GM_ADDR cuk, GM_ADDR qpos,
                              GM_ADDR seq, GM_ADDR woff, GM_ADDR P, GM_ADDR DS, int64_t Tq, int64_t Tk, int64_t B,
                              int64_t Hq, int64_t Hkv, int64_t D, int64_t W) {
    Tq_ = Tq, Hq_ = Hq, Hkv_ = Hkv, D_ = D;
    qg_.SetGlobalBuffer((__gm__ float*)q, Tq * Hq * D);
    kg_.SetGlobalBuffer((__gm__ float*)k, Tk * Hkv * D);
    vg_.SetGlobalBuffer((__gm__ float*)v, Tk * Hkv * D);
    dog_.SetGlobalBuffer((__gm__ float*)dout, Tq * Hq * D);
    cqg_.SetGlobalBuffer((__gm__ int64_t*)cuq, B + 1);
    ckg_.SetGlobalBuffer((__gm__ int64_t*)cuk, B + 1);
    pg_.SetGlobalBuffer((__gm__ int64_t*)qpos, Tq);
    sg_.SetGlobalBuffer((__gm__ int64_t*)seq, Tq);
    wg_.SetGlobalBuffer((__gm__ int64_t*)woff, Tq);
    Pg_.SetGlobalBuffer((__gm__ float*)P, W);
    DSg_.SetGlobalBuffer((__gm__ float*)DS, W);
    // offsets, positions, lse, and (phase 2) the p / ds workspace phase 1 wrote are read on the scalar unit
    InvalidateScalarCache(Pg_);
    const uint32_t d = static_cast<uint32_t>(D);
    pipe_.InitBuffer(ab_, d * sizeof(float));
    pipe_.InitBuffer(bb_, d * sizeof(float));
    pipe_.InitBuffer(cb_, d * sizeof(float));
    pipe_.InitBuffer(eb_, d * sizeof(float));
    pipe_.InitBuffer(fb_, d * sizeof(float));
    pipe_.InitBuffer(tb_, 8 * sizeof(float));
    pipe_.InitBuffer(work_, 256 * sizeof(float));
    pipe_.InitBuffer(sb_, d * sizeof(bfloat16_t));
  }
  __aicore__ inline float Dot(const LocalTensor<float>& a, const LocalTensor<float>& b) {
    LocalTensor<float> t = fb_.Get<float>(), r = tb_.Get<float>();
    Mul(t, a, b, static_cast<uint32_t>(D_));
    ReduceSum(r, t, work_.Get<float>(), static_cast<uint32_t>(D_));
    PipeBarrier<PIPE_ALL>();
    return r.GetValue(0);
  }
  // phase 1: item (i, h)
  __aicore__ inline void Query(GM_ADDR out, GM_ADDR lse, GM_ADDR dq, float scale) {
    GlobalTensor<float> og, lg, dqg;
    og.SetGlobalBuffer((__gm__ float*)out, Tq_ * Hq_ * D_);
    lg.SetGlobalBuffer((__gm__ float*)lse, Tq_ * Hq_);
    dqg.SetGlobalBuffer((__gm__ float*)dq, Tq_ * Hq_ * D_);
    const uint32_t d = static_cast<uint32_t>(D_);
    const int64_t group = Hq_ / Hkv_;
    LocalTensor<float> qf = ab_.Get<float>(), dof = bb_.Get<float>(), kf = cb_.Get<float>(), acc = eb_.Get<float>();
    LocalTensor<float> tmp = tb_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    for (int64_t it = GetBlockIdx(); it < Tq_ * Hq_; it += GetBlockNum()) {
      const int64_t i = it / Hq_, h = it % Hq_, hk = h / group;
      const int64_t p = pg_.GetValue(i), k0 = ckg_.GetValue(sg_.GetValue(i));
      const int64_t base = wg_.GetValue(i) * Hq_ + h * (p + 1);
      LoadF32(dof, st, dog_[it * D_], d);
      LoadF32(kf, st, og[it * D_], d);
      const float delta = Dot(dof, kf);
      const float l = lg.GetValue(it);
      LoadF32(qf, st, qg_[it * D_], d);
      Duplicate(acc, 0.0f, d);
      for (int64_t j = 0; j <= p; ++j) {
        const int64_t row = ((k0 + j) * Hkv_ + hk) * D_;
        LoadF32(kf, st, vg_[row], d);
        const float dp = Dot(dof, kf);
        LoadF32(kf, st, kg_[row], d);
        const float s = Dot(qf, kf) * scale;
        const float pj = VecExp1(tmp, s - l);
        const float ds = pj * (dp - delta);
        StoreScalar(Pg_[base + j], tmp, pj);
        StoreScalar(DSg_[base + j], tmp, ds);
        Muls(kf, kf, ds, d);
        Add(acc, acc, kf, d);
      }
      Muls(acc, acc, scale, d);
      StoreF32(dqg[it * D_], acc, st, d);
    }
  }
  // phase 2: item (key row r, kv head hk)
  __aicore__ inline void Key(GM_ADDR kseq, GM_ADDR dk, GM_ADDR dv, int64_t Tk, float scale) {
    GlobalTensor<int64_t> ksg;
    GlobalTensor<float> dkg, dvg;
    ksg.SetGlobalBuffer((__gm__ int64_t*)kseq, Tk);
    dkg.SetGlobalBuffer((__gm__ float*)dk, Tk * Hkv_ * D_);
    dvg.SetGlobalBuffer((__gm__ float*)dv, Tk * Hkv_ * D_);
    const uint32_t d = static_cast<uint32_t>(D_);
    const int64_t group = Hq_ / Hkv_;
    LocalTensor<float> accK = ab_.Get<float>(), accV = bb_.Get<float>(), xf = cb_.Get<float>();
    LocalTensor<bfloat16_t> st = sb_.Get<bfloat16_t>();
    for (int64_t it = GetBlockIdx(); it < Tk * Hkv_; it += GetBlockNum()) {
      const int64_t r = it / Hkv_, hk = it % Hkv_, b = ksg.GetValue(r), j = r - ckg_.GetValue(b);
      const int64_t q0 = cqg_.GetValue(b), q1 = cqg_.GetValue(b + 1);
      Duplicate(accK, 0.0f, d);
      Duplicate(accV, 0.0f, d);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i = q0; i < q1; ++i) {
          const int64_t p = pg_.GetValue(i);
          if (p < j) continue;
          const int64_t idx = wg_.GetValue(i) * Hq_ + h * (p + 1) + j;
          const float ds = DSg_.GetValue(idx), pj = Pg_.GetValue(idx);
          LoadF32(xf, st, qg_[(i * Hq_ + h) * D_], d);
          Muls(xf, xf, ds, d);
          Add(accK, accK, xf, d);
          LoadF32(xf, st, dog_[(i * Hq_ + h) * D_], d);
          Muls(xf, xf, pj, d);
          Add(accV, accV, xf, d);
        }
      }
      Muls(accK, accK, scale, d);
      StoreF32(dkg[it * D_], accK, st, d);
      StoreF32(dvg[it * D_], accV, st, d);
    }
  }

 private:
  int64_t Tq_ = 0, Hq_ = 0, Hkv_ = 0, D_ = 0;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> ab_, bb_, cb_, eb_, fb_, tb_, work_, sb_;
  GlobalTensor<float> qg_, kg_, vg_, dog_, Pg_, DSg_;
  GlobalTensor<int64_t> cqg_, ckg_, pg_, sg_, wg_;
};
}  // namespace ws1a
