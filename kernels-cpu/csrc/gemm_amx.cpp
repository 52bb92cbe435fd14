// det_gemm / lm_head on AMX-BF16 tiles (TDPBF16PS): the amx path, only when asked for (WS1_CPU_ISA=amx).
//
// NOT the chain of gemm.cpp's contract. TDPBF16PS accumulates 32 k per instruction in a way the manual
// does not describe and portable code cannot reproduce (measured: docs/numerics.md "BF16 matrix units",
// bf16_unit_probe), so this path's bits differ from the other paths'; its own arch key ("amx", from
// ws1_cpu::calls()) says so in every record. It is batch-invariant within itself by construction:
//  * an output element (m, n) is one tile element: acc = +0 (tile zero); for each K-step s of 32 k,
//    ascending: acc = TDPBF16PS(acc, w[n, 32s .. 32s+31], x[m, 32s .. 32s+31]); then FP32 out or one RNE
//    rounding to BF16. The K-step (32) and the K-loop order are the same for every M, N, row position
//    and thread count; the tile computes each element from its own W row and X column only;
//  * K tails are padded to the 32-k step, W with +0 and X with -0, so a padded product is -0 and adds
//    nothing to any accumulator (whatever the unit's internal order);
//  * M and N edges are padded tiles (zero rows / columns), never another instruction sequence;
//  * parallelism over blocks of 32 output columns (n) only.
// C^T = W . X^T: the weight [N, K] (rows contiguous in k) is in the A-tile layout (16 rows x 32 bf16)
// already and is read in place (edge blocks through a padded copy); X (M x K, small) is packed once
// into the B-tile layout (pairs of k: Xv[k/2][m][2]).
//
// Linux grants the tile data state only after arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
// isa.cpp asks once and refuses the amx path (an error, never a fallback) if the kernel says no.
#include <vector>

#include "gemm.h"

namespace ws1_gemm {
namespace amx {
namespace {

constexpr int TK = 32;   // k per tile instruction (16 pairs)
constexpr int TM = 16;   // m per X tile
constexpr int TN = 16;   // n per W tile
constexpr uint16_t kPadW = 0x0000u, kPadX = 0x8000u;
// Cache blocking (speed only; the chain per element is the same for any blocking): K blocks of
// KSB K-steps (512 k: a block's 32 W rows, 32 KiB, and the X panel stay in cache across the m-pairs),
// and NBC blocks of 32 columns per K sweep (their FP32 accumulators, NBC x 4 KiB per 32 rows of M).
constexpr int64_t KSB = 16;
constexpr int64_t NBC = 8;

struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

}  // namespace
}  // namespace amx
}  // namespace ws1_gemm

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
namespace ws1_gemm {
namespace amx {
namespace {

// Tiles 0..3: C (2 n-tiles x 2 m-tiles, 16 x 16 fp32); 4, 5: W (16 n x 32 k); 6, 7: X (16 pairs x 16 m).
void configure() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  // GCC does not see LDTILECFG read the struct and drops the stores above without this barrier
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// One block: 32 output columns n (W tiles w0 / w1, 16 rows x 32 k, the next K-step wstep bf16 on, rows
// wstride bytes apart) x 32 rows m (X tiles xv0 /
// xv1, 512 bf16 per K-step) over ksteps K-steps, C^T in c[4][16][16] (tile t: n-half t/2, m-half t%2):
// started from +0 (first K block) or from c itself (FP32, stored and reloaded exactly, so K blocking
// does not change the chain). nm = 1 or 2 m-tiles; nn = 1 or 2 n-tiles (absent tiles: unused values).
void block(const uint16_t* w0, const uint16_t* w1, int64_t wstep, int64_t wstride, const uint16_t* xv0,
           const uint16_t* xv1, int64_t ksteps, int nn, int nm, bool first, float* c) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, 64);
    _tile_loadd(1, c + 256, 64);
    _tile_loadd(2, c + 512, 64);
    _tile_loadd(3, c + 768, 64);
  }
  for (int64_t s = 0; s < ksteps; ++s) {
    _tile_loadd(4, w0 + s * wstep, wstride);
    _tile_loadd(6, xv0 + s * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (nm == 2) {
      _tile_loadd(7, xv1 + s * 512, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if (nn == 2) {
      _tile_loadd(5, w1 + s * wstep, wstride);
      _tile_dpbf16ps(2, 5, 6);
      if (nm == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}

void release() { _tile_release(); }

}  // namespace
}  // namespace amx
}  // namespace ws1_gemm
#pragma GCC pop_options

WS1_BEGIN_AVX512_BW
namespace ws1_gemm {
namespace amx {
namespace {
// One X tile of a full K-step from rows with k contiguous: row i's 16 pairs are 16 dwords, so the tile
// (t[j][i] = pair j of row i) is a 16 x 16 dword transpose. Rows >= rows are +0.
void pack_x_step(const uint16_t* x, int64_t ldx, int rows, uint16_t* t) {
  __m512i r[16], o[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(x + i * ldx) : _mm512_setzero_si512();
  ::ws1_gemm::v5::transpose16_epi32(r, o);
  for (int j = 0; j < 16; ++j) _mm512_storeu_si512(t + j * 32, o[j]);
}
}  // namespace
}  // namespace amx
}  // namespace ws1_gemm
WS1_END_ISA

namespace ws1_gemm {
namespace amx {

void gemm(const Operand& A, const uint16_t* W, int64_t M, int64_t N, int64_t K, float* outf, uint16_t* outb) {
  const int64_t ksteps = (K + TK - 1) / TK;
  const int64_t mtiles = (M + TM - 1) / TM;
  // X -> B tiles: xv[mt][s][j][i][2] = pair (x[16 mt + i, 32 s + 2j], x[.., 32 s + 2j + 1]), AMX order
  // (k in the low half); rows m >= M are +0, k >= K is kPadX.
  std::vector<uint16_t> xv(static_cast<size_t>(mtiles * ksteps * 512));
  const uint16_t* pa = static_cast<const uint16_t*>(A.p);
  for (int64_t mt = 0; mt < mtiles; ++mt)
    for (int64_t s = 0; s < ksteps; ++s) {
      uint16_t* t = xv.data() + (mt * ksteps + s) * 512;
      if (A.s1 == 1 && (s + 1) * TK <= K) {  // whole step, k contiguous: a register transpose
        pack_x_step(pa + mt * TM * A.s0 + s * TK, A.s0, static_cast<int>(std::min<int64_t>(TM, M - mt * TM)), t);
        continue;
      }
      for (int j = 0; j < 16; ++j)
        for (int i = 0; i < 16; ++i)
          for (int h = 0; h < 2; ++h) {
            const int64_t m = mt * TM + i, k = s * TK + 2 * j + h;
            t[j * 32 + i * 2 + h] = m >= M ? 0 : (k < K ? pa[m * A.s0 + k * A.s1] : kPadX);
          }
    }
  const int64_t nblocks = (N + 2 * TN - 1) / (2 * TN);
  const int64_t mpairs = (mtiles + 1) / 2;
  ::ws1::parallel_for(0, (nblocks + NBC - 1) / NBC, 1, [&](int64_t c0, int64_t c1) {
    configure();
    std::vector<float> acc(static_cast<size_t>(NBC * mpairs * 1024));
    std::vector<uint16_t> wpanel(static_cast<size_t>(2 * KSB * TN * TK));
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t bb0 = chunk * NBC, bb1 = std::min(nblocks, bb0 + NBC);
      for (int64_t s0 = 0; s0 < ksteps; s0 += KSB) {
        const int64_t ns = std::min(KSB, ksteps - s0);
        const bool first = s0 == 0, last = s0 + ns == ksteps;
        for (int64_t b = bb0; b < bb1; ++b) {
          const int64_t n0 = b * 2 * TN;
          const int nrows = static_cast<int>(std::min<int64_t>(2 * TN, N - n0));
          const int nn = nrows > TN ? 2 : 1;
          // W tiles: read in place (rows K apart) when the block lies inside W; an edge block (last
          // n-tiles when N % 32, last K-step when K % 32) is copied first as contiguous tiles,
          // wpanel[tile][step][16 rows][32 k], +0 beyond N and kPadW beyond K. The tile values are the
          // same either way. (Copying every block into L1-resident tiles was measured slower at M=256.)
          const bool in_place = n0 + 2 * TN <= N && (s0 + ns) * TK <= K;
          const uint16_t* wt0 = W + n0 * K + s0 * TK;
          const uint16_t* wt1 = wt0 + TN * K;
          int64_t wstep = TK, wstride = K * 2;
          if (!in_place) {
            wt0 = wpanel.data();
            wt1 = wt0 + KSB * TN * TK;
            wstep = TN * TK;
            wstride = TK * 2;
          }
          for (int tn = 0; tn < 2 && !in_place; ++tn)
            for (int64_t s = 0; s < ns; ++s)
              for (int r = 0; r < TN; ++r) {
                uint16_t* d = wpanel.data() + ((tn * KSB + s) * TN + r) * TK;
                const int64_t n = n0 + tn * TN + r, k0 = (s0 + s) * TK;
                if (n < N && k0 + TK <= K) {
                  std::memcpy(d, W + n * K + k0, TK * sizeof(uint16_t));
                } else {
                  for (int kk = 0; kk < TK; ++kk) d[kk] = (n < N && k0 + kk < K) ? W[n * K + k0 + kk] : kPadW;
                }
              }
          for (int64_t mp = 0; mp < mpairs; ++mp) {
            const int64_t mt = 2 * mp;
            const int nm = mt + 1 < mtiles ? 2 : 1;
            const uint16_t* x0 = xv.data() + mt * ksteps * 512 + s0 * 512;
            const uint16_t* x1 = nm == 2 ? x0 + ksteps * 512 : x0;
            float* c = acc.data() + ((b - bb0) * mpairs + mp) * 1024;
            block(wt0, wt1, wstep, wstride, x0, x1, ns, nn, nm, first, c);
            if (!last) continue;
            for (int t = 0; t < 4; ++t) {
              const int tn = t / 2, tm = t % 2;
              if (tn >= nn || tm >= nm) continue;
              const int ni = static_cast<int>(std::min<int64_t>(TN, N - (n0 + tn * TN)));
              for (int j = 0; j < TM; ++j) {  // output row m gets 16 contiguous columns from C^T's column j
                const int64_t m = (mt + tm) * TM + j;
                if (m >= M) break;
                const int64_t o = m * N + n0 + tn * TN;
                for (int i = 0; i < ni; ++i) {
                  const float v = c[t * 256 + i * 16 + j];
                  if (outb != nullptr) outb[o + i] = f32_to_bf16_bits(v);
                  else outf[o + i] = v;
                }
              }
            }
          }
        }
      }
    }
    release();
  });
}

}  // namespace amx
}  // namespace ws1_gemm
