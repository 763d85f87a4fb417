// The CUDA side of the tier table (common/tiers.h): every tier unit's file, and the table's rows expanded into what
// the planner and the launcher call (TierUnit). The kernels each input type instantiates: kernel_set.cuh.
// Adding a tier: its unit file (tier_<unit>.cuh: a namespace with `kernel`, `fit` and `shape`), included below, and
// its row in DSMHIST_FOR_EACH_TIER.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../common/tiers.h"
#include "policies.cuh"
#include "tier_block_private.cuh"
#include "tier_dsmem_cluster.cuh"
#include "tier_exchange.cuh"
#include "tier_global_atomic.cuh"
#include "tier_host.h"
#include "tier_owned_range_cluster.cuh"
#include "tier_partition.cuh"

namespace dsmhist {

// A tier's host side.
//   fit:   whether the tier holds the request's bins on this device and, when it does, its plan. `automatic`: the
//          planner is choosing (a tier may fit less there than when forced: its should-use rule).
//   shape: how a planned call runs: segments, grid, block and cluster size, stores (called before every launch).
//   custom: the tier's own launch and workspace (CustomLaunch, tier_host.h), or none.
struct TierUnit {
  PlanStatus (*fit)(const TierContext& ctx, bool automatic, HistogramPlan* plan);
  cudaError_t (*shape)(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                       bool may_store, LaunchShape* shape);
  CustomLaunch custom;
};

inline const TierUnit& tier_unit(Tier tier) {
  static constexpr TierUnit kUnits[] = {
#define DSMHIST_TIER_UNIT(e, name, unit, pick, cluster) TierUnit{&unit::fit, &unit::shape, unit::custom_launch},
      DSMHIST_FOR_EACH_TIER(DSMHIST_TIER_UNIT)
#undef DSMHIST_TIER_UNIT
  };
  return kUnits[tier_index(tier)];
}

}  // namespace dsmhist
