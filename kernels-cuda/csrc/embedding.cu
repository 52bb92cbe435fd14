// embedding (ws1_cuda::embedding, embedding_bwd).
// Forward: ids [T] int64, weight [V, H] (BF16 or FP32) -> [T, H] in weight's dtype: an exact row gather.
// Backward (dy [T, H] BF16 or FP32, ids [T], num_embeddings V) -> dE [V, H] FP32, BY SORTED SEGMENTS, no
// atomics: the host sorts ids STABLY (torch.sort(stable=True): ties keep the given row order, so the result
// is unique), finds each id's segment, and one thread per (segment, column) adds that id's rows serially in
// the given row order from +0 — the cpu kernel's sum. The caller passes rows in canonical order.
#include "ws1_cuda_common.cuh"

namespace ws1cu {

constexpr int kEmbThreads = 256;

__device__ __forceinline__ void put_nan(uint16_t* p) { *p = 0x7fc0u; }
__device__ __forceinline__ void put_nan(float* p) { *p = __int_as_float(0x7fc00000); }

// An id outside [0, V) (only possible when the host check was skipped under graph capture) gives a NaN
// row, never a read outside the table.
template <class T>
__global__ void __launch_bounds__(kEmbThreads) embedding_kernel(const int64_t* __restrict__ ids, const T* __restrict__ w,
                                                                T* __restrict__ y, int64_t V, int64_t H) {
  const int64_t t = blockIdx.x, id = ids[t];
  T* dst = y + t * H;
  if (id < 0 || id >= V) {
    for (int64_t h = threadIdx.x; h < H; h += kEmbThreads) put_nan(dst + h);
    return;
  }
  const T* src = w + id * H;
  for (int64_t h = threadIdx.x; h < H; h += kEmbThreads) dst[h] = src[h];
}

// seg_start [S + 1]: segment s covers sorted rows seg_start[s] .. seg_start[s+1]-1; order[r] is the dy row of
// sorted row r; seg_id[s] the embedding row it updates.
template <class D>
__global__ void __launch_bounds__(kEmbThreads) embedding_bwd_kernel(const D* __restrict__ dy, const int64_t* __restrict__ order,
                                                                    const int64_t* __restrict__ seg_start,
                                                                    const int64_t* __restrict__ seg_id,
                                                                    float* __restrict__ dE, int64_t H) {
  const int64_t s = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kEmbThreads + threadIdx.x;
  if (h >= H) return;
  float acc = 0.0f;
  for (int64_t r = seg_start[s]; r < seg_start[s + 1]; ++r) acc = acc + ld(dy + order[r] * H + h);
  dE[seg_id[s] * H + h] = acc;
}

}  // namespace ws1cu

template __global__ void ws1cu::embedding_kernel<uint16_t>(const int64_t*, const uint16_t*, uint16_t*, int64_t, int64_t);
template __global__ void ws1cu::embedding_kernel<float>(const int64_t*, const float*, float*, int64_t, int64_t);
template __global__ void ws1cu::embedding_bwd_kernel<uint16_t>(const uint16_t*, const int64_t*, const int64_t*,
                                                               const int64_t*, float*, int64_t);
template __global__ void ws1cu::embedding_bwd_kernel<float>(const float*, const int64_t*, const int64_t*, const int64_t*,
                                                            float*, int64_t);

#ifndef WS1_DEVICE_ONLY
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace {

void check_ids(const at::Tensor& ids, int64_t V, const char* op) {
  check_cuda(ids, op, "ids");
  check_dtype(ids, at::kLong, op, "ids");
  check_dim(ids, 1, op, "ids");
  check_contig(ids, op, "ids");
  if (ids.numel() == 0 || capturing()) return;  // under capture: the kernel's guard (NaN row), see capturing()
  // one host sync: an id out of range is an error naming the range, never an out-of-bounds read
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi < V, op, ": token ids must be in [0, ", V, "), got min ", lo, " max ", hi);
}

}  // namespace

at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) {
  const char* op = "ws1_cuda::embedding";
  CallScope call(op);
  check_cuda(weight, op, "weight");
  check_same_device(weight, ids, op, "ids");
  check_dim(weight, 2, op, "weight");
  check_float(weight, op, "weight");
  check_ids(ids, weight.size(0), op);
  const c10::cuda::CUDAGuard guard(weight.device());
  at::Tensor w = weight.contiguous();
  const int64_t T = ids.numel(), H = w.size(1);
  at::Tensor y = at::empty({T, H}, w.options());
  if (T == 0 || H == 0) return y;
  TORCH_CHECK(T < (int64_t{1} << 31), op, ": too many tokens");
  if (w.scalar_type() == at::kFloat)
    ws1cu::embedding_kernel<float><<<static_cast<unsigned>(T), ws1cu::kEmbThreads, 0, stream()>>>(
        ids.data_ptr<int64_t>(), w.data_ptr<float>(), y.data_ptr<float>(), w.size(0), H);
  else
    ws1cu::embedding_kernel<uint16_t><<<static_cast<unsigned>(T), ws1cu::kEmbThreads, 0, stream()>>>(
        ids.data_ptr<int64_t>(), bf16_in(w), bf16_out(y), w.size(0), H);
  check_launch(op);
  return y;
}

at::Tensor embedding_bwd(const at::Tensor& dy_in, const at::Tensor& ids, int64_t num_embeddings) {
  const char* op = "ws1_cuda::embedding_bwd";
  CallScope call(op);
  check_cuda(dy_in, op, "dy");
  check_same_device(dy_in, ids, op, "ids");
  check_dim(dy_in, 2, op, "dy");
  check_float(dy_in, op, "dy");
  TORCH_CHECK(num_embeddings > 0, op, ": num_embeddings must be > 0");
  check_ids(ids, num_embeddings, op);
  TORCH_CHECK(dy_in.size(0) == ids.numel(), op, ": dy has ", dy_in.size(0), " rows, ids ", ids.numel());
  const c10::cuda::CUDAGuard guard(dy_in.device());
  at::Tensor dy = dy_in.contiguous();
  const int64_t T = dy.size(0), H = dy.size(1);
  at::Tensor dE = at::zeros({num_embeddings, H}, dy.options().dtype(at::kFloat));
  if (T == 0 || H == 0) return dE;
  // Sorted segments (index work only, no arithmetic on values): stable sort keeps the given row order within an id.
  auto [sorted, order] = at::sort(ids, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  auto [seg_id, inverse, counts] = at::unique_consecutive(sorted, /*return_inverse=*/false, /*return_counts=*/true);
  at::Tensor seg_start = at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)});
  const int64_t S = seg_id.numel();
  TORCH_CHECK(S < (int64_t{1} << 31) && ceil_div(H, ws1cu::kEmbThreads) < 65536, op, ": shape too large");
  const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(ceil_div(H, ws1cu::kEmbThreads)));
  if (dy.scalar_type() == at::kFloat)
    ws1cu::embedding_bwd_kernel<float><<<grid, ws1cu::kEmbThreads, 0, stream()>>>(
        dy.data_ptr<float>(), order.data_ptr<int64_t>(), seg_start.data_ptr<int64_t>(), seg_id.data_ptr<int64_t>(),
        dE.data_ptr<float>(), H);
  else
    ws1cu::embedding_bwd_kernel<uint16_t><<<grid, ws1cu::kEmbThreads, 0, stream()>>>(
        bf16_in(dy), order.data_ptr<int64_t>(), seg_start.data_ptr<int64_t>(), seg_id.data_ptr<int64_t>(),
        dE.data_ptr<float>(), H);
  check_launch(op);
  return dE;
}

}  // namespace ws1_cuda
#endif  // WS1_DEVICE_ONLY
