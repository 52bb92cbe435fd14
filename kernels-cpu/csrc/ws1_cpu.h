// Shared helpers for the ws1_cpu kernels: the torch headers of a kernel file's host part, tensor access and
// argument checks, and (ws1_isa.h) ISA selection, ISA regions and BF16 <-> FP32.
//
// Files and chain nodes: one .cpp per KERNEL, not per node. A file registers (TORCH_LIBRARY_FRAGMENT)
// the entry points, forward and backward, of the nodes that run its one arithmetic; nodes that are the
// same arithmetic share the file, so they share the code, never a copy of it:
//   rms_norm.cpp    rms_norm, qk_norm            one row core; qk_norm's rows are [T*heads, D]
//   gemm.cpp        det_gemm, lm_head (+ gemm)   one FMA chain; lm_head keeps the FP32 accumulator
//   activation.cpp  swiglu, silu                 one template; silu is swiglu with up = 1.0f
//   logprob.cpp     logprob, batch_invariant_logp  one lse routine, one subtraction
//   embedding.cpp, rope.cpp, attention.cpp       one node each
// gemm.cpp holds the GEMM entry points and driver; its packing and per-ISA micro-kernels are in
// gemm_pack.cpp, gemm_uk_{scalar,avx2,avx512,avx512bf16}.cpp and gemm_amx.cpp (declared in gemm.h; they
// register no ops); bf16_probe.cpp registers the BF16-unit probe and the GEMM's negative control.
// isa.cpp holds the ISA selection and the self-report ops (ws1_cpu::isa, ws1_cpu::calls); module.cpp the
// (empty) Python module. A node's manifest "source" is the file that registers its entry point; the
// table is in kernels-cpu/README.md.
//
// Invariance rules every kernel in this folder follows (docs/design.md §7b):
//  * parallelism (at::parallel_for) only across independent outputs: rows, output tiles, heads;
//    never across a reduction axis, so the thread count cannot change bits;
//  * each reduction has one fixed order that depends only on the reduction length, never on the
//    number of rows, the row's position, or the tile the row falls in;
//  * every FMA is explicit (intrinsic or std::fma) and the build uses -ffp-contract=off, so the
//    scalar, AVX2 and AVX-512 paths execute the same IEEE operations and give the same bits.
#pragma once

// Build time: each .cpp is its own translation unit and parses its headers itself. These four are what a
// kernel file's host part uses (~7 s of compile per unit on a 2-core VM); <torch/extension.h> (every ATen
// operator, the C++ frontend, pybind11) was ~45 s per unit, most of the build. Do not include it here or
// in a kernel file: a file that calls another ATen operator includes that operator's own header
// (<ATen/ops/empty_like.h>, <ATen/ops/zeros.h>, ...); Tensor methods (.to, .contiguous, .zero_) come
// with <ATen/core/Tensor.h>. Files that touch no tensor include ws1_isa.h instead (the GEMM's packing
// and micro-kernels: no torch header at all); pybind11 is only in module.cpp.
#include <ATen/Parallel.h>     // at::parallel_for, at::get_num_threads
#include <ATen/core/Tensor.h>  // at::Tensor, TensorOptions, ScalarType, TORCH_CHECK
#include <ATen/ops/empty.h>    // at::empty (empty_output below)
#include <torch/library.h>     // TORCH_LIBRARY_FRAGMENT

#include "ws1_isa.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace ws1 {

// An output of at least 16 MiB about to be written for the first time: ask Linux for transparent huge
// pages on its 2 MiB-aligned interior (madvise MADV_HUGEPAGE, honoured where THP is "madvise" or
// "always") before the first touch. A vocabulary-sized gradient (151936 x 4096 FP32, 2.5 GB) is
// 610k page faults in 4 KiB pages -- about 2 s of kernel time on a 2-core VM, more than its GEMM --
// and 1.2k in 2 MiB pages. Where the layout lies in memory only; never a value. Failure is ignored
// (the pages are then ordinary ones). torch's own switch, THP_MEM_ALLOC_ENABLE=1, does this for every
// allocation of a process; this covers processes started without it.
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  at::Tensor t = at::empty(sizes, opts);
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const size_t bytes = t.nbytes();
  if (bytes >= (size_t(16) << 20)) {
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(t.data_ptr()) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(t.data_ptr()) + bytes) & ~(kHuge - 1);
    if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
  return t;
}

inline const uint16_t* bf16_ptr(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* bf16_ptr_mut(at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

// One-line argument checks; the message names the op and the argument.
#define WS1_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

inline void check_cpu(const at::Tensor& t, const char* op, const char* name) {
  WS1_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", t.device());
}

inline void check_dtype(const at::Tensor& t, at::ScalarType want, const char* op, const char* name) {
  WS1_CHECK(t.scalar_type() == want, op, ": ", name, " must be ", c10::toString(want), ", got ",
            c10::toString(t.scalar_type()));
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* op, const char* name) {
  WS1_CHECK(t.dim() == dim, op, ": ", name, " must have rank ", dim, ", got shape ", t.sizes());
}

}  // namespace ws1
