// Tier "cluster_dsmem", the CUDA guide's design: the bins are split across the blocks of a cluster as in tier
// "cluster", but the blocks share the work items and every thread adds into the owning block's shared memory through
// distributed shared memory (map_shared_rank). Remote atomics cap it near 80 G adds/s and serialise on a hot bin, so
// the planner never picks it (common/tiers.h); it stays as a forced tier for comparison.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cluster_common.cuh"
#include "policies.cuh"
#include "tier_host.h"
#include "traversal.cuh"

namespace dsmhist {
namespace dsmem_cluster_tier {

template <typename T, typename Policy>
__global__ void __launch_bounds__(kBlockThreads) kernel(const HistogramParams p, const detail::ClusterLaunch launch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using Acc = typename Policy::Acc;
  cg::cluster_group cluster = cg::this_cluster();
  const detail::ClusterSlice<Acc> slice = detail::cluster_slice<Acc>(cluster, p, launch);
  cluster.sync();  // other blocks add into these bins remotely: they must all be zeroed first
  const Binner<T> binner(p);
  detail::for_each_item<T>(
      p, launch.flushing, blockIdx.x / slice.cluster_size, gridDim.x / slice.cluster_size,
      int64_t(cluster.block_rank()) * blockDim.x + threadIdx.x, int64_t(slice.cluster_size) * blockDim.x,
      [&](const detail::ItemSpan<T>& span, T value, int64_t weight_offset) {
        const int64_t bin = binner(value);
        if (bin < 0) return;
        const Acc add = Policy::contribution(p, span.output_row * p.bins + bin, weight_offset);
        if (add == Acc(0)) return;
        const uint32_t b = static_cast<uint32_t>(bin);
        const uint32_t owner = b / slice.per_block;
        Policy::add_shared(cluster.map_shared_rank(slice.bins, owner) + (b - owner * slice.per_block), add);
      },
      // Remote adds target every block: the whole cluster must agree that they landed (or that bins are re-zeroed).
      [&] { cluster.sync(); },
      [&](int64_t row) { detail::flush_bins<Policy>(p, launch.flushing, slice.bins, row, slice.first, slice.owned); });
  // The final flush reads only this block's bins, and the barrier before it already ordered every remote add, so no
  // block exits while another may still write into its shared memory.
#endif
  // Without sm_90 code this body is empty; the host launches this tier only after checking that the loaded
  // binary was compiled for sm_90 or newer (cluster_code_available, device_caps.h).
}

inline PlanStatus fit(const TierContext& ctx, bool /*automatic*/, HistogramPlan* plan) {
  if (!ctx.cluster_code) return PlanStatus::declines(kClusterUnavailable);
  const int64_t acc_bytes = accumulator_bytes(ctx.request.acc);
  return detail::fit_cluster(
      ctx, Tier::kClusterDsmem, /*smallest=*/2, /*replicas=*/1,
      [acc_bytes](int64_t block_bins) { return block_bins * acc_bytes; }, plan);
}

inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                         bool may_store, LaunchShape* shape) {
  return detail::shape_cluster(p, ctx, plan, acc, may_store, /*readers=*/plan.cluster_size, /*item_bins=*/p.bins,
                               shape);
}

// One kernel, no workspace: the common launch.
constexpr CustomLaunch custom_launch{};

}  // namespace dsmem_cluster_tier
}  // namespace dsmhist
