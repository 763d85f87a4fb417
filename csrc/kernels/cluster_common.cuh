// What the two cluster tiers ("cluster" and "cluster_dsmem") share: the kernel prologue (which bins a block of the
// cluster owns, zeroed), and on the host the search for the cluster that holds the bins and the launch shape.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tier_host.h"
#include "traversal.cuh"

namespace dsmhist {
namespace detail {

// The cluster tiers' launch arguments (shape_cluster's).
struct ClusterLaunch {
  Flushing flushing;
  int64_t bins_per_block = 0;  // consecutive bins each block of a cluster owns (the plan's)
  // Tier cluster only: how many blocks of a cluster own the same bins (consecutive ranks), each counting a share of
  // every item's elements; their counts are summed through DSMEM at each flush. 1 elsewhere.
  int64_t replicas = 1;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The bins this block of its cluster owns: [first, first + owned), launch.bins_per_block of them (the last range
// fewer, or none), kept from bins[0]; launch.replicas consecutive blocks own each range. Cluster capacity is far below
// 2^31 bins, so the per-block arithmetic fits 32 bits.
template <typename Acc>
struct ClusterSlice {
  Acc* bins;
  uint32_t cluster_size;
  uint32_t per_block;
  uint32_t replicas;  // blocks that own this range (ClusterLaunch::replicas)
  uint32_t replica;   // this block's place among them
  int64_t first;
  int64_t owned;
};

// The bins this block of its cluster owns (not zeroed: cluster_slice zeroes them).
template <typename Acc>
__device__ __forceinline__ ClusterSlice<Acc> owned_slice(const cooperative_groups::cluster_group& cluster,
                                                         const HistogramParams& p, const ClusterLaunch& launch) {
  ClusterSlice<Acc> slice;
  slice.bins = shared_bins<Acc>();
  slice.cluster_size = cluster.num_blocks();
  slice.per_block = static_cast<uint32_t>(launch.bins_per_block);
  slice.replicas = static_cast<uint32_t>(launch.replicas);
  slice.replica = cluster.block_rank() % slice.replicas;
  slice.first = int64_t(cluster.block_rank() / slice.replicas) * slice.per_block;
  slice.owned =
      slice.first >= p.bins ? 0 : (p.bins - slice.first < slice.per_block ? p.bins - slice.first : slice.per_block);
  return slice;
}

// The prologue of a cluster tier kernel: this block's slice of the bins, zeroed by this block's threads. The caller
// puts the barrier after it that its adds need (a block barrier for local adds, a cluster barrier for remote ones).
template <typename Acc>
__device__ __forceinline__ ClusterSlice<Acc> cluster_slice(const cooperative_groups::cluster_group& cluster,
                                                           const HistogramParams& p, const ClusterLaunch& launch) {
  const ClusterSlice<Acc> slice = owned_slice<Acc>(cluster, p, launch);
  zero_bins(slice.bins, slice.owned);
  return slice;
}
#endif

// The cluster of `tier` to plan: the smallest from `smallest` blocks (or the forced size) whose blocks' shared memory
// holds the bins, `block_bytes(block_bins)` a block, and that can be resident. `replicas` (1: the tier keeps one copy
// of each bin) is how many blocks the automatic plan gives bins that one block holds (a cluster of `replicas`
// blocks, else of one where that cannot run); a forced size of a tier that replicates splits into the fewest ranges
// that hold the bins, its other blocks replicas.
template <typename BlockBytes>
inline PlanStatus fit_cluster(const TierContext& ctx, Tier tier, int smallest, int replicas, BlockBytes block_bytes,
                              HistogramPlan* plan) {
  const PlanRequest& request = ctx.request;
  int sizes[2 * kMaxClusterSize];
  int copies[2 * kMaxClusterSize];
  int count = 0;
  const auto add = [&](int size, int copies_of_a_range) {
    sizes[count] = size;
    copies[count++] = copies_of_a_range;
  };
  if (request.forced_cluster_size > 0) {
    const int size = request.forced_cluster_size;
    for (int ranges = 1; ranges <= size; ++ranges) {
      if (size % ranges == 0 && (replicas > 1 || ranges == size)) add(size, size / ranges);
    }
  } else {
    for (int ranges = smallest; ranges <= kMaxClusterSize; ++ranges) {
      if (replicas > 1 && ranges == 1) add(replicas, replicas);
      add(ranges, 1);
    }
  }
  return fit_first_cluster_size(ctx, tier, sizes, copies, count, kBlockThreads, INT64_MAX, block_bytes, plan);
}

// A worker is a cluster. `readers`: how many blocks of a cluster split an item's elements (all of them in tier
// cluster_dsmem; in tier cluster every block reads the whole item, and zeroes and flushes only its own bins).
// `item_bins`: the bins one item is worth zeroing and flushing for. The caller sets shape->kernel_variant first: the
// kernel whose residency sizes the grid.
inline cudaError_t shape_cluster(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan,
                                 AccKind acc, bool may_store, int64_t readers, int64_t item_bins, LaunchShape* shape) {
  shape->threads = plan.threads;
  int resident = 0;
  const void* kernel = ctx.kernels.tier_kernel(plan.tier, shape->kernel_variant);
  const cudaError_t err = max_active_clusters(kernel, ctx.request.device, ctx.caps, plan.cluster_size, plan.threads,
                                              plan.shared_bytes, &resident);
  if (err != cudaSuccess) return err;
  shape_items(p, resident, std::max<int64_t>(readers * plan.threads * kMinElementsPerThread, 2 * item_bins), shape);
  shape->grid *= plan.cluster_size;
  settle_flushes_and_stores(p, shape->grid / plan.cluster_size, acc, may_store, /*one_cluster_sums=*/false, shape);
  shape->cluster_dim = plan.cluster_size;
  ClusterLaunch launch;
  launch.flushing = shape->flushing;
  launch.bins_per_block = plan.bins_per_block;
  launch.replicas = plan.replicas;
  shape->args.set(launch);
  return cudaSuccess;
}

}  // namespace detail
}  // namespace dsmhist
