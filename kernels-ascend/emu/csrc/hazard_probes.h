// hazard_probes.h — small kernels that exercise the emulator's hazard checker (emu/include/ws1_emu_hazard.h), one
// planted mistake or its corrected form each, for kernels-ascend/tests/test_emu_hazards.py. Never WS1 kernels:
// registered as the test op ws1_ascend_emu::hazard_probe(name) only.
//
// Each probe is an Ascend C kernel body written against the same API the real kernels use, launched on one
// block. A probe whose name ends in "_ok" must run clean; every other one must fail with a hazard (or API
// misuse) message. "legacy_loadf32" is git HEAD~'s LoadF32 (ws1_ascend_kernel.h before the V->MTE2 fix)
// copied verbatim into a two-row loop of the shape rms_norm_dw / embedding_bwd / attention's PV loop had.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ws1_ascend_kernel.h"

namespace ws1probe {
using namespace AscendC;
using ws1a::kTile;

// ws1_ascend_kernel.h's LoadF32 before the fix: no V -> MTE2 wait before the copy-in.
template <class T>
__aicore__ inline void LegacyLoadF32(const LocalTensor<float>& dst, const LocalTensor<bfloat16_t>& stage,
                                     const GlobalTensor<T>& src, uint32_t n) {
  DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
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

struct Gm {  // host-side "GM" for a probe
  std::vector<float> a = std::vector<float>(4 * kTile, 1.5f), b = std::vector<float>(4 * kTile, 0.0f);
  std::vector<int64_t> ids = std::vector<int64_t>(64, 3);
  std::vector<float> out = std::vector<float>(16, 0.0f);
};

// dW-like accumulation over two rows: acc += row * 2, the row loaded by LOAD into one TBuf each time.
template <bool LEGACY>
__aicore__ inline void accumulate_rows(Gm& g) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> ab, rb, sb;
  pipe.InitBuffer(ab, 256 * sizeof(float));
  pipe.InitBuffer(rb, 256 * sizeof(float));
  pipe.InitBuffer(sb, 256 * sizeof(bfloat16_t));
  GlobalTensor<float> src, dst;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  dst.SetGlobalBuffer(g.b.data(), g.b.size());
  LocalTensor<float> acc = ab.Get<float>(), row = rb.Get<float>();
  LocalTensor<bfloat16_t> st = sb.Get<bfloat16_t>();
  Duplicate(acc, 0.0f, 256);
  for (int r = 0; r < 2; ++r) {
    if (LEGACY) LegacyLoadF32(row, st, src[r * 256], 256);
    else ws1a::LoadF32(row, st, src[r * 256], 256);
    Muls(row, row, 2.0f, 256);
    Add(acc, acc, row, 256);
  }
  ws1a::StoreF32(dst, acc, st, 256);
}

__aicore__ inline void copy_then_vector(Gm& g, bool flag) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb, yb;
  pipe.InitBuffer(xb, 256 * sizeof(float));
  pipe.InitBuffer(yb, 256 * sizeof(float));
  GlobalTensor<float> src;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  LocalTensor<float> x = xb.Get<float>(), y = yb.Get<float>();
  DataCopy(x, src, 256);
  if (flag) {  // the planted barrier's correct form: V waits for MTE2
    SetFlag<HardEvent::MTE2_V>(0);
    WaitFlag<HardEvent::MTE2_V>(0);
  }
  Adds(y, x, 1.0f, 256);
}

__aicore__ inline void two_copies(Gm& g, bool barrier) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb;
  pipe.InitBuffer(xb, 512 * sizeof(float));
  GlobalTensor<float> src;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  LocalTensor<float> x = xb.Get<float>();
  DataCopy(x, src, 256);
  if (barrier) PipeBarrier<PIPE_MTE2>();
  DataCopy(x[128], src[1024], 256);  // overlaps x[128, 256)
  PipeBarrier<PIPE_ALL>();
}

// A VECIN queue orders its own buffer, not a TBuf the same copy-in phase filled.
__aicore__ inline void queue_scope(Gm& g, bool read_tbuf) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inq;
  TBuf<TPosition::VECCALC> xb, yb;
  pipe.InitBuffer(inq, 1, 256 * sizeof(float));
  pipe.InitBuffer(xb, 256 * sizeof(float));
  pipe.InitBuffer(yb, 256 * sizeof(float));
  GlobalTensor<float> src;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  LocalTensor<float> q = inq.AllocTensor<float>(), x = xb.Get<float>(), y = yb.Get<float>();
  DataCopy(x, src, 256);
  DataCopy(q, src[256], 256);
  inq.EnQue(q);
  q = inq.DeQue<float>();
  Add(y, q, q, 256);
  if (read_tbuf) Add(y, x, q, 256);
  inq.FreeTensor(q);
}

// The classic VECIN -> compute -> VECOUT pipeline, three tiles through depth-1 queues: queues alone order it.
__aicore__ inline void queue_pipeline(Gm& g) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inq;
  TQue<TPosition::VECOUT, 1> outq;
  pipe.InitBuffer(inq, 1, 256 * sizeof(float));
  pipe.InitBuffer(outq, 1, 256 * sizeof(float));
  GlobalTensor<float> src, dst;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  dst.SetGlobalBuffer(g.b.data(), g.b.size());
  for (int t = 0; t < 3; ++t) {
    LocalTensor<float> in = inq.AllocTensor<float>();
    DataCopy(in, src[t * 256], 256);
    inq.EnQue(in);
    in = inq.DeQue<float>();
    LocalTensor<float> out = outq.AllocTensor<float>();
    Muls(out, in, 3.0f, 256);
    outq.EnQue(out);
    inq.FreeTensor(in);
    out = outq.DeQue<float>();
    DataCopy(dst[t * 256], out, 256);
    outq.FreeTensor(out);
  }
}

// Scalar <-> vector through UB: the compiler's auto-sync covers both directions.
__aicore__ inline void scalar_vector(Gm& g) {
  (void)g;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb;
  pipe.InitBuffer(xb, 64 * sizeof(float));
  LocalTensor<float> x = xb.Get<float>();
  x.SetValue(0, 2.0f);
  Adds(x, x, 1.0f, 64);
  (void)x.GetValue(0);
}

__aicore__ inline void scalar_gm_read(Gm& g, bool dcci) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  GlobalTensor<int64_t> ids;
  ids.SetGlobalBuffer(g.ids.data(), g.ids.size());
  if (dcci) ws1a::InvalidateScalarCache(ids);
  (void)ids.GetValue(5);
}

__aicore__ inline void flags(int mode) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  if (mode == 0) WaitFlag<HardEvent::V_MTE2>(1);  // never set: the pipe would block forever
  if (mode == 1) {                                  // set twice before the wait: undefined behaviour
    SetFlag<HardEvent::V_MTE2>(1);
    SetFlag<HardEvent::V_MTE2>(1);
  }
  if (mode == 2) SetFlag<HardEvent::V_MTE2>(1);  // never waited for
}

__aicore__ inline void reduce_in_place(Gm& g) {
  (void)g;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb, wb;
  pipe.InitBuffer(xb, 256 * sizeof(float));
  pipe.InitBuffer(wb, 64 * sizeof(float));
  LocalTensor<float> x = xb.Get<float>(), w = wb.Get<float>();
  Duplicate(x, 1.0f, 256);
  ReduceSum(x, x, w, 256);  // dst overlapping src: not documented as allowed
}

__aicore__ inline void vector_on_cube(Gm& g) {
  (void)g;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb;
  pipe.InitBuffer(xb, 64 * sizeof(float));
  Duplicate(xb.Get<float>(), 0.0f, 64);
}

__aicore__ inline void no_kernel_type(Gm& g) {
  (void)g;
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb;
  pipe.InitBuffer(xb, 64 * sizeof(float));
  Duplicate(xb.Get<float>(), 0.0f, 64);
}

// Two Mmads accumulating into one L0C: m x n = 16 x 16 is under the Cube's threshold ((m/16)*(n/16) < 10)
// and needs PipeBarrier<PIPE_M> between them; 64 x 128 does not.
template <class T>
__aicore__ inline void two_mmads(uint16_t m, uint16_t n, bool barrier, bool hf32_off) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  TPipe pipe;
  TQue<TPosition::A2, 1> qa;
  TQue<TPosition::B2, 1> qb;
  TQue<TPosition::CO1, 1> qc;
  constexpr uint16_t k = 32 / sizeof(T) * 2;
  pipe.InitBuffer(qa, 1, m * k * sizeof(T));
  pipe.InitBuffer(qb, 1, k * n * sizeof(T));
  pipe.InitBuffer(qc, 1, m * n * sizeof(float));
  if (hf32_off) SetHF32Mode(false);
  LocalTensor<T> a = qa.AllocTensor<T>(), b = qb.AllocTensor<T>();
  InitConstValue(a, InitConstValueParams<T>{1, static_cast<uint16_t>(m * k * sizeof(T) / 512), 0, T{}});
  InitConstValue(b, InitConstValueParams<T>{1, static_cast<uint16_t>(k * n * sizeof(T) / 512), 0, T{}});
  qa.EnQue(a);
  qb.EnQue(b);
  a = qa.DeQue<T>();
  b = qb.DeQue<T>();
  LocalTensor<float> c = qc.AllocTensor<float>();
  MmadParams mp;
  mp.m = m, mp.n = n, mp.k = k, mp.cmatrixInitVal = true;
  Mmad(c, a, b, mp);
  if (barrier) PipeBarrier<PIPE_M>();
  mp.cmatrixInitVal = false;
  Mmad(c, a, b, mp);
  qa.FreeTensor(a);
  qb.FreeTensor(b);
  qc.EnQue(c);
  c = qc.DeQue<float>();
  qc.FreeTensor(c);
}

// GM -> UB DataCopyPad of 5 floats with isPad = false: the rest of the 32-byte block is dummy data.
__aicore__ inline void dummy_tail(Gm& g) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  TBuf<TPosition::VECCALC> xb;
  pipe.InitBuffer(xb, 8 * sizeof(float));
  GlobalTensor<float> src, dst;
  src.SetGlobalBuffer(g.a.data(), g.a.size());
  dst.SetGlobalBuffer(g.out.data(), g.out.size());
  LocalTensor<float> x = xb.Get<float>();
  DataCopyPad(x, src, DataCopyExtParams{1, 5 * sizeof(float), 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
  PipeBarrier<PIPE_ALL>();
  DataCopy(dst, x, 8);  // the whole 32-byte block, tail included, for the test to look at
  PipeBarrier<PIPE_ALL>();
}

// ---- mixed (KERNEL_TYPE_MIX_AIC_1_2) probes: launched with ws1emu::launch_mix (names starting "mix_") ----------
// The AIC writes a 16 x 16 FP32 tile to a GM workspace slot with Fixpipe, twice; each AIV reads its 8 rows after the
// AIC's CrossCoreSetFlag<2, PIPE_FIX>(0) and gives the slot back with CrossCoreSetFlag<2, PIPE_MTE2>(1) — the
// protocol of the attention kernels. Each mode plants one mistake.
enum MixMode { MIX_OK, MIX_NO_WAIT, MIX_WRONG_PIPE, MIX_NO_FREE_WAIT, MIX_DEADLOCK, MIX_UNPAIRED };
template <MixMode MODE>
__aicore__ inline void mix_probe(Gm& g) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  GlobalTensor<float> ws;
  ws.SetGlobalBuffer(g.b.data(), 256);
  constexpr int kRounds = 2;
  if ASCEND_IS_AIC {
    TQue<TPosition::A2, 1> qa;
    TQue<TPosition::B2, 1> qb;
    TQue<TPosition::CO1, 1> qc;
    pipe.InitBuffer(qa, 1, 512);
    pipe.InitBuffer(qb, 1, 512);
    pipe.InitBuffer(qc, 1, 16 * 16 * sizeof(float));
    for (int r = 0; r < kRounds; ++r) {
      LocalTensor<bfloat16_t> a = qa.AllocTensor<bfloat16_t>(), b = qb.AllocTensor<bfloat16_t>();
      InitConstValue(a, InitConstValueParams<bfloat16_t>{1, 1, 0, bfloat16_t{}});
      InitConstValue(b, InitConstValueParams<bfloat16_t>{1, 1, 0, bfloat16_t{}});
      qa.EnQue(a), qb.EnQue(b);
      a = qa.DeQue<bfloat16_t>(), b = qb.DeQue<bfloat16_t>();
      LocalTensor<float> c = qc.AllocTensor<float>();
      MmadParams mp;
      mp.m = 16, mp.n = 16, mp.k = 16, mp.cmatrixInitVal = true;
      Mmad(c, a, b, mp);
      qa.FreeTensor(a), qb.FreeTensor(b);
      qc.EnQue(c);
      c = qc.DeQue<float>();
      if (r >= 1 && MODE != MIX_NO_FREE_WAIT) CrossCoreWaitFlag<2, PIPE_FIX>(1);  // the AIVs gave the slot back
      FixpipeParamsV220 fp;
      fp.nSize = 16, fp.mSize = 16, fp.srcStride = 16, fp.dstStride = 16;
      Fixpipe<float, float, CFG_ROW_MAJOR>(ws, c, fp);
      qc.FreeTensor(c);
      if (MODE == MIX_WRONG_PIPE) CrossCoreSetFlag<2, PIPE_M>(0);  // the Mmad is done, the Fixpipe maybe not
      else CrossCoreSetFlag<2, PIPE_FIX>(0);
    }
    if (MODE != MIX_NO_FREE_WAIT) CrossCoreWaitFlag<2, PIPE_FIX>(1);  // the last give-back
    if (MODE == MIX_UNPAIRED) CrossCoreSetFlag<2, PIPE_FIX>(7);      // nobody waits for it
  }
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> xb;
    pipe.InitBuffer(xb, 8 * 16 * sizeof(float));
    LocalTensor<float> x = xb.Get<float>();
    for (int r = 0; r < kRounds; ++r) {
      if (MODE == MIX_DEADLOCK) CrossCoreWaitFlag<2, PIPE_MTE2>(5);  // nobody sets it
      if (MODE != MIX_NO_WAIT) CrossCoreWaitFlag<2, PIPE_MTE2>(0);
      DataCopy(x, ws[GetSubBlockIdx() * 8 * 16], 8 * 16);
      CrossCoreSetFlag<2, PIPE_MTE2>(1);
      PipeBarrier<PIPE_ALL>();
      (void)x.GetValue(0);
    }
  }
}
// CrossCoreSetFlag in an AIV_ONLY kernel: no scheduling module carries it
__aicore__ inline void cross_flag_in_aiv_kernel(Gm& g) {
  (void)g;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  TPipe pipe;
  CrossCoreSetFlag<2, PIPE_MTE3>(0);
}
// LoadData with ifTranspose on FP32 data: b16 only
__aicore__ inline void transpose_fp32(Gm& g) {
  (void)g;
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  TPipe pipe;
  TQue<TPosition::B1, 1> q1;
  TQue<TPosition::B2, 1> q2;
  pipe.InitBuffer(q1, 1, 512);
  pipe.InitBuffer(q2, 1, 512);
  LocalTensor<float> a = q1.AllocTensor<float>();
  InitConstValue(a, InitConstValueParams<float>{1, 16, 0, 0.0f});
  q1.EnQue(a);
  a = q1.DeQue<float>();
  LocalTensor<float> b = q2.AllocTensor<float>();
  LoadData(b, a, LoadData2DParams{0, 1, 1, 0, 0, true, 0});
}

// name -> (probe, expected): "" = must run clean, else a substring of the expected failure
inline const std::map<std::string, std::pair<void (*)(Gm&), std::string>>& probes() {
  static const std::map<std::string, std::pair<void (*)(Gm&), std::string>> m = {
      {"copy_then_vector", {[](Gm& g) { copy_then_vector(g, false); }, "PIPE_MTE2 -> PIPE_V here (read after write)"}},
      {"copy_then_vector_ok", {[](Gm& g) { copy_then_vector(g, true); }, ""}},
      {"legacy_loadf32", {[](Gm& g) { accumulate_rows<true>(g); }, "PIPE_V -> PIPE_MTE2 here"}},
      {"loadf32_ok", {[](Gm& g) { accumulate_rows<false>(g); }, ""}},
      {"two_copies", {[](Gm& g) { two_copies(g, false); }, "PIPE_MTE2 -> PIPE_MTE2 here (write after write)"}},
      {"two_copies_ok", {[](Gm& g) { two_copies(g, true); }, ""}},
      {"queue_other_buffer", {[](Gm& g) { queue_scope(g, true); }, "PIPE_MTE2 -> PIPE_V here (read after write)"}},
      {"queue_own_buffer_ok", {[](Gm& g) { queue_scope(g, false); }, ""}},
      {"queue_pipeline_ok", {[](Gm& g) { queue_pipeline(g); }, ""}},
      {"scalar_vector_ok", {[](Gm& g) { scalar_vector(g); }, ""}},
      {"scalar_gm_read", {[](Gm& g) { scalar_gm_read(g, false); }, "no DataCacheCleanAndInvalid"}},
      {"scalar_gm_read_ok", {[](Gm& g) { scalar_gm_read(g, true); }, ""}},
      {"wait_without_set", {[](Gm&) { flags(0); }, "would wait forever"}},
      {"set_twice", {[](Gm&) { flags(1); }, "was not yet waited for"}},
      {"set_never_waited", {[](Gm&) { flags(2); }, "never waited for"}},
      {"reduce_in_place", {[](Gm& g) { reduce_in_place(g); }, "destination overlaps the source"}},
      {"vector_on_cube", {[](Gm& g) { vector_on_cube(g); }, "no such pipe"}},
      {"no_kernel_type", {[](Gm& g) { no_kernel_type(g); }, "KERNEL_TASK_TYPE_DEFAULT"}},
      {"small_mmads", {[](Gm&) { two_mmads<bfloat16_t>(16, 16, false, false); }, "PIPE_M -> PIPE_M here"}},
      {"small_mmads_ok", {[](Gm&) { two_mmads<bfloat16_t>(16, 16, true, false); }, ""}},
      {"big_mmads_ok", {[](Gm&) { two_mmads<bfloat16_t>(64, 128, false, false); }, ""}},
      {"fp32_mmad_hf32_unset", {[](Gm&) { two_mmads<float>(64, 128, false, false); }, "HF32"}},
      {"fp32_mmad_ok", {[](Gm&) { two_mmads<float>(64, 128, false, true); }, ""}},
      {"dummy_tail_ok", {[](Gm& g) { dummy_tail(g); }, ""}},
      {"mix_ok", {[](Gm& g) { mix_probe<MIX_OK>(g); }, ""}},
      {"mix_no_wait", {[](Gm& g) { mix_probe<MIX_NO_WAIT>(g); },
                       "no CrossCoreSetFlag/CrossCoreWaitFlag orders AIC PIPE_FIX -> AIV0 PIPE_MTE2 here (read after write)"}},
      {"mix_wrong_pipe", {[](Gm& g) { mix_probe<MIX_WRONG_PIPE>(g); },
                          "no CrossCoreSetFlag/CrossCoreWaitFlag orders AIC PIPE_FIX -> AIV0 PIPE_MTE2 here (read after write)"}},
      {"mix_no_free_wait", {[](Gm& g) { mix_probe<MIX_NO_FREE_WAIT>(g); }, "AIC PIPE_FIX Fixpipe L0C->GM"}},
      {"mix_deadlock", {[](Gm& g) { mix_probe<MIX_DEADLOCK>(g); }, "deadlock"}},
      {"mix_unpaired", {[](Gm& g) { mix_probe<MIX_UNPAIRED>(g); }, "CrossCoreSetFlag flagId 7"}},
      {"cross_flag_in_aiv_kernel", {[](Gm& g) { cross_flag_in_aiv_kernel(g); }, "not launched as KERNEL_TYPE_MIX_AIC_1_2"}},
      {"transpose_fp32", {[](Gm& g) { transpose_fp32(g); }, "ifTranspose supports b16 data only"}},
  };
  return m;
}
}  // namespace ws1probe
