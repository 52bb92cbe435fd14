// The attention plans (layouts in attention_plan.cuh), integer work only: attention_plan_kernel (the forward's items
// in whole-row or chunk mode; the backward's dQ kernel reads it too) and attention_bwd_plan_kernel (the backward's key
// plan, read by the dK/dV kernel). Host part: make_plan / make_kvplan, which launch them (attention_host.h).
#include "attention_plan.cuh"

namespace ws1cu {
namespace attn {

// One CTA of kPlanThreads: each sequence's item counts in both modes, exclusive-scanned kPlanThreads sequences at a
// time (carried over the loop); then the mode, the item count and the status.
__global__ void __launch_bounds__(kPlanThreads) attention_plan_kernel(const int64_t* __restrict__ cu_q,
                                                                      const int64_t* __restrict__ cu_k,
                                                                      const int64_t* __restrict__ q_pos, int B, int64_t Tq,
                                                                      int64_t Tk, int G, int bm, int split_ok, int64_t cap,
                                                                      int* __restrict__ plan) {
  __shared__ int64_t wtot[2][kPlanThreads / 32];
  __shared__ int64_t carry[2];
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  int bad = 0;
  if (tid == 0) {
    bad = !(cu_q[0] == 0 && cu_k[0] == 0 && cu_q[B] == Tq && cu_k[B] == Tk);
    carry[0] = carry[1] = 0;
  }
  __syncthreads();
  int* start_f = plan + 3;
  int* start_s = plan + 4 + B;
  int* nch_out = plan + 5 + 2 * B;
  for (int base = 0; base < B; base += kPlanThreads) {
    const int b = base + tid;
    int64_t nf = 0, ns = 0;
    if (b < B) {
      const int64_t q0 = cu_q[b], q1 = cu_q[b + 1], k0 = cu_k[b], k1 = cu_k[b + 1];
      if (!(0 <= q0 && q0 <= q1 && q1 <= Tq && 0 <= k0 && k0 <= k1 && k1 <= Tk)) {
        bad = 1;
        nch_out[b] = 0;
      } else {
        const int64_t nq = q1 - q0;
        nf = (nq * G + bm - 1) / bm;
        int64_t nch = 0;
        if (nq > 0 && split_ok) {  // chunk mode is only considered for decode-sized calls (few queries)
          int64_t mp = -1;
          for (int64_t i = q0; i < q1; ++i) {
            const int64_t p = q_pos[i];
            if (p >= 0 && p < k1 - k0 && p > mp) mp = p;
          }
          nch = mp >= 0 ? mp / kChunk + 1 : 1;  // a sequence whose positions are all invalid still gets a CTA (NaN rows)
        }
        ns = nf * nch;
        nch_out[b] = clamp32(nch);
      }
    }
    // exclusive block scan of (nf, ns), carried over the loop
    const int64_t inf_ = warp_incl_scan(nf), ins = warp_incl_scan(ns);
    if (lane == 31) {
      wtot[0][wid] = inf_;
      wtot[1][wid] = ins;
    }
    __syncthreads();
    int64_t pf = carry[0], ps = carry[1];
    for (int w2 = 0; w2 < wid; ++w2) {
      pf += wtot[0][w2];
      ps += wtot[1][w2];
    }
    if (b < B) {
      start_f[b] = clamp32(pf + inf_ - nf);
      start_s[b] = clamp32(ps + ins - ns);
    }
    __syncthreads();
    if (tid == kPlanThreads - 1) {
      carry[0] = pf + inf_;
      carry[1] = ps + ins;
    }
    __syncthreads();
  }
  const int anybad = __syncthreads_or(bad);
  if (tid == 0) {
    const int64_t tf = carry[0], ts = carry[1];
    start_f[B] = clamp32(tf);
    start_s[B] = clamp32(ts);
    const int mode = (split_ok && ts <= cap) ? 1 : 0;
    const int64_t items = mode ? ts : tf;
    plan[0] = (!anybad && items <= cap) ? 1 : 0;
    plan[1] = mode;
    plan[2] = clamp32(items);
  }
}

// grid max(1, ceil(Tq / 256)) x 256 threads: a thread per query claims its table slot; block 0 also scans the key
// blocks. Integer atomics only, and no value depends on their order: a slot has one claimant unless two queries share
// a position (refused: status 0), and a max is order-free.
__global__ void __launch_bounds__(kPlanThreads) attention_bwd_plan_kernel(const int64_t* __restrict__ cu_q,
                                                                          const int64_t* __restrict__ cu_k,
                                                                          const int64_t* __restrict__ q_pos, int B,
                                                                          int64_t Tq, int64_t Tk, int* __restrict__ kvplan) {
  __shared__ int64_t wtot[kPlanThreads / 32];
  __shared__ int64_t carry;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kPlanThreads + tid;
  if (i < Tq) {
    const int64_t b = seq_of(cu_q, B, i);  // an index in [0, B) whatever cu_q holds; checked against it below
    const int64_t q0 = cu_q[b], q1 = cu_q[b + 1], k0 = cu_k[b], k1 = cu_k[b + 1], p = q_pos[i];
    bool ok = q0 <= i && i < q1 && 0 <= k0 && k0 <= k1 && k1 <= Tk && 0 <= p && p < k1 - k0;
    if (ok) ok = atomicCAS(kvplan + 2 * B + 2 + k0 + p, -1, static_cast<int>(i)) == -1;
    if (ok) atomicMax(kvplan + B + 1 + b, static_cast<int>(p));
    else atomicExch(kvplan + 2 * B + 1, 0);
  }
  if (blockIdx.x != 0) return;
  // exclusive scan of the key blocks per sequence, carried over the loop (inconsistent offsets count 0 blocks: the
  // forward plan's status, plan[0], refuses them)
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < B; base += kPlanThreads) {
    const int b = base + tid;
    int64_t n = 0;
    if (b < B) {
      const int64_t k0 = cu_k[b], k1 = cu_k[b + 1];
      if (0 <= k0 && k0 <= k1 && k1 <= Tk) n = (k1 - k0 + kBKV - 1) / kBKV;
    }
    const int64_t inc = warp_incl_scan(n);
    if (lane == 31) wtot[wid] = inc;
    __syncthreads();
    int64_t pre = carry;
    for (int w2 = 0; w2 < wid; ++w2) pre += wtot[w2];
    if (b < B) kvplan[b] = clamp32(pre + inc - n);
    __syncthreads();
    if (tid == kPlanThreads - 1) carry = pre + inc;
    __syncthreads();
  }
  if (tid == 0) kvplan[B] = clamp32(carry);
}

}  // namespace attn
}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "attention_host.h"

#include <algorithm>

namespace ws1_cuda {
namespace attn_host {

// The plan (device-side: no host sync, so a captured forward plans each replay from its own cu_seqlens / q_pos).
at::Tensor make_plan(const char* op, const Meta& m, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos,
                     int bm, bool split_ok, int64_t cap) {
  at::Tensor plan = at::empty({A::plan_size(m.B)}, cu_q.options().dtype(at::kInt));
  A::attention_plan_kernel<<<1, A::kPlanThreads, 0, stream()>>>(
      cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(), q_pos.data_ptr<int64_t>(), static_cast<int>(m.B), m.Tq, m.Tk,
      static_cast<int>(m.Hq / m.Hkv), bm, split_ok ? 1 : 0, cap, plan.data_ptr<int>());
  check_launch(op);
  return plan;
}

// The backward's key plan: filled with -1, then built by attention_bwd_plan_kernel (one thread per query).
at::Tensor make_kvplan(const char* op, const Meta& m, const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos) {
  at::Tensor kvplan = at::full({A::kvplan_size(m.B, m.Tk)}, -1, cu_q.options().dtype(at::kInt));
  A::attention_bwd_plan_kernel<<<static_cast<unsigned>(std::max<int64_t>(1, ceil_div(m.Tq, A::kPlanThreads))),
                                 A::kPlanThreads, 0, stream()>>>(cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(),
                                                                 q_pos.data_ptr<int64_t>(), static_cast<int>(m.B), m.Tq,
                                                                 m.Tk, kvplan.data_ptr<int>());
  check_launch(op);
  return kvplan;
}

}  // namespace attn_host
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
