// Host side shared by the ws1_cuda entry points (torch headers; never included with WS1_DEVICE_ONLY):
// argument checks that name the op and the argument, the launch stream, and the self-report
// (CallScope: ws1_cuda::calls() counts each entry point that ran to completion, by the device's arch).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <string>

namespace ws1_cuda {

// Counts one call of `kernel_id` ("ws1_cuda::det_gemm") under the path "sm_<major><minor>" of the
// current device when the entry point returns normally (an entry point that raised did not run). An entry
// point with several kernels per arch names the one that ran: path("wgmma") counts under "sm_90:wgmma".
class CallScope {
 public:
  explicit CallScope(const char* kernel_id);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  void path(const char* kernel) { kernel_ = kernel; }  // a string literal

 private:
  const char* id_;
  int uncaught_;
  const char* kernel_ = nullptr;
};

std::string calls_json();  // {"ws1_cuda::det_gemm": {"sm_90:wgmma": 3}, "ws1_cuda::silu": {"sm_90": 2}, ...}

// ---- one-line argument checks ----------------------------------------------------------------------
inline void check_cuda(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got ", t.device());
}
inline void check_dtype(const at::Tensor& t, at::ScalarType want, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == want, op, ": ", name, " must be ", c10::toString(want), ", got ",
              c10::toString(t.scalar_type()));
}
inline void check_float(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be bfloat16 or float32, got ", c10::toString(t.scalar_type()));
}
inline void check_dim(const at::Tensor& t, int64_t dim, const char* op, const char* name) {
  TORCH_CHECK(t.dim() == dim, op, ": ", name, " must have rank ", dim, ", got shape ", t.sizes());
}
inline void check_contig(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
}
inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* name) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", name, " is on ", b.device(), ", expected ", a.device());
}

inline cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

// True while the current stream is being captured into a CUDA graph (a decode step, a benchmark). A
// device -> host copy cannot be captured, so the entry points then skip their host-side VALUE checks
// (token ids in range, positions >= 0, cu_seqlens / q_pos consistent) and rely on their kernels' own
// guards: an out-of-range index makes that output row NaN, never an out-of-bounds read. Shape, dtype and
// device checks need no copy and always run. Outside capture the one-line host errors stay.
inline bool capturing() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream(), &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

// After a launch: a launch error (bad configuration, missing sm image) is one line naming the op.
inline void check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  TORCH_CHECK(e == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(e));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Raw pointers: BF16 tensors as their 16-bit patterns (the kernels convert with ws1cu::bf16_f32 / bf16_rne).
inline const uint16_t* bf16_in(const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr()); }
inline uint16_t* bf16_out(at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr()); }

}  // namespace ws1_cuda
