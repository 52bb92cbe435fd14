// ws1_ascend_kernel.h — what every WS1 Ascend C kernel shares: the fixed launch geometry, the fixed UB
// tile, the host-launcher macro, and the GM <-> UB helpers that turn a bf16 or fp32 tile into fp32.
//
// Compiled two ways: by CANN's bisheng (`-x asc --npu-arch=dav-2201`, kernel_operator.h from CANN) for
// Atlas A2/A3, and by g++ against WS1's emulator (kernels-ascend/emu/include/kernel_operator.h), which
// defines WS1_ASCEND_EMU. Nothing below depends on which.
//
// Invariance rules these constants carry (docs/numerics.md, docs/ascend.md):
//  * kTile (elements of one UB tile) and the Cube's baseM/baseN/baseK are compile-time constants: no
//    tile size, reduction length or split ever depends on the number of rows, tokens or the blockDim.
//  * Work items (rows, tokens, (query, head) pairs, output tiles, column tiles) go to cores by
//    item % GetBlockNum(); an item's instruction sequence never depends on which core runs it or on
//    how many items there are, so the launch's blockDim cannot change bits (the tests vary it).
//  * No atomics: every output element is written by exactly one core.
//
// Synchronization (docs/ascend.md, "Pipes and synchronization"): the vector core's pipes (PIPE_MTE2 GM->UB,
// PIPE_V, PIPE_MTE3 UB->GM, PIPE_S) run concurrently. The compiler's auto-sync orders S<->V, S<->MTE2, S<->MTE3
// and V->V by itself, nothing else; every other ordering below is written out: PipeBarrier<PIPE_ALL> after each
// transfer in the row kernels (they overlap nothing), and V->MTE2 before each copy-in (LoadF32). The Cube GEMM and
// the mixed attention kernels order their pipes with queues and flags (cube_gemm.h, attention.h).
#pragma once
#include "kernel_operator.h"
#include "ws1_ascend_launch.h"

namespace ws1a {
using namespace AscendC;

// Launch geometry: blockDim is the SoC's own core count, read by the host (ws1_ascend_ops.h, soc(): on an NPU
// CANN's PlatformAscendCManager GetCoreNumAic / GetCoreNumAiv — 24 / 48 on an Ascend910B2, 20 / 40 on an
// Ascend910B4): one block per AIV for vector kernels, per AIC for Cube kernels, per AI core (one AIC + two AIVs) for
// mixed ones. Items go to blocks by index mod blockDim, so the count never changes a work item's bits.

// One UB tile: 4096 fp32 elements (16 KiB). A row longer than that is processed in kTile pieces whose
// ReduceSum results are added in ascending tile order on the scalar unit.
constexpr uint32_t kTile = 4096;

// Round n up to a multiple of m.
__aicore__ inline uint32_t RoundUp(uint32_t n, uint32_t m) { return (n + m - 1) / m * m; }

// -inf from its IEEE-754 bit pattern: INFINITY (<cmath>) is not defined anywhere in the dav-2201 include
// chain of CANN's kernel_operator.h, and a kernel should not depend on a host header for it.
constexpr uint32_t kNegInfBits = 0xff800000u;
__aicore__ inline float F32FromBits(uint32_t bits) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = bits;
  return v.f;
}

// Every kernel that reads GM on the scalar unit (GlobalTensor::GetValue: ids, positions, rstd, lse, offsets,
// the attention backward's workspace) calls this first. Scalar GM reads go through the core's data cache, which
// nothing keeps coherent with GM written by DMA, by other cores or by earlier kernels ("DataCacheCleanAndInvalid",
// "Scalar读写数据"); dropping the whole cache once per launch, before the first such read, means no line from
// before this launch can be read. (No kernel scalar-reads GM that it writes itself.)
template <class T>
__aicore__ inline void InvalidateScalarCache(const GlobalTensor<T>& any) {
  DataCacheCleanAndInvalid<T, CacheLine::ENTIRE_DATA_CACHE, DcciDst::CACHELINE_OUT>(any);
}

// V -> MTE2: every vector instruction issued so far has finished (reading or writing its UB operands) before
// the next copy-in starts. The compiler's auto-sync does not cover this pair (it covers S<->V, S<->MTE2,
// S<->MTE3 and V->V only: "关键特性说明", table 3), and a TQue's flags cover that queue's buffers only.
__aicore__ inline void WaitVectorBeforeCopyIn() {
  const TEventID id = GetTPipePtr()->FetchEventID(HardEvent::V_MTE2);
  SetFlag<HardEvent::V_MTE2>(id);
  WaitFlag<HardEvent::V_MTE2>(id);
}

// GM -> UB: n elements of T at src, as fp32 in dst (bf16 is widened exactly by Cast CAST_NONE).
// stage: a bf16 scratch tile (unused for float). Synchronous: the copy-in first waits for the vector unit (the
// caller's Muls / Add / Mul / Cast may still be reading or writing dst or stage: a write-after-read race on the
// device, wrong numbers that change from run to run), and the PipeBarrier<PIPE_ALL> after each transfer makes
// the data visible to the vector unit (this first version does not overlap copy and compute; double
// buffering is a later, bit-neutral change).
template <class T>
__aicore__ inline void LoadF32(const LocalTensor<float>& dst, const LocalTensor<bfloat16_t>& stage,
                               const GlobalTensor<T>& src, uint32_t n) {
  DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
  WaitVectorBeforeCopyIn();
  if constexpr (std::is_same<T, float>::value) {
    DataCopyPad(dst, src, p, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    PipeBarrier<PIPE_ALL>();
  } else {
    DataCopyPad(stage, src, p, DataCopyPadExtParams<bfloat16_t>{false, 0, 0, bfloat16_t{}});
    PipeBarrier<PIPE_ALL>();
    Cast(dst, stage, RoundMode::CAST_NONE, n);
    PipeBarrier<PIPE_ALL>();
  }
}

// UB -> GM: n fp32 elements of src stored as T at dst (fp32 -> bf16 by Cast CAST_RINT: nearest even).
template <class T>
__aicore__ inline void StoreF32(const GlobalTensor<T>& dst, const LocalTensor<float>& src,
                                const LocalTensor<bfloat16_t>& stage, uint32_t n) {
  DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
  PipeBarrier<PIPE_ALL>();
  if constexpr (std::is_same<T, float>::value) {
    DataCopyPad(dst, src, p);
  } else {
    Cast(stage, src, RoundMode::CAST_RINT, n);
    PipeBarrier<PIPE_ALL>();
    DataCopyPad(dst, stage, p);
  }
  PipeBarrier<PIPE_ALL>();
}

// One fp32 scalar through the vector unit: f(x) with f one of Sqrt / Exp / Ln on a 8-lane (32-byte) tile.
// The scalar unit only adds, subtracts, multiplies and divides; transcendentals go through the vector unit
// so a value computed here and inside a vector loop gets the same instruction.
__aicore__ inline float VecExp1(const LocalTensor<float>& t, float x) {
  Duplicate(t, x, 8);
  PipeBarrier<PIPE_ALL>();
  Exp(t, t, 8);
  PipeBarrier<PIPE_ALL>();
  return t.GetValue(0);
}
__aicore__ inline float VecLn1(const LocalTensor<float>& t, float x) {
  Duplicate(t, x, 8);
  PipeBarrier<PIPE_ALL>();
  Ln(t, t, 8);
  PipeBarrier<PIPE_ALL>();
  return t.GetValue(0);
}
__aicore__ inline float VecSqrt1(const LocalTensor<float>& t, float x) {
  Duplicate(t, x, 8);
  PipeBarrier<PIPE_ALL>();
  Sqrt(t, t, 8);
  PipeBarrier<PIPE_ALL>();
  return t.GetValue(0);
}

// Store one fp32 scalar to GM (rstd, lse, logprob): a 4-byte DataCopyPad from an 8-lane UB tile.
__aicore__ inline void StoreScalar(const GlobalTensor<float>& dst, const LocalTensor<float>& t, float v) {
  t.SetValue(0, v);
  PipeBarrier<PIPE_ALL>();
  DataCopyPad(dst, t, DataCopyExtParams{1, 4, 0, 0, 0});
  PipeBarrier<PIPE_ALL>();
}
}  // namespace ws1a

// Host launcher: bisheng's <<<blockDim, l2ctrl, stream>>> kernel launch on the device; in the emulator a
// loop over block indices (ws1emu::launch), like CANN's CPU-debug ICPU_RUN_KF.
#ifdef WS1_ASCEND_EMU
namespace ws1emu {
template <class F>
struct Launcher {
  uint32_t n;
  F* f;
  const char* name;
  template <class... A>
  void operator()(A... a) const {
    launch(n, name, [&] { f(a...); });
  }
};
template <class F>
Launcher<F> launcher(uint32_t n, F* f, const char* name) { return {n, f, name}; }
template <class F>
struct MixLauncher {
  uint32_t n;
  F* f;
  const char* name;
  template <class... A>
  void operator()(A... a) const {
    launch_mix(n, name, [&] { f(a...); });
  }
};
template <class F>
MixLauncher<F> mix_launcher(uint32_t n, F* f, const char* name) { return {n, f, name}; }
}  // namespace ws1emu
#define WS1_KERNEL_CALL(kernel, block_dim, stream) ws1emu::launcher(block_dim, kernel, #kernel)
#define WS1_MIX_KERNEL_CALL(kernel, block_dim, stream) ws1emu::mix_launcher(block_dim, kernel, #kernel)
#else
#define WS1_KERNEL_CALL(kernel, block_dim, stream) kernel<<<block_dim, nullptr, stream>>>
// a KERNEL_TYPE_MIX_AIC_1_2 kernel: block_dim = the number of AI cores used (each one AIC + two AIVs)
#define WS1_MIX_KERNEL_CALL(kernel, block_dim, stream) kernel<<<block_dim, nullptr, stream>>>
#endif
