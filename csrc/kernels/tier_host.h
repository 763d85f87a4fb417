// What a tier unit's host side (its fit and shape functions, in tier_<unit>.cuh) works with: the context it is asked
// in, the launch shape it fills, and the small shaping rules several tiers share.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_caps.h"
#include "kernels.h"

namespace dsmhist {

// One question to a tier: the request, the device, the kernels of the accumulator being planned or launched, and
// whether the loaded binary holds sm_90 cluster code.
struct TierContext {
  const PlanRequest& request;
  const DeviceCaps& caps;
  const KernelSet& kernels;
  bool cluster_code;

  static TierContext of(const PreparedCall& call) {
    return TierContext{call.request, call.caps, call.kernels, call.cluster_code};
  }
};

// The refusals several tiers share (each tier's own are in its unit).
constexpr const char* kClusterUnavailable =
    "tiers 'cluster' and 'cluster_dsmem' need a device of compute capability 9.0+ and an extension built with sm_90 "
    "code (TORCH_CUDA_ARCH_LIST including 9.0)";
constexpr const char* kClusterTooSmall =
    "a cluster tier cannot hold these bins: they do not fit the shared memory of any launchable cluster";
constexpr const char* kClusterSizeUnsupported =
    "the forced cluster size cannot be launched on this device with the shared memory these bins need";
static_assert(kFewElementsPerBin == 32 && kFewElementsMinBins == 16384,
              "kFewElementsPerBinRefusal states kFewElementsPerBin and kFewElementsMinBins");
constexpr const char* kFewElementsPerBinRefusal =
    "the planner takes tier 'global' for 16384 bins or more with fewer than 32 elements per bin";

// A tier's kernels past its first (`kernel`, variant 0). A unit whose kernel has bodies specialised for common calls
// gives each its own kernel, so that each gets the registers it needs alone, by specialising this for its Tier as
// KernelBodies<whether T and Policy have them, the last body's number, the first's>; the kernel set
// (kernel_set.cuh) stores body k (the first to the last), `kernel<T, Policy, k>` of the unit, at variants[k]
// (variants[0] is the kernel). Its shape function picks one (LaunchShape::kernel_variant) where the kernel set holds
// it.
template <bool kHas, int kLastBody = 0, int kFirstBody = 1>
struct KernelBodies {
  static_assert(kLastBody < kMaxTierKernels, "every body has a slot in the kernel set");
  static_assert(kFirstBody >= 1, "body 0 is the kernel");
  // Stores `kernel_of(std::integral_constant<int, k>{})` at variants[k] for each body k; without kHas, instantiates
  // no body.
  template <typename KernelOf>
  static void add(const void** variants, KernelOf kernel_of) {
    if constexpr (kHas) add(variants, kernel_of, std::make_integer_sequence<int, kLastBody + 1 - kFirstBody>{});
  }

 private:
  template <typename KernelOf, int... kSteps>
  static void add(const void** variants, KernelOf kernel_of, std::integer_sequence<int, kSteps...>) {
    ((variants[kFirstBody + kSteps] = kernel_of(std::integral_constant<int, kFirstBody + kSteps>{})), ...);
  }
};
template <Tier kTier, typename T, typename Policy>
struct TierKernelVariants : KernelBodies<false> {};

// A tier that runs its own launches (several kernels, a workspace) instead of the one launch every other tier gets
// (launch.cu run_planned_tier): its unit's `custom_launch`. Units with one kernel and no workspace declare an empty
// one.
//   launch:          runs pass `acc` of the call on `stream`, zeroing the output first when `zero_output`.
//   workspace_bytes: the device workspace the call needs at p.workspace (allocated by the caller).
struct CustomLaunch {
  cudaError_t (*launch)(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                        bool zero_output, cudaStream_t stream) = nullptr;
  int64_t (*workspace_bytes)(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan) = nullptr;
};

// Whether the loaded binary holds sm_90 cluster code, asked of the first cluster tier's kernel in `kernels` (every
// kernel of a build is compiled for the same targets).
inline bool cluster_code_of(const KernelSet& kernels, int device, const DeviceCaps& caps) {
  for (const TierInfo& info : kTiers) {
    if (info.cluster_kernel) return cluster_code_available(kernels.tier_kernel(info.tier), device, caps);
  }
  return false;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The cluster tiers' search: the first of `sizes` (cluster sizes, in the order the tier prefers them) whose blocks
// hold their share of the bins, at most `max_block_bins`, in `block_bytes(block_bins)` bytes of opt-in shared memory,
// that the launch may use (max_cluster_size) and that can be resident; `plan` gets that size. A cluster of `size`
// blocks with `replicas[k]` replicas (null: 1) splits the bins size / replicas ways, ceil(bins * replicas / size) a
// block (ClusterLaunch::replicas). Otherwise why none did: no size holds the bins (kClusterTooSmall), or
// the forced size cannot run (kClusterSizeUnsupported).
template <typename BlockBytes>
inline PlanStatus fit_first_cluster_size(const TierContext& ctx, Tier tier, const int* sizes, const int* replicas,
                                         int count, int threads, int64_t max_block_bins, BlockBytes block_bytes,
                                         HistogramPlan* plan) {
  const PlanRequest& request = ctx.request;
  const int launchable = request.max_cluster_size > 0 ? request.max_cluster_size : kMaxClusterSize;
  bool fitted = false;
  for (int k = 0; k < count; ++k) {
    const int size = sizes[k];
    const int replicas_k = replicas != nullptr ? replicas[k] : 1;
    const int64_t block_bins = ceil_div(request.bins, size / replicas_k);
    const int64_t bytes = block_bytes(block_bins);
    if (block_bins > max_block_bins || bytes > ctx.caps.shared_optin) continue;
    fitted = true;
    if (size > launchable) continue;
    int resident = 0;
    const cudaError_t err =
        max_active_clusters(ctx.kernels.tier_kernel(tier), request.device, ctx.caps, size, threads, bytes, &resident);
    if (err != cudaSuccess) return PlanStatus::query_failed(err);
    if (resident < 1) continue;
    plan->tier = tier;
    plan->cluster_size = size;
    plan->replicas = replicas_k;
    plan->threads = threads;
    plan->bins_per_block = block_bins;
    plan->shared_bytes = bytes;
    return PlanStatus::fits();
  }
  const bool size_refused = fitted && request.forced_cluster_size > 0;
  return PlanStatus::declines(size_refused ? kClusterSizeUnsupported : kClusterTooSmall);
}

// Count bins one block of tier cluster holds as packed 16-bit counts, 8 a 16-byte vector of its opt-in shared memory
// (116224 on an H100).
inline int64_t packed_block_bins(const DeviceCaps& caps) { return caps.shared_optin / 16 * 8; }

// The most count bins the automatic plan gives tier cluster, kClusterAutoMaxBlocks blocks of packed counts (232448 on
// an H100): past them counts go to the exchange and the partition. The thresholds between the tiers are written as
// the device's capacities, not as H100 bin counts, so that another device's plan follows its shared memory.
inline int64_t cluster_auto_max_count_bins(const DeviceCaps& caps) {
  return kClusterAutoMaxBlocks * packed_block_bins(caps);
}

inline int64_t ceil_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// The automatic plan's rule for a histogram with few elements per bin (kFewElementsPerBin, kFewElementsMinBins,
// measured in tuning.h): tiers shared and cluster, which zero and flush all their bins, decline it, and tier
// "global" takes it. (n < 32 * bins, written so that it cannot overflow.)
inline bool few_elements_per_bin(const PlanRequest& request) {
  return request.bins >= kFewElementsMinBins && request.elements_per_histogram / kFewElementsPerBin < request.bins;
}

inline int64_t accumulator_bytes(AccKind acc) { return (acc == AccKind::kDouble || acc == AccKind::kFixed) ? 8 : 4; }

// Cuts rows into segments so that `resident` workers (blocks or clusters) all get an item, but no segment is
// shorter than `min_per_item` elements; then as many workers as there are items, up to `resident`.
inline void shape_items(const InputDescription& p, int64_t resident, int64_t min_per_item, LaunchShape* shape) {
  resident = std::max<int64_t>(resident, 1);
  shape->segments = 1;
  if (p.rows < resident) {
    shape->segments = std::max<int64_t>(
        1, std::min<int64_t>(ceil_div(resident, p.rows), p.row_length / std::max<int64_t>(min_per_item, 1)));
  }
  shape->grid = std::min<int64_t>(p.rows * shape->segments, resident);
}

// Kernels without block state (the global tier, the range pass, the bin indices): `threads`-thread blocks, as many
// as fill the SMs, each with at least `min_per_thread` elements a thread.
inline void shape_stateless(const InputDescription& p, const DeviceCaps& caps, int threads, LaunchShape* shape,
                            int64_t min_per_thread = kMinElementsPerThread) {
  shape->threads = threads;
  shape_items(p, int64_t(caps.sm_count) * (2048 / threads), threads * min_per_thread, shape);
}

// The rules every tier with shared-memory bins applies once its grid is shaped (`workers`: blocks, or clusters),
// into shape->flushing. `one_cluster_sums`: the grid is one cluster whose blocks' bins are summed through DSMEM and
// stored (tier shared's small calls), one worker as far as storing goes; false when the rows cannot be stored.
//
// 32-bit shared-memory counts could wrap if a worker counted more than kMaxCountsPerFlush elements into one row's
// bins before flushing: then every item is flushed on its own and no item is longer than that. Unreachable with
// memory-resident inputs on today's GPUs (2^32 elements per block), but not with stride-0 (expanded) views.
//
// Stores replace the output, so each output row must be flushed exactly once, by the one worker that counted all
// of it: a batched row that is not split, or a 1-D histogram counted by a single worker or summed in one cluster
// (no zeroing launch). Without stores (the deterministic passes) the blocks flush into the scratch as usual.
inline void settle_flushes_and_stores(const HistogramParams& p, int64_t workers, AccKind acc, bool may_store,
                                      bool one_cluster_sums, LaunchShape* shape) {
  Flushing& flushing = shape->flushing;
  if (acc == AccKind::kCount) {
    const int64_t per_worker =
        most_elements_per_worker(p.rows, p.row_length, shape->segments, std::max<int64_t>(workers, 1));
    if (per_worker > kMaxCountsPerFlush) {
      flushing.flush_each_item = true;
      shape->segments = std::max(shape->segments, ceil_div(p.row_length, kMaxCountsPerFlush));
    }
  }
  const bool one_worker = workers == 1 || one_cluster_sums;
  flushing.store_rows =
      may_store && (p.output_row_stride != 0 ? shape->segments == 1 : one_worker && !flushing.flush_each_item);
}

}  // namespace dsmhist
