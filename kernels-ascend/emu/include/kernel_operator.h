// kernel_operator.h — WS1's host EMULATOR of the Ascend C API subset the kernels in ../../csrc use.
//
// NOT CANN. On an Atlas host the .asc sources include CANN's own kernel_operator.h and are compiled by
// bisheng; here the SAME sources compile with g++ against this header and run on CPU tensors, the role
// CANN's CPU-debug mode (ICPU_RUN_KF) plays where CANN exists. Emulated results are never ascend_bf16
// evidence (the emulator package reports family "ascend_emu").
//
// Each function names the Ascend C API reference page it follows (hiascend.com, "Ascend C operator development
// API", CANN 8.0.0: https://www.hiascend.com/document/detail/zh/canncommercial/800/apiref/ascendcopapi/
// atlasascendc_api_07_NNNN.html, and the same pages in CANN's public asc-devkit repository, docs/zh/api/...).
// A page id is given where it was checked against the stored page; ids move between CANN releases, the page
// TITLE (in quotes) is the stable name. Where the documentation does not fix an order or a rounding the
// emulator has to pick one; every such choice is marked ASSUMPTION and listed in docs/ascend.md ("What the
// emulator assumes"). The emulator also enforces the documented constraints it can check (32-byte alignment of
// DataCopy, buffer capacities of UB / L1 / L0A / L0B / L0C, queue depth, operand overlap), so a kernel that
// would be illegal on the device fails here too.
//
// PIPES: every instruction below runs on the pipe the API's page (and "API流水类型汇总.md") names, and goes
// through the hazard checker of ws1_emu_hazard.h: an access that no barrier, flag, queue or compiler auto-sync
// orders after a conflicting earlier one fails the kernel call. Each API takes one extra trailing, defaulted
// ws1emu::Where (the caller's file:line for those messages); kernels never pass it.
//
// Numerics: every vector instruction is emulated lane by lane with one IEEE fp32 (or exact integer)
// operation per element, compiled with -ffp-contract=off, so the emulated bits are the same on every x86-64
// host. Exp / Ln / Sqrt use the C library's correctly-rounded-or-nearly functions (expf, logf, sqrtf):
// ASSUMPTION — the NPU's transcendental units differ in the last bits; the emulator proves the kernels'
// ORDER logic (what is reduced with what, in which order, with which tile), not the NPU's bits.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ws1_emu_hazard.h"

// ---- the kernel-language qualifiers (bisheng's), as no-ops on the host ------------------------------------
#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR uint8_t*
#define WS1_ASCEND_EMU 1

// KernelMetaType / KERNEL_TASK_TYPE_DEFAULT ("设置Kernel类型.md"; the enum of asc-devkit impl/basic_api/utils/
// kernel_utils_macros.h): on the device a compile-time attribute; here it tells the hazard checker which pipes the
// core has and which syncs the compiler inserts (AIV only). KERNEL_TYPE_MIX_AIC_1_2 runs the kernel on one AIC and
// two AIVs per block ("numBlocks 10 -> 10 Cube and 20 Vector cores"); such a kernel is launched with
// WS1_MIX_KERNEL_CALL (ws1emu::launch_mix), and its body branches on ASCEND_IS_AIC / ASCEND_IS_AIV.
enum KernelMetaType : uint8_t {
  KERNEL_TYPE_AIV_ONLY,
  KERNEL_TYPE_AIC_ONLY,
  KERNEL_TYPE_MIX_AIV_1_0,
  KERNEL_TYPE_MIX_AIC_1_0,
  KERNEL_TYPE_MIX_AIC_1_1,
  KERNEL_TYPE_MIX_AIC_1_2
};
#define KERNEL_TASK_TYPE_DEFAULT(x) ::ws1emu::set_kernel_type(x)

namespace ws1emu {
// One emulated AI core's state while the launch loop runs its block (see launch() at the end).
struct Core {
  int64_t block_idx = 0, block_num = 1;
  bool mixed = false;   // this core belongs to a KERNEL_TYPE_MIX_AIC_1_2 launch
  int slot = 0;         // mixed: 0 the AIC, 1 / 2 the AIV of sub-block 0 / 1
  // byte arenas per on-chip buffer; capacities of Atlas A2 (dav-2201): UB 192 KiB, L1 512 KiB,
  // L0A 64 KiB, L0B 64 KiB, L0C 128 KiB (Ascend C "hardware architecture" / TPipe InitBuffer limits)
  std::vector<uint8_t> arena[5];
  size_t used[5] = {};
  void* tpipe = nullptr;  // the kernel's TPipe (GetTPipePtr)
  struct MixRun* run = nullptr;  // mixed: the block's scheduler
  Hazards hz;
};
// A mixed block's three cores run as three threads of which exactly one runs at any time (a baton): a core runs
// until it finishes or waits (CrossCoreWaitFlag) on a counter that is 0, then the next runnable core in the fixed
// order AIC, AIV0, AIV1 takes over. The schedule is deterministic, and since every cross-core exchange goes through
// GM ordered by the flags (which the hazard checker verifies), no bit can depend on it. No runnable core while some
// still wait is a deadlock: the device would hang, the emulator fails the call naming what each core waits for.
struct MixAbort {};
struct MixRun {
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  bool done[NCS] = {};
  int waiting[NCS] = {-1, -1, -1};
  bool abort = false;
  std::string err;
  Group group;
  const char* kernel = "";
  int64_t block = 0;
  // called with mu held by the core that gives up the turn
  void pass(int from) {
    for (int d = 1; d <= NCS; ++d) {
      const int s = (from + d) % NCS;
      if (done[s]) continue;
      if (waiting[s] < 0 || !group.ctr[s][waiting[s]].q.empty()) {
        turn = s;
        cv.notify_all();
        return;
      }
    }
    bool all = true;
    for (bool x : done) all = all && x;
    if (!all && !abort) {
      std::string w;
      for (int s = 0; s < NCS; ++s)
        if (!done[s]) w += std::string(w.empty() ? "" : ", ") + (s == 0 ? "the AIC" : s == 1 ? "AIV0" : "AIV1") +
                           " in CrossCoreWaitFlag(" + std::to_string(waiting[s]) + ")";
      err = "hazard in kernel '" + std::string(kernel) + "' (block " + std::to_string(block) +
            "): deadlock — no core can run: " + w + " with no CrossCoreSetFlag pending (the device would hang)";
      abort = true;
    }
    turn = -1;
    cv.notify_all();
  }
};
inline Core& core() {
  static thread_local Core c;
  return c;
}
inline Hazards& hz() { return core().hz; }
inline void set_kernel_type(KernelMetaType t) {
  Core& c = core();
  if (c.mixed) {
    if (t != KERNEL_TYPE_MIX_AIC_1_2)
      fail("a kernel launched as KERNEL_TYPE_MIX_AIC_1_2 (WS1_MIX_KERNEL_CALL) declares another kernel type");
    c.hz.kind = c.slot == 0 ? CK_AIC : CK_AIV;
    return;
  }
  if (t != KERNEL_TYPE_AIV_ONLY && t != KERNEL_TYPE_AIC_ONLY)
    fail("KERNEL_TYPE_MIX_* kernels must be launched with WS1_MIX_KERNEL_CALL (one AIC and two AIVs per block)");
  c.hz.kind = t == KERNEL_TYPE_AIC_ONLY ? CK_AIC : CK_AIV;
}
constexpr size_t kCap[5] = {192 * 1024, 512 * 1024, 64 * 1024, 64 * 1024, 128 * 1024};

// The operation counts of every kernel launched since the last reset, by kernel name (Counts, ws1_emu_hazard.h).
inline std::mutex& counts_mu() {
  static std::mutex m;
  return m;
}
inline std::map<std::string, Counts>& counts_registry() {
  static std::map<std::string, Counts> r;
  return r;
}
inline Counts* counts_for(const char* kernel, uint32_t blocks) {
  std::lock_guard<std::mutex> g(counts_mu());
  Counts& c = counts_registry()[kernel];
  ++c.launches;
  c.blocks += blocks;
  return &c;  // std::map nodes are stable
}
}  // namespace ws1emu

// ASCEND_IS_AIC / ASCEND_IS_AIV (asc-devkit impl/utils/sys_macros.h; in CANN's CPU-debug mode a runtime test of
// g_coreType, as here): which core of a mixed block runs this code.
#define ASCEND_IS_AIC (::ws1emu::core().hz.kind == ::ws1emu::CK_AIC)
#define ASCEND_IS_AIV (::ws1emu::core().hz.kind == ::ws1emu::CK_AIV)

// ---- data types -------------------------------------------------------------------------------------------
// bfloat16_t ("Cast" page, 0072: the bfloat16_t layout): 1 sign, 8 exponent, 7 mantissa bits. A GLOBAL type, as in
// the kernel language (a compiler built-in on the device; tikicpulib's kernel_bf16.h in CANN's CPU-debug mode):
// asc-devkit declares no AscendC::bfloat16_t, so the emulator does not either — a kernel that wrote it would fail
// here as under bisheng (docs/ascend.md, compile check finding F1).
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  static bfloat16_t from_bits(uint16_t b) {
    bfloat16_t r;
    r.bits = b;
    return r;
  }
};

namespace AscendC {
inline float bf16_to_float(bfloat16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;  // exact
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline bfloat16_t float_to_bf16_rint(float f) {  // round to nearest, ties to even; NaN kept quiet
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16_t::from_bits(static_cast<uint16_t>((u >> 16) | 0x40u));
  uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return bfloat16_t::from_bits(static_cast<uint16_t>(r >> 16));
}

// TPosition ("TPosition" page): where a LocalTensor lives.
enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, CO1, CO2 };
using QuePosition = TPosition;

// RoundMode ("Cast" page 0072 and the scalar "Cast" page 0018, CANN 9.0): CAST_NONE (exact widening), CAST_RINT (nearest even).
enum class RoundMode { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

// pipe_t / PipeBarrier ("PipeBarrier(ISASI)" page, asc-devkit docs/zh/api/SIMD-API/基础API/同步控制/核内同步/):
// PipeBarrier<p> makes every earlier instruction of pipe p complete before a later one of p starts;
// PipeBarrier<PIPE_ALL> waits for every earlier instruction of every pipe. PIPE_S is not allowed (the scalar
// unit is in order by itself).
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
template <pipe_t P>
inline void PipeBarrier(ws1emu::Where w = ws1emu::Where::here()) {
  static_assert(P != PIPE_S, "PipeBarrier does not support PIPE_S (PipeBarrier(ISASI).md)");
  if constexpr (P == PIPE_ALL) {
    ws1emu::hz().barrier_all();
  } else {
    ws1emu::hz().begin(P, "PipeBarrier", w);  // a pipe the core lacks is an error
    ws1emu::hz().barrier(P);
  }
}

// HardEvent / SetFlag / WaitFlag ("SetFlag-WaitFlag(ISASI)" page): event SRC_DST; SetFlag completes when every
// earlier SRC instruction has, WaitFlag blocks DST's later instructions until then. Pairs must match; a second
// SetFlag of one (event, id) before its WaitFlag is undefined behaviour. Event ids 0-7 on Atlas A2/A3.
enum class HardEvent : uint8_t {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, MTE3_MTE1, MTE1_MTE3, MTE2_M, M_MTE2,
  M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, FIX_S, M_S, MTE1_FIX, FIX_MTE1,
  MAX
};
using TEventID = int8_t;
inline void event_pipes(HardEvent e, int& src, int& dst) {
  using namespace ws1emu;
  static const int t[][2] = {
      {P_MTE2, P_MTE1}, {P_MTE1, P_MTE2}, {P_MTE1, P_M}, {P_M, P_MTE1}, {P_MTE2, P_V}, {P_V, P_MTE2},
      {P_MTE3, P_V}, {P_V, P_MTE3}, {P_MTE3, P_MTE1}, {P_MTE1, P_MTE3}, {P_MTE2, P_M}, {P_M, P_MTE2},
      {P_M, P_FIX}, {P_FIX, P_M}, {P_MTE3, P_MTE2}, {P_MTE2, P_MTE3}, {P_S, P_V}, {P_V, P_S},
      {P_S, P_MTE2}, {P_MTE2, P_S}, {P_S, P_MTE3}, {P_MTE3, P_S}, {P_FIX, P_S}, {P_M, P_S},
      {P_MTE1, P_FIX}, {P_FIX, P_MTE1}};
  src = t[static_cast<int>(e)][0], dst = t[static_cast<int>(e)][1];
}
template <HardEvent E>
inline void SetFlag(int32_t id, ws1emu::Where w = ws1emu::Where::here()) {
  if (id < 0 || id > 7) ws1emu::fail("SetFlag: event id must be in [0, 7] on Atlas A2/A3");
  int s, d;
  event_pipes(E, s, d);
  ws1emu::hz().set_flag(static_cast<int>(E), id, s, d, nullptr, w, "SetFlag");
}
template <HardEvent E>
inline void WaitFlag(int32_t id, ws1emu::Where w = ws1emu::Where::here()) {
  if (id < 0 || id > 7) ws1emu::fail("WaitFlag: event id must be in [0, 7] on Atlas A2/A3");
  int s, d;
  event_pipes(E, s, d);
  ws1emu::hz().wait_flag(static_cast<int>(E), id, s, d, nullptr, w, "WaitFlag");
}

// CrossCoreSetFlag<modeId, pipe>(flagId) / CrossCoreWaitFlag<modeId, pipe>(flagId) (asc-devkit docs/zh/api/SIMD-API/
// 基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md, CrossCoreWaitFlag(ISASI).md, 关键特性说明.md;
// include/basic_api/kernel_operator_block_sync_intf.h): mode 2 only (one AI core: the AIC's set releases both AIVs'
// waits, the AIC's wait needs both AIVs' sets), flagId 0-15, the set's pipe one of V / M / MTE1 / MTE2 / MTE3 / FIX
// (not S, not ALL). Only in KERNEL_TYPE_MIX_* kernels (AIV_ONLY / AIC_ONLY start no scheduling module). On A2/A3 the
// wait's template arguments have no effect: it blocks every pipe of the waiting core.
template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId, ws1emu::Where w = ws1emu::Where::here()) {
  static_assert(modeId == 2, "the emulator implements CrossCoreSetFlag mode 2 (AIC <-> AIVs of one AI core) only");
  static_assert(pipe != PIPE_S && pipe != PIPE_ALL, "CrossCoreSetFlag: PIPE_S and PIPE_ALL are not supported");
  if (flagId > 15) ws1emu::fail("CrossCoreSetFlag: flagId must be in [0, 15] in mode 2");
  ws1emu::hz().cross_set(static_cast<int>(pipe), flagId, w);
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId, ws1emu::Where w = ws1emu::Where::here()) {
  static_assert(modeId == 2, "the emulator implements CrossCoreWaitFlag mode 2 (AIC <-> AIVs of one AI core) only");
  if (flagId > 15) ws1emu::fail("CrossCoreWaitFlag: flagId must be in [0, 15] in mode 2");
  auto& c = ws1emu::core();
  if (!c.mixed || !c.run)
    c.hz.error(std::string("CrossCoreWaitFlag (") + ws1emu::base_name(w.file) + ":" + std::to_string(w.line) +
               ") in a kernel not launched as KERNEL_TYPE_MIX_AIC_1_2");
  const auto i = c.hz.begin(ws1emu::P_S, "CrossCoreWaitFlag", w);
  c.hz.end(i);
  ws1emu::MixRun& r = *c.run;
  std::unique_lock<std::mutex> lk(r.mu);
  if (c.hz.cross_try_wait(flagId)) return;
  r.waiting[c.slot] = flagId;
  r.pass(c.slot);
  r.cv.wait(lk, [&] { return r.turn == c.slot || r.abort; });
  if (r.abort) throw ws1emu::MixAbort{};
  r.waiting[c.slot] = -1;
  if (!c.hz.cross_try_wait(flagId)) ws1emu::fail("emulator: a core resumed with no flag pending");
}

// GetBlockIdx / GetBlockNum / GetSubBlockIdx / GetTaskRatio (asc-devkit docs/zh/api/SIMD-API/基础API/工具接口/
// 系统资源与变量/): GetBlockNum is the launch's numBlocks on every core; in a MIX_AIC_1_2 launch the AIC's block index
// is in [0, numBlocks) and an AIV's in [0, 2 numBlocks) (block * 2 + sub-block), GetSubBlockIdx is 0 / 1 on the two
// AIVs, GetTaskRatio 1 on the AIC and 2 on an AIV (1 in AIV_ONLY / AIC_ONLY launches).
inline int64_t GetBlockIdx() {
  const auto& c = ws1emu::core();
  return c.mixed && c.slot > 0 ? c.block_idx * 2 + (c.slot - 1) : c.block_idx;
}
inline int64_t GetBlockNum() { return ws1emu::core().block_num; }
inline int64_t GetSubBlockIdx() {
  const auto& c = ws1emu::core();
  return c.mixed && c.slot > 0 ? c.slot - 1 : 0;
}
inline int64_t GetTaskRatio() {
  const auto& c = ws1emu::core();
  return c.mixed && c.slot > 0 ? 2 : 1;
}

// ---- where a pointer lives (the emulator's own bookkeeping) ------------------------------------------------
namespace detail {
inline int arena_of(TPosition pos) {
  switch (pos) {
    case TPosition::VECIN: case TPosition::VECOUT: case TPosition::VECCALC: return ws1emu::SP_UB;
    case TPosition::A1: case TPosition::B1: return ws1emu::SP_L1;
    case TPosition::A2: return ws1emu::SP_L0A;
    case TPosition::B2: return ws1emu::SP_L0B;
    case TPosition::CO1: return ws1emu::SP_L0C;
    default: ws1emu::fail("a LocalTensor on an unsupported TPosition");
  }
}
// (space, byte offset inside the space) of an on-chip pointer
inline uint64_t offset_in(int space, const void* p) {
  const auto& a = ws1emu::core().arena[space];
  const uint8_t* b = static_cast<const uint8_t*>(p);
  if (a.empty() || b < a.data() || b > a.data() + a.size()) ws1emu::fail("a LocalTensor outside its on-chip buffer");
  return static_cast<uint64_t>(b - a.data());
}
}  // namespace detail

// ---- tensors ----------------------------------------------------------------------------------------------
// GlobalTensor ("GlobalTensor" page): SetGlobalBuffer, operator[], GetValue (PIPE_S, through the core's data
// cache: see DataCacheCleanAndInvalid below).
template <class T>
class GlobalTensor {
 public:
  void SetGlobalBuffer(__gm__ T* buffer, uint64_t size) { p_ = buffer, n_ = size; }
  void SetGlobalBuffer(__gm__ T* buffer) { p_ = buffer, n_ = UINT64_MAX; }
  GlobalTensor operator[](uint64_t off) const {
    if (n_ != UINT64_MAX && off > n_) ws1emu::fail("GlobalTensor offset past its SetGlobalBuffer size");
    GlobalTensor r;
    r.p_ = p_ + off;
    r.n_ = n_ == UINT64_MAX ? n_ : n_ - off;
    return r;
  }
  T GetValue(uint64_t i, ws1emu::Where w = ws1emu::Where::here()) const {
    check(i);
    auto& h = ws1emu::hz();
    ws1emu::Instr ins = h.begin(ws1emu::P_S, "GlobalTensor::GetValue", w);
    const uint64_t a = addr(i);
    if (!h.dcci)
      h.error("PIPE_S GlobalTensor::GetValue (" + std::string(ws1emu::base_name(w.file)) + ":" +
              std::to_string(w.line) +
              ") reads GM through the core's data cache with no DataCacheCleanAndInvalid in this kernel: the cache "
              "may hold a line of these bytes from before this launch (DataCacheCleanAndInvalid.md)");
    auto& gm = h.shadow[ws1emu::SP_GM];
    auto it = gm.upper_bound(a + sizeof(T) - 1);
    if (it != gm.begin()) {
      --it;
      if (it->second.hi > a && it->second.s.has_w && it->second.s.w.gseq > h.dcci_gseq)
        h.error("PIPE_S GlobalTensor::GetValue (" + std::string(ws1emu::base_name(w.file)) + ":" +
                std::to_string(w.line) + ") reads GM bytes " + ws1emu::describe(it->second.s.w) +
                " wrote after the kernel's last DataCacheCleanAndInvalid");
    }
    h.access(ins, ws1emu::SP_GM, a, a + sizeof(T), false);
    h.end(ins);
    return p_[i];
  }
  // GlobalTensor::SetValue writes the data cache, not GM, until a DataCacheCleanAndInvalid: not emulated.
  __gm__ T* GetPhyAddr() const { return p_; }
  uint64_t GetSize() const { return n_; }
  void check(uint64_t i) const {
    if (n_ != UINT64_MAX && i >= n_) ws1emu::fail("GlobalTensor access past its SetGlobalBuffer size");
  }
  // the emulator's own element access (no instruction)
  T* raw() const { return p_; }
  uint64_t addr(uint64_t i) const { return reinterpret_cast<uint64_t>(p_ + i); }

 private:
  T* p_ = nullptr;
  uint64_t n_ = 0;
};

// LocalTensor ("LocalTensor" page): a view of an on-chip buffer; operator[] offsets in elements. GetValue /
// SetValue are PIPE_S and reach UB only (the scalar unit cannot address L1 / L0: "Scalar读写数据.md").
template <class T>
class LocalTensor {
 public:
  LocalTensor() = default;
  LocalTensor(T* p, uint32_t n, TPosition pos) : p_(p), n_(n), pos_(pos) {}
  LocalTensor operator[](uint32_t off) const {
    if (off > n_) ws1emu::fail("LocalTensor offset past its buffer");
    return LocalTensor(p_ + off, n_ - off, pos_);
  }
  T GetValue(uint32_t i, ws1emu::Where w = ws1emu::Where::here()) const {
    scalar(i, false, "LocalTensor::GetValue", w);
    return p_[i];
  }
  void SetValue(uint32_t i, T v, ws1emu::Where w = ws1emu::Where::here()) const {
    scalar(i, true, "LocalTensor::SetValue", w);
    p_[i] = v;
  }
  uint32_t GetSize() const { return n_; }
  TPosition GetPosition() const { return pos_; }
  template <class U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>(reinterpret_cast<U*>(p_), static_cast<uint32_t>(n_ * sizeof(T) / sizeof(U)), pos_);
  }
  void check(uint32_t i) const {
    if (i >= n_) ws1emu::fail("LocalTensor access past its buffer");
  }
  // the emulator's own view: raw pointer, space, byte offset of element i
  T* raw() const { return p_; }
  int space() const { return detail::arena_of(pos_); }
  uint64_t off(uint64_t i = 0) const { return detail::offset_in(space(), p_) + i * sizeof(T); }

 private:
  void scalar(uint32_t i, bool write, const char* name, const ws1emu::Where& w) const {
    check(i);
    if (space() != ws1emu::SP_UB) ws1emu::fail(std::string(name) + ": the scalar unit reaches UB only");
    auto& h = ws1emu::hz();
    ws1emu::Instr ins = h.begin(ws1emu::P_S, name, w);
    h.access(ins, ws1emu::SP_UB, off(i), off(i + 1), write);
    h.end(ins);
  }
  T* p_ = nullptr;
  uint32_t n_ = 0;
  TPosition pos_ = TPosition::VECCALC;
};

// ---- TPipe / TQue / TBuf ("TPipe", "TQue", "TBuf" pages; InitBuffer, AllocTensor, EnQue, DeQue, FreeTensor, Get) ----------------------
namespace detail {
inline uint8_t* arena_alloc(TPosition pos, size_t bytes, ws1emu::Region** region, const std::string& name,
                            bool queue) {
  auto& c = ws1emu::core();
  const int s = arena_of(pos);
  // a mixed (Cube + Vector) kernel may use 256 bytes less of UB and of L1: the framework reserves them
  // ("NPU架构版本2201.md", 存储单元规格)
  const size_t cap = ws1emu::kCap[s] - (c.mixed && (s == ws1emu::SP_UB || s == ws1emu::SP_L1) ? 256 : 0);
  if (c.arena[s].size() != ws1emu::kCap[s]) c.arena[s].assign(ws1emu::kCap[s], 0xA5);  // garbage, never zeros
  size_t aligned = (bytes + 31) / 32 * 32;                      // buffers are 32-byte aligned
  if (c.used[s] + aligned > cap)
    ws1emu::fail("InitBuffer exceeds the on-chip buffer (" + std::to_string(c.used[s] + aligned) + " > " +
                 std::to_string(cap) + " bytes)");
  uint8_t* p = c.arena[s].data() + c.used[s];
  auto r = std::make_unique<ws1emu::Region>();
  r->space = s, r->lo = c.used[s], r->hi = c.used[s] + aligned, r->queue = queue;
  r->name = name + " (" + ws1emu::space_name(s) + "+0x" + [&] {
    char b[32];
    std::snprintf(b, sizeof b, "%zx", c.used[s]);
    return std::string(b);
  }() + ", " + std::to_string(aligned) + " B)";
  *region = r.get();
  c.hz.regions.push_back(std::move(r));
  c.used[s] += aligned;
  return p;
}
// A TQue's two flags, from its position ("TQue" page; the queue events of asc-devkit impl/basic_api/kernel_event.h
// GetQueEvt): EnQue sets producer->consumer, DeQue waits for it; FreeTensor sets consumer->producer, AllocTensor
// waits for it.
inline void queue_events(TPosition pos, HardEvent& enq, HardEvent& fre) {
  switch (pos) {
    case TPosition::VECIN: enq = HardEvent::MTE2_V, fre = HardEvent::V_MTE2; return;
    case TPosition::VECOUT: enq = HardEvent::V_MTE3, fre = HardEvent::MTE3_V; return;
    case TPosition::A1: case TPosition::B1: enq = HardEvent::MTE2_MTE1, fre = HardEvent::MTE1_MTE2; return;
    case TPosition::A2: case TPosition::B2: enq = HardEvent::MTE1_M, fre = HardEvent::M_MTE1; return;
    case TPosition::CO1: enq = HardEvent::M_FIX, fre = HardEvent::FIX_M; return;
    default: ws1emu::fail("TQue on a position with no queue events (VECCALC is for TBuf)");
  }
}
}  // namespace detail

class TPipe {
 public:
  TPipe() {  // a kernel owns one TPipe: its construction starts the core's buffers afresh
    auto& c = ws1emu::core();
    if (c.tpipe) ws1emu::fail("a second TPipe in one kernel");
    for (auto& u : c.used) u = 0;
    c.tpipe = this;
  }
  template <class Q>
  void InitBuffer(Q& q, int32_t num, uint32_t len) { q.init(num, len); }
  template <class B>
  void InitBuffer(B& b, uint32_t len) { b.init(len); }
  // AllocEventID / ReleaseEventID / FetchEventID ("AllocEventID", "FetchEventID" pages): ids 0-7 per HardEvent;
  // Alloc occupies one until Release, Fetch returns a free one without occupying it.
  template <HardEvent E>
  TEventID AllocEventID() { return alloc_id(E); }
  template <HardEvent E>
  void ReleaseEventID(TEventID id) { busy_[static_cast<int>(E)][id] = false; }
  template <HardEvent E>
  TEventID FetchEventID() { return FetchEventID(E); }
  TEventID FetchEventID(HardEvent e) {
    for (int i = 0; i < 8; ++i)
      if (!busy_[static_cast<int>(e)][i]) return static_cast<TEventID>(i);
    ws1emu::fail("FetchEventID: every event id of this HardEvent is allocated");
  }
  TEventID alloc_id(HardEvent e) {
    const TEventID i = FetchEventID(e);
    busy_[static_cast<int>(e)][i] = true;
    return i;
  }
  void release_id(HardEvent e, TEventID i) { busy_[static_cast<int>(e)][i] = false; }

 private:
  bool busy_[static_cast<int>(HardEvent::MAX)][8] = {};
};
}  // namespace AscendC

// GetTPipePtr (kernel_common.h): the kernel's TPipe.
inline AscendC::TPipe* GetTPipePtr() {
  auto* p = static_cast<AscendC::TPipe*>(ws1emu::core().tpipe);
  if (!p) ws1emu::fail("GetTPipePtr before the kernel's TPipe exists");
  return p;
}

namespace AscendC {
template <TPosition POS, int32_t DEPTH>
class TQue {
 public:
  void init(int32_t num, uint32_t len) {
    if (num < 1 || num > 8) ws1emu::fail("TQue InitBuffer: num must be in [1, 8]");
    detail::queue_events(POS, enq_, fre_);
    event_pipes(enq_, prod_, cons_);
    len_ = len;
    for (int32_t i = 0; i < num; ++i) {
      Buf b;
      b.p = detail::arena_alloc(POS, len, &b.r, "TQue buffer #" + std::to_string(bufs_.size()), true);
      bufs_.push_back(b);
      free_.push_back(static_cast<int>(bufs_.size()) - 1);
    }
  }
  template <class T>
  LocalTensor<T> AllocTensor(ws1emu::Where w = ws1emu::Where::here()) {
    if (free_.empty()) ws1emu::fail("TQue AllocTensor with every buffer in use (missing FreeTensor?)");
    const int i = free_.front();
    free_.pop_front();
    Buf& b = bufs_[i];
    if (b.free_id >= 0) {  // wait until the consumer has finished with this buffer
      ws1emu::hz().wait_flag(static_cast<int>(fre_), b.free_id, cons_, prod_, b.r, w, "TQue::AllocTensor");
      GetTPipePtr()->release_id(fre_, b.free_id);
      b.free_id = -1;
    }
    return LocalTensor<T>(reinterpret_cast<T*>(b.p), static_cast<uint32_t>(len_ / sizeof(T)), POS);
  }
  template <class T>
  void EnQue(const LocalTensor<T>& t, ws1emu::Where w = ws1emu::Where::here()) {
    if (static_cast<int32_t>(queued_.size()) >= DEPTH) ws1emu::fail("TQue EnQue beyond the queue depth");
    const int i = find(t.raw());
    Buf& b = bufs_[i];
    b.enq_id = GetTPipePtr()->alloc_id(enq_);
    ws1emu::hz().set_flag(static_cast<int>(enq_), b.enq_id, prod_, cons_, b.r, w, "TQue::EnQue");
    queued_.push_back(i);
  }
  template <class T>
  LocalTensor<T> DeQue(ws1emu::Where w = ws1emu::Where::here()) {
    if (queued_.empty()) ws1emu::fail("TQue DeQue on an empty queue");
    const int i = queued_.front();
    queued_.pop_front();
    Buf& b = bufs_[i];
    ws1emu::hz().wait_flag(static_cast<int>(enq_), b.enq_id, prod_, cons_, b.r, w, "TQue::DeQue");
    GetTPipePtr()->release_id(enq_, b.enq_id);
    b.enq_id = -1;
    return LocalTensor<T>(reinterpret_cast<T*>(b.p), static_cast<uint32_t>(len_ / sizeof(T)), POS);
  }
  template <class T>
  void FreeTensor(const LocalTensor<T>& t, ws1emu::Where w = ws1emu::Where::here()) {
    const int i = find(t.raw());
    Buf& b = bufs_[i];
    b.free_id = GetTPipePtr()->alloc_id(fre_);
    ws1emu::hz().set_flag(static_cast<int>(fre_), b.free_id, cons_, prod_, b.r, w, "TQue::FreeTensor");
    free_.push_back(i);
  }

 private:
  struct Buf {
    uint8_t* p = nullptr;
    ws1emu::Region* r = nullptr;
    TEventID enq_id = -1, free_id = -1;
  };
  template <class T>
  int find(T* p) const {
    for (size_t i = 0; i < bufs_.size(); ++i)
      if (reinterpret_cast<uint8_t*>(p) == bufs_[i].p) return static_cast<int>(i);
    ws1emu::fail("TQue: a tensor that is not one of this queue's buffers");
  }
  uint32_t len_ = 0;
  HardEvent enq_ = HardEvent::MAX, fre_ = HardEvent::MAX;
  int prod_ = 0, cons_ = 0;
  std::vector<Buf> bufs_;
  std::deque<int> free_, queued_;
};

template <TPosition POS>
class TBuf {
 public:
  void init(uint32_t len) {
    ws1emu::Region* r = nullptr;
    p_ = detail::arena_alloc(POS, len, &r, "TBuf #" + std::to_string(ws1emu::hz().regions.size()), false);
    len_ = len;
  }
  template <class T>
  LocalTensor<T> Get() const { return LocalTensor<T>(reinterpret_cast<T*>(p_), len_ / sizeof(T), POS); }
  template <class T>
  LocalTensor<T> Get(uint32_t n) const {
    if (n * sizeof(T) > len_) ws1emu::fail("TBuf Get beyond its buffer");
    return LocalTensor<T>(reinterpret_cast<T*>(p_), n, POS);
  }

 private:
  uint8_t* p_ = nullptr;
  uint32_t len_ = 0;
};

// ---- the hazard checker's view of operands ------------------------------------------------------------------
namespace detail {
inline ws1emu::Instr issue(int pipe, const char* name, const ws1emu::Where& w, bool big = false) {
  return ws1emu::hz().begin(pipe, name, w, big);
}
// Vector instructions read and write UB at 32-byte-aligned addresses ("NPU架构版本2201.md", 存储单元规格: "Vector计算单元
// 的数据来自于Unified Buffer，要求32字节对齐"): an operand starting elsewhere is refused.
template <class T>
inline void vaddr(const char* name, const LocalTensor<T>& t) {
  if (t.space() == ws1emu::SP_UB && t.off() % 32 != 0)
    ws1emu::fail(std::string(name) + ": a vector operand at UB offset " + std::to_string(t.off()) +
                 " (vector instructions need 32-byte-aligned UB addresses)");
}
// the emulator's operation counts (ws1emu::Counts): vector element-operations, Cube MACs
inline void count_vec(uint64_t n) {
  if (auto* c = ws1emu::hz().counts) c->vec_elems += n;
}
inline void count_macs(uint64_t n) {
  if (auto* c = ws1emu::hz().counts) c->mmad_macs += n;
}
template <class T>
inline void rd(const ws1emu::Instr& i, const LocalTensor<T>& t, uint64_t n) {
  ws1emu::hz().access(i, t.space(), t.off(), t.off(n), false);
}
template <class T>
inline void wr(const ws1emu::Instr& i, const LocalTensor<T>& t, uint64_t n) {
  ws1emu::hz().access(i, t.space(), t.off(), t.off(n), true);
}
template <class T>
inline void gm_rd(const ws1emu::Instr& i, const GlobalTensor<T>& g, uint64_t first, uint64_t n) {
  ws1emu::hz().access(i, ws1emu::SP_GM, g.addr(first), g.addr(first + n), false);
}
template <class T>
inline void gm_wr(const ws1emu::Instr& i, const GlobalTensor<T>& g, uint64_t first, uint64_t n) {
  ws1emu::hz().access(i, ws1emu::SP_GM, g.addr(first), g.addr(first + n), true);
}
// "通用地址重叠约束" (通用说明和约束.md): a source either IS the destination (same start, same extent) or does not
// overlap it; a partial overlap is not supported.
template <class D, class S>
inline void same_or_apart(const char* name, const LocalTensor<D>& d, uint64_t nd, const LocalTensor<S>& s,
                          uint64_t ns) {
  if (d.space() != s.space()) return;
  const uint64_t a0 = d.off(), a1 = d.off(nd), b0 = s.off(), b1 = s.off(ns);
  if (a0 < b1 && b0 < a1 && !(a0 == b0 && a1 == b1))
    ws1emu::fail(std::string(name) + ": source and destination partially overlap (not supported, "
                 "通用地址重叠约束)");
}
template <class D, class S>
inline void apart(const char* name, const LocalTensor<D>& d, uint64_t nd, const LocalTensor<S>& s, uint64_t ns,
                  const char* what) {
  if (d.space() != s.space()) return;
  if (d.off() < s.off(ns) && s.off() < d.off(nd)) ws1emu::fail(std::string(name) + ": " + what);
}
}  // namespace detail

// ---- data movement ---------------------------------------------------------------------------------------
// DataCopy, contiguous ("基础数据搬运" / basic DataCopy page): GM -> UB on PIPE_MTE2, UB -> GM on PIPE_MTE3, count
// elements, count*sizeof(T) a multiple of 32 bytes (the documented constraint; DataCopyPad is for the rest).
template <class T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count,
                     ws1emu::Where w = ws1emu::Where::here()) {
  if ((count * sizeof(T)) % 32 != 0) ws1emu::fail("DataCopy GM->UB length not a multiple of 32 bytes");
  if (count > dst.GetSize()) ws1emu::fail("DataCopy past the local buffer");
  const auto i = detail::issue(ws1emu::P_MTE2, "DataCopy GM->UB", w);
  detail::gm_rd(i, src, 0, count);
  detail::wr(i, dst, count);
  for (uint32_t k = 0; k < count; ++k) src.check(k), dst.raw()[k] = src.raw()[k];
}
template <class T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count,
                     ws1emu::Where w = ws1emu::Where::here()) {
  if ((count * sizeof(T)) % 32 != 0) ws1emu::fail("DataCopy UB->GM length not a multiple of 32 bytes");
  if (count > src.GetSize()) ws1emu::fail("DataCopy past the local buffer");
  const auto i = detail::issue(ws1emu::P_MTE3, "DataCopy UB->GM", w);
  detail::rd(i, src, count);
  detail::gm_wr(i, dst, 0, count);
  for (uint32_t k = 0; k < count; ++k) dst.check(k), dst.raw()[k] = src.raw()[k];
}

// DataCopyPad ("DataCopyPad(ISASI)" page 0265; asc-devkit "DataCopyPad（GMToUB非对齐数据搬运）.md", Atlas A2):
// blockCount blocks of blockLen BYTES; on the UB side every block starts on a 32-byte boundary (the UB address
// must be 32-byte aligned); srcStride/dstStride: gap between blocks, in bytes on the GM side and in 32-byte
// units on the UB side. GM->UB (PIPE_MTE2) pads each block to 32 bytes: with paddingValue when isPad, else with
// "dummy" data the hardware chooses (the page: the block's first element when left/right padding are 0, random
// otherwise, or SetPadValue's). The emulator writes a NaN byte pattern (0xFF) there, a value no kernel can
// mistake for data — the kernels must never read it. UB->GM is PIPE_MTE3 and writes exactly blockLen bytes.
// The parameter structs have asc-devkit's constructors (include/basic_api/kernel_struct_data_copy.h,
// kernel_struct_mm.h, kernel_struct_fixpipe.h), not aggregate initialization: a brace list with too few values fails
// here as it does under bisheng (compile check finding F2); defaults as asc-devkit's (F3).
struct DataCopyExtParams {
  DataCopyExtParams() = default;
  DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};
template <class T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() = default;
  DataCopyPadExtParams(bool isPadIn, uint8_t left, uint8_t right, T value)
      : isPad(isPadIn), leftPadding(left), rightPadding(right), paddingValue(value) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue{};
};
constexpr uint8_t kDummyByte = 0xFF;
template <class T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad, ws1emu::Where w = ws1emu::Where::here()) {
  if (p.blockLen % sizeof(T) != 0) ws1emu::fail("DataCopyPad blockLen not a whole number of elements");
  if (pad.leftPadding || pad.rightPadding) ws1emu::fail("DataCopyPad: left/right padding is not emulated");
  if (dst.off() % 32 != 0) ws1emu::fail("DataCopyPad GM->UB: the UB address must be 32-byte aligned");
  const uint32_t n = p.blockLen / sizeof(T), ub_block = (p.blockLen + 31) / 32 * 32 / sizeof(T);
  const uint64_t gm_step = n + p.srcStride / sizeof(T);
  const auto ins = detail::issue(ws1emu::P_MTE2, "DataCopyPad GM->UB", w);
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    const uint32_t d0 = b * (ub_block + p.dstStride * 32 / sizeof(T));
    if (d0 + ub_block > dst.GetSize()) ws1emu::fail("DataCopyPad GM->UB past the local buffer");
    detail::gm_rd(ins, src, b * gm_step, n);
    detail::wr(ins, dst[d0], ub_block);  // the 32-byte padded block, dummy tail included
    for (uint32_t i = 0; i < n; ++i) src.check(b * gm_step + i), dst.raw()[d0 + i] = src.raw()[b * gm_step + i];
    if (pad.isPad)
      for (uint32_t i = n; i < ub_block; ++i) dst.raw()[d0 + i] = pad.paddingValue;
    else
      std::memset(dst.raw() + d0 + n, kDummyByte, (ub_block - n) * sizeof(T));
  }
}
template <class T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p,
                        ws1emu::Where w = ws1emu::Where::here()) {
  if (p.blockLen % sizeof(T) != 0) ws1emu::fail("DataCopyPad blockLen not a whole number of elements");
  const uint32_t n = p.blockLen / sizeof(T), ub_block = (p.blockLen + 31) / 32 * 32 / sizeof(T);
  const uint64_t gm_step = n + p.dstStride / sizeof(T);
  const auto ins = detail::issue(ws1emu::P_MTE3, "DataCopyPad UB->GM", w);
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    const uint32_t s0 = b * (ub_block + p.srcStride * 32 / sizeof(T));
    if (s0 + n > src.GetSize()) ws1emu::fail("DataCopyPad UB->GM past the local buffer");
    detail::rd(ins, src[s0], n);
    detail::gm_wr(ins, dst, b * gm_step, n);
    for (uint32_t i = 0; i < n; ++i) dst.check(b * gm_step + i), dst.raw()[b * gm_step + i] = src.raw()[s0 + i];
  }
}

// DataCacheCleanAndInvalid ("DataCacheCleanAndInvalid" page, asc-devkit docs/zh/api/SIMD-API/基础API/缓存控制/):
// PIPE_S. The scalar unit reads GM through a per-core data cache that nothing keeps coherent with GM written by
// DMA or by other cores/kernels; ENTIRE_DATA_CACHE writes back and drops every line. The emulator emulates that
// mode only (it is what the kernels use: once per launch, before their first scalar GM read).
enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
template <class T, CacheLine entireType, DcciDst dcciDst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst, ws1emu::Where w = ws1emu::Where::here()) {
  (void)dst;
  static_assert(entireType == CacheLine::ENTIRE_DATA_CACHE, "the emulator emulates ENTIRE_DATA_CACHE only");
  static_assert(dcciDst == DcciDst::CACHELINE_OUT || dcciDst == DcciDst::CACHELINE_ALL,
                "DataCacheCleanAndInvalid for GM: CACHELINE_OUT (or ALL)");
  auto& h = ws1emu::hz();
  const auto i = h.begin(ws1emu::P_S, "DataCacheCleanAndInvalid", w);
  h.dcci = true;
  h.dcci_gseq = i.gseq;
  h.end(i);
}

// ---- vector instructions (PIPE_V), "first count elements" (level-2) form ---------------------------------
// Elementwise binary ops ("Add", "Sub", "Mul", "Div", "Max" pages, the "tensor前n个数据计算" form): dst[i] = a[i] op b[i].
#define WS1_EMU_BINARY(NAME, EXPR)                                                                       \
  template <class T>                                                                                     \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,          \
                   const int32_t count, ws1emu::Where w = ws1emu::Where::here()) {                       \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() ||                                     \
        static_cast<uint32_t>(count) > a.GetSize() || static_cast<uint32_t>(count) > b.GetSize())        \
      ws1emu::fail(#NAME ": count past a buffer");                                                       \
    detail::same_or_apart(#NAME, dst, count, a, count);                                                  \
    detail::same_or_apart(#NAME, dst, count, b, count);                                                  \
    detail::vaddr(#NAME, dst), detail::vaddr(#NAME, a), detail::vaddr(#NAME, b);                         \
    const auto ins = detail::issue(ws1emu::P_V, #NAME, w);                                               \
    detail::count_vec(static_cast<uint64_t>(count));                                                     \
    detail::rd(ins, a, count), detail::rd(ins, b, count), detail::wr(ins, dst, count);                   \
    for (int32_t i = 0; i < count; ++i) {                                                                \
      const T x = a.raw()[i], y = b.raw()[i];                                                            \
      dst.raw()[i] = (EXPR);                                                                             \
    }                                                                                                    \
  }
WS1_EMU_BINARY(Add, x + y)
WS1_EMU_BINARY(Sub, x - y)
WS1_EMU_BINARY(Mul, x * y)
WS1_EMU_BINARY(Div, x / y)
WS1_EMU_BINARY(Max, (x != x || y != y) ? (x + y) : (x > y ? x : y))
#undef WS1_EMU_BINARY

// Elementwise with a scalar ("Adds", "Muls", "Maxs" pages): dst[i] = src[i] op scalar.
#define WS1_EMU_SCALAR(NAME, EXPR)                                                                         \
  template <class T>                                                                                       \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T s, const int32_t count,   \
                   ws1emu::Where w = ws1emu::Where::here()) {                                              \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() || static_cast<uint32_t>(count) > src.GetSize()) \
      ws1emu::fail(#NAME ": count past a buffer");                                                         \
    detail::same_or_apart(#NAME, dst, count, src, count);                                                  \
    detail::vaddr(#NAME, dst), detail::vaddr(#NAME, src);                                                  \
    const auto ins = detail::issue(ws1emu::P_V, #NAME, w);                                                 \
    detail::count_vec(static_cast<uint64_t>(count));                                                       \
    detail::rd(ins, src, count), detail::wr(ins, dst, count);                                              \
    for (int32_t i = 0; i < count; ++i) {                                                                  \
      const T x = src.raw()[i];                                                                            \
      dst.raw()[i] = (EXPR);                                                                               \
    }                                                                                                      \
  }
WS1_EMU_SCALAR(Adds, x + s)
WS1_EMU_SCALAR(Muls, x * s)
WS1_EMU_SCALAR(Maxs, (x != x) ? x : (x > s ? x : s))
#undef WS1_EMU_SCALAR

// Elementwise unary ops ("Exp", "Ln", "Sqrt" pages): one libm call per element (ASSUMPTION above).
#define WS1_EMU_UNARY(NAME, EXPR)                                                                          \
  inline void NAME(const LocalTensor<float>& dst, const LocalTensor<float>& src, const int32_t count,      \
                   ws1emu::Where w = ws1emu::Where::here()) {                                              \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() || static_cast<uint32_t>(count) > src.GetSize()) \
      ws1emu::fail(#NAME ": count past a buffer");                                                         \
    detail::same_or_apart(#NAME, dst, count, src, count);                                                  \
    detail::vaddr(#NAME, dst), detail::vaddr(#NAME, src);                                                  \
    const auto ins = detail::issue(ws1emu::P_V, #NAME, w);                                                 \
    detail::count_vec(static_cast<uint64_t>(count));                                                       \
    detail::rd(ins, src, count), detail::wr(ins, dst, count);                                              \
    for (int32_t i = 0; i < count; ++i) {                                                                  \
      const float x = src.raw()[i];                                                                        \
      dst.raw()[i] = (EXPR);                                                                               \
    }                                                                                                      \
  }
WS1_EMU_UNARY(Exp, std::exp(x))
WS1_EMU_UNARY(Ln, std::log(x))
WS1_EMU_UNARY(Sqrt, std::sqrt(x))
// Sin / Cos: the advanced math API ("Sin", "Cos" pages; the (dst, src, calCount) form that allocates its own
// temporary buffer — that buffer is not modelled). ASSUMPTION: fp32 sinf / cosf; the NPU's polynomial differs in
// the last bits.
WS1_EMU_UNARY(Sin, std::sin(x))
WS1_EMU_UNARY(Cos, std::cos(x))
#undef WS1_EMU_UNARY

// Duplicate ("Duplicate" page): dst[0..count) = scalar.
template <class T>
inline void Duplicate(const LocalTensor<T>& dst, const T& v, const int32_t count,
                      ws1emu::Where w = ws1emu::Where::here()) {
  if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize()) ws1emu::fail("Duplicate: count past the buffer");
  detail::vaddr("Duplicate", dst);
  const auto ins = detail::issue(ws1emu::P_V, "Duplicate", w);
  detail::count_vec(static_cast<uint64_t>(count));
  detail::wr(ins, dst, count);
  for (int32_t i = 0; i < count; ++i) dst.raw()[i] = v;
}

// Cast ("Cast" page 0072, CANN 8.0.0): bfloat16_t -> float with CAST_NONE (exact), float -> bfloat16_t
// with CAST_RINT (round to nearest, ties to even). Source and destination (other element sizes) must not overlap.
inline void Cast(const LocalTensor<float>& dst, const LocalTensor<bfloat16_t>& src, RoundMode m, uint32_t count,
                 ws1emu::Where w = ws1emu::Where::here()) {
  if (m != RoundMode::CAST_NONE) ws1emu::fail("Cast bf16->float: only CAST_NONE is emulated");
  if (count > dst.GetSize() || count > src.GetSize()) ws1emu::fail("Cast: count past a buffer");
  detail::apart("Cast", dst, count, src, count, "source and destination overlap");
  detail::vaddr("Cast", dst), detail::vaddr("Cast", src);
  const auto ins = detail::issue(ws1emu::P_V, "Cast", w);
  detail::count_vec(static_cast<uint64_t>(count));
  detail::rd(ins, src, count), detail::wr(ins, dst, count);
  for (uint32_t i = 0; i < count; ++i) dst.raw()[i] = bf16_to_float(src.raw()[i]);
}
inline void Cast(const LocalTensor<bfloat16_t>& dst, const LocalTensor<float>& src, RoundMode m, uint32_t count,
                 ws1emu::Where w = ws1emu::Where::here()) {
  if (m != RoundMode::CAST_RINT) ws1emu::fail("Cast float->bf16: only CAST_RINT is emulated");
  if (count > dst.GetSize() || count > src.GetSize()) ws1emu::fail("Cast: count past a buffer");
  detail::apart("Cast", dst, count, src, count, "source and destination overlap");
  detail::vaddr("Cast", dst), detail::vaddr("Cast", src);
  const auto ins = detail::issue(ws1emu::P_V, "Cast", w);
  detail::count_vec(static_cast<uint64_t>(count));
  detail::rd(ins, src, count), detail::wr(ins, dst, count);
  for (uint32_t i = 0; i < count; ++i) dst.raw()[i] = float_to_bf16_rint(src.raw()[i]);
}

// ReduceSum, "first count elements" form ("ReduceSum" page 0078, CANN 8.0.0 / 8.1; asc-devkit
// "归约计算/ReduceSum.md"). On Atlas A2/A3 this form uses the page's "method 2": a binary tree inside each repeat
// (256 bytes = 64 fp32 lanes: lanes 2i and 2i+1 added, then pairs of those, ...), and the repeats' results added
// IN SEQUENCE (r0 + r1, then + r2, ...). dst[0] receives the sum; sharedTmpBuffer (work) holds the intermediate
// results (the page's size formula; checked loosely here as >= ceil(count / 64) elements). Overlap: the page
// allows dst to overlap work and says nothing of dst or work overlapping src, which the emulator therefore
// refuses (通用地址重叠约束: an undocumented overlap is unsupported).
// ASSUMPTION: in the last, partial repeat the absent lanes enter the tree as +0.0f (the page does not say
// what a masked lane contributes; +0.0f is the identity except that it turns a lone -0.0f into +0.0f).
inline float detail_tree64(const float* x, int32_t n) {
  float lane[64];
  for (int32_t i = 0; i < 64; ++i) lane[i] = i < n ? x[i] : 0.0f;
  for (int32_t w = 32; w >= 1; w /= 2)
    for (int32_t i = 0; i < w; ++i) lane[i] = lane[2 * i] + lane[2 * i + 1];
  return lane[0];
}
namespace detail {
inline void reduce_operands(const char* name, const LocalTensor<float>& dst, const LocalTensor<float>& src,
                            const LocalTensor<float>& work, int32_t count, uint32_t work_n, const ws1emu::Instr& ins) {
  apart(name, dst, 1, src, count, "the destination overlaps the source (not documented as allowed)");
  vaddr(name, dst), vaddr(name, src), vaddr(name, work);
  apart(name, work, work_n, src, count, "sharedTmpBuffer overlaps the source (not documented as allowed)");
  rd(ins, src, count);
  wr(ins, work, work_n);
  wr(ins, dst, 1);
}
}  // namespace detail
inline void ReduceSum(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& work,
                      const int32_t count, ws1emu::Where w = ws1emu::Where::here()) {
  if (count <= 0 || static_cast<uint32_t>(count) > src.GetSize()) ws1emu::fail("ReduceSum: bad count");
  const int32_t reps = (count + 63) / 64;
  if (work.GetSize() < static_cast<uint32_t>(reps)) ws1emu::fail("ReduceSum: work buffer too small");
  const auto ins = detail::issue(ws1emu::P_V, "ReduceSum", w);
  detail::count_vec(static_cast<uint64_t>(count));
  detail::reduce_operands("ReduceSum", dst, src, work, count, static_cast<uint32_t>(reps), ins);
  float acc = 0.0f;
  for (int32_t r = 0; r < reps; ++r) {
    const int32_t n = count - r * 64 < 64 ? count - r * 64 : 64;
    const float part = detail_tree64(src.raw() + r * 64, n);
    acc = r == 0 ? part : acc + part;
  }
  dst.raw()[0] = acc;
}

// ReduceMax, "first count elements" form ("ReduceMax" page), calIndex = false: dst[0] = max.
// Max is exact, so the order does not matter except for NaN, which the emulator propagates.
inline void ReduceMax(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& work,
                      const int32_t count, bool calIndex = false, ws1emu::Where w = ws1emu::Where::here()) {
  if (calIndex) ws1emu::fail("ReduceMax: calIndex is not emulated");
  if (count <= 0 || static_cast<uint32_t>(count) > src.GetSize()) ws1emu::fail("ReduceMax: bad count");
  const uint32_t reps = static_cast<uint32_t>((count + 63) / 64);
  if (work.GetSize() < reps) ws1emu::fail("ReduceMax: work buffer too small");
  const auto ins = detail::issue(ws1emu::P_V, "ReduceMax", w);
  detail::count_vec(static_cast<uint64_t>(count));
  detail::reduce_operands("ReduceMax", dst, src, work, count, reps, ins);
  float m = src.raw()[0];
  for (int32_t i = 1; i < count; ++i) {
    const float x = src.raw()[i];
    if (x != x || m != m) m = (m != m) ? m : x;
    else if (x > m) m = x;
  }
  dst.raw()[0] = m;
}

// ---- Cube (AIC) data path: GM -> L1 (Nd2Nz) -> L0A/L0B (LoadData 2D) -> Mmad -> L0C -> Fixpipe -> GM ----
// Fractal layouts (the "Mmad" page's "数据排布格式": A ZZ, B ZN, C NZ; fractal 16 x C0 for A, C0 x 16 for B): C0 = 32 bytes /
// sizeof(T) elements (16 for bf16, 8 for fp32); a fractal is 16 rows x C0 = 512 bytes.
//  * Nz in L1 of an ND matrix [rows, cols]: C0-wide column blocks one after another (dstNzC0Stride 32-byte
//    blocks apart), each block rows x C0 row-major: element (r, c) at (c / C0) * C0Stride * C0 + r * C0 + c % C0.
//  * L0A (Zz): fractals of A [m, k] ordered m-block major, k-block minor; inside a fractal row-major (m, k).
//  * L0B (Zn of B [k, n]): fractals ordered k-block major, n-block minor; inside a fractal n-major, i.e.
//    element (k, n) at (n % 16) * C0 + k % C0 — the bytes of Nz(Bᵀ), which is why the kernels keep weights
//    as [N, K] (= Bᵀ) and load them without transpose.
//  * L0C (Nz of C [m, n], fp32): n-block (16 wide) major, then m row, then n % 16.
template <class T>
struct C0Of {
  static constexpr uint32_t value = 32 / sizeof(T);
};

// Nd2NzParams / DataCopy GM -> L1 with ND-to-NZ conversion, PIPE_MTE2 ("随路格式转换" page 0105, CANN 8.0.0; the
// loop nest is the one of the intrinsic page "copy_gm_to_cbuf_multi_nd2nz"): one ND matrix (ndNum = 1) of nValue
// rows x dValue columns, srcDValue elements between GM rows (a 16-bit field: a row stride of 65536 elements or
// more cannot be expressed), written as Nz with dstNzC0Stride (32-byte blocks between column blocks) and
// dstNzNStride (32-byte blocks between rows, 1 here).
struct Nd2NzParams {
  Nd2NzParams() = default;
  Nd2NzParams(uint16_t ndNumIn, uint16_t nValueIn, uint16_t dValueIn, uint16_t srcNdMatrixStrideIn,
              uint16_t srcDValueIn, uint16_t dstNzC0StrideIn, uint16_t dstNzNStrideIn, uint16_t dstNzMatrixStrideIn)
      : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
        srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
        dstNzMatrixStride(dstNzMatrixStrideIn) {}
  uint16_t ndNum = 0, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0, dstNzC0Stride = 0,
           dstNzNStride = 0, dstNzMatrixStride = 0;
};
template <class T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p,
                     ws1emu::Where w = ws1emu::Where::here()) {
  if (p.ndNum != 1) ws1emu::fail("Nd2Nz: only ndNum = 1 is emulated");
  if (p.dstNzNStride != 1) ws1emu::fail("Nd2Nz: only dstNzNStride = 1 is emulated");
  if (p.dValue > p.srcDValue && p.nValue > 1) ws1emu::fail("Nd2Nz: dValue wider than the GM row stride srcDValue");
  const uint32_t c0 = C0Of<T>::value;
  const auto ins = detail::issue(ws1emu::P_MTE2, "DataCopy GM->L1 (Nd2Nz)", w);
  for (uint32_t r = 0; r < p.nValue; ++r) detail::gm_rd(ins, src, static_cast<uint64_t>(r) * p.srcDValue, p.dValue);
  for (uint32_t cb = 0; cb < (p.dValue + c0 - 1) / c0; ++cb) {  // a column block's rows are contiguous (NStride 1)
    const uint32_t d = cb * p.dstNzC0Stride * c0;
    if (d + p.nValue * c0 > dst.GetSize()) ws1emu::fail("Nd2Nz DataCopy past the L1 buffer");
    detail::wr(ins, dst[d], p.nValue * c0);
  }
  for (uint32_t r = 0; r < p.nValue; ++r)
    for (uint32_t c = 0; c < p.dValue; ++c) {
      const uint32_t d = (c / c0) * p.dstNzC0Stride * c0 + r * p.dstNzNStride * c0 + c % c0;
      const uint64_t s = static_cast<uint64_t>(r) * p.srcDValue + c;
      src.check(s);
      dst.raw()[d] = src.raw()[s];
    }
}

// InitConstValue ("InitConstValue" page; renamed "Fill" in current asc-devkit, 矩阵搬入辅助配置接口/Fill.md): fill
// repeatTimes x blockNum blocks of an L1 buffer (32-byte blocks, PIPE_MTE2) or an L0A / L0B buffer (512-byte
// blocks, PIPE_MTE1) with initValue (the kernels zero their tiles so edge tiles carry exact zeros, never garbage).
template <class T>
struct InitConstValueParams {
  InitConstValueParams() = default;
  InitConstValueParams(uint16_t repeat, uint16_t blocks, uint16_t gap, T value)
      : repeatTimes(repeat), blockNum(blocks), dstGap(gap), initValue(value) {}
  InitConstValueParams(uint16_t repeat, T value) : repeatTimes(repeat), initValue(value) {}
  uint16_t repeatTimes = 0, blockNum = 0, dstGap = 0;
  T initValue{};
};
template <class T>
inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<T>& p,
                           ws1emu::Where w = ws1emu::Where::here()) {
  const int s = dst.space();
  if (s != ws1emu::SP_L1 && s != ws1emu::SP_L0A && s != ws1emu::SP_L0B)
    ws1emu::fail("InitConstValue: L1, L0A or L0B only");
  const uint32_t block = s == ws1emu::SP_L1 ? 32 : 512, per_block = block / sizeof(T);
  const auto ins = detail::issue(s == ws1emu::SP_L1 ? ws1emu::P_MTE2 : ws1emu::P_MTE1, "InitConstValue", w);
  uint32_t at = 0;
  for (uint32_t r = 0; r < p.repeatTimes; ++r) {
    const uint32_t n = p.blockNum * per_block;
    if (at + n > dst.GetSize()) ws1emu::fail("InitConstValue past the buffer");
    detail::wr(ins, dst[at], n);
    for (uint32_t b = 0; b < n; ++b) dst.raw()[at + b] = p.initValue;
    at += (p.blockNum + p.dstGap) * per_block;
  }
}

// LoadData2DParams / LoadData L1 -> L0A / L0B, PIPE_MTE1 ("LoadData" page, the LoadData2DParams form; asc-devkit
// docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/矩阵计算的搬入/LoadData_2D.md and its pseudo code
// examples/01_simd_cpp_api/03_basic_api/03_matrix_compute/load_data_l12l0/scripts/load2d.py): repeatTimes fractals of
// 512 bytes, the i-th read at fractal startIndex + i * srcStride and written at fractal i * (1 + dstGap).
// ifTranspose (L1 -> L0A / L0B, b16 only): each 16 x 16 fractal is transposed — row j of the destination fractal is
// column j of the source one. The attention kernels load V (and K, Q, dO where they are the B operand [k, n] of a
// product, stored k-major) this way. The destination must be 512-byte aligned, an L1 source 32-byte aligned.
struct LoadData2DParams {
  LoadData2DParams() = default;
  LoadData2DParams(uint16_t start, uint8_t repeat, uint16_t srcStrideIn, uint8_t sidIn, uint16_t dstGapIn,
                   bool transpose, uint8_t addrModeIn)
      : startIndex(start), repeatTimes(repeat), srcStride(srcStrideIn), sid(sidIn), dstGap(dstGapIn),
        ifTranspose(transpose), addrMode(addrModeIn) {}
  uint16_t startIndex = 0;
  uint8_t repeatTimes = 0;
  uint16_t srcStride = 0;
  uint8_t sid = 0;
  uint16_t dstGap = 0;
  bool ifTranspose = false;
  uint8_t addrMode = 0;
};
template <class T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p,
                     ws1emu::Where w = ws1emu::Where::here()) {
  if (p.ifTranspose && sizeof(T) != 2) ws1emu::fail("LoadData2D: ifTranspose supports b16 data only (LoadData_2D.md)");
  if (src.space() != ws1emu::SP_L1 || (dst.space() != ws1emu::SP_L0A && dst.space() != ws1emu::SP_L0B))
    ws1emu::fail("LoadData2D: the emulator implements L1 -> L0A / L0B only");
  if (dst.off() % 512 != 0) ws1emu::fail("LoadData2D: the L0A / L0B destination must be 512-byte aligned");
  if (src.off() % 32 != 0) ws1emu::fail("LoadData2D: the L1 source must be 32-byte aligned");
  const uint32_t frac = 512 / sizeof(T);
  const auto ins = detail::issue(ws1emu::P_MTE1, p.ifTranspose ? "LoadData L1->L0 (transpose)" : "LoadData L1->L0", w);
  for (uint32_t i = 0; i < p.repeatTimes; ++i) {
    const uint32_t s = (p.startIndex + i * p.srcStride) * frac, d = i * (1 + p.dstGap) * frac;
    if (s + frac > src.GetSize() || d + frac > dst.GetSize()) ws1emu::fail("LoadData2D past a buffer");
    detail::rd(ins, src[s], frac);
    detail::wr(ins, dst[d], frac);
    if (!p.ifTranspose) {
      std::memcpy(dst.raw() + d, src.raw() + s, 512);
    } else {
      T tmp[256];
      for (uint32_t r = 0; r < 16; ++r)
        for (uint32_t c = 0; c < 16; ++c) tmp[r * 16 + c] = src.raw()[s + c * 16 + r];
      std::memcpy(dst.raw() + d, tmp, 512);
    }
  }
}

// SetHF32Mode ("SetHF32Mode" page, 矩阵计算（ISASI）/Mmad计算辅助配置接口/SetHF32Mode.md): PIPE_S; when on, Mmad rounds
// FP32 L0A / L0B data to HF32 first. The mode is core state whose value at kernel start the documentation does not
// give, so an FP32 Mmad requires the kernel to have set it (off) itself; HF32 rounding is not emulated.
// (The bool form is the one CANN 8.x headers have; asc-devkit 9.x adds SetHF32Mode(HF32Mode) and keeps it.)
inline void SetHF32Mode(bool hf32Mode, ws1emu::Where w = ws1emu::Where::here()) {
  auto& h = ws1emu::hz();
  const auto i = h.begin(ws1emu::P_S, "SetHF32Mode", w);
  h.hf32 = hf32Mode ? 1 : 0;
  h.end(i);
}

// MmadParams / Mmad, PIPE_M ("Mmad" page, 0242 in CANN 8.0.RC3: MmadParams {m, n, k, isBias, fmOffset, enSsparse,
// enWinogradA, enWinogradB, unitFlag, cmatrixInitVal, cmatrixSource}): C[m, n] (+)= sum_k A[m, k] * B[k, n] on L0A (Zz) x
// L0B (Zn) -> L0C (Nz, fp32); m, n multiples of 16 here, k a multiple of C0. cmatrixInitVal = true starts C
// from zero, false accumulates into what L0C holds. Consecutive Mmads into one L0C are ordered by the Cube itself
// when (m/16)*(n/16) >= 10, else need PipeBarrier<PIPE_M> (asc-devkit "Mmad.md", 同步优化说明).
// ASSUMPTION (the page does not give the Cube's internal order): one Mmad forms, per output element, the
// fp32 sum of its k products in ascending k starting from +0 (a chain of fmaf; bf16 x bf16 products are
// exact in fp32), and adds that partial sum to the L0C value once. So the bits depend on how K is cut into
// Mmad calls (baseK), which is exactly what the kernels pin; the negative control varies it.
struct MmadParams {
  MmadParams() = default;
  MmadParams(uint16_t mIn, uint16_t nIn, uint16_t kIn, bool isBiasIn, int32_t fmOffsetIn, bool enSsparseIn,
             bool enWinogradAIn, bool enWinogradBIn)
      : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
        enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn) {}
  MmadParams(uint16_t mIn, uint16_t nIn, uint16_t kIn, uint8_t unitFlagIn, bool cmatrixSourceIn, bool cmatrixInitValIn)
      : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn), cmatrixInitVal(cmatrixInitValIn) {}
  uint16_t m = 0, n = 0, k = 0;
  bool isBias = false;
  int32_t fmOffset = 0;
  bool enSsparse = false, enWinogradA = false, enWinogradB = false;
  uint8_t unitFlag = 0;
  bool kDirectionAlign = false, cmatrixSource = false, cmatrixInitVal = true;
};
inline float detail_elem(float v) { return v; }
inline float detail_elem(bfloat16_t v) { return bf16_to_float(v); }
template <class T>
inline void Mmad(const LocalTensor<float>& c, const LocalTensor<T>& a, const LocalTensor<T>& b, const MmadParams& p,
                 ws1emu::Where w = ws1emu::Where::here()) {
  const uint32_t c0 = C0Of<T>::value;
  if (p.m % 16 || p.n % 16 || p.k % c0) ws1emu::fail("Mmad: m, n must be multiples of 16 and k of C0");
  if (p.m == 1) ws1emu::fail("Mmad: m = 1 switches on GEMV (ND A) — not emulated");
  if (std::is_same<T, float>::value && ws1emu::hz().hf32 != 0)
    ws1emu::fail(ws1emu::hz().hf32 == 1
                     ? "Mmad: HF32 mode is not emulated"
                     : "Mmad on FP32 operands with the Cube's HF32 mode never set in this kernel (call "
                       "SetHF32Mode(false) first: its state at kernel start is not documented)");
  const uint32_t kb = p.k / c0, mp = p.m;
  if (p.m * p.k > a.GetSize() || p.k * p.n > b.GetSize() || p.m * p.n > c.GetSize())
    ws1emu::fail("Mmad: operands past their L0 buffers");
  const auto ins = detail::issue(ws1emu::P_M, "Mmad", w, (p.m / 16) * (p.n / 16) >= 10);
  detail::count_macs(static_cast<uint64_t>(p.m) * p.n * p.k);
  detail::rd(ins, a, static_cast<uint64_t>(p.m) * p.k);
  detail::rd(ins, b, static_cast<uint64_t>(p.k) * p.n);
  if (!p.cmatrixInitVal) detail::rd(ins, c, static_cast<uint64_t>(p.m) * p.n);
  detail::wr(ins, c, static_cast<uint64_t>(p.m) * p.n);
  for (uint32_t m = 0; m < p.m; ++m)
    for (uint32_t n = 0; n < p.n; ++n) {
      float part = 0.0f;
      for (uint32_t k = 0; k < p.k; ++k) {
        const float av = detail_elem(a.raw()[((m / 16) * kb + k / c0) * 16 * c0 + (m % 16) * c0 + k % c0]);
        const float bv = detail_elem(b.raw()[((k / c0) * (p.n / 16) + n / 16) * 16 * c0 + (n % 16) * c0 + k % c0]);
        part = std::fma(av, bv, part);
      }
      float& out = c.raw()[(n / 16) * mp * 16 + m * 16 + n % 16];
      out = p.cmatrixInitVal ? part : out + part;
    }
}

// Fixpipe L0C -> GM with NZ-to-ND conversion, PIPE_FIX ("Fixpipe" page 0251, FixpipeParamsV220, CFG_ROW_MAJOR, Atlas A2):
// writes mSize rows x nSize columns of the Nz fp32 tile (srcStride = the tile's m extent, a multiple of 16)
// as ND rows dstStride elements apart; quantPre F322BF16 rounds to bf16 (ASSUMPTION: round to nearest even,
// as CAST_RINT), NoQuant keeps fp32.
enum class QuantMode_t { NoQuant, F322BF16 };
struct FixpipeParamsV220 {
  FixpipeParamsV220() = default;
  FixpipeParamsV220(uint16_t n, uint16_t m, uint16_t srcStrideIn, uint32_t dstStrideIn, bool relu)
      : nSize(n), mSize(m), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(relu) {}
  uint16_t nSize = 0, mSize = 0, srcStride = 0;
  uint32_t dstStride = 0;
  QuantMode_t quantPre = QuantMode_t::NoQuant;
  bool reluEn = false;
  uint16_t ndNum = 1;
};
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
  CO2Layout format;
};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
template <class D, class U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<D>& dst, const LocalTensor<U>& c, const FixpipeParamsV220& p,
                    ws1emu::Where w = ws1emu::Where::here()) {
  static_assert(std::is_same<U, float>::value, "emulated Fixpipe reads an fp32 L0C");
  if (config.format != CO2Layout::ROW_MAJOR) ws1emu::fail("Fixpipe: only CFG_ROW_MAJOR (NZ2ND) is emulated");
  const auto ins = detail::issue(ws1emu::P_FIX, "Fixpipe L0C->GM", w);
  const uint64_t nblk = (p.nSize + 15u) / 16u;
  if (p.mSize > p.srcStride) ws1emu::fail("Fixpipe: mSize past the L0C tile's m extent (srcStride)");
  // the last element read: column block nblk - 1, row mSize - 1 (a source offset into a tile may start mid-tile)
  const uint64_t extent = nblk == 0 ? 0 : ((nblk - 1) * p.srcStride + p.mSize) * 16;
  if (extent > c.GetSize()) ws1emu::fail("Fixpipe past the L0C buffer");
  if (c.off() % 64 != 0) ws1emu::fail("Fixpipe: the L0C source must be 64-byte aligned");
  detail::rd(ins, c, extent);
  for (uint32_t m = 0; m < p.mSize; ++m) detail::gm_wr(ins, dst, static_cast<uint64_t>(m) * p.dstStride, p.nSize);
  for (uint32_t m = 0; m < p.mSize; ++m)
    for (uint32_t n = 0; n < p.nSize; ++n) {
      const float v = c.raw()[(n / 16) * p.srcStride * 16 + m * 16 + n % 16];
      const uint64_t o = static_cast<uint64_t>(m) * p.dstStride + n;
      dst.check(o);
      if constexpr (std::is_same<D, float>::value) {
        if (p.quantPre != QuantMode_t::NoQuant) ws1emu::fail("Fixpipe to fp32 with a quantPre");
        dst.raw()[o] = v;
      } else {
        if (p.quantPre != QuantMode_t::F322BF16) ws1emu::fail("Fixpipe to bf16 needs quantPre F322BF16");
        dst.raw()[o] = float_to_bf16_rint(v);
      }
    }
}

}  // namespace AscendC

namespace ws1emu {
// The launch: like CANN's CPU-debug ICPU_RUN_KF, run the kernel once per block index 0..blockDim-1, each
// with a fresh core state (buffers, pipes, flags, data cache, HF32 mode). Blocks run one after another; a kernel
// whose bits depended on which blocks ran concurrently would be wrong on the device and is ruled out by the
// kernels' design (no atomics, each output written by exactly one block), which the tests check by varying blockDim.
inline void launch(uint32_t block_dim, const char* kernel, const std::function<void()>& body) {
  if (block_dim == 0) fail("launch with blockDim 0");
  Counts* counts = counts_for(kernel, block_dim);
  for (uint32_t b = 0; b < block_dim; ++b) {
    Core& c = core();
    c.block_idx = b;
    c.block_num = block_dim;
    c.mixed = false, c.slot = 0, c.run = nullptr;
    c.tpipe = nullptr;
    c.hz.reset(kernel, b, 0, false, nullptr, counts);
    body();
    c.hz.finish();
    c.tpipe = nullptr;
  }
}

// A KERNEL_TYPE_MIX_AIC_1_2 launch: per block one AIC and two AIVs, run as three threads under MixRun's baton (the
// blocks themselves one after another, as above: nothing orders two blocks, and the kernels give each output to one
// block). At the end of a block every cross-core set must have been waited for.
inline void launch_mix(uint32_t block_dim, const char* kernel, const std::function<void()>& body) {
  if (block_dim == 0) fail("launch with blockDim 0");
  Counts* counts = counts_for(kernel, block_dim);
  for (uint32_t b = 0; b < block_dim; ++b) {
    MixRun run;
    run.kernel = kernel, run.block = b;
    auto core_main = [&](int slot) {
      {
        std::unique_lock<std::mutex> lk(run.mu);
        run.cv.wait(lk, [&] { return run.turn == slot || run.abort; });
      }
      if (!run.abort) {
        try {
          Core& c = core();
          c.block_idx = b, c.block_num = block_dim, c.mixed = true, c.slot = slot, c.run = &run, c.tpipe = nullptr;
          c.hz.reset(kernel, b, slot, true, &run.group, counts);
          body();
          c.hz.finish();
          c.tpipe = nullptr;
        } catch (const MixAbort&) {
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> g(run.mu);
          if (!run.abort) run.err = e.what(), run.abort = true;
        }
      }
      std::lock_guard<std::mutex> g(run.mu);
      run.done[slot] = true;
      if (run.abort) {
        run.turn = -1;
        run.cv.notify_all();
      } else {
        run.pass(slot);
      }
    };
    std::thread t0(core_main, 0), t1(core_main, 1), t2(core_main, 2);
    t0.join(), t1.join(), t2.join();
    if (run.abort) throw std::runtime_error(run.err.rfind("ascend emulator: ", 0) == 0 ? run.err : "ascend emulator: " + run.err);
    finish_group(run.group, kernel, b);
  }
}
}  // namespace ws1emu
