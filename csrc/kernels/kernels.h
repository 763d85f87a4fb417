// The host-side interface of the CUDA path: what the torch bindings call (plan, then launch). Raw pointers,
// HistogramParams and a cudaStream_t only; no torch header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/binning.h"
#include "../common/call.h"
#include "../common/edge_binning.h"
#include "../common/tiers.h"
#include "tuning.h"

namespace dsmhist {

// The most kernels one tier has: its kernel and the bodies its unit specialises (TierKernelVariants, tier_host.h).
constexpr int kMaxTierKernels = 6;

// Addresses of the kernels instantiated for one input type and accumulator: per tier (indexed by tier_index) its
// kernel and any specialised variants (null where the unit has none for this type), the range pass and the
// per-element bin indices.
struct KernelSet {
  const void* tiers[kTierCount][kMaxTierKernels] = {};
  const void* finite_range = nullptr;  // null for integer inputs
  const void* bin_index = nullptr;

  const void* tier_kernel(Tier tier, int variant = 0) const { return tiers[tier_index(tier)][variant]; }
};

// Defined in histogram_<type>.cu, one translation unit per input type.
template <typename T>
KernelSet kernel_set_for(AccKind acc);

// The kernels of an input type and accumulator (any type of the dtype table).
KernelSet kernels_for(InputType type, AccKind acc);

// What to plan for: the device, the bin count, the accumulator, how many elements a histogram gets, and an optional
// forced tier / cluster size. How rows are cut into work items is decided per launch.
struct PlanRequest {
  int device = 0;
  int64_t bins = 0;
  InputType input_type = InputType::kInt64;
  BinMode mode = BinMode::kIndex;  // how the call bins (integer input by value, or a range)
  AccKind acc = AccKind::kCount;
  Tier forced_tier = Tier::kAuto;
  int forced_cluster_size = 0;  // 0: the planner chooses
  int max_cluster_size = 0;     // > 0: treat larger clusters as unlaunchable (tests: a device that cannot run 16)
  // Elements that add into one histogram: all of a 1-D call's, a row of a batched call. The default stands for a
  // large call (what plan() reports when it is given none). The automatic plan takes tier "global" when they are
  // few per bin (few_elements_per_bin, tier_host.h), and tier "partition" only for many.
  int64_t elements_per_histogram = INT64_MAX;
};

// The strategy for one call: tier, cluster size, shared memory per block and threads per block. These are what a
// 1-D call with more than kSmallCallMaxElements elements launches; three launches reshape per call (the tier's shape
// function): tier "shared" runs a small 1-D call as one cluster of up to kSmallCallMaxBlocks blocks, gives the
// rows of a batched call blocks of fewer threads when they are short, and leaves out a 1-byte input's byte tallies
// (kByteTallyBytes) where its work items are too short for them. describe_launch reports a given call's shape.
struct HistogramPlan {
  Tier tier = Tier::kGlobal;
  int cluster_size = 1;
  int threads = 0;
  int64_t bins_per_block = 0;  // bins each block keeps in shared memory (0 for the global tier)
  int replicas = 1;            // tier cluster: blocks of a cluster that keep the same bins (HistogramParams)
  int64_t shared_bytes = 0;    // dynamic shared memory per block
};

enum class PlanStatus : int32_t {
  kOk = 0,
  kCudaError,               // a CUDA runtime query failed; see the cudaError_t
  kSharedTooSmall,          // forced "shared" but the bins do not fit one block's shared memory
  kClusterUnavailable,      // forced a cluster tier on a device below sm_90, or a binary without sm_90 code
  kClusterTooSmall,         // forced a cluster tier but the bins do not fit any launchable cluster
  kClusterSizeUnsupported,  // the forced cluster size cannot be launched with this shared memory on this device
  kPartitionTooManyBins,    // tier "partition" holds at most kPartitionMaxChunks - 1 chunks of bins per row
  kPartitionNotChosen,      // the planner takes tier "partition" only for counts past its auto_min_bins
  kFewElementsPerBin,       // the planner takes tier "global" for many bins with few elements each
  kExchangeCountsOnly,      // tier "exchange" adds counts, not weighted or deterministic sums
  kExchangeNotChosen        // the planner takes tier "exchange" only for counts by value in its window of bins
};

const char* plan_status_message(PlanStatus status);

// Chooses the tier for a request (planner.cu: the one place where tiers are chosen), from the device's capabilities
// and occupancy answers (device_caps.h); kernels are configured for launch by the launcher, not here. (An occupancy
// answer for more than 48 KB of shared memory or a 16-block cluster needs the kernel's limits raised first: the
// occupancy query does that for the kernel it asks about, once per kernel and device.)
PlanStatus make_plan(const PlanRequest& request, HistogramPlan* plan, cudaError_t* cuda_error);

// Bytes of device scratch a deterministic weighted sum (AccKind::kFixed) needs for `output_bins` bins in all
// (output rows * bins); the caller points p.deterministic.sums at it (8-byte aligned), the launcher does the rest.
int64_t deterministic_scratch_bytes(int64_t output_bins);

// The range pass for floating input with no min/max: writes the finite min and max of p.input's elements to p.keys
// on `stream`, as the two slots of encode_data_range (binning.h: zeros for an input with no finite value; slots of
// several inputs merge by the larger of each, as a distributed call combines its ranks' ranges).
cudaError_t launch_finite_range(const RangeParams& p, const PlanRequest& request, cudaStream_t stream);

// Writes each element's bin (-1: dropped) on `stream`: p from make_bin_index_params, its int64 indices at p.output.
// A data-derived range must already be at p.device_range, as for launch_histogram.
cudaError_t launch_bin_indices(const HistogramParams& p, const PlanRequest& request, cudaStream_t stream);

// What the launch of a call of p under `plan` uses (the planned tier's shape function, as launch_histogram asks
// it): threads per block, blocks per cluster (1: no clusters), blocks in the grid and dynamic shared memory per
// block; all 0 for a call with no elements (nothing is launched). p needs only its shape (rows, row_length,
// output_row_stride, strides): no pointer is read. Like a launch, it may raise the kernel's shared-memory limits first
// (device_caps.h).
struct LaunchReport {
  int threads = 0;
  int cluster_size = 0;
  int64_t grid = 0;
  int64_t shared_bytes = 0;
};
cudaError_t describe_launch(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                            LaunchReport* report);

// The bin-edges stage (edge_bins.cu): writes the int32 flat bin of each point of p's chunk to p.out on `stream`
// (edges_bodies.h then counts them with launch_histogram in index mode). Never synchronises with the host.
cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream);

// The fused edges path (edge_histogram.cu): plans a whole call of p (first_point 0, every point) into c and, where it
// takes it (plan->fused), zeroes c's output and bins and counts in one pass on `stream`. Where it declines
// (deterministic sums, an output past L2, edges that do not fit, bounds of its 32-bit counts and offsets) nothing is
// launched or written, and the caller takes the two stages. The planning is host-side; it may raise the kernel's
// limits.
struct EdgeHistogramPlan {
  bool fused = false;
  const char* mode = "";  // "shared" (every block all bins), "owned" (a group's blocks split them), "global"
  int64_t grid = 0;
  int threads = 0;
  int64_t shared_bytes = 0;
  int replicas = 0;  // copies of the bins in a block (mode shared)
  int owners = 0;    // blocks that split the bins (mode owned; 1 elsewhere)
  const void* kernel = nullptr;
};
cudaError_t launch_edge_histogram(const EdgeBinParams& p, const EdgeCountParams& c, int device, cudaStream_t stream,
                                  EdgeHistogramPlan* plan);

// Bytes of device workspace the planned tier needs for the call p (0 for most tiers; tier "partition": at most
// kPartitionWorkspaceBytes); the caller points p.workspace at that many bytes (256-byte aligned) before launching.
cudaError_t tier_workspace_bytes(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                                 int64_t* bytes);

// Runs one call on `stream`: the planned tier (zeroing the output first unless p.accumulate or every row is stored
// whole), or the three deterministic steps for AccKind::kFixed (fixed_point.cu). When p.device_range is set, the keys
// must already be there (launch_finite_range earlier on the same stream, or keys merged across ranks). Never
// synchronises with the host.
cudaError_t launch_histogram(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                             cudaStream_t stream);

}  // namespace dsmhist
