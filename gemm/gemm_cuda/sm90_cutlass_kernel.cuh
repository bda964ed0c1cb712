// One CUTLASS 4.x sm90 warp-specialized FP8 GEMM with DeepSeek-style blockwise scaling
// (cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp):
// TMA loads of 128-wide K tiles, wgmma (QGMMA) with fp8 e4m3fn operands into a temporary fp32
// accumulator, and once per 128-wide K block the partial sums are promoted into the main fp32
// accumulator multiplied by a_scale[m, kb] * b_scale[n / 128, kb]. bf16 output through a TMA
// epilogue. Include from exactly one .cu per variant (see sm90_kernel_args.h).
#pragma once

// CUTLASS's device-side asserts cost registers and time; the extension build (torch's
// CUDAExtension) does not define NDEBUG, so these TUs do before any header pulls in <cassert>.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/numeric_types.h"

#include "sm90_kernel_args.h"

namespace fp8gemm::cuda::sm90 {

// The blockwise-scaling mainloop assembled by hand (what CUTLASS's sm90 collective builder does for
// fp8), so that it can also run on fp16 operands: the builder static_asserts fp8 input, the
// collective itself does not. fp16 holds every e4m3fn/e4m3fnuz value exactly, and the fp16 tensor
// cores accumulate in fp32 (the fp8 ones keep only ~13 fraction bits inside a K block).
template <class ElementOp, class TileShape, class ClusterShape, class KernelSchedule, class StrideA, class LayoutSFA,
          class StrideB, class LayoutSFB, int EpilogueSmemBytes>
struct ManualBlockwiseMainloop {
  static constexpr bool kCooperative =
      cute::is_base_of_v<cutlass::gemm::KernelTmaWarpSpecializedCooperative, KernelSchedule>;
  using AtomLayoutMNK = std::conditional_t<kCooperative, cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>,
                                           cute::Layout<cute::Shape<cute::_1, cute::_1, cute::_1>>>;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementOp, ElementOp, float, TileShape, cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      AtomLayoutMNK{}));
  using SmemLayoutAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   cute::GMMA::Major::K, ElementOp, decltype(cute::get<0>(TileShape{})),
                                   decltype(cute::get<2>(TileShape{}))>());
  using SmemLayoutAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   cute::GMMA::Major::K, ElementOp, decltype(cute::get<1>(TileShape{})),
                                   decltype(cute::get<2>(TileShape{}))>());
  static constexpr int kScaleMsPerTile = cute::size<0>(TileShape{}) / cute::size<0, 0>(LayoutSFA{});
  static constexpr int kScaleNsPerTile = cute::size<1>(TileShape{}) / cute::size<0, 0>(LayoutSFB{});
  static constexpr int kStages = cutlass::gemm::collective::detail::compute_stage_count_with_blockwise_scale<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, ElementOp, ElementOp, float, TileShape,
      kScaleMsPerTile, kScaleNsPerTile>(cutlass::gemm::collective::StageCountAutoCarveout<EpilogueSmemBytes>{});
  using DispatchPolicy = cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8<kStages, ClusterShape, KernelSchedule>;
  using CollectiveOp = cutlass::gemm::collective::CollectiveMma<
      DispatchPolicy, TileShape, ElementOp, cute::tuple<StrideA, LayoutSFA>, ElementOp, cute::tuple<StrideB, LayoutSFB>,
      TiledMma, cute::SM90_TMA_LOAD, SmemLayoutAtomA, void, cute::identity, cute::SM90_TMA_LOAD, SmemLayoutAtomB, void,
      cute::identity>;
};

// The bf16 TMA epilogue of the cooperative 128x128x128 kernels: D = alpha * acc (no C operand; alpha is 1,
// or 1/4 for converted e4m3fnuz inputs). Built outside any template and handed to CutlassCoop128x128 as a
// template argument: nvcc's front end spells an alias by its full builder expansion in the host code, and
// inside a template g++ 12 rejects that spelling (dependent names without `typename`).
namespace coop128x128 {
using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
using ElementD = cutlass::bfloat16_t;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignD = 8;  // bf16 elements in 16 bytes (TMA store)
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
using FusionOp = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>;
using CollectiveEpilogue = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD,
    EpilogueSchedule, FusionOp>::CollectiveOp;
}  // namespace coop128x128

// The cooperative 128x128x128 kernel with CUTLASS's stream-K scheduler (data-parallel, split-K or
// stream-K per call). Fp16Operands: the "exact accumulation" path (operands converted to fp16 by the
// launcher).
template <bool Fp16Operands, class Epilogue>
struct CutlassCoop128x128 {
  using TileShape = coop128x128::TileShape;
  using ClusterShape = coop128x128::ClusterShape;

  using ElementA = std::conditional_t<Fp16Operands, cutlass::half_t, cutlass::float_e4m3_t>;
  using ElementB = ElementA;
  using ElementD = coop128x128::ElementD;
  using ElementAcc = float;

  // Both operands K-major: A (m, k) row-major, B (n, k) is CUTLASS's column-major K x N.
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  static constexpr int kAlignAB = 16 / static_cast<int>(sizeof(ElementA));  // elements in 16 bytes (TMA)

  // A scales per row (granularity 1, MN-major: contiguous along M, loaded by TMA), B scales per
  // 128x128 block (K-major, one float per K tile loaded by cp.async).
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::MN, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  using CollectiveEpilogue = Epilogue;

  static constexpr int kEpilogueSmem = static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage));
  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t, cute::tuple<LayoutA, LayoutSFA>, 16,
      cutlass::float_e4m3_t, cute::tuple<LayoutB, LayoutSFB>, 16, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kEpilogueSmem>, KernelSchedule>;
  using CollectiveMainloop = typename std::conditional_t<
      Fp16Operands,
      ManualBlockwiseMainloop<ElementA, TileShape, ClusterShape, KernelSchedule, cutlass::gemm::TagToStrideA_t<LayoutA>,
                              LayoutSFA, cutlass::gemm::TagToStrideB_t<LayoutB>, LayoutSFB, kEpilogueSmem>,
      BuiltMainloop>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideD = typename Gemm::GemmKernel::StrideD;

  static typename Gemm::Arguments make_arguments(const KernelArgs& p) {
    using namespace cute;
    const int kb = (p.k + 127) / 128;
    // Batch (L) strides as CUTLASS's packed helpers set them (one batch; never 0, which TMA
    // descriptors need not accept).
    StrideA stride_a = make_stride(int64_t(p.lda), Int<1>{}, int64_t(p.lda) * p.m);
    StrideB stride_b = make_stride(int64_t(p.ldb), Int<1>{}, int64_t(p.ldb) * p.n);
    StrideD stride_d = make_stride(int64_t(p.ldd), Int<1>{}, int64_t(p.ldd) * p.m);

    // Scale layouts with the caller's leading dimension (the compact helpers in CUTLASS assume
    // ld == rows; we allow padded ld so that TMA's 16-byte stride rule can be met in place).
    const LayoutSFA layout_sfa =
        make_layout(make_shape(make_shape(Int<1>{}, p.sfa_rows), make_shape(Int<128>{}, kb), 1),
                    make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, p.sfa_ld), p.sfa_ld * kb));
    const LayoutSFB layout_sfb =
        make_layout(make_shape(make_shape(Int<128>{}, p.sfb_rows), make_shape(Int<128>{}, kb), 1),
                    make_stride(make_stride(_0{}, p.sfb_ld), make_stride(_0{}, _1{}), p.sfb_ld * p.sfb_rows));

    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(p.m, p.n, p.k, 1);
    args.mainloop.ptr_A = static_cast<const ElementA*>(p.a);
    args.mainloop.dA = stride_a;
    args.mainloop.ptr_B = static_cast<const ElementB*>(p.b);
    args.mainloop.dB = stride_b;
    args.mainloop.ptr_SFA = p.sfa;
    args.mainloop.layout_SFA = layout_sfa;
    args.mainloop.ptr_SFB = p.sfb;
    args.mainloop.layout_SFB = layout_sfb;
    args.epilogue.thread.alpha = p.alpha;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = stride_d;
    args.epilogue.ptr_D = static_cast<ElementD*>(p.d);
    args.epilogue.dD = stride_d;
    args.hw_info.device_id = 0;
    cudaGetDevice(&args.hw_info.device_id);
    args.hw_info.sm_count = p.sm_count;

    using RasterOrder = typename cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params::RasterOrderOptions;
    args.scheduler.max_swizzle_size = p.group;
    args.scheduler.raster_order = RasterOrder::AlongM;
    using Decomp = typename cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
    args.scheduler.splits = p.splits;
    switch (p.decomposition) {
      case Decomposition::kSplitK: args.scheduler.decomposition_mode = Decomp::SplitK; break;
      case Decomposition::kStreamK: args.scheduler.decomposition_mode = Decomp::StreamK; break;
      case Decomposition::kHeuristic: args.scheduler.decomposition_mode = Decomp::Heuristic; break;
      default: args.scheduler.decomposition_mode = Decomp::DataParallel; break;
    }
    return args;
  }

  static size_t workspace_bytes(const KernelArgs& p) { return Gemm::get_workspace_size(make_arguments(p)); }

  static bool can_implement(const KernelArgs& p) {
    return Gemm::can_implement(make_arguments(p)) == cutlass::Status::kSuccess;
  }

  static cudaError_t run(const KernelArgs& p, void* workspace, size_t workspace_size, cudaStream_t stream) {
    auto args = make_arguments(p);
    Gemm gemm;
    if (Gemm::get_workspace_size(args) > workspace_size) return cudaErrorInvalidValue;
    cutlass::Status st = gemm.initialize(args, workspace, stream);
    if (st != cutlass::Status::kSuccess) return cudaErrorInvalidConfiguration;
    st = gemm.run(stream);
    if (st != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }
};

}  // namespace fp8gemm::cuda::sm90

#define FP8GEMM_SM90_CUTLASS_KERNEL(name, fp16_operands)                                              \
  namespace fp8gemm::cuda::sm90 {                                                                    \
  using name##_type = CutlassCoop128x128<fp16_operands, coop128x128::CollectiveEpilogue>;            \
  size_t name##_workspace_bytes(const KernelArgs& a) { return name##_type::workspace_bytes(a); }      \
  size_t name##_zeroed_bytes(const KernelArgs&) { return 0; }                                         \
  bool name##_can_implement(const KernelArgs& a) { return name##_type::can_implement(a); }            \
  cudaError_t name##_run(const KernelArgs& a, void* ws, size_t ws_bytes, cudaStream_t s) {           \
    return name##_type::run(a, ws, ws_bytes, s);                                                      \
  }                                                                                                  \
  }
