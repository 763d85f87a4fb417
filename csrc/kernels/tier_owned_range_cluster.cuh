// Tier "cluster": the bins are split into ranges across the blocks of a cluster (bins_per_block each, the last
// range fewer). Every block of a range reads all of the cluster's items and counts only the values of its own bins,
// with local shared-memory atomics: the input is read once per range, but the blocks of a cluster run together on one
// GPC, so all reads after the first come from L2, which sustains them, while adds stay local. Counts whose bins one
// block holds run as clusters of replicas (ClusterLaunch::replicas blocks keep the same range, each reading a share of
// every item), which sum their copies through DSMEM at the flush, so the cluster's global adds are one block's
// (packed_counts.cuh, flush_replicas). Remote DSMEM atomics (the guide's design, kept as tier "cluster_dsmem") are
// the bottleneck there and serialise on a hot bin; the tier reads and zeroes remote words only at a flush.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cluster_common.cuh"
#include "packed_counts.cuh"
#include "policies.cuh"
#include "tier_host.h"
#include "traversal.cuh"

namespace dsmhist {
namespace owned_range_cluster_tier {

// Whether the tier's blocks hold Policy's sums as packed 16-bit counts: counts.
template <typename Policy>
constexpr bool kPacksCounts = std::is_same<Policy, detail::CountPolicy>::value;

inline bool packs_counts(AccKind acc) { return acc == AccKind::kCount; }

// The kernel's bodies: any call (0); packed counts of integer input binned by value, values out of range dropped (1)
// or clamped (2), whose key is a subtraction and a compare (ValueLocalKeys): the binner's general case took about a
// third of the walk's instructions (NOTES.md); packed counts over a range computed in float, dropped (3) or clamped
// (4), keyed with no branch (RangeLocalKeys): through the general case a range ran 1.6x by value (docs/perf-log).
enum Body : int {
  kAnyCall = 0,
  kCountsByValue = 1,
  kCountsByValueClamped = 2,
  kCountsOverRange = 3,
  kCountsOverRangeClamped = 4
};

// The rule for values out of range that a specialised body keeps.
template <int kBody>
constexpr OutOfRange kBodyRule =
    kBody == kCountsByValueClamped || kBody == kCountsOverRangeClamped ? OutOfRange::kClamp : OutOfRange::kIgnore;

template <typename T, typename Policy, int kBody = kAnyCall>
__global__ void __launch_bounds__(kBlockThreads) kernel(const HistogramParams p, const detail::ClusterLaunch launch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using Acc = typename Policy::Acc;
  const cg::cluster_group cluster = cg::this_cluster();
  if constexpr (kPacksCounts<Policy>) {
    using LocalKeys = typename std::conditional<
        kBody == kAnyCall, detail::BinnerLocalKeys<T>,
        typename std::conditional<kBody <= kCountsByValueClamped, detail::ValueLocalKeys<T, kBodyRule<kBody>>,
                                  detail::RangeLocalKeys<T, kBodyRule<kBody>>>::type>::type;
    const detail::ClusterSlice<uint32_t> range = detail::owned_slice<uint32_t>(cluster, p, launch);
    const detail::PackedBins bins(range.bins, static_cast<uint32_t>(detail::packed_words(range.per_block)));
    detail::zero_bins(bins.words, bins.count);
    __syncthreads();  // no thread may count into a word another thread has not zeroed yet
    detail::count_packed<T, Policy, LocalKeys>(cluster, p, launch.flushing, bins, range.first,
                                               static_cast<uint32_t>(range.owned), range.replica, range.replicas,
                                               blockIdx.x / range.cluster_size, gridDim.x / range.cluster_size);
  } else {
    const detail::ClusterSlice<Acc> slice = detail::cluster_slice<Acc>(cluster, p, launch);
    const uint32_t owned32 = static_cast<uint32_t>(slice.owned);
    __syncthreads();  // no thread may count into a bin another thread has not zeroed yet
    const Binner<T> binner(p);
    // Weighted and deterministic sums add a thread's consecutive contributions to one owned bin once (RunMerger).
    detail::RunMerger<Policy, uint32_t> run;
    const auto add_shared = [&](uint32_t local, Acc total) { Policy::add_shared(slice.bins + local, total); };
    detail::for_each_item<T>(
        p, launch.flushing, blockIdx.x / slice.cluster_size, gridDim.x / slice.cluster_size, threadIdx.x, blockDim.x,
        [&](const detail::ItemSpan<T>& span, T value, int64_t weight_offset) {
          const int64_t bin = binner(value);
          // A dropped value (-1) or another block's bin wraps to at least owned32 (bins < 2^31).
          const uint32_t local = static_cast<uint32_t>(bin - slice.first);
          if (local >= owned32) return;
          const Acc add = Policy::contribution(p, span.output_row * p.bins + bin, weight_offset);
          if (add != Acc(0)) run.push(local, add, add_shared);
        },
        [&] {
          run.emit(add_shared);
          __syncthreads();  // (the traversal's barrier before and after a flush) the run's add must land first
        },
        [&](int64_t row) {
          detail::flush_bins<Policy>(p, launch.flushing, slice.bins, row, slice.first, slice.owned);
        });
  }
#endif
  // Without sm_90 code this body is empty; the host launches the cluster tiers only after checking that the loaded
  // binary was compiled for sm_90 or newer (cluster_code_available, device_caps.h).
}

// A specialised body where one runs the call (packed counts of integer input binned by value, or of input over a
// range given on the host that Binner::narrow_range_applies to), else the general one.
inline int body_for(const HistogramParams& p, const TierContext& ctx, AccKind acc) {
  if (!packs_counts(acc)) return kAnyCall;
  const bool clamped = p.out_of_range == OutOfRange::kClamp;
  int body = kAnyCall;
  if (p.mode == BinMode::kIndex) body = clamped ? kCountsByValueClamped : kCountsByValue;
  if (p.mode == BinMode::kRange && narrow_range_on_host(p)) body = clamped ? kCountsOverRangeClamped : kCountsOverRange;
  return body != kAnyCall && ctx.kernels.tier_kernel(Tier::kCluster, body) != nullptr ? body : kAnyCall;
}

// Shared memory of a block of `block_bins` bins.
inline int64_t block_bytes(AccKind acc, int64_t block_bins) {
  return packs_counts(acc) ? detail::packed_words(block_bins) * 4 : block_bins * accumulator_bytes(acc);
}

// Forced: any cluster that holds the bins, from one block for counts (two for sums, where one block is tier shared);
// a forced size for counts splits into the fewest ranges that hold the bins, its other blocks replicas. Automatic:
// only up to kClusterAutoMaxBlocks blocks' worth of bins for counts (bins one block holds: kClusterReplicas blocks
// that keep them all), kClusterAutoMaxBlocksForSums (1: never past tier shared) for sums, where it beats the other
// tiers (tuning.h).
inline PlanStatus fit(const TierContext& ctx, bool automatic, HistogramPlan* plan) {
  if (!ctx.cluster_code) return PlanStatus::declines(kClusterUnavailable);
  const AccKind acc = ctx.request.acc;
  // 8 packed counts a 16-byte vector (116224 on an H100), else the accumulators that fit.
  const int64_t block_capacity =
      packs_counts(acc) ? packed_block_bins(ctx.caps) : ctx.caps.shared_optin / accumulator_bytes(acc);
  const int64_t auto_max_blocks = packs_counts(acc) ? kClusterAutoMaxBlocks : kClusterAutoMaxBlocksForSums;
  if (automatic && ctx.request.bins > auto_max_blocks * block_capacity) return PlanStatus::declines(kClusterTooSmall);
  if (automatic && few_elements_per_bin(ctx.request)) return PlanStatus::declines(kFewElementsPerBinRefusal);
  return detail::fit_cluster(
      ctx, Tier::kCluster, /*smallest=*/packs_counts(acc) ? 1 : 2, packs_counts(acc) ? kClusterReplicas : 1,
      [acc](int64_t block_bins) { return block_bytes(acc, block_bins); }, plan);
}

// Packed counts add into the output at every sweep, so they never store a row whole; their work items are worth a
// block from a quarter of the elements a plain block's are (kPackedItemBinsDivisor, tuning.h). A range's replicas
// split each item's elements.
inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                         bool may_store, LaunchShape* shape) {
  const int64_t item_bins = packs_counts(acc) ? plan.bins_per_block / kPackedItemBinsDivisor : plan.bins_per_block;
  shape->kernel_variant = body_for(p, ctx, acc);
  return detail::shape_cluster(p, ctx, plan, acc, may_store && !packs_counts(acc), /*readers=*/plan.replicas, item_bins,
                               shape);
}

// One kernel, no workspace: the common launch.
constexpr CustomLaunch custom_launch{};

}  // namespace owned_range_cluster_tier

// The by-value bodies exist for integer input and counts, the range bodies for counts of input binned in float.
template <typename T, typename Policy>
struct TierKernelVariants<Tier::kCluster, T, Policy>
    : KernelBodies<detail::kIntegerCounts<T, Policy> || detail::kFloatRangeCounts<T, Policy>,
                   detail::kFloatRangeCounts<T, Policy> ? owned_range_cluster_tier::kCountsOverRangeClamped
                                                        : owned_range_cluster_tier::kCountsByValueClamped,
                   detail::kIntegerCounts<T, Policy> ? owned_range_cluster_tier::kCountsByValue
                                                     : owned_range_cluster_tier::kCountsOverRange> {};

}  // namespace dsmhist
