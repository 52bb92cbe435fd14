// Host side of the sm_90a GEMM (torch; never included with WS1_DEVICE_ONLY): operands as the TMA path takes
// them, and the two entry shapes — the forward (det_gemm, lm_head) and the BF16 x BF16 backward GEMM.
//
// Layout: an operand is K-major when its reduction axis is contiguous (stride(1) == 1), else MN-major when
// its other axis is (stride(0) == 1), else it is copied to a contiguous (K-major) tensor. The layout is a
// property of the call site (x, a weight, a transposed view), never of the row count.
// Alignment (TMA: 16-byte base, leading dimension and contiguous extent): an operand that misses it is
// copied into a zero-padded buffer OF THE SAME LAYOUT (K-major [R, K8], MN-major [K8, R8]; K8, R8 rounded up
// to 8), and a C whose row is not a multiple of 16 bytes goes through a padded buffer. When K % 8 != 0 every
// operand is padded to K8: the instructions then see exactly the zeros that TMA's out-of-bounds fill would
// have given past K (k-tiles of 64, a multiple of 8), so a padded call has the same per-element sequence as
// an aligned one of the same K — alignment moves data, never a bit.
#pragma once

#include <string>
#include <utility>

#include "wgmma_gemm.h"
#include "ws1_cuda_host.h"

namespace ws1_cuda {
namespace wg {

using ws1cu::sm90::Major;

// True when the tensor's device runs the sm_90a kernels (compute capability 9.x). The attribute is read once
// per device (the CUDA runtime, not ATen/cuda/CUDAContext.h, whose cuSPARSE include this toolkit lacks).
inline bool on_sm90(const at::Tensor& t) {
  static int major[64] = {};  // 0: not read yet; a racing first read writes the same value
  const int dev = t.get_device();
  TORCH_CHECK(dev >= 0 && dev < 64, "ws1_cuda: device ordinal ", dev, " out of range");
  if (major[dev] == 0) {
    int m = 0;
    TORCH_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess,
                "ws1_cuda: cannot read the compute capability of device ", dev);
    major[dev] = m;
  }
  return major[dev] == 9;
}

struct Operand {
  at::Tensor t;   // what the kernel reads (the input, or an aligned padded copy)
  int64_t ld;     // leading dimension in elements
  Major major;
  int64_t rows;   // the M (A) or N (B) extent the kernel sees (R, or R8 for a padded MN-major copy)
};

inline bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// t: a logical [R, K] BF16 operand (K the reduction axis). K8: the K every operand is given (K rounded up
// to 8 when some operand's K is not a multiple of 8, else K). rmul: the row count the kernel sees must be a
// multiple of it (an MN-major operand's contiguous extent; B's N, which is C's contiguous extent).
inline Operand operand(const at::Tensor& t_in, int64_t K8, int64_t rmul) {
  const int64_t R = t_in.size(0), K = t_in.size(1), Rp = (R + rmul - 1) / rmul * rmul;
  at::Tensor t = t_in;
  Major mj;
  if (t.stride(1) == 1) {
    mj = Major::K;
  } else if (t.stride(0) == 1) {
    mj = Major::MN;
  } else {
    t = t.contiguous();
    mj = Major::K;
  }
  if (mj == Major::K) {
    // rows must not overlap (an expanded tensor has stride 0): TMA reads [R, ld] rows
    if (K == K8 && R == Rp && aligned16(t) && t.stride(0) % 8 == 0 && t.stride(0) >= K) return {t, t.stride(0), mj, R};
    at::Tensor buf = at::zeros({Rp, K8}, t.options());
    buf.narrow(0, 0, R).narrow(1, 0, K).copy_(t);
    return {buf, K8, mj, Rp};
  }
  const int64_t R8 = (Rp + 7) / 8 * 8;
  if (K == K8 && R == R8 && aligned16(t) && t.stride(1) % 8 == 0 && t.stride(1) >= R) return {t, t.stride(1), mj, R};
  at::Tensor buf = at::zeros({K8, R8}, t.options());  // physical [K8, R8]: R contiguous, as the input
  buf.narrow(0, 0, K).narrow(1, 0, R).copy_(t.t());
  return {buf, R8, mj, R8};
}

// The configurations by the names det_gemm_in_config takes (docs/cuda.md's): false for an unknown name.
inline bool config_named(const std::string& name, ws1cu::sm90::Config* out) {
  using ws1cu::sm90::Config;
  for (auto [n, c] : {std::pair{"narrow", Config::Narrow}, std::pair{"wide", Config::Wide},
                      std::pair{"narrow_n32", Config::NarrowN32}})
    if (name == n) {
      *out = c;
      return true;
    }
  return false;
}

// out[M, N] = a[M, K] @ b[N, K]^T on the sm_90a kernels; out is allocated by the caller (BF16 or FP32,
// contiguous). a, b: BF16 on out's device. `force`: a configuration instead of pick_config's (the tests and
// benchmarks of the configurations; nullptr for every op). Returns the configuration used.
inline ws1cu::sm90::Config run(const at::Tensor& a_in, const at::Tensor& b_in, at::Tensor& out, const char* op,
                               const ws1cu::sm90::Config* force = nullptr) {
  const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(0);
  const bool c_bf16 = out.scalar_type() == at::kBFloat16;
  const int64_t K8 = K % 8 ? (K + 7) / 8 * 8 : K;
  Operand a = operand(a_in, K8, 1), b = operand(b_in, K8, 8);
  if (a.major == Major::MN && b.major == Major::K) a = operand(a_in.contiguous(), K8, 1);  // not instantiated
  if (c_bf16 && (a.major != Major::K || b.major != Major::K)) {  // a BF16 C is instantiated K-major only
    a = operand(a_in.contiguous(), K8, 1);
    b = operand(b_in.contiguous(), K8, 8);
  }
  const bool direct = a.rows == M && b.rows == N && out.is_contiguous() && aligned16(out);
  at::Tensor c = direct ? out : at::empty({a.rows, b.rows}, out.options());
  ws1cu::sm90::GemmArgs g{a.t.data_ptr(), a.ld, a.major, b.t.data_ptr(), b.ld, b.major, c.data_ptr(), c.stride(0), c_bf16,
                          a.rows, b.rows, K8};
  ws1cu::sm90::Config cfg{};
  const char* err = ws1cu::sm90::gemm(g, out.get_device(), stream(), &cfg, force);
  TORCH_CHECK(err == nullptr, op, ": sm_90a GEMM: ", err ? err : "", " (M=", M, ", N=", N, ", K=", K, ")");
  check_launch(op);
  if (!direct) out.copy_(c.narrow(0, 0, M).narrow(1, 0, N));
  return cfg;
}

}  // namespace wg
}  // namespace ws1_cuda
