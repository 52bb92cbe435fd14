// kernel_operator.h — WS1's host EMULATOR of the Ascend C API subset the kernels in ../../csrc use.
//
// NOT CANN. On an Atlas host the .asc sources include CANN's own kernel_operator.h and are compiled by
// bisheng; here the SAME sources compile with g++ against this header and run on CPU tensors, the role
// CANN's CPU-debug mode (ICPU_RUN_KF) plays where CANN exists. Emulated results are never ascend_bf16
// evidence (the emulator package reports family "ascend_emu").
//
// Each function names the Ascend C API reference page it follows (hiascend.com, "Ascend C operator development
// API", CANN 8.0.0: https://www.hiascend.com/document/detail/zh/canncommercial/800/apiref/ascendcopapi/
// atlasascendc_api_07_NNNN.html). A page id is given where it was checked against the stored page; ids move
// between CANN releases, the page TITLE (in quotes) is the stable name. Where the documentation does not fix an
// order or a rounding the emulator has to pick one; every such choice is marked ASSUMPTION and listed in
// docs/ascend.md ("What the emulator assumes"). The emulator also enforces the documented constraints it
// can check (32-byte alignment of DataCopy, buffer capacities of UB / L1 / L0A / L0B / L0C, queue depth),
// so a kernel that would be illegal on the device fails here too.
//
// Numerics: every vector instruction is emulated lane by lane with one IEEE fp32 (or exact integer)
// operation per element, compiled with -ffp-contract=off, so the emulated bits are the same on every x86-64
// host. Exp / Ln / Sqrt use the C library's correctly-rounded-or-nearly functions (expf, logf, sqrtf):
// ASSUMPTION — the NPU's transcendental units differ in the last bits; the emulator proves the kernels'
// ORDER logic (what is reduced with what, in which order, with which tile), not the NPU's bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// ---- the kernel-language qualifiers (bisheng's), as no-ops on the host ------------------------------------
#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(x)
#define WS1_ASCEND_EMU 1

namespace ws1emu {
[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error("ascend emulator: " + what); }

// One emulated AI core's state while the launch loop runs its block (see launch() at the end).
struct Core {
  int64_t block_idx = 0, block_num = 1;
  // byte arenas per on-chip buffer; capacities of Atlas A2 (dav-2201): UB 192 KiB, L1 512 KiB,
  // L0A 64 KiB, L0B 64 KiB, L0C 128 KiB (Ascend C "hardware architecture" / TPipe InitBuffer limits)
  std::vector<uint8_t> ub, l1, l0a, l0b, l0c;
  size_t ub_used = 0, l1_used = 0, l0a_used = 0, l0b_used = 0, l0c_used = 0;
};
inline Core& core() {
  static thread_local Core c;
  return c;
}
}  // namespace ws1emu

namespace AscendC {

// ---- data types -------------------------------------------------------------------------------------------
// bfloat16_t ("Cast" page, 0072: the bfloat16_t layout): 1 sign, 8 exponent, 7 mantissa bits.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  static bfloat16_t from_bits(uint16_t b) {
    bfloat16_t r;
    r.bits = b;
    return r;
  }
};
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

// pipe_t / PipeBarrier ("PipeBarrier" page): the emulator runs every instruction
// in program order, so a barrier has nothing to wait for.
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
template <pipe_t P>
inline void PipeBarrier() {}

// GetBlockIdx / GetBlockNum ("GetBlockIdx" / "GetBlockNum" pages): this core's index in the launch and
// the launch's block count (blockDim).
inline int64_t GetBlockIdx() { return ws1emu::core().block_idx; }
inline int64_t GetBlockNum() { return ws1emu::core().block_num; }

// ---- tensors ----------------------------------------------------------------------------------------------
// GlobalTensor ("GlobalTensor" page): SetGlobalBuffer, operator[], GetValue, SetValue.
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
  T GetValue(uint64_t i) const { return check(i), p_[i]; }
  void SetValue(uint64_t i, T v) { check(i), p_[i] = v; }
  __gm__ T* GetPhyAddr() const { return p_; }
  uint64_t GetSize() const { return n_; }
  void check(uint64_t i) const {
    if (n_ != UINT64_MAX && i >= n_) ws1emu::fail("GlobalTensor access past its SetGlobalBuffer size");
  }

 private:
  T* p_ = nullptr;
  uint64_t n_ = 0;
};

// LocalTensor ("LocalTensor" page): a view of an on-chip buffer; operator[] offsets in elements.
template <class T>
class LocalTensor {
 public:
  LocalTensor() = default;
  LocalTensor(T* p, uint32_t n, TPosition pos) : p_(p), n_(n), pos_(pos) {}
  LocalTensor operator[](uint32_t off) const {
    if (off > n_) ws1emu::fail("LocalTensor offset past its buffer");
    return LocalTensor(p_ + off, n_ - off, pos_);
  }
  T GetValue(uint32_t i) const { return check(i), p_[i]; }
  void SetValue(uint32_t i, T v) const { check(i), p_[i] = v; }
  uint32_t GetSize() const { return n_; }
  TPosition GetPosition() const { return pos_; }
  template <class U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>(reinterpret_cast<U*>(p_), static_cast<uint32_t>(n_ * sizeof(T) / sizeof(U)), pos_);
  }
  void check(uint32_t i) const {
    if (i >= n_) ws1emu::fail("LocalTensor access past its buffer");
  }
  T* raw() const { return p_; }

 private:
  T* p_ = nullptr;
  uint32_t n_ = 0;
  TPosition pos_ = TPosition::VECCALC;
};

// ---- TPipe / TQue / TBuf ("TPipe", "TQue", "TBuf" pages; InitBuffer, AllocTensor, EnQue, DeQue, FreeTensor, Get) ----------------------
namespace detail {
inline uint8_t* arena_alloc(TPosition pos, size_t bytes) {
  auto& c = ws1emu::core();
  std::vector<uint8_t>* a;
  size_t* used;
  size_t cap;
  switch (pos) {
    case TPosition::VECIN: case TPosition::VECOUT: case TPosition::VECCALC:
      a = &c.ub, used = &c.ub_used, cap = 192 * 1024; break;
    case TPosition::A1: case TPosition::B1:
      a = &c.l1, used = &c.l1_used, cap = 512 * 1024; break;
    case TPosition::A2: a = &c.l0a, used = &c.l0a_used, cap = 64 * 1024; break;
    case TPosition::B2: a = &c.l0b, used = &c.l0b_used, cap = 64 * 1024; break;
    case TPosition::CO1: a = &c.l0c, used = &c.l0c_used, cap = 128 * 1024; break;
    default: ws1emu::fail("InitBuffer on an unsupported TPosition");
  }
  if (a->size() != cap) a->assign(cap, 0xA5);  // on-chip memory starts as garbage, never as zeros
  size_t aligned = (bytes + 31) / 32 * 32;        // buffers are 32-byte aligned
  if (*used + aligned > cap)
    ws1emu::fail("InitBuffer exceeds the on-chip buffer (" + std::to_string(*used + aligned) + " > " +
                 std::to_string(cap) + " bytes)");
  uint8_t* p = a->data() + *used;
  *used += aligned;
  return p;
}
}  // namespace detail

template <TPosition POS, int32_t DEPTH>
class TQue {
 public:
  void init(int32_t num, uint32_t len) {
    if (num < 1 || num > 8) ws1emu::fail("TQue InitBuffer: num must be in [1, 8]");
    len_ = len;
    for (int32_t i = 0; i < num; ++i) free_.push_back(detail::arena_alloc(POS, len));
  }
  template <class T>
  LocalTensor<T> AllocTensor() {
    if (free_.empty()) ws1emu::fail("TQue AllocTensor with every buffer in use (missing FreeTensor?)");
    uint8_t* p = free_.front();
    free_.pop_front();
    return LocalTensor<T>(reinterpret_cast<T*>(p), static_cast<uint32_t>(len_ / sizeof(T)), POS);
  }
  template <class T>
  void EnQue(const LocalTensor<T>& t) {
    if (static_cast<int32_t>(queued_.size()) >= DEPTH) ws1emu::fail("TQue EnQue beyond the queue depth");
    queued_.push_back(reinterpret_cast<uint8_t*>(t.raw()));
  }
  template <class T>
  LocalTensor<T> DeQue() {
    if (queued_.empty()) ws1emu::fail("TQue DeQue on an empty queue");
    uint8_t* p = queued_.front();
    queued_.pop_front();
    return LocalTensor<T>(reinterpret_cast<T*>(p), static_cast<uint32_t>(len_ / sizeof(T)), POS);
  }
  template <class T>
  void FreeTensor(const LocalTensor<T>& t) { free_.push_back(reinterpret_cast<uint8_t*>(t.raw())); }

 private:
  uint32_t len_ = 0;
  std::deque<uint8_t*> free_, queued_;
};

template <TPosition POS>
class TBuf {
 public:
  void init(uint32_t len) { p_ = detail::arena_alloc(POS, len), len_ = len; }
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

class TPipe {
 public:
  TPipe() {  // a kernel owns one TPipe: its construction starts the core's buffers afresh
    auto& c = ws1emu::core();
    c.ub_used = c.l1_used = c.l0a_used = c.l0b_used = c.l0c_used = 0;
  }
  template <TPosition P, int32_t D>
  void InitBuffer(TQue<P, D>& q, int32_t num, uint32_t len) { q.init(num, len); }
  template <TPosition P>
  void InitBuffer(TBuf<P>& b, uint32_t len) { b.init(len); }
};

// ---- data movement ---------------------------------------------------------------------------------------
// DataCopy, contiguous ("基础数据搬运" / basic DataCopy page): GM <-> UB, count elements, count*sizeof(T) a
// multiple of 32 bytes (the documented constraint; DataCopyPad is for the rest).
template <class T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count) {
  if ((count * sizeof(T)) % 32 != 0) ws1emu::fail("DataCopy GM->UB length not a multiple of 32 bytes");
  if (count > dst.GetSize()) ws1emu::fail("DataCopy past the local buffer");
  for (uint32_t i = 0; i < count; ++i) dst.raw()[i] = src.GetValue(i);
}
template <class T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count) {
  if ((count * sizeof(T)) % 32 != 0) ws1emu::fail("DataCopy UB->GM length not a multiple of 32 bytes");
  GlobalTensor<T> d = dst;
  for (uint32_t i = 0; i < count; ++i) d.SetValue(i, src.GetValue(i));
}

// DataCopyPad ("DataCopyPad(ISASI)" page 0265, Atlas A2): blockCount blocks of blockLen BYTES; on the UB side
// every block starts on a 32-byte boundary; srcStride/dstStride: gap between blocks, in bytes on the GM side
// and in 32-byte units on the UB side. GM->UB may fill the rest of the block's last 32 bytes with paddingValue
// (isPad) — the emulator fills it when isPad, else leaves the UB bytes as they were.
struct DataCopyExtParams {
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};
template <class T>
struct DataCopyPadExtParams {
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue{};
};
template <class T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad) {
  if (p.blockLen % sizeof(T) != 0) ws1emu::fail("DataCopyPad blockLen not a whole number of elements");
  const uint32_t n = p.blockLen / sizeof(T), ub_block = (p.blockLen + 31) / 32 * 32 / sizeof(T);
  const uint64_t gm_step = n + p.srcStride / sizeof(T);
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    const uint32_t d0 = b * (ub_block + p.dstStride * 32 / sizeof(T));
    if (d0 + ub_block > dst.GetSize()) ws1emu::fail("DataCopyPad GM->UB past the local buffer");
    for (uint32_t i = 0; i < n; ++i) dst.raw()[d0 + i] = src.GetValue(b * gm_step + i);
    if (pad.isPad)
      for (uint32_t i = n; i < ub_block; ++i) dst.raw()[d0 + i] = pad.paddingValue;
  }
}
template <class T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  if (p.blockLen % sizeof(T) != 0) ws1emu::fail("DataCopyPad blockLen not a whole number of elements");
  const uint32_t n = p.blockLen / sizeof(T), ub_block = (p.blockLen + 31) / 32 * 32 / sizeof(T);
  const uint64_t gm_step = n + p.dstStride / sizeof(T);
  GlobalTensor<T> d = dst;
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    const uint32_t s0 = b * (ub_block + p.srcStride * 32 / sizeof(T));
    for (uint32_t i = 0; i < n; ++i) d.SetValue(b * gm_step + i, src.GetValue(s0 + i));
  }
}

// ---- vector instructions, "first count elements" (level-2) form -----------------------------------------
// Elementwise binary ops ("Add", "Sub", "Mul", "Div", "Max" pages, the "tensor前n个数据计算" form): dst[i] = a[i] op b[i].
#define WS1_EMU_BINARY(NAME, EXPR)                                                                       \
  template <class T>                                                                                     \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,          \
                   const int32_t count) {                                                                \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() ||                                     \
        static_cast<uint32_t>(count) > a.GetSize() || static_cast<uint32_t>(count) > b.GetSize())        \
      ws1emu::fail(#NAME ": count past a buffer");                                                       \
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
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T s, const int32_t count) { \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() || static_cast<uint32_t>(count) > src.GetSize()) \
      ws1emu::fail(#NAME ": count past a buffer");                                                         \
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
  inline void NAME(const LocalTensor<float>& dst, const LocalTensor<float>& src, const int32_t count) {    \
    if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize() || static_cast<uint32_t>(count) > src.GetSize()) \
      ws1emu::fail(#NAME ": count past a buffer");                                                         \
    for (int32_t i = 0; i < count; ++i) {                                                                  \
      const float x = src.raw()[i];                                                                        \
      dst.raw()[i] = (EXPR);                                                                               \
    }                                                                                                      \
  }
WS1_EMU_UNARY(Exp, std::exp(x))
WS1_EMU_UNARY(Ln, std::log(x))
WS1_EMU_UNARY(Sqrt, std::sqrt(x))
// Sin / Cos: the advanced math API ("Sin", "Cos" pages; the (dst, src, calCount) form that allocates its own
// temporary buffer). ASSUMPTION: fp32 sinf / cosf; the NPU's polynomial differs in the last bits.
WS1_EMU_UNARY(Sin, std::sin(x))
WS1_EMU_UNARY(Cos, std::cos(x))
#undef WS1_EMU_UNARY

// Duplicate ("Duplicate" page): dst[0..count) = scalar.
template <class T>
inline void Duplicate(const LocalTensor<T>& dst, const T& v, const int32_t count) {
  if (count < 0 || static_cast<uint32_t>(count) > dst.GetSize()) ws1emu::fail("Duplicate: count past the buffer");
  for (int32_t i = 0; i < count; ++i) dst.raw()[i] = v;
}

// Cast ("Cast" page 0072, CANN 8.0.0): bfloat16_t -> float with CAST_NONE (exact), float -> bfloat16_t
// with CAST_RINT (round to nearest, ties to even); int32 -> float CAST_NONE (exact below 2^24).
inline void Cast(const LocalTensor<float>& dst, const LocalTensor<bfloat16_t>& src, RoundMode m, uint32_t count) {
  if (m != RoundMode::CAST_NONE) ws1emu::fail("Cast bf16->float: only CAST_NONE is emulated");
  if (count > dst.GetSize() || count > src.GetSize()) ws1emu::fail("Cast: count past a buffer");
  for (uint32_t i = 0; i < count; ++i) dst.raw()[i] = bf16_to_float(src.raw()[i]);
}
inline void Cast(const LocalTensor<bfloat16_t>& dst, const LocalTensor<float>& src, RoundMode m, uint32_t count) {
  if (m != RoundMode::CAST_RINT) ws1emu::fail("Cast float->bf16: only CAST_RINT is emulated");
  if (count > dst.GetSize() || count > src.GetSize()) ws1emu::fail("Cast: count past a buffer");
  for (uint32_t i = 0; i < count; ++i) dst.raw()[i] = float_to_bf16_rint(src.raw()[i]);
}

// ReduceSum, "first count elements" form ("ReduceSum" page 0078, CANN 8.0.0 / 8.1). On Atlas A2/A3 this form uses
// the page's "method 2": a binary tree inside each repeat (256 bytes = 64 fp32 lanes: lanes 2i and 2i+1
// added, then pairs of those, ...), and the repeats' results added IN SEQUENCE (r0 + r1, then + r2, ...).
// dst[0] receives the sum; work must hold the intermediate results (the page's size formula; checked
// loosely here as >= ceil(count / 64) elements).
// ASSUMPTION: in the last, partial repeat the absent lanes enter the tree as +0.0f (the page does not say
// what a masked lane contributes; +0.0f is the identity except that it turns a lone -0.0f into +0.0f).
inline float detail_tree64(const float* x, int32_t n) {
  float lane[64];
  for (int32_t i = 0; i < 64; ++i) lane[i] = i < n ? x[i] : 0.0f;
  for (int32_t w = 32; w >= 1; w /= 2)
    for (int32_t i = 0; i < w; ++i) lane[i] = lane[2 * i] + lane[2 * i + 1];
  return lane[0];
}
inline void ReduceSum(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& work,
                      const int32_t count) {
  if (count <= 0 || static_cast<uint32_t>(count) > src.GetSize()) ws1emu::fail("ReduceSum: bad count");
  const int32_t reps = (count + 63) / 64;
  if (work.GetSize() < static_cast<uint32_t>(reps)) ws1emu::fail("ReduceSum: work buffer too small");
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
                      const int32_t count, bool calIndex = false) {
  if (calIndex) ws1emu::fail("ReduceMax: calIndex is not emulated");
  if (count <= 0 || static_cast<uint32_t>(count) > src.GetSize()) ws1emu::fail("ReduceMax: bad count");
  (void)work;
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

// Nd2NzParams / DataCopy GM -> L1 with ND-to-NZ conversion ("随路格式转换" page 0105, CANN 8.0.0; the
// loop nest is the one of the intrinsic page "copy_gm_to_cbuf_multi_nd2nz"): one ND matrix (ndNum = 1) of nValue rows x dValue columns, srcDValue elements
// between GM rows, written as Nz with dstNzC0Stride (32-byte blocks between column blocks) and dstNzNStride
// (32-byte blocks between rows, 1 here).
struct Nd2NzParams {
  uint16_t ndNum = 1, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0, dstNzC0Stride = 0,
           dstNzNStride = 1, dstNzMatrixStride = 0;
};
template <class T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p) {
  if (p.ndNum != 1) ws1emu::fail("Nd2Nz: only ndNum = 1 is emulated");
  const uint32_t c0 = C0Of<T>::value;
  for (uint32_t r = 0; r < p.nValue; ++r)
    for (uint32_t c = 0; c < p.dValue; ++c) {
      const uint32_t d = (c / c0) * p.dstNzC0Stride * c0 + r * p.dstNzNStride * c0 + c % c0;
      if (d >= dst.GetSize()) ws1emu::fail("Nd2Nz DataCopy past the L1 buffer");
      dst.raw()[d] = src.GetValue(static_cast<uint64_t>(r) * p.srcDValue + c);
    }
}

// InitConstValue ("InitConstValue" page): fill repeatTimes x blockNum 32-byte blocks of an L1 / L0
// buffer with initValue (the kernels zero their tiles so edge tiles carry exact zeros, never garbage).
template <class T>
struct InitConstValueParams {
  uint16_t repeatTimes = 1, blockNum = 0, dstGap = 0;
  T initValue{};
};
template <class T>
inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<T>& p) {
  const uint32_t per_block = 32 / sizeof(T);
  uint32_t at = 0;
  for (uint32_t r = 0; r < p.repeatTimes; ++r) {
    for (uint32_t b = 0; b < p.blockNum * per_block; ++b) dst.SetValue(at + b, p.initValue);
    at += (p.blockNum + p.dstGap) * per_block;
  }
}

// LoadData2DParams / LoadData L1 -> L0A / L0B ("LoadData" page, the LoadData2DParams form): repeatTimes
// fractals of 512 bytes, the i-th read at fractal startIndex + i * srcStride and written at fractal
// i * (1 + dstGap). ifTranspose is not used by WS1 (weights are kept as Bᵀ).
struct LoadData2DParams {
  uint16_t startIndex = 0;
  uint8_t repeatTimes = 0;
  uint16_t srcStride = 0;
  uint8_t sid = 0;
  uint16_t dstGap = 0;
  bool ifTranspose = false;
  uint8_t addrMode = 0;
};
template <class T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p) {
  if (p.ifTranspose) ws1emu::fail("LoadData2D: ifTranspose is not emulated");
  const uint32_t frac = 512 / sizeof(T);
  for (uint32_t i = 0; i < p.repeatTimes; ++i) {
    const uint32_t s = (p.startIndex + i * p.srcStride) * frac, d = i * (1 + p.dstGap) * frac;
    if (s + frac > src.GetSize() || d + frac > dst.GetSize()) ws1emu::fail("LoadData2D past a buffer");
    std::memcpy(dst.raw() + d, src.raw() + s, 512);
  }
}

// MmadParams / Mmad ("Mmad" page, 0242 in CANN 8.0.RC3: MmadParams {m, n, k, isBias, fmOffset, enSsparse,
// enWinogradA, enWinogradB, unitFlag, cmatrixInitVal, cmatrixSource}): C[m, n] (+)= sum_k A[m, k] * B[k, n] on L0A (Zz) x
// L0B (Zn) -> L0C (Nz, fp32); m, n multiples of 16 here, k a multiple of C0. cmatrixInitVal = true starts C
// from zero, false accumulates into what L0C holds.
// ASSUMPTION (the page does not give the Cube's internal order): one Mmad forms, per output element, the
// fp32 sum of its k products in ascending k starting from +0 (a chain of fmaf; bf16 x bf16 products are
// exact in fp32), and adds that partial sum to the L0C value once. So the bits depend on how K is cut into
// Mmad calls (baseK), which is exactly what the kernels pin; the negative control varies it.
struct MmadParams {
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
inline void Mmad(const LocalTensor<float>& c, const LocalTensor<T>& a, const LocalTensor<T>& b, const MmadParams& p) {
  const uint32_t c0 = C0Of<T>::value;
  if (p.m % 16 || p.n % 16 || p.k % c0) ws1emu::fail("Mmad: m, n must be multiples of 16 and k of C0");
  const uint32_t kb = p.k / c0, mp = p.m;
  if (p.m * p.k > a.GetSize() || p.k * p.n > b.GetSize() || p.m * p.n > c.GetSize())
    ws1emu::fail("Mmad: operands past their L0 buffers");
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

// Fixpipe L0C -> GM with NZ-to-ND conversion ("Fixpipe" page 0251, FixpipeParamsV220, CFG_ROW_MAJOR, Atlas A2):
// writes mSize rows x nSize columns of the Nz fp32 tile (srcStride = the tile's m extent, a multiple of 16)
// as ND rows dstStride elements apart; quantPre F322BF16 rounds to bf16 (ASSUMPTION: round to nearest even,
// as CAST_RINT), NoQuant keeps fp32.
enum class QuantMode_t { NoQuant, F322BF16 };
struct FixpipeParamsV220 {
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
inline void Fixpipe(const GlobalTensor<D>& dst, const LocalTensor<U>& c, const FixpipeParamsV220& p) {
  static_assert(std::is_same<U, float>::value, "emulated Fixpipe reads an fp32 L0C");
  if (config.format != CO2Layout::ROW_MAJOR) ws1emu::fail("Fixpipe: only CFG_ROW_MAJOR (NZ2ND) is emulated");
  GlobalTensor<D> d = dst;
  for (uint32_t m = 0; m < p.mSize; ++m)
    for (uint32_t n = 0; n < p.nSize; ++n) {
      const float v = c.GetValue((n / 16) * p.srcStride * 16 + m * 16 + n % 16);
      if constexpr (std::is_same<D, float>::value) {
        if (p.quantPre != QuantMode_t::NoQuant) ws1emu::fail("Fixpipe to fp32 with a quantPre");
        d.SetValue(static_cast<uint64_t>(m) * p.dstStride + n, v);
      } else {
        if (p.quantPre != QuantMode_t::F322BF16) ws1emu::fail("Fixpipe to bf16 needs quantPre F322BF16");
        d.SetValue(static_cast<uint64_t>(m) * p.dstStride + n, float_to_bf16_rint(v));
      }
    }
}

}  // namespace AscendC

namespace ws1emu {
// The launch: like CANN's CPU-debug ICPU_RUN_KF, run the kernel once per block index 0..blockDim-1, each
// with a fresh core state. Blocks run one after another; a kernel whose bits depended on which blocks ran
// concurrently would be wrong on the device and is ruled out by the kernels' design (no atomics, each
// output written by exactly one block), which the tests check by varying blockDim.
inline void launch(uint32_t block_dim, const std::function<void()>& body) {
  if (block_dim == 0) fail("launch with blockDim 0");
  for (uint32_t b = 0; b < block_dim; ++b) {
    core().block_idx = b;
    core().block_num = block_dim;
    body();
  }
}
}  // namespace ws1emu
