// logprob (ws1_cuda::logprob, logprob_bwd): logits [T, V] FP32, targets [T] int64 -> (logp [T], lse [T]) FP32.
// Forward: lse.cuh's row_lse (one block per row), then logp = x[target] - lse.
// Backward: g [T], lse [T] -> d [T, V] FP32: d[v] = g * (0 - expf(x[v] - lse)), d[target] = g * (1 - expf(x[target] - lse)).
// Elementwise per row after the row's lse: no reduction in the backward.
#include "lse.cuh"

namespace ws1cu {

__global__ void __launch_bounds__(kLseThreads) logprob_kernel(const float* __restrict__ x, const int64_t* __restrict__ tgt,
                                                              float* __restrict__ lp, float* __restrict__ lse, int64_t V) {
  __shared__ float red[kLseThreads / 32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * V;
  const float l = row_lse(xr, V, red);
  if (threadIdx.x == 0) {
    lse[r] = l;
    lp[r] = xr[tgt[r]] - l;
  }
}

__global__ void __launch_bounds__(kLseThreads) logprob_bwd_kernel(const float* __restrict__ g, const float* __restrict__ x,
                                                                  const float* __restrict__ lse,
                                                                  const int64_t* __restrict__ tgt, float* __restrict__ d,
                                                                  int64_t V) {
  const int64_t r = blockIdx.x;
  const float gr = g[r], l = lse[r];
  const int64_t k = tgt[r];
  const float* xr = x + r * V;
  float* dr = d + r * V;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) dr[v] = gr * ((v == k ? 1.0f : 0.0f) - expf(xr[v] - l));
}

}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
namespace ws1_cuda {

std::tuple<at::Tensor, at::Tensor> logprob(const at::Tensor& logits, const at::Tensor& targets) {
  const char* op = "ws1_cuda::logprob";
  CallScope call(op);
  lse::check_logits(logits, op);
  check_same_device(logits, targets, op, "targets");
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor l = logits.contiguous(), t = targets.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  lse::check_targets(t, T, V, op);
  at::Tensor lp = at::empty({T}, l.options()), ls = at::empty({T}, l.options());
  if (T == 0) return {lp, ls};
  ws1cu::logprob_kernel<<<static_cast<unsigned>(T), ws1cu::kLseThreads, 0, stream()>>>(
      l.data_ptr<float>(), t.data_ptr<int64_t>(), lp.data_ptr<float>(), ls.data_ptr<float>(), V);
  check_launch(op);
  return {lp, ls};
}

at::Tensor logprob_bwd(const at::Tensor& g, const at::Tensor& logits, const at::Tensor& lse_in, const at::Tensor& targets) {
  const char* op = "ws1_cuda::logprob_bwd";
  CallScope call(op);
  lse::check_logits(logits, op);
  check_same_device(logits, g, op, "g");
  check_same_device(logits, lse_in, op, "lse");
  check_same_device(logits, targets, op, "targets");
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor l = logits.contiguous(), t = targets.contiguous();
  const int64_t T = l.size(0), V = l.size(1);
  lse::check_targets(t, T, V, op);
  TORCH_CHECK(g.numel() == T && lse_in.numel() == T, op, ": g and lse must have ", T, " elements");
  at::Tensor gf = g.to(at::kFloat).contiguous(), sf = lse_in.to(at::kFloat).contiguous();
  at::Tensor d = at::empty_like(l);
  if (T == 0) return d;
  ws1cu::logprob_bwd_kernel<<<static_cast<unsigned>(T), ws1cu::kLseThreads, 0, stream()>>>(
      gf.data_ptr<float>(), l.data_ptr<float>(), sf.data_ptr<float>(), t.data_ptr<int64_t>(), d.data_ptr<float>(), V);
  check_launch(op);
  return d;
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
