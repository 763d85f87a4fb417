// The planner: which tier, cluster size and shared memory a call gets, from the bin count, the accumulator and the
// device's capabilities, made once per call into a PreparedCall (with the call's launch shape and workspace). The rules
// live in the tier units (each tier's `fit` and `shape`, tier_*.cuh) and their order in the tier table
// (common/tiers.h); this file only asks them. Nothing here touches a stream.
#include <cuda_runtime.h>

#include <tuple>

#include "device_caps.h"
#include "kept_answers.h"
#include "kernels.h"
#include "tier_host.h"
#include "tier_units.cuh"

namespace dsmhist {

namespace {

// A forced tier is asked alone (its refusal is the caller's error). Otherwise the tiers the planner may pick are asked
// in the table's order and the first that fits wins:
//   1. shared  - every block holds all bins: bins * accumulator bytes <= the opt-in shared memory per block
//                (227 KB on H100: 58112 32-bit counters);
//   2. exchange - sm_90 code on an sm_90+ device, counts of integer input binned by value, past the bins tier
//                cluster's kClusterAutoMaxBlocks blocks hold up to what a 16-block cluster of the exchange holds
//                (232449-640000 on an H100), at least kExchangeAutoMinElements elements (2^23) a histogram (all
//                measured, tuning.h);
//   3. partition - counts past the bins of tier cluster's kClusterAutoMaxBlocks blocks (232448 on an H100; without
//                sm_90 code, every count tier 1 declines)
//                of at least kPartitionAutoMinElements elements (2^23) a histogram (both measured, tuning.h), up to
//                its capacity (tier_partition.cuh, auto_min_bins);
//   4. cluster - sm_90 code on an sm_90+ device, the bins fit kClusterAutoMaxBlocks blocks (counts; sums:
//                kClusterAutoMaxBlocksForSums; both measured, tuning.h),
//                and the smallest cluster whose combined shared memory holds the bins can be resident;
//      (1 and 4 decline 16384 bins or more with fewer than 32 elements a bin: few_elements_per_bin, tuning.h)
//   5. global  - everything else (and, before sm_90, everything beyond tiers 1 and 3).

PlanStatus plan_for(const TierContext& ctx, HistogramPlan* plan) {
  if (ctx.request.forced_tier != Tier::kAuto) {
    return tier_unit(ctx.request.forced_tier).fit(ctx, /*automatic=*/false, plan);
  }
  PlanStatus status;
  for (const TierInfo& info : kTiers) {
    if (!info.planner_may_pick) continue;
    status = tier_unit(info.tier).fit(ctx, /*automatic=*/true, plan);
    if (status.ok() || status.cuda_error != cudaSuccess) return status;
  }
  return status;  // not reached while the table's last pickable tier ("global") fits every request
}

// What decides a plan: every field of the request.
using PlanKey = std::tuple<int, int64_t, InputType, BinMode, AccKind, Tier, int, int, int64_t>;

PlanKey key_of(const PlanRequest& r) {
  return PlanKey{r.device,
                 r.bins,
                 r.input_type,
                 r.mode,
                 r.acc,
                 r.forced_tier,
                 r.forced_cluster_size,
                 r.max_cluster_size,
                 r.elements_per_histogram};
}

// A plan and what it was made with, kept per request.
struct KeptPlan {
  HistogramPlan plan;
  DeviceCaps caps;
  bool cluster_code = false;
};

// Plans kept at most (KeptAnswers starts over past this).
constexpr size_t kMaxKeptPlans = 1024;

}  // namespace

PlanStatus prepare_histogram(const HistogramParams& p, const PlanRequest& request, PreparedCall* call) {
  call->request = request;
  call->kernels = kernels_for(request.input_type, request.acc);
  call->shape = LaunchShape{};
  call->workspace_bytes = 0;
  // A model calls with a handful of shapes: a kept plan costs one lookup where planning asks each tier in turn.
  // (Refusals are not kept: they raise.)
  static KeptAnswers<PlanKey, KeptPlan> kept_plans(kMaxKeptPlans);
  const PlanKey key = key_of(request);
  KeptPlan kept;
  if (kept_plans.find(key, &kept)) {
    call->plan = kept.plan;
    call->caps = kept.caps;
    call->cluster_code = kept.cluster_code;
  } else {
    const cudaError_t err = device_caps(request.device, &call->caps);
    if (err != cudaSuccess) return PlanStatus::query_failed(err);
    call->cluster_code = cluster_code_of(call->kernels, request.device, call->caps);
    const PlanStatus status = plan_for(TierContext::of(*call), &call->plan);
    if (!status.ok()) return status;
    kept_plans.keep(key, KeptPlan{call->plan, call->caps, call->cluster_code});
  }
  if (p.elements() == 0) return PlanStatus::fits();
  const TierContext ctx = TierContext::of(*call);
  const TierUnit& unit = tier_unit(call->plan.tier);
  call->shape.shared_bytes = call->plan.shared_bytes;
  cudaError_t err = unit.shape(p, ctx, call->plan, request.acc, /*may_store=*/true, &call->shape);
  if (err != cudaSuccess) return PlanStatus::query_failed(err);
  if (unit.custom.workspace_bytes != nullptr) call->workspace_bytes = unit.custom.workspace_bytes(p, ctx, call->plan);
  return PlanStatus::fits();
}

}  // namespace dsmhist
