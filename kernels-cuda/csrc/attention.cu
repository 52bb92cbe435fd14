// attention (ws1_cuda::attention, attention_bwd): causal GQA over packed variable-length sequences on tensor cores
// (mma.sync m16n8k16, BF16 operands, FP32 accumulation; sm_80 and sm_90a); ONE kernel family for prefill, chunked
// prefill and decode, whose output bits do not depend on which of them ran.
// Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0, G = Hq / Hkv; D a multiple of 8, D <= 128),
// cu_seqlens_q, cu_seqlens_k [B+1] int64, q_pos [Tq] int64 (query i of sequence b sits at absolute position q_pos[i]
// and sees its sequence's keys 0..q_pos[i]; key j of sequence b is row cu_seqlens_k[b] + j) ->
// (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32, natural log). The signature is kernels-cpu's: K/V arrive packed per
// sequence (ws1-kv gathers a sequence's cache blocks in block-table order), so key j's absolute position is its
// index in its sequence however the cache was paged.
//
// Where the code is (split by role; each kernel is instantiated in exactly one translation unit):
//   attention_mma.cuh     the PTX (cp.async, ldmatrix, mma.sync), the tile constants, the merge and finalisation
//   attention_plan.cuh    the device plans' layouts and the integer helpers that read them
//   attention_plan.cu     attention_plan_kernel, attention_bwd_plan_kernel; host: make_plan, make_kvplan
//   attention_fwd.cuh     FORWARD: the per-element order, attention_fwd_kernel<DP, NWM, MW>
//   attention_merge.cuh   the split-KV merge, attention_merge_kernel<DP>
//   attention_fwd.cu      the forward's instantiations; host: run_forward (the launch configuration)
//   attention_bwd.cuh     BACKWARD: the per-element order, the prep, dQ and dK/dV kernels
//   attention_bwd.cu      the backward's instantiations; host: run_backward
//   attention_host.h      the host declarations those TUs share (Meta, the launchers)
//   attention.cu          this file: the torch entry points (input checks, buffers); no device code, no launch
//
// Memory: the forward's split workspace is (items x Hkv x 16 rows) x (D + 2) floats; the backward needs no P / dS
// buffer (recomputed from lse), only dO in BF16, Delta, lse2 and an int32 table position -> query.
// Fixed launch configurations, no autotuning, no floating-point atomics (no output value is ever summed by an
// atomic); the backward's key plan claims its table slots with an integer atomicCAS (one writer per slot: a second
// claimant is refused input) and takes each sequence's last position with an integer atomicMax (order-free).
// docs/cuda.md has the proof and the cost model.
#ifndef WS1_DEVICE_ONLY
#include "attention_host.h"

#include <tuple>
#include <utility>
#include <vector>

namespace ws1_cuda {
namespace {
namespace A = ws1cu::attn;
using attn_host::Meta;
using attn_host::run_forward;

// One host sync: cu_seqlens and q_pos are validated as the cpu kernel does (bad input -> one-line error, never an
// out-of-bounds read on the device). Under graph capture the values are not copied to the host (capturing()): the
// device plans and the kernels guard themselves (NaN rows in the forward, NaN outputs in the backward).
Meta check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_q,
                  const at::Tensor& cu_k, const at::Tensor& q_pos, bool need_host) {
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_cuda(*t, op, n);
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kBFloat16, op, n);
    check_dim(*t, 3, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have one shape, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(q.size(2) == k.size(2), op, ": head_dim mismatch q ", q.size(2), " k ", k.size(2));
  TORCH_CHECK(q.size(2) % 8 == 0 && q.size(2) >= 8 && q.size(2) <= A::kDMax, op,
              ": head_dim must be a multiple of 8 in [8, ", A::kDMax, "] (the tensor-core tiles), got ", q.size(2));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": Hq (", q.size(1), ") must be a multiple of Hkv (", k.size(1), ")");
  for (auto [t, n] : {std::pair{&cu_q, "cu_seqlens_q"}, {&cu_k, "cu_seqlens_k"}, {&q_pos, "q_pos"}}) {
    check_same_device(q, *t, op, n);
    check_dtype(*t, at::kLong, op, n);
    check_dim(*t, 1, op, n);
    check_contig(*t, op, n);
  }
  TORCH_CHECK(cu_q.numel() == cu_k.numel() && cu_q.numel() >= 2, op, ": cu_seqlens_q/k must both be [B+1]");
  TORCH_CHECK(q_pos.numel() == q.size(0), op, ": q_pos must be [", q.size(0), "]");
  Meta m{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2), cu_q.numel() - 1, false, {}, {}, {}};
  TORCH_CHECK(m.Hq < 65536 && m.Hkv < 65536 && m.B < (int64_t{1} << 28) && m.Tq * m.Hq < (int64_t{1} << 31) &&
                  m.Tk * m.Hq < (int64_t{1} << 31),
              op, ": shape too large (Tq * Hq and Tk * Hq must be < 2^31)");
  if (capturing()) return m;
  at::Tensor host = at::cat({cu_q, cu_k, q_pos}).cpu();
  const int64_t* cq = host.data_ptr<int64_t>();
  const int64_t* ck = cq + (m.B + 1);
  const int64_t* qp = ck + (m.B + 1);
  TORCH_CHECK(cq[0] == 0 && ck[0] == 0 && cq[m.B] == m.Tq && ck[m.B] == m.Tk, op,
              ": cu_seqlens must start at 0 and end at Tq=", m.Tq, ", Tk=", m.Tk);
  for (int64_t b = 0; b < m.B; ++b) {
    TORCH_CHECK(cq[b + 1] >= cq[b] && ck[b + 1] >= ck[b], op, ": cu_seqlens must be non-decreasing");
    const int64_t lk = ck[b + 1] - ck[b];
    for (int64_t i = cq[b]; i < cq[b + 1]; ++i)
      TORCH_CHECK(qp[i] >= 0 && qp[i] < lk, op, ": query ", i, " at position ", qp[i], " but its sequence ", b, " has ", lk,
                  " keys");
  }
  m.checked = true;
  if (need_host) {
    m.cq.assign(cq, cq + m.B + 1);
    m.ck.assign(ck, ck + m.B + 1);
    m.qpos.assign(qp, qp + m.Tq);
  }
  return m;
}

// cp.async reads 16-byte pieces: a tensor whose storage is not 16-byte aligned (a view at an odd offset) is copied
// once into a fresh (aligned) buffer. Same bytes, so the same bits.
at::Tensor aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention";
  CallScope call(op);
  check_cuda(q_in, op, "q");  // before the guard: a CPU q is a one-line error, not a CUDAGuard failure
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Meta m = check_inputs(op, q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_host=*/false);
  at::Tensor out = at::empty_like(q_in);
  at::Tensor lse = at::empty({m.Tq, m.Hq}, q_in.options().dtype(at::kFloat));
  if (m.Tq == 0) return {out, lse};
  const at::Tensor q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  if (m.D <= 64) run_forward<64>(op, m, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale, out, lse);
  else run_forward<128>(op, m, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale, out, lse);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                             const at::Tensor& k_in, const at::Tensor& v_in,
                                                             const at::Tensor& out_in, const at::Tensor& lse_in,
                                                             const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                             const at::Tensor& q_pos, double scale) {
  const char* op = "ws1_cuda::attention_bwd";
  CallScope call(op);
  check_cuda(q_in, op, "q");  // before the guard (as above)
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Meta m = check_inputs(op, q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k, q_pos, /*need_host=*/true);
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), op, ": dout and out must have q's shape");
  TORCH_CHECK(lse_in.numel() == m.Tq * m.Hq, op, ": lse must be [Tq, Hq]");
  for (auto [t, n] : {std::pair{&dout_in, "dout"}, {&out_in, "out"}, {&lse_in, "lse"}}) check_same_device(q_in, *t, op, n);
  check_float(dout_in, op, "dout");
  check_float(out_in, op, "out");
  auto fopts = q_in.options().dtype(at::kFloat);
  at::Tensor dq = at::empty(q_in.sizes(), fopts), dk = at::empty(k_in.sizes(), fopts), dv = at::empty(k_in.sizes(), fopts);
  if (m.Tq == 0 && m.Tk == 0) return {dq, dk, dv};

  // Row slots of the dK/dV kernel are positions, so two queries of one sequence may not share a position: a one-line
  // error in an eager call (the host has the values); a captured call's device plan refuses it (NaN outputs).
  if (m.checked) {
    std::vector<int64_t> seen(static_cast<size_t>(m.Tk), -1);
    for (int64_t b = 0; b < m.B; ++b)
      for (int64_t i = m.cq[b]; i < m.cq[b + 1]; ++i) {
        int64_t& slot = seen[static_cast<size_t>(m.ck[b] + m.qpos[i])];
        TORCH_CHECK(slot < 0, op, ": sequence ", b, " has two queries at position ", m.qpos[i], " (queries ", slot, " and ",
                    i, ")");
        slot = i;
      }
  }

  const at::Tensor q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  const at::Tensor out = out_in.scalar_type() == at::kBFloat16 ? out_in.contiguous() : out_in.to(at::kBFloat16).contiguous();
  const at::Tensor lse = lse_in.to(at::kFloat).contiguous(), dout = dout_in.contiguous();
  at::Tensor dob = at::empty(q_in.sizes(), q_in.options());  // BF16, fresh: 16-byte aligned
  at::Tensor delta = at::empty({m.Tq, m.Hq}, fopts), lse2 = at::empty({m.Tq, m.Hq}, fopts);
  attn_host::BwdTensors t{q, k, v, out, lse, dout, dob, delta, lse2, dq, dk, dv};
  if (m.D <= 64) attn_host::run_backward<64>(op, m, t, cu_seqlens_q, cu_seqlens_k, q_pos, scale);
  else attn_host::run_backward<128>(op, m, t, cu_seqlens_q, cu_seqlens_k, q_pos, scale);
  return {dq, dk, dv};
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
