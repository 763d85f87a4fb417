// The planner: which tier, cluster size and shared memory a call gets, from the bin count, the accumulator and the
// device's capabilities. The rules live in the tier units (each tier's `fit`, tier_*.cuh) and their order in the tier
// table (common/tiers.h); this file only asks them. Nothing here sets a kernel attribute or touches a stream.
#include <cuda_runtime.h>

#include "device_caps.h"
#include "kernels.h"
#include "tier_host.h"
#include "tier_units.cuh"

namespace dsmhist {

const char* plan_status_message(PlanStatus status) {
  switch (status) {
    case PlanStatus::kOk:
      return "ok";
    case PlanStatus::kCudaError:
      return "a CUDA runtime query failed";
    case PlanStatus::kSharedTooSmall:
      return "tier 'shared' needs all bins in one block's shared memory, and these bins do not fit";
    case PlanStatus::kClusterUnavailable:
      return "tiers 'cluster' and 'cluster_dsmem' need a device of compute capability 9.0+ and an extension built "
             "with sm_90 code (TORCH_CUDA_ARCH_LIST including 9.0)";
    case PlanStatus::kClusterTooSmall:
      return "a cluster tier cannot hold these bins: they do not fit the shared memory of any launchable cluster";
    case PlanStatus::kClusterSizeUnsupported:
      return "the forced cluster size cannot be launched on this device with the shared memory these bins need";
    case PlanStatus::kPartitionTooManyBins:
      return "tier 'partition' holds at most 33521664 bins per row for counts and float32 sums, 16760832 for "
             "float64 and deterministic sums";
    case PlanStatus::kPartitionNotChosen:
      static_assert(kPartitionAutoMinBins == 232448 && kPartitionAutoMinElements == (int64_t(1) << 23),
                    "the message below states kPartitionAutoMinBins and kPartitionAutoMinElements");
      return "the planner takes tier 'partition' only for counts past 232448 bins (where the cluster tiers run; "
             "else past tier 'shared'), 2^23 elements or more";
    case PlanStatus::kFewElementsPerBin:
      static_assert(kFewElementsPerBin == 32 && kFewElementsMinBins == 16384,
                    "the message below states kFewElementsPerBin and kFewElementsMinBins");
      return "the planner takes tier 'global' for 16384 bins or more with fewer than 32 elements per bin";
    case PlanStatus::kExchangeCountsOnly:
      return "tier 'exchange' adds counts only: weighted sums (deterministic or not) take another tier";
    case PlanStatus::kExchangeNotChosen:
      static_assert(kExchangeAutoMinBins == 232449 && kExchangeAutoMaxBins == 640000 &&
                        kExchangeAutoMinElements == (int64_t(1) << 23),
                    "the message below states kExchangeAutoMinBins, kExchangeAutoMaxBins and kExchangeAutoMinElements");
      return "the planner takes tier 'exchange' only for counts of integer input by value at 232449-640000 bins, "
             "2^23 elements or more";
  }
  return "unknown planning status";
}

// A forced tier is asked alone (its refusal is the caller's error). Otherwise the tiers the planner may pick are asked
// in the table's order and the first that fits wins:
//   1. shared  - every block holds all bins: bins * accumulator bytes <= the opt-in shared memory per block
//                (227 KB on H100: 58112 32-bit counters);
//   2. exchange - sm_90 code on an sm_90+ device, counts of integer input binned by value, kExchangeAutoMinBins to
//                kExchangeAutoMaxBins bins (232449-640000) of at least kExchangeAutoMinElements elements (2^23) a
//                histogram (all measured, tuning.h);
//   3. partition - counts past kPartitionAutoMinBins bins (232448; without sm_90 code, every count tier 1 declines)
//                of at least kPartitionAutoMinElements elements (2^23) a histogram (both measured, tuning.h), up to
//                its capacity (tier_partition.cuh, auto_min_bins);
//   4. cluster - sm_90 code on an sm_90+ device, the bins fit kClusterAutoMaxBlocks blocks (counts; sums:
//                kClusterAutoMaxBlocksForSums; both measured, tuning.h),
//                and the smallest cluster whose combined shared memory holds the bins can be resident;
//      (1 and 4 decline 16384 bins or more with fewer than 32 elements a bin: few_elements_per_bin, tuning.h)
//   5. global  - everything else (and, before sm_90, everything beyond tiers 1 and 3).
PlanStatus make_plan(const PlanRequest& request, HistogramPlan* plan, cudaError_t* cuda_error) {
  *cuda_error = cudaSuccess;
  DeviceCaps caps;
  *cuda_error = device_caps(request.device, &caps);
  if (*cuda_error != cudaSuccess) return PlanStatus::kCudaError;
  const KernelSet kernels = kernels_for(request.input_type, request.acc);
  const TierContext ctx{request, caps, kernels, cluster_code_of(kernels, request.device, caps)};
  if (request.forced_tier != Tier::kAuto) {
    return tier_unit(request.forced_tier).fit(ctx, /*automatic=*/false, plan, cuda_error);
  }
  PlanStatus status = PlanStatus::kOk;
  for (const TierInfo& info : kTiers) {
    if (!info.planner_may_pick) continue;
    status = tier_unit(info.tier).fit(ctx, /*automatic=*/true, plan, cuda_error);
    if (status == PlanStatus::kOk || status == PlanStatus::kCudaError) return status;
  }
  return status;  // not reached while the table's last pickable tier ("global") fits every request
}

}  // namespace dsmhist
