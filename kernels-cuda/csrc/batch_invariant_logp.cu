// batch_invariant_logp (ws1_cuda::batch_invariant_logp, batch_invariant_logp_bwd): logits [T, V] FP32 ->
// (logp [T, V], lse [T]) FP32 — the log-softmax of each row: x - lse with lse.cuh's row_lse, the same lse
// and the same subtraction as logprob, so logprob(l, t)[i] == batch_invariant_logp(l)[i, t[i]] bitwise.
// Backward: g [T, V], logp [T, V] -> d [T, V] FP32: d[v] = g[v] - expf(logp[v]) * S with S = block_sum of the
// row's g (one block of 512 per row, per-thread serial sums, fixed tree).
#include "lse.cuh"

namespace ws1cu {

__global__ void __launch_bounds__(kLseThreads) bilp_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                           float* __restrict__ lse, int64_t V) {
  __shared__ float red[kLseThreads / 32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * V;
  const float l = row_lse(xr, V, red);
  if (threadIdx.x == 0) lse[r] = l;
  float* o = out + r * V;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) o[v] = xr[v] - l;
}

__global__ void __launch_bounds__(kLseThreads) bilp_bwd_kernel(const float* __restrict__ g, const float* __restrict__ lp,
                                                               float* __restrict__ d, int64_t V) {
  __shared__ float red[kLseThreads / 32];
  const int64_t r = blockIdx.x;
  const float* gr = g + r * V;
  const float* lr = lp + r * V;
  float part = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) part = part + gr[v];
  const float S = block_sum<kLseThreads>(part, red);
  float* dr = d + r * V;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) dr[v] = gr[v] - expf(lr[v]) * S;
}

}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

std::tuple<at::Tensor, at::Tensor> batch_invariant_logp(const at::Tensor& logits) {
  const char* op = "ws1_cuda::batch_invariant_logp";
  CallScope call(op);
  lse::check_logits(logits, op);
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor l = logits.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  at::Tensor out = at::empty_like(l), ls = at::empty({T}, l.options());
  if (T == 0) return {out, ls};
  ws1cu::bilp_kernel<<<static_cast<unsigned>(T), ws1cu::kLseThreads, 0, stream()>>>(l.data_ptr<float>(), out.data_ptr<float>(),
                                                                                    ls.data_ptr<float>(), V);
  check_launch(op);
  return {out, ls};
}

at::Tensor batch_invariant_logp_bwd(const at::Tensor& g, const at::Tensor& logp) {
  const char* op = "ws1_cuda::batch_invariant_logp_bwd";
  CallScope call(op);
  lse::check_logits(logp, op, "logp");
  check_same_device(logp, g, op, "g");
  TORCH_CHECK(g.sizes() == logp.sizes(), op, ": g and logp must have one shape, got ", g.sizes(), " and ", logp.sizes());
  const c10::cuda::CUDAGuard guard(logp.device());
  at::Tensor gf = g.to(at::kFloat).contiguous(), lp = logp.contiguous();
  at::Tensor d = at::empty_like(lp);
  const int64_t T = lp.size(0), V = lp.size(1);
  if (T == 0) return d;
  ws1cu::bilp_bwd_kernel<<<static_cast<unsigned>(T), ws1cu::kLseThreads, 0, stream()>>>(gf.data_ptr<float>(), lp.data_ptr<float>(),
                                                                                        d.data_ptr<float>(), V);
  check_launch(op);
  return d;
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
