// legacy_gemm.h — TEST FIXTURE, not a WS1 kernel: the Cube GEMM as it was before double buffering and the A slab in
// L1 (kernels-ascend/csrc/cube_gemm.h at commit 68187df: one A and one B chunk per Mmad, single-buffered queues, tile t
// -> core t % blockDim), kept so that tests/test_emu_gemm_buffers.py can show the new kernel gives every bit it gave.
// Registered only as the emulator's test op ws1_ascend_emu::legacy_gemm.
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1legacy {
using namespace AscendC;
constexpr uint32_t kBaseM = 64, kBaseN = 128;
template <class TIn, class TOut, uint32_t BK>
class CubeGemm {
  static constexpr uint32_t C0 = 32 / sizeof(TIn);  // 16 for bf16, 8 for fp32
  static constexpr uint32_t MB = kBaseM / 16, NB = kBaseN / 16, KB = BK / C0;
  static constexpr uint32_t FRAC = 16 * C0;        // elements of one 512-byte fractal

 public:
  // KP: the K panel width of a and bt (kWs1KPanel; the tests may pass a smaller multiple of BK)
  __aicore__ inline void Run(GM_ADDR a, GM_ADDR bt, GM_ADDR c, int64_t M, int64_t N, int64_t K, int64_t KP) {
    KP_ = KP;
    ag_.SetGlobalBuffer((__gm__ TIn*)a, M * K);
    bg_.SetGlobalBuffer((__gm__ TIn*)bt, N * K);
    cg_.SetGlobalBuffer((__gm__ TOut*)c, M * N);
    pipe_.InitBuffer(qa1_, 1, kBaseM * BK * sizeof(TIn));
    pipe_.InitBuffer(qb1_, 1, kBaseN * BK * sizeof(TIn));
    pipe_.InitBuffer(qa2_, 1, kBaseM * BK * sizeof(TIn));
    pipe_.InitBuffer(qb2_, 1, kBaseN * BK * sizeof(TIn));
    pipe_.InitBuffer(qc_, 1, kBaseM * kBaseN * sizeof(float));
    // The Cube's HF32 mode rounds FP32 L0A/L0B operands to HF32 before the multiply when on ("SetHF32Mode"); it is
    // core state whose value at kernel start is not documented. gemm_fp32 must multiply full FP32 values, so the
    // mode is set off explicitly (bf16 operands ignore it). The bool form: CANN 8.x has only that one.
    SetHF32Mode(false);
    const int64_t mt = (M + kBaseM - 1) / kBaseM, nt = (N + kBaseN - 1) / kBaseN;
    for (int64_t t = GetBlockIdx(); t < mt * nt; t += GetBlockNum()) Tile(t / nt, t % nt, M, N, K);
  }

 private:
  __aicore__ inline void Tile(int64_t mi, int64_t ni, int64_t M, int64_t N, int64_t K) {
    const int64_t m0 = mi * kBaseM, n0 = ni * kBaseN;
    const uint16_t mv = static_cast<uint16_t>(M - m0 < kBaseM ? M - m0 : kBaseM);
    const uint16_t nv = static_cast<uint16_t>(N - n0 < kBaseN ? N - n0 : kBaseN);
    LocalTensor<float> l0c = qc_.AllocTensor<float>();
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
      const uint16_t kv = static_cast<uint16_t>(K - k0 < BK ? K - k0 : BK);
      // the chunk's panel: p, its width w (the copy's row stride, < 65536) and the chunk's column in it
      const int64_t p = k0 / KP_, kk = k0 - p * KP_, w = K - p * KP_ < KP_ ? K - p * KP_ : KP_;
      // GM -> L1: zero the whole tile, then the valid rows/columns in Nz (column blocks kBase{M,N} rows apart)
      LocalTensor<TIn> a1 = qa1_.AllocTensor<TIn>();
      LocalTensor<TIn> b1 = qb1_.AllocTensor<TIn>();
      InitConstValue(a1, InitConstValueParams<TIn>{1, static_cast<uint16_t>(kBaseM * BK * sizeof(TIn) / 32), 0, TIn{}});
      InitConstValue(b1, InitConstValueParams<TIn>{1, static_cast<uint16_t>(kBaseN * BK * sizeof(TIn) / 32), 0, TIn{}});
      // the fill and the copies below are all PIPE_MTE2 writes to the same L1 bytes: one queue runs them in
      // order but a later one may start before an earlier one ends, so overlapping MTE2 writes need this barrier
      // ("PipeBarrier(ISASI).md", 约束说明) — without it the zeros could land over the copied data.
      PipeBarrier<PIPE_MTE2>();
      DataCopy(a1, ag_[p * M * KP_ + m0 * w + kk], Nd2NzParams{1, mv, kv, 0, static_cast<uint16_t>(w), kBaseM, 1, 0});
      DataCopy(b1, bg_[p * N * KP_ + n0 * w + kk], Nd2NzParams{1, nv, kv, 0, static_cast<uint16_t>(w), kBaseN, 1, 0});
      qa1_.EnQue(a1);
      qb1_.EnQue(b1);
      // L1 -> L0A (Zz): per 16-row block i, its KB fractals, which sit MB fractals apart in Nz
      a1 = qa1_.DeQue<TIn>();
      b1 = qb1_.DeQue<TIn>();
      LocalTensor<TIn> a2 = qa2_.AllocTensor<TIn>();
      LocalTensor<TIn> b2 = qb2_.AllocTensor<TIn>();
      for (uint32_t i = 0; i < MB; ++i)
        LoadData(a2[i * KB * FRAC], a1, LoadData2DParams{static_cast<uint16_t>(i), static_cast<uint8_t>(KB),
                                                         static_cast<uint16_t>(MB), 0, 0, false, 0});
      // L1 -> L0B (Zn of B = Nz of Bt): all KB * NB fractals in order
      LoadData(b2, b1, LoadData2DParams{0, static_cast<uint8_t>(KB * NB), 1, 0, 0, false, 0});
      qa1_.FreeTensor(a1);
      qb1_.FreeTensor(b1);
      qa2_.EnQue(a2);
      qb2_.EnQue(b2);
      a2 = qa2_.DeQue<TIn>();
      b2 = qb2_.DeQue<TIn>();
      MmadParams mp;
      mp.m = kBaseM;
      mp.n = kBaseN;
      mp.k = BK;  // always the full chunk: the zero padding past kv adds exact zeros
      mp.cmatrixInitVal = (k0 == 0);
      Mmad(l0c, a2, b2, mp);
      qa2_.FreeTensor(a2);
      qb2_.FreeTensor(b2);
    }
    qc_.EnQue(l0c);
    l0c = qc_.DeQue<float>();
    FixpipeParamsV220 fp;
    fp.nSize = nv;
    fp.mSize = mv;
    fp.srcStride = kBaseM;
    fp.dstStride = static_cast<uint32_t>(N);
    fp.quantPre = std::is_same<TOut, float>::value ? QuantMode_t::NoQuant : QuantMode_t::F322BF16;
    Fixpipe<TOut, float, CFG_ROW_MAJOR>(cg_[m0 * N + n0], l0c, fp);
    qc_.FreeTensor(l0c);
  }
  int64_t KP_ = 0;
  TPipe pipe_;
  TQue<TPosition::A1, 1> qa1_;
  TQue<TPosition::B1, 1> qb1_;
  TQue<TPosition::A2, 1> qa2_;
  TQue<TPosition::B2, 1> qb2_;
  TQue<TPosition::CO1, 1> qc_;
  GlobalTensor<TIn> ag_, bg_;
  GlobalTensor<TOut> cg_;
};
}  // namespace ws1legacy

extern "C" __global__ __aicore__ void legacy_cube_gemm(GM_ADDR a, GM_ADDR bt, GM_ADDR c, int32_t kind, int64_t M,
                                                       int64_t N, int64_t K, int64_t KP) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  if (kind == 0) { ws1legacy::CubeGemm<bfloat16_t, bfloat16_t, 64> g; g.Run(a, bt, c, M, N, K, KP); }
  else if (kind == 1) { ws1legacy::CubeGemm<bfloat16_t, float, 64> g; g.Run(a, bt, c, M, N, K, KP); }
  else { ws1legacy::CubeGemm<float, float, 64> g; g.Run(a, bt, c, M, N, K, KP); }
}
