// The one row-logsumexp shared by logprob.cu and batch_invariant_logp.cu. Logits [T, V] FP32, one block of
// kLseThreads = 512 threads per row (fixed, whatever T is). Thread t owns the columns v = t, t + 512, ...:
//   m   = block_max(per-thread max)                               (max is exact: any order gives its bits)
//   s   = block_sum(per-thread serial sum of expf(x_v - m), v ascending, from +0)   (fixed tree)
//   lse = m + logf(s)
// logprob[t] = x[t, target] - lse;  batch_invariant_logp[t, v] = x[t, v] - lse: the same lse bits and the
// same subtraction, so logprob(l, t)[i] == batch_invariant_logp(l)[i, t[i]] bitwise.
#pragma once

#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kLseThreads = 512;

// Every thread of the block returns the row's lse. `red`: kLseThreads / 32 floats of shared memory.
__device__ __forceinline__ float row_lse(const float* __restrict__ xr, int64_t V, float* red) {
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) m = fmaxf(m, xr[v]);
  m = block_max<kLseThreads>(m, red);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += kLseThreads) s = s + expf(xr[v] - m);
  s = block_sum<kLseThreads>(s, red);
  return m + logf(s);
}

}  // namespace ws1cu

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace lse {

inline void check_logits(const at::Tensor& l, const char* op, const char* name = "logits") {
  check_cuda(l, op, name);
  check_dtype(l, at::kFloat, op, name);
  check_dim(l, 2, op, name);
  TORCH_CHECK(l.size(1) > 0, op, ": ", name, " need at least one column");
  TORCH_CHECK(l.size(0) < (int64_t{1} << 31), op, ": too many rows");
}

inline void check_targets(const at::Tensor& t, int64_t T, int64_t V, const char* op) {
  check_cuda(t, op, "targets");
  check_dtype(t, at::kLong, op, "targets");
  TORCH_CHECK(t.dim() == 1 && t.size(0) == T, op, ": targets must be [", T, "], got ", t.sizes());
  if (T == 0) return;
  const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();  // one host sync
  TORCH_CHECK(lo >= 0 && hi < V, op, ": target ids must be in [0, ", V, "), got min ", lo, " max ", hi);
}

}  // namespace lse
}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
