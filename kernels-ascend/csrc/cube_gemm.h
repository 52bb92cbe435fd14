// cube_gemm.h — the WS1 GEMM on the Cube unit (AIC), shared by det_gemm.asc and lm_head.asc.
//
//   C[M, N] = A[M, K] · Bᵀ,  A row-major [M, K], Bt row-major [N, K] (a weight as stored, = Bᵀ), C [M, N].
//
// Hand-written tiling, NOT the high-level Matmul API (whose tiling may pick baseK and split K by shape):
//  * fixed baseM = 64, baseN = 128, baseK = BK (64 for the kernels, another value only in the negative
//    control) for EVERY M, N, K: an edge tile is zero-padded and computed with the same Mmad shape, never a
//    smaller one — so an output element's K chunks, and hence its bits, do not depend on M;
//  * K is walked in ascending baseK chunks; each chunk is one Mmad into the tile's FP32 L0C accumulator
//    (cmatrixInitVal for the first chunk, accumulate after): no split-K across cores, no AtomicAdd;
//  * work items are groups of kGemmMGroup x kGemmNGroup = 2 x 2 output tiles (consecutive M and N tiles), numbered
//    M-group major, and go to cores by item % GetBlockNum(): an output tile is computed start to finish by one core,
//    whatever blockDim is.
// Data path and overlap (none of it changes an element's chunks or their order — the tests compare every bit
// with the single-buffered kernel this replaced, emu/csrc/legacy_gemm.h):
//  * A: per K slab of kGemmSlab bytes (64 rows x 512 bf16 / 256 fp32 columns) of each of the item's M tiles,
//    GM -(DataCopy Nd2Nz)-> L1 once and KEPT there for the item's N tiles (A's GM traffic / 2); the slab queue has
//    two buffers per M tile, so the next slab's copy overlaps this one's Mmads;
//  * B: per (N tile, chunk) GM -> L1 -> L0B once for the item's M tiles (B's GM traffic / 2), through two-buffer
//    queues (depth 1, two buffers: "TQue简介.md" double buffer): the copy-in of the next chunk overlaps the Mmads of
//    the current one;
//  * L1 -> L0A (Zz) per M tile and chunk, Mmad into the output tile's L0C accumulator (four: all of L0C), at the end
//    of the item Fixpipe L0C -> GM (NZ2ND; F322BF16 for a bf16 C).
//    Bt [N, K] in Nz is exactly B [K, N] in Zn, so B is loaded without transpose. Tiles are zeroed (InitConstValue)
//    only where they are partial (edge rows, the last K chunk), which puts the same zeros in the same places.
// TIn: bfloat16_t (det_gemm, lm_head) or float (gemm_fp32: the FP32-input GEMM of the row-fold VJP —
// dx = dy · W and dW = dyᵀ · x over canonically ordered rows, both FP32 in, FP32 out).
//
// K panels: Nd2NzParams.srcDValue (the GM row stride of a copy) is 16 bits, so a row-major [rows, K] operand with
// K >= 65536 — dW = dyᵀ · x over 65536 tokens or more — cannot be copied row by row. The host therefore passes
// A and Bt cut along K into panels of KP = kWs1KPanel columns (ws1_ascend_launch.h; the last one narrower), each
// panel row-major [rows, width] and the panels one after another; for K <= KP that is the plain layout. Every panel
// width but the last is a multiple of baseK, so the chunks and their ascending order — hence every bit — are
// the same whatever KP is (the tests compare KP = kWs1KPanel with a small KP). An A slab that straddles a panel
// boundary is copied in two pieces.
#pragma once
#include "ws1_ascend_kernel.h"

namespace ws1a {
constexpr uint32_t kBaseM = 64, kBaseN = 128, kBaseK = 64;
constexpr uint32_t kGemmMGroup = 2;          // M tiles per work item, sharing every B chunk in L1 / L0B
constexpr uint32_t kGemmNGroup = 2;          // N tiles per work item, sharing the A slabs in L1
constexpr uint32_t kGemmSlab = 64 * 1024;    // bytes of one A slab in L1 (64 rows)

template <class TIn, class TOut, uint32_t BK>
class CubeGemm {
  static constexpr uint32_t C0 = 32 / sizeof(TIn);  // 16 for bf16, 8 for fp32
  static constexpr uint32_t MB = kBaseM / 16, NB = kBaseN / 16, KB = BK / C0;
  static constexpr uint32_t FRAC = 16 * C0;        // elements of one 512-byte fractal
  static constexpr uint32_t KS = kGemmSlab / (kBaseM * sizeof(TIn));  // A slab columns: 512 bf16, 256 fp32
  static_assert(KS % BK == 0, "an A slab holds whole K chunks");

 public:
  // KP: the K panel width of a and bt (kWs1KPanel; the tests may pass a smaller multiple of BK)
  __aicore__ inline void Run(GM_ADDR a, GM_ADDR bt, GM_ADDR c, int64_t M, int64_t N, int64_t K, int64_t KP) {
    M_ = M, N_ = N, K_ = K, KP_ = KP;
    ag_.SetGlobalBuffer((__gm__ TIn*)a, M * K);
    bg_.SetGlobalBuffer((__gm__ TIn*)bt, N * K);
    cg_.SetGlobalBuffer((__gm__ TOut*)c, M * N);
    pipe_.InitBuffer(qa1_, 2 * kGemmMGroup, kGemmSlab);  // this slab of each M tile, and the next
    pipe_.InitBuffer(qb1_, 2, kBaseN * BK * sizeof(TIn));
    pipe_.InitBuffer(qa2_, 2, kBaseM * BK * sizeof(TIn));
    pipe_.InitBuffer(qb2_, 2, kBaseN * BK * sizeof(TIn));
    pipe_.InitBuffer(qc_, kGemmMGroup * kGemmNGroup, kBaseM * kBaseN * sizeof(float));  // 4 x 32 KB: all of L0C
    // The Cube's HF32 mode rounds FP32 L0A/L0B operands to HF32 before the multiply when on ("SetHF32Mode"); it is
    // core state whose value at kernel start is not documented. gemm_fp32 must multiply full FP32 values, so the
    // mode is set off explicitly (bf16 operands ignore it). The bool form: CANN 8.x has only that one.
    SetHF32Mode(false);
    const int64_t mt = (M + kBaseM - 1) / kBaseM, nt = (N + kBaseN - 1) / kBaseN;
    const int64_t mg = (mt + kGemmMGroup - 1) / kGemmMGroup, ng = (nt + kGemmNGroup - 1) / kGemmNGroup;
    for (int64_t it = GetBlockIdx(); it < mg * ng; it += GetBlockNum()) {
      const int64_t m0 = (it / ng) * kGemmMGroup, n0 = (it % ng) * kGemmNGroup;
      Item(m0, m0 + kGemmMGroup < mt ? m0 + kGemmMGroup : mt, n0, n0 + kGemmNGroup < nt ? n0 + kGemmNGroup : nt);
    }
  }

 private:
  __aicore__ inline uint16_t Rows(int64_t mi) const {
    return static_cast<uint16_t>(M_ - mi * kBaseM < kBaseM ? M_ - mi * kBaseM : kBaseM);
  }
  // output tiles [mtb, mte) x [ntb, nte): per K slab, the A slab of each M tile -> L1 once; per N tile and chunk, the
  // B chunk -> L1 and L0B once, then one Mmad per M tile. Each tile's accumulator gets its chunks in ascending K.
  __aicore__ inline void Item(int64_t mtb, int64_t mte, int64_t ntb, int64_t nte) {
    LocalTensor<float> acc[kGemmMGroup][kGemmNGroup];
    for (int64_t m = mtb; m < mte; ++m)
      for (int64_t n = ntb; n < nte; ++n) acc[m - mtb][n - ntb] = qc_.AllocTensor<float>();
    for (int64_t s0 = 0; s0 < K_; s0 += KS) {
      const int64_t sw = K_ - s0 < KS ? K_ - s0 : KS;  // valid columns of the slab
      LocalTensor<TIn> a1[kGemmMGroup];
      for (int64_t m = mtb; m < mte; ++m) {
        const uint16_t mv = Rows(m);
        LocalTensor<TIn> t = qa1_.AllocTensor<TIn>();
        if (mv < kBaseM || sw < KS) {  // a partial slab: zeros where no data lands
          InitConstValue(t, InitConstValueParams<TIn>{1, static_cast<uint16_t>(kGemmSlab / 32), 0, TIn{}});
          // the fill and the copies are PIPE_MTE2 writes to the same L1 bytes ("PipeBarrier(ISASI).md", 约束说明)
          PipeBarrier<PIPE_MTE2>();
        }
        for (int64_t c = s0; c < s0 + sw;) {  // one copy per K panel the slab touches
          const int64_t p = c / KP_, w = K_ - p * KP_ < KP_ ? K_ - p * KP_ : KP_;
          const int64_t e = (p + 1) * KP_ < s0 + sw ? (p + 1) * KP_ : s0 + sw;
          DataCopy(t[static_cast<uint32_t>((c - s0) * kBaseM)], ag_[p * M_ * KP_ + m * kBaseM * w + (c - p * KP_)],
                   Nd2NzParams{1, mv, static_cast<uint16_t>(e - c), 0, static_cast<uint16_t>(w), kBaseM, 1, 0});
          c = e;
        }
        qa1_.EnQue(t);
        a1[m - mtb] = qa1_.DeQue<TIn>();
      }
      for (int64_t n = ntb; n < nte; ++n)
        for (int64_t k0 = s0; k0 < s0 + sw; k0 += BK)
          Chunk(acc, a1, mte - mtb, n - ntb, static_cast<uint32_t>((k0 - s0) / BK), n, k0);
      for (int64_t m = mtb; m < mte; ++m) qa1_.FreeTensor(a1[m - mtb]);
    }
    for (int64_t m = mtb; m < mte; ++m)
      for (int64_t n = ntb; n < nte; ++n) {
        const int64_t m0 = m * kBaseM, n0 = n * kBaseN;
        const uint16_t nv = static_cast<uint16_t>(N_ - n0 < kBaseN ? N_ - n0 : kBaseN);
        LocalTensor<float> l0c = acc[m - mtb][n - ntb];
        qc_.EnQue(l0c);
        l0c = qc_.DeQue<float>();
        FixpipeParamsV220 fp;
        fp.nSize = nv;
        fp.mSize = Rows(m);
        fp.srcStride = kBaseM;
        fp.dstStride = static_cast<uint32_t>(N_);
        fp.quantPre = std::is_same<TOut, float>::value ? QuantMode_t::NoQuant : QuantMode_t::F322BF16;
        Fixpipe<TOut, float, CFG_ROW_MAJOR>(cg_[m0 * N_ + n0], l0c, fp);
        qc_.FreeTensor(l0c);
      }
  }
  // one K chunk (chunk ci of the slabs a1, columns k0 ..) of N tile n: B -> L1 -> L0B once, then for every M tile of
  // the item its A chunk -> L0A and the Mmad into its accumulator
  __aicore__ inline void Chunk(LocalTensor<float> (&acc)[kGemmMGroup][kGemmNGroup], const LocalTensor<TIn> (&a1)[kGemmMGroup],
                               int64_t nm, int64_t jn, uint32_t ci, int64_t n, int64_t k0) {
    const int64_t n0 = n * kBaseN;
    const uint16_t nv = static_cast<uint16_t>(N_ - n0 < kBaseN ? N_ - n0 : kBaseN);
    const uint16_t kv = static_cast<uint16_t>(K_ - k0 < BK ? K_ - k0 : BK);
    // the chunk's panel: p, its width w (the copy's row stride, < 65536) and the chunk's column in it
    const int64_t p = k0 / KP_, kk = k0 - p * KP_, w = K_ - p * KP_ < KP_ ? K_ - p * KP_ : KP_;
    LocalTensor<TIn> b1 = qb1_.AllocTensor<TIn>();
    if (nv < kBaseN || kv < BK) {
      InitConstValue(b1, InitConstValueParams<TIn>{1, static_cast<uint16_t>(kBaseN * BK * sizeof(TIn) / 32), 0, TIn{}});
      PipeBarrier<PIPE_MTE2>();
    }
    DataCopy(b1, bg_[p * N_ * KP_ + n0 * w + kk], Nd2NzParams{1, nv, kv, 0, static_cast<uint16_t>(w), kBaseN, 1, 0});
    qb1_.EnQue(b1);
    b1 = qb1_.DeQue<TIn>();
    // L1 -> L0B (Zn of B = Nz of Bt): all KB * NB fractals in order
    LocalTensor<TIn> b2 = qb2_.AllocTensor<TIn>();
    LoadData(b2, b1, LoadData2DParams{0, static_cast<uint8_t>(KB * NB), 1, 0, 0, false, 0});
    qb1_.FreeTensor(b1);
    qb2_.EnQue(b2);
    b2 = qb2_.DeQue<TIn>();
    for (int64_t jm = 0; jm < nm; ++jm) {
      // L1 -> L0A (Zz): per 16-row block i, the chunk's KB fractals, which sit MB fractals apart in the slab's Nz
      LocalTensor<TIn> a2 = qa2_.AllocTensor<TIn>();
      for (uint32_t i = 0; i < MB; ++i)
        LoadData(a2[i * KB * FRAC], a1[jm], LoadData2DParams{static_cast<uint16_t>(ci * KB * MB + i),
                                                             static_cast<uint8_t>(KB), static_cast<uint16_t>(MB), 0, 0,
                                                             false, 0});
      qa2_.EnQue(a2);
      a2 = qa2_.DeQue<TIn>();
      MmadParams mp;
      mp.m = kBaseM;
      mp.n = kBaseN;
      mp.k = BK;  // always the full chunk: the zero padding past kv adds exact zeros
      mp.cmatrixInitVal = (k0 == 0);
      Mmad(acc[jm][jn], a2, b2, mp);  // (64/16)(128/16) = 32 >= 10: the Cube orders Mmads into one L0C itself
      qa2_.FreeTensor(a2);
    }
    qb2_.FreeTensor(b2);
  }
  int64_t M_ = 0, N_ = 0, K_ = 0, KP_ = 0;
  TPipe pipe_;
  TQue<TPosition::A1, 1> qa1_;
  TQue<TPosition::B1, 1> qb1_;
  TQue<TPosition::A2, 1> qa2_;
  TQue<TPosition::B2, 1> qb2_;
  TQue<TPosition::CO1, 1> qc_;
  GlobalTensor<TIn> ag_, bg_;
  GlobalTensor<TOut> cg_;
};
}  // namespace ws1a
