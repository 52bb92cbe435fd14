// GEMM family for the ws1_cpu kernels: det_gemm (bf16 out), lm_head (fp32 out) and the general
// strided/mixed-dtype gemm used by backward passes. All three share one core.
//
// NUMERICAL CONTRACT (the point of these files). Every output element is
//
//     acc = +0.0f;
//     for (k = 0; k < K; ++k) acc = fmaf(float(a[m, k]), float(b[n, k]), acc);   // ascending k
//     c[m, n] = out_fp32 ? acc : bf16_rne(acc);
//
// i.e. one serial chain of single-rounded FP32 FMAs per output element, whose order depends only
// on K. When both operands are bf16 (det_gemm, lm_head, and gemm on bf16 x bf16) each step also
// follows the BF16 unit's flush rules, so that VDPBF16PS computes the same chain (gemm.h chain_step;
// docs/numerics.md "BF16 matrix units"): bf16 denormal inputs read as zero, and a step whose exact
// result is nonzero and below FLT_MIN in magnitude gives a zero of its sign. The vector paths get
// this from MXCSR.FTZ|DAZ (FlushScope), the scalar path writes it out, VDPBF16PS does it itself.
// Nothing else in this file, gemm_pack.cpp or gemm_uk_*.cpp may change that sequence:
//  * the micro-kernel is the classic outer-product kernel: a broadcast of a[m, k] times a vector
//    of b[n..n+15, k], FMA'd into an accumulator whose lanes are 16 *different outputs*. There is
//    no horizontal reduction and no split of K across lanes, threads or partial sums;
//  * K is blocked (KC) only with the FP32 partial accumulator carried across blocks: stored as
//    FP32 and reloaded (exact), so the chain is the same as without blocking;
//  * parallelism (at::parallel_for, honouring torch.set_num_threads) is over output tiles only;
//  * edge tiles: the B panel is zero-padded to NR columns (the padded lanes are never stored) and
//    the M edge uses a micro-kernel instantiated for the exact row count (same chain per element);
//  * inputs are converted to FP32 exactly (bf16 -> fp32 is a 16-bit shift) when they are packed;
//  * scalar (std::fma), AVX2 (_mm256_fmadd_ps) and AVX-512 (_mm512_fmadd_ps) paths execute the
//    same IEEE-754 operations, and the build uses -ffp-contract=off, so all give the same bits;
//  * the avx512bf16 path (VDPBF16PS, two k per instruction) packs k into the high half of each bf16
//    pair, which the instruction multiplies and accumulates first: the same chain, two steps at a time;
//    odd-K padding is an A = -0, B = +0 pair, whose product -0 leaves every accumulator unchanged.
// Consequence: results are bitwise independent of M, of the row position, of padding / tiling,
// of the thread count, and of the ISA path.
//
// Special values: NaN and Inf propagate as IEEE FMA says (e.g. Inf * 0 = NaN). Empty M or N
// returns an empty [M, N] tensor; K = 0 returns zeros.
//
// Layout: this file holds the ops and the driver; packing and the per-ISA micro-kernels are in
// gemm_pack.cpp and gemm_uk_{scalar,avx2,avx512}.cpp, declared in gemm.h (which says why the GEMM's
// ISA code is three hand-written kernels rather than one body compiled per ISA).
#include <ATen/Parallel.h>

#include "ws1_cpu.h"
#include "gemm.h"

namespace ws1_gemm {

void out_of_memory(size_t bytes) {
  TORCH_CHECK(false, "ws1_cpu gemm: out of memory allocating ", bytes, " bytes");
}

namespace {

using ::ws1::bf16_ptr_mut;
using ::ws1::check_cpu;
using ::ws1::check_dim;
using ::ws1::check_dtype;
using ::ws1::dispatch_isa;

// ------------------------------------------------------------------------------------------
// Driver
// ------------------------------------------------------------------------------------------
UkFn pick_uk(Isa isa, int mr) {
  if (isa == Isa::avx512bf16) return vb::uk(mr);
  if (isa == Isa::avx512) return v5::uk(mr);
  if (isa == Isa::avx2) return v2::uk(mr);
  return vs::uk(mr);
}

// out: fp32 (outf) or bf16 (outb), contiguous [M, N].
void gemm_core(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* outf,
               uint16_t* outb) {
  const Isa path = dispatch_isa();
  // bf16 x bf16 runs the BF16 unit's chain (flush rules) on every path; VDPBF16PS only multiplies
  // bf16, so an FP32 operand on the avx512bf16 path takes the avx512 code (its FP32 chain).
  const bool bf16_chain = A.bf16 && B.bf16;
  // the amx path's tiles serve det_gemm / lm_head only (run_gemm); here it runs the avx512 code
  const Isa isa = ((path == Isa::avx512bf16 && !bf16_chain) || path == Isa::amx) ? Isa::avx512 : path;
  const bool pairs = isa == Isa::avx512bf16;  // packed panels hold bf16 pairs, 2 k per 32-bit unit
  if (pairs && M <= SMALL_M_MAX && B.s1 == 1) {
    vb::small_m_gemm(A, B, M, N, K, outf, outb);
    return;
  }
  if (isa == Isa::avx512 && M <= SMALL_M_MAX && B.bf16 && B.s1 == 1) {
    v5::small_m_gemm(A, B, M, N, K, outf, outb, bf16_chain);
    return;
  }
  const int MR = (isa == Isa::avx512 || pairs) ? MR512 : (isa == Isa::avx2 ? MR256 : MRSC);
  UkFn uks[MR512 + 1];
  for (int r = 1; r <= MR; ++r) uks[r] = pick_uk(isa, r);
  auto pack_b = [&](int64_t n0, int nv, int64_t k0, int64_t kc, float* dst) {
    if (pairs) vb::pack_b(B, n0, nv, k0, kc, reinterpret_cast<uint32_t*>(dst));
    else if (isa == Isa::avx512) v5::pack_b_avx512(B, n0, nv, k0, kc, dst);
    else pack_b_generic(B, n0, nv, k0, kc, dst);
  };
  auto pack_a_blk = [&](int64_t m0, int64_t mb, int64_t k0, int64_t kc, float* dst) {
    if (pairs) vb::pack_a(A, m0, mb, k0, kc, MR, reinterpret_cast<uint32_t*>(dst));
    else pack_a(A, m0, mb, k0, kc, MR, dst);
  };
  // 32-bit units a packed K range takes: one per k, or one per pair of k (K blocks start even)
  auto units = [&](int64_t k) { return pairs ? (k + 1) / 2 : k; };
  // the vector paths get the flush rules from MXCSR (the BF16 unit ignores MXCSR; scalar: chain_step)
  const bool mxcsr_flush = bf16_chain && (isa == Isa::avx512 || isa == Isa::avx2);

  // Output tiling (affects speed only): row blocks of <= MB_MAX, column blocks of whole panels,
  // with enough tiles for the threads to balance.
  const int64_t nthreads = std::max(1, at::get_num_threads());
  const int64_t mblocks = (M + MB_MAX - 1) / MB_MAX;
  const int64_t MB = (M + mblocks - 1) / mblocks;  // balanced row blocks
  const int64_t npanels = (N + NR - 1) / NR;
  int64_t nb_panels = NB_PANELS_MAX;
  const int64_t want_tiles = 4 * nthreads;
  if (mblocks * ((npanels + nb_panels - 1) / nb_panels) < want_tiles) {
    const int64_t ncb = std::max<int64_t>(1, (want_tiles + mblocks - 1) / mblocks);
    nb_panels = std::max<int64_t>(1, (npanels + ncb - 1) / ncb);
  }
  const int64_t nblocks = (npanels + nb_panels - 1) / nb_panels;
  const int64_t ntiles = mblocks * nblocks;
  const int64_t nkb = (K + KC - 1) / KC;
  const bool full_k = MB * K * static_cast<int64_t>(sizeof(float)) <= A_FULLK_BYTES;
  const bool need_carry_buf = outb != nullptr && nkb > 1;

  at::parallel_for(0, ntiles, 1, [&](int64_t t_begin, int64_t t_end) {
    FlushScope flush(mxcsr_flush);
    FBuf bbuf = alloc_floats(static_cast<int64_t>(KC) * NR);
    FBuf abuf = alloc_floats(MB * (full_k ? K : std::min<int64_t>(K, KC)));
    FBuf cbuf = need_carry_buf ? alloc_floats(MB * (full_k ? NR : nb_panels * NR)) : FBuf();
    for (int64_t tile = t_begin; tile < t_end; ++tile) {
      const int64_t mb_i = tile / nblocks, nb_i = tile % nblocks;
      const int64_t m0 = mb_i * MB, mb = std::min(MB, M - m0);
      const int64_t p0 = nb_i * nb_panels, p1 = std::min(npanels, p0 + nb_panels);
      const int64_t tile_n0 = p0 * NR;

      // Run the micro-kernels of one (K block, panel) over all row micro-tiles of the tile.
      // a_blk: packed A of this K block (rows m0.., tile layout). cacc: fp32 accumulator of the
      // panel's column 0 / row m0 (ld cld) for the bf16-out case, else the fp32 output.
      auto run_panel = [&](const float* a_blk, int64_t kb, int64_t kc, int64_t n0, int nv,
                           float* cacc, int64_t cld) {
        const bool first = kb == 0, last = kb == nkb - 1;
        for (int64_t r0 = 0; r0 < mb; r0 += MR) {
          const int mr = static_cast<int>(std::min<int64_t>(MR, mb - r0));
          Tile t;
          t.ncols = nv;
          t.ftz = bf16_chain;
          t.cin = (first || cacc == nullptr) ? nullptr : cacc + r0 * cld;
          t.ldcin = cld;
          t.cout = cacc != nullptr ? cacc + r0 * cld : nullptr;
          t.ldcout = cld;
          t.bout = (last && outb != nullptr) ? outb + (m0 + r0) * N + n0 : nullptr;
          t.ldb = N;
          uks[mr](kc, a_blk + r0 * units(kc), bbuf.get(), t);
        }
      };

      if (full_k) {
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
          pack_a_blk(m0, mb, k0, kc, abuf.get() + units(k0) * mb);
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n0 = p * NR;
          const int nv = static_cast<int>(std::min<int64_t>(NR, N - n0));
          float* cacc = outb != nullptr ? cbuf.get() : outf + m0 * N + n0;
          const int64_t cld = outb != nullptr ? NR : N;
          for (int64_t kb = 0; kb < nkb; ++kb) {
            const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
            pack_b(n0, nv, k0, kc, bbuf.get());
            run_panel(abuf.get() + units(k0) * mb, kb, kc, n0, nv, cacc, cld);
          }
        }
      } else {
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t k0 = kb * KC, kc = std::min<int64_t>(KC, K - k0);
          pack_a_blk(m0, mb, k0, kc, abuf.get());
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t n0 = p * NR;
            const int nv = static_cast<int>(std::min<int64_t>(NR, N - n0));
            float* cacc = outb != nullptr ? cbuf.get() + (n0 - tile_n0) : outf + m0 * N + n0;
            const int64_t cld = outb != nullptr ? nb_panels * NR : N;
            pack_b(n0, nv, k0, kc, bbuf.get());
            run_panel(abuf.get(), kb, kc, n0, nv, cacc, cld);
          }
        }
      }
    }
  });
}

Operand make_operand(const at::Tensor& t) {
  Operand o;
  o.bf16 = t.scalar_type() == at::kBFloat16;
  o.p = t.data_ptr();
  o.s0 = t.stride(0);
  o.s1 = t.stride(1);
  return o;
}

void check_operand(const at::Tensor& t, const char* op, const char* name, bool allow_fp32) {
  check_cpu(t, op, name);
  if (allow_fp32) {
    WS1_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be BFloat16 or Float, got ", c10::toString(t.scalar_type()));
  } else {
    check_dtype(t, at::kBFloat16, op, name);
  }
  check_dim(t, 2, op, name);
}

at::Tensor run_gemm(const char* op, const at::Tensor& a, const at::Tensor& b, bool out_fp32,
                    const char* an, const char* bn, bool tiles_ok = false) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  WS1_CHECK(b.size(1) == K, op, ": K mismatch: ", an, " has K=", K, " (shape ", a.sizes(), "), ", bn,
            " has K=", b.size(1), " (shape ", b.sizes(), ")");
  at::Tensor out = ::ws1::empty_output({M, N}, a.options().dtype(out_fp32 ? at::kFloat : at::kBFloat16));
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  const Operand A = make_operand(a), B = make_operand(b);
  if (tiles_ok && ::ws1::active_isa() == Isa::amx) {  // det_gemm / lm_head on AMX tiles (own bits)
    ::ws1::dispatch_isa();
    const at::Tensor bc = b.contiguous();
    amx::gemm(A, ::ws1::bf16_ptr(bc), M, N, K, out_fp32 ? out.data_ptr<float>() : nullptr,
              out_fp32 ? nullptr : bf16_ptr_mut(out));
    return out;
  }
  if (out_fp32) gemm_core(A, B, M, N, K, out.data_ptr<float>(), nullptr);
  else gemm_core(A, B, M, N, K, nullptr, bf16_ptr_mut(out));
  return out;
}

}  // namespace
}  // namespace ws1_gemm

// y = x @ weight.T, bf16 in, fp32 serial-fma accumulation, one RNE rounding to bf16.
static at::Tensor det_gemm(const at::Tensor& x, const at::Tensor& weight) {
  const char* op = "ws1_cpu::det_gemm";
  ws1::CallScope call(op);
  ws1_gemm::check_operand(x, op, "x", false);
  ws1_gemm::check_operand(weight, op, "weight", false);
  return ws1_gemm::run_gemm(op, x, weight, false, "x", "weight", true);
}

// logits = x @ weight.T in fp32 (same core, no final rounding).
static at::Tensor lm_head(const at::Tensor& x, const at::Tensor& weight) {
  const char* op = "ws1_cpu::lm_head";
  ws1::CallScope call(op);
  ws1_gemm::check_operand(x, op, "x", false);
  ws1_gemm::check_operand(weight, op, "weight", false);
  return ws1_gemm::run_gemm(op, x, weight, true, "x", "weight", true);
}

// C = a @ b.T; a [M,K], b [N,K], each bf16 or fp32 with arbitrary strides (transposed views ok).
static at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, bool out_fp32) {
  const char* op = "ws1_cpu::gemm";
  ws1::CallScope call(op);
  ws1_gemm::check_operand(a, op, "a", true);
  ws1_gemm::check_operand(b, op, "b", true);
  return ws1_gemm::run_gemm(op, a, b, out_fp32, "a", "b");
}

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("det_gemm(Tensor x, Tensor weight) -> Tensor", &det_gemm);
  m.def("lm_head(Tensor x, Tensor weight) -> Tensor", &lm_head);
  m.def("gemm(Tensor a, Tensor b, bool out_fp32) -> Tensor", &gemm);
}
