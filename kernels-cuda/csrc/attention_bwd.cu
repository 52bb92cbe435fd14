// The attention backward's translation unit: the prep, dQ and dK/dV kernels' explicit instantiations (each kernel is
// instantiated here and nowhere else), and the host launcher run_backward (attention_host.h).
#include "attention_bwd.cuh"

namespace ws1cu {
namespace attn {

// ---- explicit instantiations (compile_check compiles exactly these) -----------------------------------------------
#define WS1_ATTN_BWD_INST(DP)                                          \
  template __global__ void attention_bwd_dq_kernel<DP>(const BwdArgs); \
  template __global__ void attention_bwd_dkv_kernel<DP>(const BwdArgs);
WS1_ATTN_BWD_INST(64)
WS1_ATTN_BWD_INST(128)
#undef WS1_ATTN_BWD_INST
template __global__ void attention_bwd_prep_kernel<uint16_t>(const uint16_t*, const uint16_t*, const float*, int64_t, int,
                                                             uint16_t*, float*, float*);
template __global__ void attention_bwd_prep_kernel<float>(const float*, const uint16_t*, const float*, int64_t, int,
                                                          uint16_t*, float*, float*);

}  // namespace attn
}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "attention_host.h"

namespace ws1_cuda {
namespace attn_host {

// The prep kernel (dO -> BF16, Delta, lse2), the two plans (on the device: no host sync), then the dQ and dK/dV
// kernels. The grids are bounds that depend on the shapes only (a captured call cannot read cu_seqlens); CTAs past a
// plan's item count return at once.
template <int DP>
void run_backward(const char* op, const Meta& m, BwdTensors& t, const at::Tensor& cu_q, const at::Tensor& cu_k,
                  const at::Tensor& q_pos, double scale) {
  const int64_t rows = m.Tq * m.Hq;
  if (rows > 0) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, 4));
    if (t.dout.scalar_type() == at::kBFloat16)
      A::attention_bwd_prep_kernel<uint16_t><<<blocks, 128, 0, stream()>>>(
          bf16_in(t.dout), bf16_in(t.out), t.lse.data_ptr<float>(), rows, static_cast<int>(m.D), bf16_out(t.dob),
          t.delta.data_ptr<float>(), t.lse2.data_ptr<float>());
    else
      A::attention_bwd_prep_kernel<float><<<blocks, 128, 0, stream()>>>(
          t.dout.data_ptr<float>(), bf16_in(t.out), t.lse.data_ptr<float>(), rows, static_cast<int>(m.D), bf16_out(t.dob),
          t.delta.data_ptr<float>(), t.lse2.data_ptr<float>());
    check_launch(op);
  }
  A::BwdArgs args{bf16_in(t.q), bf16_in(t.k), bf16_in(t.v), bf16_in(t.dob), t.lse2.data_ptr<float>(),
                  t.delta.data_ptr<float>(), cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(), q_pos.data_ptr<int64_t>(),
                  nullptr, nullptr, t.dq.data_ptr<float>(), t.dk.data_ptr<float>(), t.dv.data_ptr<float>(), m.Tq, m.Tk,
                  static_cast<int>(m.B), static_cast<int>(m.Hq), static_cast<int>(m.Hkv),
                  static_cast<int>(m.Hq / m.Hkv), static_cast<int>(m.D), static_cast<float>(scale) * A::kLog2e,
                  static_cast<float>(scale)};
  const int64_t G = m.Hq / m.Hkv;
  const int64_t cap = ceil_div(m.Tq * G, 64) + m.B;       // dQ items: query blocks of 64 rows per sequence
  const int64_t kv_cap = ceil_div(m.Tk, A::kBKV) + m.B;  // dK/dV items: sum_b ceil(lk_b / 64) <= Tk / 64 + B
  TORCH_CHECK(cap < (int64_t{1} << 31) - 1 && kv_cap < (int64_t{1} << 31) - 1, op, ": too many query or key blocks");
  at::Tensor plan = make_plan(op, m, cu_q, cu_k, q_pos, 64, false, cap);
  at::Tensor kvplan = make_kvplan(op, m, cu_q, cu_k, q_pos);
  args.plan = plan.data_ptr<int>();
  args.kvplan = kvplan.data_ptr<int>();
  if (m.Tq > 0) {
    set_smem(A::attention_bwd_dq_kernel<DP>, A::DqCfg<DP>::smem_bytes, op);
    A::attention_bwd_dq_kernel<DP><<<dim3(static_cast<unsigned>(cap), static_cast<unsigned>(m.Hkv)), 128,
                                     A::DqCfg<DP>::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
  if (m.Tk > 0) {
    set_smem(A::attention_bwd_dkv_kernel<DP>, A::DkvCfg<DP>::smem_bytes, op);
    A::attention_bwd_dkv_kernel<DP><<<dim3(static_cast<unsigned>(kv_cap), static_cast<unsigned>(m.Hkv)), 128,
                                      A::DkvCfg<DP>::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
}

template void run_backward<64>(const char*, const Meta&, BwdTensors&, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&, double);
template void run_backward<128>(const char*, const Meta&, BwdTensors&, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, double);

}  // namespace attn_host
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
