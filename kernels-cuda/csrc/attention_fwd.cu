// The attention forward's translation unit: the forward and merge kernels' explicit instantiations (each kernel is
// instantiated here and nowhere else), and the host launcher run_forward, which picks the launch configuration
// (attention_host.h).
#include "attention_fwd.cuh"
#include "attention_merge.cuh"

namespace ws1cu {
namespace attn {

// ---- explicit instantiations (compile_check compiles exactly these) -----------------------------------------------
#define WS1_ATTN_FWD_INST(DP)                                              \
  template __global__ void attention_fwd_kernel<DP, 4, 2>(const FwdArgs); \
  template __global__ void attention_fwd_kernel<DP, 4, 1>(const FwdArgs); \
  template __global__ void attention_fwd_kernel<DP, 1, 1>(const FwdArgs); \
  template __global__ void attention_merge_kernel<DP>(const FwdArgs);
WS1_ATTN_FWD_INST(64)
WS1_ATTN_FWD_INST(128)
#undef WS1_ATTN_FWD_INST

}  // namespace attn
}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "attention_host.h"

#include <algorithm>
#include <atomic>

namespace ws1_cuda {
namespace attn_host {
namespace {

// A device attribute (multiprocessors, opt-in shared memory per block), cached per device; a query, no sync.
int device_attr(const at::Tensor& t, cudaDeviceAttr attr, int which) {
  static std::atomic<int> cache[2][64];
  const int dev = t.device().index();
  if (dev >= 0 && dev < 64 && cache[which][dev].load(std::memory_order_relaxed) > 0)
    return cache[which][dev].load(std::memory_order_relaxed);
  int n = 0;
  const cudaError_t e = cudaDeviceGetAttribute(&n, attr, dev);
  TORCH_CHECK(e == cudaSuccess && n > 0, "ws1_cuda::attention: cannot read a device attribute: ", cudaGetErrorString(e));
  if (dev >= 0 && dev < 64) cache[which][dev].store(n, std::memory_order_relaxed);
  return n;
}
int sm_count(const at::Tensor& t) { return device_attr(t, cudaDevAttrMultiProcessorCount, 0); }
int smem_optin(const at::Tensor& t) { return device_attr(t, cudaDevAttrMaxSharedMemoryPerBlockOptin, 1); }

}  // namespace

template <int DP>
void run_forward(const char* op, const Meta& m, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& cu_q, const at::Tensor& cu_k, const at::Tensor& q_pos, double scale, at::Tensor& out,
                 at::Tensor& lse) {
  const int64_t G = m.Hq / m.Hkv;
  // Chunk mode (one KV chunk per 1-warp CTA of 16 rows, then the merge kernel) for decode-sized calls, whose rows
  // alone would leave most SMs idle; whole rows per 4-warp CTA otherwise (128 rows where the device's shared memory
  // holds the running state, else 64). Choices of speed only: every configuration gives the same bits.
  const bool split = m.Tq * m.Hq < int64_t{64} * sm_count(q);
  const bool mw2 = !split && A::FwdCfg<DP, 4, 2>::smem_bytes <= smem_optin(q);
  const int bm = split ? 16 : mw2 ? 128 : 64;
  int64_t cap = ceil_div(m.Tq * G, bm) + m.B;
  if (split) cap = std::max(cap, ceil_div(m.Tk, A::kChunk) + m.B);
  TORCH_CHECK(cap < (int64_t{1} << 31) - 1, op, ": too many (query block, chunk) items");
  // Short chunk-mode calls (B <= 32, Tk <= kChunk: the fixture pack, short decode steps) plan inside their CTAs
  // (self_plan: the same items, one launch instead of plan + kernel); a choice by the shapes, no bit moves.
  const bool self_planned = split && m.B <= 32 && m.Tk <= A::kChunk;
  at::Tensor plan;
  if (!self_planned) plan = make_plan(op, m, cu_q, cu_k, q_pos, bm, split, cap);
  A::FwdArgs args{bf16_in(q), bf16_in(k), bf16_in(v), cu_q.data_ptr<int64_t>(), cu_k.data_ptr<int64_t>(),
                  q_pos.data_ptr<int64_t>(), self_planned ? nullptr : plan.data_ptr<int>(), bf16_out(out),
                  lse.data_ptr<float>(), nullptr, nullptr, m.Tq, m.Tk, static_cast<int>(m.B), static_cast<int>(m.Hq),
                  static_cast<int>(m.Hkv), static_cast<int>(G), static_cast<int>(m.D),
                  static_cast<float>(scale) * A::kLog2e};
  const dim3 grid(static_cast<unsigned>(cap), static_cast<unsigned>(m.Hkv));
  if (split) {
    auto fo = q.options().dtype(at::kFloat);
    at::Tensor ws_acc = at::empty({cap * m.Hkv * 16 * DP}, fo), ws_ml = at::empty({cap * m.Hkv * 16 * 2}, fo);
    args.ws_acc = ws_acc.data_ptr<float>();
    args.ws_ml = ws_ml.data_ptr<float>();
    using C = A::FwdCfg<DP, 1, 1>;
    set_smem(A::attention_fwd_kernel<DP, 1, 1>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 1, 1><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
    // With Tk <= kChunk every valid position is < kChunk: each row is finalised by its chunk-0 CTA and the merge
    // kernel would return for every row, so it is not launched (one launch fewer for short packs; no bit moves).
    if (m.Tk > A::kChunk) {
      A::attention_merge_kernel<DP><<<static_cast<unsigned>(ceil_div(m.Tq * m.Hq, 4)), 128, 0, stream()>>>(args);
      check_launch(op);
    }
  } else if (mw2) {  // 32 rows per warp (H100 / H200: 227 KB of shared memory per block)
    using C = A::FwdCfg<DP, 4, 2>;
    set_smem(A::attention_fwd_kernel<DP, 4, 2>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 4, 2><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
  } else {  // 16 rows per warp, running state in registers (A100: 163 KB)
    using C = A::FwdCfg<DP, 4, 1>;
    set_smem(A::attention_fwd_kernel<DP, 4, 1>, C::smem_bytes, op);
    A::attention_fwd_kernel<DP, 4, 1><<<grid, C::NT, C::smem_bytes, stream()>>>(args);
    check_launch(op);
  }
}

template void run_forward<64>(const char*, const Meta&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const at::Tensor&, const at::Tensor&, double, at::Tensor&, at::Tensor&);
template void run_forward<128>(const char*, const Meta&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&, const at::Tensor&, const at::Tensor&, double, at::Tensor&, at::Tensor&);

}  // namespace attn_host
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
