// asc_probe_calls.cpp — every Ascend C API call kernels-ascend/csrc makes, one probe each, compiled by
// asc_compile_check.py twice: against CANN's asc-devkit headers (the real API) and against WS1's emulator
// (kernels-ascend/emu/include). Never linked or run (-fsyntax-only).
//
// Each probe starts with a marker line `// PROBE <id> | <API> | <form> | <core> | <token>`; the tool maps
// every diagnostic to the probe whose lines (or whose instantiation) it comes from. <token>: a regex of the name
// by which the kernels' sources use the API; a probe whose token no csrc file contains is reported as not
// (yet) used by the kernels and does not count.
//   form `call`: the call written exactly as the kernels write it (argument types, braces, template
//                arguments, what is left to deduction and default arguments). Both headers must accept it.
//   form `sig`:  the declaration the call must resolve to, pinned by taking the address of that overload
//                (or by static_asserts on member types). Written from reading asc-devkit (the file:line is
//                in docs/ascend.md); compiled against the real headers it proves that reading. The emulator
//                side is reported too: it differs by design where the emulator adds a defaulted trailing
//                `ws1emu::Where` parameter or takes by value what the API takes by const reference.
// Types: the kernels write `bfloat16_t` unqualified inside `using namespace AscendC` (and `AscendC::bfloat16_t`
// at global scope, probe 02); QuantMode_t, pipe_t and event values come from the compiler on the device.
#include <cstdint>
#include <type_traits>

#include "kernel_operator.h"

using namespace AscendC;

// The kernels' buffers, as members of their kernel classes.
struct Bufs {
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  TQue<TPosition::A1, 1> qa1;
  TQue<TPosition::B1, 1> qb1;
  TQue<TPosition::A2, 1> qa2;
  TQue<TPosition::B2, 1> qb2;
  TQue<TPosition::CO1, 1> qc;
  GlobalTensor<float> gf;
  GlobalTensor<bfloat16_t> gb;
  GlobalTensor<int64_t> gi;
};

// PROBE 01 | bfloat16_t | call | aiv | bfloat16_t
void probe_01(Bufs& b) {
  bfloat16_t x{};  // unqualified, as inside namespace ws1a (using namespace AscendC)
  LocalTensor<bfloat16_t> t = b.buf.Get<bfloat16_t>();
  (void)x, (void)t;
}

// PROBE 02 | AscendC::bfloat16_t | call | aiv | AscendC::bfloat16_t
void probe_02(Bufs&) {
  AscendC::bfloat16_t x{};  // as the entry points write it at global scope (Activation<AscendC::bfloat16_t, ...>)
  (void)x;
}

// PROBE 03 | GM_ADDR, __gm__, __aicore__, __global__ | call | aiv | GM_ADDR
extern "C" __global__ __aicore__ void probe_03_kernel(GM_ADDR x, int64_t n) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)x, n);
}

// PROBE 04 | KERNEL_TASK_TYPE_DEFAULT | call | aiv | KERNEL_TASK_TYPE_DEFAULT
void probe_04() {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
}

// PROBE 49 | KernelMetaType enumerators (the macro's argument; CPU-debug expands the macro to nothing) | sig | aiv | KERNEL_TYPE_AI[VC]_ONLY
void probe_49() {
  constexpr auto aiv = KERNEL_TYPE_AIV_ONLY;
  constexpr auto aic = KERNEL_TYPE_AIC_ONLY;
  (void)aiv, (void)aic;
}

// PROBE 05 | GetBlockIdx / GetBlockNum | call | aiv | GetBlockIdx
int64_t probe_05() { return GetBlockIdx() + GetBlockNum(); }

// PROBE 06 | GetBlockIdx / GetBlockNum | sig | aiv | GetBlockIdx
void probe_06() {
  int64_t (*idx)() = &GetBlockIdx;
  int64_t (*num)() = &GetBlockNum;
  (void)idx, (void)num;
}

// PROBE 07 | PipeBarrier | call | aiv | PipeBarrier
void probe_07() { PipeBarrier<PIPE_ALL>(); PipeBarrier<PIPE_V>(); PipeBarrier<PIPE_MTE2>(); }

// PROBE 08 | SetFlag / WaitFlag / HardEvent | call | aiv | SetFlag
void probe_08() {
  SetFlag<HardEvent::V_MTE2>(0);
  WaitFlag<HardEvent::V_MTE2>(0);
  SetFlag<HardEvent::MTE3_MTE2>(1);
  WaitFlag<HardEvent::MTE3_MTE2>(1);
  SetFlag<HardEvent::MTE2_V>(2);
  WaitFlag<HardEvent::MTE2_V>(2);
  SetFlag<HardEvent::V_MTE3>(3);
  WaitFlag<HardEvent::V_MTE3>(3);
  SetFlag<HardEvent::MTE3_V>(4);
  WaitFlag<HardEvent::MTE3_V>(4);
  SetFlag<HardEvent::S_V>(5);
  WaitFlag<HardEvent::S_V>(5);
  SetFlag<HardEvent::V_S>(6);
  WaitFlag<HardEvent::V_S>(6);
}

// PROBE 09 | SetFlag / WaitFlag | sig | aiv | SetFlag
void probe_09() {
  void (*s)(int32_t) = &SetFlag<HardEvent::V_MTE2>;
  void (*w)(int32_t) = &WaitFlag<HardEvent::V_MTE2>;
  (void)s, (void)w;
}

// PROBE 10 | TPipe::InitBuffer, TBuf::Get | call | aiv | InitBuffer
void probe_10(Bufs& b, uint32_t d) {
  b.pipe.InitBuffer(b.buf, d * sizeof(float));
  b.pipe.InitBuffer(b.qin, 1, 3 * 4096 * sizeof(float));
  LocalTensor<float> t = b.buf.Get<float>();
  (void)t;
}

// PROBE 11 | TPipe::InitBuffer | sig | aiv | InitBuffer
void probe_11() {
  bool (TPipe::*q)(TQue<TPosition::VECIN, 1>&, uint8_t, uint32_t) = &TPipe::InitBuffer<TQue<TPosition::VECIN, 1>>;
  bool (TPipe::*t)(TBuf<TPosition::VECCALC>&, uint32_t) = &TPipe::InitBuffer<TPosition::VECCALC>;
  (void)q, (void)t;
}

// PROBE 12 | TQue AllocTensor / EnQue / DeQue / FreeTensor | call | aiv | AllocTensor
void probe_12(Bufs& b) {
  LocalTensor<float> in = b.qin.AllocTensor<float>();
  b.qin.EnQue(in);
  in = b.qin.DeQue<float>();
  b.qin.FreeTensor(in);
}

// PROBE 13 | TQue AllocTensor / EnQue / DeQue / FreeTensor, TBuf::Get | sig | aiv | AllocTensor
void probe_13() {
  using Q = TQue<TPosition::VECIN, 1>;
  LocalTensor<float> (Q::*alloc)() = &Q::AllocTensor<float>;
  bool (Q::*enq)(const LocalTensor<float>&) = &Q::EnQue<float>;
  LocalTensor<float> (Q::*deq)() = &Q::DeQue<float>;
  void (Q::*fr)(LocalTensor<float>&) = &Q::FreeTensor<float>;
  LocalTensor<float> (TBuf<TPosition::VECCALC>::*get)() = &TBuf<TPosition::VECCALC>::Get<float>;
  (void)alloc, (void)enq, (void)deq, (void)fr, (void)get;
}

// PROBE 14 | GlobalTensor SetGlobalBuffer / operator[] / GetValue | call | aiv | SetGlobalBuffer
float probe_14(Bufs& b, GM_ADDR p, int64_t rows, int64_t h, int64_t r) {
  b.gf.SetGlobalBuffer((__gm__ float*)p, rows * h);
  b.gi.SetGlobalBuffer((__gm__ int64_t*)p, rows);
  GlobalTensor<float> row = b.gf[r * h];
  const int64_t id = b.gi.GetValue(r);
  return row.GetValue(0) + static_cast<float>(id);
}

// PROBE 15 | GlobalTensor SetGlobalBuffer / operator[] / GetValue | sig | aiv | SetGlobalBuffer
void probe_15() {
  using G = GlobalTensor<float>;
  void (G::*set)(float*, uint64_t) = &G::SetGlobalBuffer;
  G (G::*at)(const uint64_t) const = &G::operator[];
  float (G::*get)(const uint64_t) const = &G::GetValue;
  (void)set, (void)at, (void)get;
}

// PROBE 16 | LocalTensor operator[] / GetValue / SetValue | call | aiv | GetValue
float probe_16(Bufs& b, uint32_t jj, float v) {
  LocalTensor<float> t = b.buf.Get<float>();
  LocalTensor<float> u = t[4096];
  t.SetValue(jj, v);
  return u.GetValue(0) + t.GetValue(jj);
}

// PROBE 17 | LocalTensor operator[] / GetValue | sig | aiv | GetValue
void probe_17() {
  using L = LocalTensor<float>;
  L (L::*at)(const uint32_t) const = &L::operator[];
  float (L::*get)(const uint32_t) const = &L::GetValue;
  void (L::*set)(const uint32_t, const float) const = &L::SetValue<float>;
  (void)at, (void)get, (void)set;
}

// PROBE 18 | DataCopyExtParams / DataCopyPadExtParams | call | aiv | DataCopyExtParams
void probe_18(uint32_t n) {
  DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0};
  DataCopyPadExtParams<float> pf{false, 0, 0, 0.0f};
  DataCopyPadExtParams<bfloat16_t> pb{false, 0, 0, bfloat16_t{}};
  (void)p, (void)pf, (void)pb;
}

// PROBE 19 | DataCopyExtParams / DataCopyPadExtParams | sig | aiv | DataCopyExtParams
void probe_19() {
  static_assert(std::is_same<decltype(DataCopyExtParams::blockCount), uint16_t>::value, "blockCount");
  static_assert(std::is_same<decltype(DataCopyExtParams::blockLen), uint32_t>::value, "blockLen");
  static_assert(std::is_same<decltype(DataCopyExtParams::srcStride), uint32_t>::value, "srcStride");
  static_assert(std::is_same<decltype(DataCopyExtParams::dstStride), uint32_t>::value, "dstStride");
  static_assert(std::is_same<decltype(DataCopyExtParams::rsv), uint32_t>::value, "rsv");
  static_assert(std::is_same<decltype(DataCopyPadExtParams<float>::isPad), bool>::value, "isPad");
  static_assert(std::is_same<decltype(DataCopyPadExtParams<float>::leftPadding), uint8_t>::value, "leftPadding");
  static_assert(std::is_same<decltype(DataCopyPadExtParams<float>::rightPadding), uint8_t>::value, "rightPadding");
  static_assert(std::is_same<decltype(DataCopyPadExtParams<float>::paddingValue), float>::value, "paddingValue");
}

// PROBE 20 | DataCopyPad GM->UB, UB->GM | call | aiv | DataCopyPad
void probe_20(Bufs& b, uint32_t n) {
  LocalTensor<float> t = b.buf.Get<float>();
  LocalTensor<bfloat16_t> s = b.buf.Get<bfloat16_t>();
  DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0};
  DataCopyPad(t, b.gf, p, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
  DataCopyPad(s, b.gb, p, DataCopyPadExtParams<bfloat16_t>{false, 0, 0, bfloat16_t{}});
  DataCopyPad(b.gf, t, p);
  DataCopyPad(b.gb, s, p);
  DataCopyPad(b.gf[4], t, DataCopyExtParams{1, 4, 0, 0, 0});
}

// PROBE 21 | DataCopyPad GM->UB, UB->GM | sig | aiv | DataCopyPad
void probe_21() {
  void (*in)(const LocalTensor<float>&, const GlobalTensor<float>&, const DataCopyExtParams&,
             const DataCopyPadExtParams<float>&) = &DataCopyPad<float>;
  void (*out)(const GlobalTensor<float>&, const LocalTensor<float>&, const DataCopyExtParams&) = &DataCopyPad<float>;
  (void)in, (void)out;
}

// PROBE 22 | Cast bf16<->fp32 | call | aiv | Cast
void probe_22(Bufs& b, uint32_t n) {
  LocalTensor<float> f = b.buf.Get<float>();
  LocalTensor<bfloat16_t> s = b.buf.Get<bfloat16_t>();
  Cast(f, s, RoundMode::CAST_NONE, n);
  Cast(s, f, RoundMode::CAST_RINT, n);
}

// PROBE 23 | Cast | sig | aiv | Cast
void probe_23() {
  void (*c)(const LocalTensor<float>&, const LocalTensor<bfloat16_t>&, const RoundMode&, const uint32_t) =
      &Cast<float, bfloat16_t>;
  (void)c;
}

// PROBE 24 | Add / Sub / Mul / Div (count form) | call | aiv | Mul
void probe_24(Bufs& b, uint32_t n, int32_t m) {
  LocalTensor<float> x = b.buf.Get<float>(), y = x[4096], z = x[8192];
  Add(x, y, z, n);
  Sub(x, y, z, n);
  Mul(x, y, z, n);
  Div(x, y, z, n);
  Mul(x, x, x, m);
}

// PROBE 25 | Add / Sub / Mul / Div | sig | aiv | Mul
void probe_25() {
  using F = void (*)(const LocalTensor<float>&, const LocalTensor<float>&, const LocalTensor<float>&, const int32_t&);
  F a = &Add<float>, s = &Sub<float>, m = &Mul<float>, d = &Div<float>;
  (void)a, (void)s, (void)m, (void)d;
}

// PROBE 26 | Adds / Muls (count form) | call | aiv | Muls
void probe_26(Bufs& b, uint32_t n, float s) {
  LocalTensor<float> x = b.buf.Get<float>();
  Adds(x, x, -s, n);
  Muls(x, x, s, n);
  Muls(x, x, -1.0f, n);
  Adds(x, x, 1.0f, n);
}

// PROBE 27 | Adds / Muls | sig | aiv | Muls
void probe_27() {
  using F = void (*)(const LocalTensor<float>&, const LocalTensor<float>&, const float&, const int32_t&);
  F a = &Adds<float, true>, m = &Muls<float, true>;
  (void)a, (void)m;
}

// PROBE 28 | Exp / Ln / Sqrt | call | aiv | Exp
void probe_28(Bufs& b, uint32_t n) {
  LocalTensor<float> x = b.buf.Get<float>();
  Exp(x, x, n);
  Ln(x, x, 8);
  Sqrt(x, x, 8);
}

// PROBE 29 | Exp / Ln / Sqrt | sig | aiv | Exp
void probe_29() {
  using F = void (*)(const LocalTensor<float>&, const LocalTensor<float>&, const int32_t&);
  F e = &Exp<float>, l = &Ln<float>, s = &Sqrt<float>;
  (void)e, (void)l, (void)s;
}

// PROBE 30 | Duplicate | call | aiv | Duplicate
void probe_30(Bufs& b, uint32_t n, float v) {
  LocalTensor<float> x = b.buf.Get<float>();
  Duplicate(x, 0.0f, n);
  Duplicate(x, v, 8);
}

// PROBE 31 | Duplicate | sig | aiv | Duplicate
void probe_31() {
  void (*d)(const LocalTensor<float>&, const float&, const int32_t&) = &Duplicate<float>;
  (void)d;
}

// PROBE 32 | Sin / Cos (advanced API, calCount form) | call | aiv | Sin
void probe_32(Bufs& b, uint32_t half) {
  LocalTensor<float> c = b.buf.Get<float>(), s = c[2048], t = c[4096];
  Cos(c, t, half);
  Sin(s, t, half);
}

// PROBE 33 | Sin / Cos | sig | aiv | Sin
void probe_33() {
  using F = void (*)(const LocalTensor<float>&, const LocalTensor<float>&, const uint32_t);
  F s = &Sin<float, false>, c = &Cos<float, false>;
  (void)s, (void)c;
}

// PROBE 34 | ReduceSum / ReduceMax (count form) | call | aiv | ReduceSum
float probe_34(Bufs& b, uint32_t n) {
  LocalTensor<float> x = b.buf.Get<float>(), y = x[4096], w = x[8192];
  ReduceSum(y, x, w, n);
  ReduceMax(y, x, w, n);
  return y.GetValue(0);
}

// PROBE 35 | ReduceSum / ReduceMax | sig | aiv | ReduceSum
void probe_35() {
  void (*s)(const LocalTensor<float>&, const LocalTensor<float>&, const LocalTensor<float>&, const int32_t) =
      &ReduceSum<float, true>;
  void (*m)(const LocalTensor<float>&, const LocalTensor<float>&, const LocalTensor<float>&, const int32_t, bool) =
      &ReduceMax<float>;
  (void)s, (void)m;
}

// PROBE 36 | Nd2NzParams, DataCopy GM->L1 (Nd2Nz) | call | aic | Nd2NzParams
template <class T>
void probe_36_t(TQue<TPosition::A1, 1>& q, GlobalTensor<T>& g, uint16_t mv, uint16_t kv, int64_t K) {
  constexpr uint32_t kBaseM = 64;
  LocalTensor<T> a1 = q.template AllocTensor<T>();
  DataCopy(a1, g[0], Nd2NzParams{1, mv, kv, 0, static_cast<uint16_t>(K), kBaseM, 1, 0});
}
void probe_36(Bufs& b, uint16_t mv, uint16_t kv, int64_t K) {
  probe_36_t<bfloat16_t>(b.qa1, b.gb, mv, kv, K);
  probe_36_t<float>(b.qa1, b.gf, mv, kv, K);
}

// PROBE 37 | Nd2NzParams, DataCopy GM->L1 | sig | aic | Nd2NzParams
void probe_37() {
  static_assert(std::is_same<decltype(Nd2NzParams::srcDValue), uint16_t>::value, "srcDValue is 16 bits on 2201");
  static_assert(std::is_same<decltype(Nd2NzParams::dValue), uint16_t>::value, "dValue");
  static_assert(std::is_same<decltype(Nd2NzParams::dstNzC0Stride), uint16_t>::value, "dstNzC0Stride");
  void (*c)(const LocalTensor<float>&, const GlobalTensor<float>&, const Nd2NzParams&) = &DataCopy<float>;
  (void)c;
}

// PROBE 38 | InitConstValueParams, InitConstValue | call | aic | InitConstValue
template <class T>
void probe_38_t(TQue<TPosition::A1, 1>& q) {
  constexpr uint32_t kBaseM = 64, BK = 64;
  LocalTensor<T> a1 = q.template AllocTensor<T>();
  InitConstValue(a1, InitConstValueParams<T>{1, static_cast<uint16_t>(kBaseM * BK * sizeof(T) / 32), 0, T{}});
}
void probe_38(Bufs& b) {
  probe_38_t<bfloat16_t>(b.qa1);
  probe_38_t<float>(b.qa1);
}

// PROBE 39 | InitConstValue | sig | aic | InitConstValue
void probe_39() {
  void (*i)(const LocalTensor<float>&, const InitConstValueParams<float>&) = &InitConstValue<float, float, true>;
  (void)i;
}

// PROBE 40 | LoadData2DParams, LoadData L1->L0A/L0B | call | aic | LoadData
template <class T>
void probe_40_t(Bufs& b) {
  constexpr uint32_t KB = 4, MB = 4, NB = 8, FRAC = 256;
  LocalTensor<T> a1 = b.qa1.template AllocTensor<T>(), b1 = b.qb1.template AllocTensor<T>();
  LocalTensor<T> a2 = b.qa2.template AllocTensor<T>(), b2 = b.qb2.template AllocTensor<T>();
  for (uint32_t i = 0; i < MB; ++i)
    LoadData(a2[i * KB * FRAC], a1,
             LoadData2DParams{static_cast<uint16_t>(i), static_cast<uint8_t>(KB), static_cast<uint16_t>(MB), 0, 0, false, 0});
  LoadData(b2, b1, LoadData2DParams{0, static_cast<uint8_t>(KB * NB), 1, 0, 0, false, 0});
}
void probe_40(Bufs& b) {
  probe_40_t<bfloat16_t>(b);
  probe_40_t<float>(b);
}

// PROBE 41 | LoadData | sig | aic | LoadData
void probe_41() {
  void (*l)(const LocalTensor<float>&, const LocalTensor<float>&, const LoadData2DParams&) = &LoadData<float>;
  (void)l;
}

// PROBE 42 | MmadParams, Mmad | call | aic | Mmad
template <class T>
void probe_42_t(Bufs& b, int64_t k0) {
  LocalTensor<float> l0c = b.qc.template AllocTensor<float>();
  LocalTensor<T> a2 = b.qa2.template AllocTensor<T>(), b2 = b.qb2.template AllocTensor<T>();
  MmadParams mp;
  mp.m = 64;
  mp.n = 128;
  mp.k = 64;
  mp.cmatrixInitVal = (k0 == 0);
  Mmad(l0c, a2, b2, mp);
}
void probe_42(Bufs& b, int64_t k0) {
  probe_42_t<bfloat16_t>(b, k0);
  probe_42_t<float>(b, k0);
}

// PROBE 43 | MmadParams, Mmad | sig | aic | Mmad
void probe_43() {
  static_assert(std::is_same<decltype(MmadParams::m), uint16_t>::value, "m");
  static_assert(std::is_same<decltype(MmadParams::k), uint16_t>::value, "k");
  static_assert(std::is_same<decltype(MmadParams::cmatrixInitVal), bool>::value, "cmatrixInitVal");
  void (*m)(const LocalTensor<float>&, const LocalTensor<bfloat16_t>&, const LocalTensor<bfloat16_t>&,
            const MmadParams&) = &Mmad<float, bfloat16_t, bfloat16_t>;
  (void)m;
}

// PROBE 44 | FixpipeParamsV220, Fixpipe L0C->GM (CFG_ROW_MAJOR), QuantMode_t | call | aic | Fixpipe
template <class TOut>
void probe_44_t(Bufs& b, GlobalTensor<TOut>& cg, uint16_t mv, uint16_t nv, int64_t N) {
  LocalTensor<float> l0c = b.qc.template DeQue<float>();
  FixpipeParamsV220 fp;
  fp.nSize = nv;
  fp.mSize = mv;
  fp.srcStride = 64;
  fp.dstStride = static_cast<uint32_t>(N);
  fp.quantPre = std::is_same<TOut, float>::value ? QuantMode_t::NoQuant : QuantMode_t::F322BF16;
  Fixpipe<TOut, float, CFG_ROW_MAJOR>(cg[0], l0c, fp);
}
void probe_44(Bufs& b, uint16_t mv, uint16_t nv, int64_t N) {
  probe_44_t<float>(b, b.gf, mv, nv, N);
  probe_44_t<bfloat16_t>(b, b.gb, mv, nv, N);
}

// PROBE 45 | Fixpipe | sig | aic | Fixpipe
void probe_45() {
  static_assert(std::is_same<decltype(FixpipeParamsV220::nSize), uint16_t>::value, "nSize");
  static_assert(std::is_same<decltype(FixpipeParamsV220::srcStride), uint16_t>::value, "srcStride");
  static_assert(std::is_same<decltype(FixpipeParamsV220::dstStride), uint32_t>::value, "dstStride");
  static_assert(std::is_same<decltype(FixpipeParamsV220::quantPre), QuantMode_t>::value, "quantPre");
  void (*f)(const GlobalTensor<float>&, const LocalTensor<float>&, const FixpipeParamsV220&) =
      &Fixpipe<float, float, CFG_ROW_MAJOR>;
  (void)f;
}

// PROBE 46 | TPosition, RoundMode, QuePosition enumerators | call | aiv | TPosition
void probe_46() {
  constexpr TPosition p[] = {TPosition::GM, TPosition::VECIN, TPosition::VECOUT, TPosition::VECCALC,
                             TPosition::A1, TPosition::A2, TPosition::B1, TPosition::B2, TPosition::CO1};
  constexpr RoundMode r[] = {RoundMode::CAST_NONE, RoundMode::CAST_RINT};
  QuePosition q = TPosition::VECIN;
  (void)p, (void)r, (void)q;
}

// PROBE 47 | GetTPipePtr()->FetchEventID, TEventID | call | aiv | FetchEventID
void probe_47() {
  const TEventID id = GetTPipePtr()->FetchEventID(HardEvent::V_MTE2);  // ws1_ascend_kernel.h's V->MTE2 wait
  SetFlag<HardEvent::V_MTE2>(id);
  WaitFlag<HardEvent::V_MTE2>(id);
}

// PROBE 50 | event_t (the docs' SetFlag idiom) | call | aiv | event_t
void probe_50() {
  event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE2));
  SetFlag<HardEvent::V_MTE2>(id);
  WaitFlag<HardEvent::V_MTE2>(id);
}

// PROBE 51 | TPipe::FetchEventID, GetTPipePtr | sig | aiv | FetchEventID
void probe_51() {
  TEventID (TPipe::*f)(HardEvent) = &TPipe::FetchEventID;
  TPipe* (*g)() = &GetTPipePtr;
  static_assert(std::is_same<TEventID, int8_t>::value, "TEventID");
  (void)f, (void)g;
}

// PROBE 52 | DataCacheCleanAndInvalid (GM, whole cache) | call | aiv | DataCacheCleanAndInvalid
template <class T>
void probe_52_t(const GlobalTensor<T>& any) {
  DataCacheCleanAndInvalid<T, CacheLine::ENTIRE_DATA_CACHE, DcciDst::CACHELINE_OUT>(any);
}
void probe_52(Bufs& b) {
  probe_52_t(b.gf);
  probe_52_t(b.gi);
  probe_52_t(b.gb);
}

// PROBE 53 | DataCacheCleanAndInvalid, CacheLine, DcciDst | sig | aiv | DataCacheCleanAndInvalid
void probe_53() {
  void (*d)(const GlobalTensor<float>&) =
      &DataCacheCleanAndInvalid<float, CacheLine::ENTIRE_DATA_CACHE, DcciDst::CACHELINE_OUT>;
  static_assert(std::is_same<std::underlying_type<CacheLine>::type, uint64_t>::value, "CacheLine : uint64_t");
  static_assert(std::is_same<std::underlying_type<DcciDst>::type, uint64_t>::value, "DcciDst : uint64_t");
  (void)d;
}

// PROBE 54 | SetHF32Mode(bool) | call | aic | SetHF32Mode
void probe_54() { SetHF32Mode(false); }

// PROBE 55 | SetHF32Mode | sig | aic | SetHF32Mode
void probe_55() {
  void (*h)(bool) = &SetHF32Mode;
  (void)h;
}

// PROBE 48 | EVENT_ID0..7 | call | aiv | EVENT_ID[0-7]
void probe_48() {
  SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID7);
}
