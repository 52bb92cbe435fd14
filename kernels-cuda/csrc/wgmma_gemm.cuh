// The CUTLASS side of the sm_90a GEMM (wgmma_gemm.h has the interface and the numerics): CUTLASS 3.x's TMA
// warp-specialized collectives (mainloop sm90_mma_tma_gmma_ss_warpspecialized, epilogue
// sm90_epilogue_tma_warpspecialized, the persistent data-parallel tile scheduler), pinned to one wgmma
// instruction (m64n128k16 BF16 -> FP32) by static_assert. Included only by the wgmma_gemm_*.cu translation
// units, each of which instantiates one (layout, output) pair in both configurations: four small TUs
// compile in parallel (CUTLASS TUs are slow: ~35 s of nvcc per kernel on one core). No torch here.
//
// On the sm_80 pass of a two-arch build these kernels compile to CUTLASS's arch stub (an sm_80 device never
// launches them: the entry points take mma_gemm.cuh's path there). WS1_NO_SM90_GEMM (setup.py, when 90a is
// not among the archs) compiles the launch functions as stubs that return an error.
#pragma once

#include "wgmma_gemm.h"

// The launch functions' namespace, around a definition (the macros below).
#define WS1_SM90_DETAIL(...) \
  namespace ws1cu {          \
  namespace sm90 {           \
  namespace detail {         \
  __VA_ARGS__                \
  }                          \
  }                          \
  }

#if !defined(WS1_NO_SM90_GEMM)

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <type_traits>

namespace ws1cu {
namespace sm90 {
namespace detail {

using namespace cute;
using BF16 = cutlass::bfloat16_t;

// Operand layouts as CUTLASS tags. A: RowMajor = K-major, ColumnMajor = M-major. B ([N, K] logically):
// ColumnMajor = K-major (a weight [N, K] row-major), RowMajor = N-major.
template <Major MA>
using TagA = std::conditional_t<MA == Major::K, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
template <Major MB>
using TagB = std::conditional_t<MB == Major::K, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

template <Config C>
struct Shapes {
  static constexpr bool kWide = C == Config::Wide, kN32 = C == Config::NarrowN32;
  using Tile = std::conditional_t<kWide, Shape<_256, _128, _64>, std::conditional_t<kN32, Shape<_64, _32, _64>, Shape<_64, _128, _64>>>;
  using Cluster = std::conditional_t<kWide, Shape<_1, _2, _1>, Shape<_1, _1, _1>>;
  using Mainloop = std::conditional_t<kWide, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                      cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Epilogue = std::conditional_t<kWide, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                      cutlass::epilogue::TmaWarpSpecialized>;
  using AtomLayout = std::conditional_t<kWide, Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _1, _1>>>;
  // Fixed pipeline depth (no auto count that could differ between outputs): wide 4 x 48 KB, narrow 8 x 24 KB
  // of A+B tiles in shared memory. (The auto count gave the BF16-output narrow kernel 9 stages, and ptxas then
  // spilled its stage index arithmetic.) The n32 candidate: 16 x 12 KB (A 8 KB + B 4 KB), i.e. 64 KB of weight
  // in flight per CTA, for a decode step's weight stream.
  static constexpr int kStages = kWide ? 4 : kN32 ? 16 : 8;
};

// The wgmma instruction each configuration must run (the numerics pin below): m64n128k16, or m64n32k16 for the
// n32 candidate.
template <Config C, GMMA::Major GA, GMMA::Major GB>
using ExpectedAtom = std::conditional_t<C == Config::NarrowN32, SM90_64x32x16_F32BF16BF16_SS<GA, GB>,
                                        SM90_64x128x16_F32BF16BF16_SS<GA, GB>>;

template <Major MA, Major MB, class ElementD, Config C>
struct Kernel {
  using S = Shapes<C>;
  static constexpr int kAlignD = 16 / int(sizeof(ElementD));
  // D = 1 * acc (no source C): the multiply by one is exact (a NaN stays a NaN, -0 stays -0); then one
  // float -> ElementD conversion, round to nearest even (cvt.rn.bf16x2.f32 for BF16; none for FP32).
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float,
                                                              cutlass::FloatRoundStyle::round_to_nearest>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename S::Tile, typename S::Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignD, ElementD,
      cutlass::layout::RowMajor, kAlignD, typename S::Epilogue, Fusion>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BF16, TagA<MA>, 8, BF16, TagB<MB>, 8, float, typename S::Tile,
      typename S::Cluster,
      cutlass::gemm::collective::StageCount<S::kStages>, typename S::Mainloop>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                          cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  // The numerics pin: the builder must have chosen exactly this instruction and atom layout (the per-element
  // sequence of wgmma_gemm.h rests on it), K-tiles of 64, and the non-stream-K persistent scheduler.
  static constexpr GMMA::Major kGA = MA == Major::K ? GMMA::Major::K : GMMA::Major::MN;
  static constexpr GMMA::Major kGB = MB == Major::K ? GMMA::Major::K : GMMA::Major::MN;
  using ExpectedMma = decltype(make_tiled_mma(ExpectedAtom<C, kGA, kGB>{}, typename S::AtomLayout{}));
  static_assert(std::is_same_v<typename CollectiveMainloop::TiledMma, ExpectedMma>,
                "ws1: the sm90 GEMM must run wgmma m64n128k16 (m64n32k16: the n32 candidate; docs/cuda.md): the collective "
                "builder chose another MMA");
  static_assert(size<2>(typename S::Tile{}) == 64, "ws1: k-tiles of 64");
  static_assert(std::is_same_v<typename GemmKernel::TileSchedulerTag, cutlass::gemm::PersistentScheduler>,
                "ws1: the persistent (data-parallel) tile scheduler, never stream-K");
  static_assert(sizeof(typename GemmKernel::SharedStorage) <= 227 * 1024, "ws1: shared memory over the sm_90 limit");
};

template <class K>
inline const char* launch(const GemmArgs& g, int device, cudaStream_t stream) {
  using Gemm = typename K::Gemm;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  using ElementD = typename Gemm::GemmKernel::ElementD;
  StrideA sa{};
  StrideB sb{};
  StrideD sd{};
  // the dynamic stride of each operand is its leading dimension; the batch (L) stride is unused (L = 1)
  if constexpr (std::is_same_v<typename K::CollectiveMainloop::StrideA, cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>>)
    sa = make_stride(g.lda, Int<1>{}, int64_t(0));
  else
    sa = make_stride(Int<1>{}, g.lda, int64_t(0));
  if constexpr (std::is_same_v<typename K::CollectiveMainloop::StrideB, cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>>)
    sb = make_stride(g.ldb, Int<1>{}, int64_t(0));
  else
    sb = make_stride(Int<1>{}, g.ldb, int64_t(0));
  sd = make_stride(g.ldc, Int<1>{}, int64_t(0));

  static int sm_count[64] = {};  // per device; a racing first call writes the same value
  if (device < 0 || device >= 64) return "ws1 sm90 gemm: device ordinal out of range";
  if (sm_count[device] == 0) sm_count[device] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  cutlass::KernelHardwareInfo hw{device, sm_count[device]};

  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), 1},
                                {static_cast<const BF16*>(g.a), sa, static_cast<const BF16*>(g.b), sb},
                                {{}, nullptr, sd, static_cast<ElementD*>(g.c), sd},
                                hw};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess) return "ws1 sm90 gemm: CUTLASS cannot implement these arguments";
  if (Gemm::get_workspace_size(args) != 0) return "ws1 sm90 gemm: unexpected workspace (the kernel must not need one)";
  if (op.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return "ws1 sm90 gemm: initialize failed (TMA descriptors)";
  if (op.run(stream) != cutlass::Status::kSuccess) return "ws1 sm90 gemm: kernel launch failed";
  return nullptr;
}

}  // namespace detail
}  // namespace sm90
}  // namespace ws1cu

// Defines ws1cu::sm90::detail::launch_<NAME>(args, config, device, stream) for one layout pair and output type, in the
// two configurations pick_config chooses from; WS1_SM90_GEMM_DEFINE_N32: launch_<NAME>_n32(args, device, stream), the
// n32 candidate alone (its own TU).
#define WS1_SM90_GEMM_DEFINE(NAME, MA, MB, ELEMENT_D)                                                               \
  WS1_SM90_DETAIL(const char* launch_##NAME(const GemmArgs& g, Config cfg, int device, cudaStream_t stream) {       \
    if (cfg == Config::NarrowN32) return "the n32 candidate is not instantiated in this translation unit";         \
    return cfg == Config::Wide ? launch<Kernel<MA, MB, ELEMENT_D, Config::Wide>>(g, device, stream)                \
                               : launch<Kernel<MA, MB, ELEMENT_D, Config::Narrow>>(g, device, stream);             \
  })
#define WS1_SM90_GEMM_DEFINE_N32(NAME, MA, MB, ELEMENT_D)                                                           \
  WS1_SM90_DETAIL(const char* launch_##NAME##_n32(const GemmArgs& g, int device, cudaStream_t stream) {             \
    return launch<Kernel<MA, MB, ELEMENT_D, Config::NarrowN32>>(g, device, stream);                                 \
  })

#else  // WS1_NO_SM90_GEMM

#define WS1_SM90_NONE "this build has no sm_90a GEMM (WS1_CUDA_ARCHS without 90a)"
#define WS1_SM90_GEMM_DEFINE(NAME, MA, MB, ELEMENT_D) \
  WS1_SM90_DETAIL(const char* launch_##NAME(const GemmArgs&, Config, int, cudaStream_t) { return WS1_SM90_NONE; })
#define WS1_SM90_GEMM_DEFINE_N32(NAME, MA, MB, ELEMENT_D) \
  WS1_SM90_DETAIL(const char* launch_##NAME##_n32(const GemmArgs&, int, cudaStream_t) { return WS1_SM90_NONE; })

#endif  // WS1_NO_SM90_GEMM
