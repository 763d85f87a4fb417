// The host-side interface of the CUDA path: what the torch bindings call (plan, then launch). Raw pointers,
// HistogramParams and a cudaStream_t only; no torch header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/binning.h"
#include "../common/call.h"
#include "../common/edge_binning.h"
#include "../common/tiers.h"
#include "device_caps.h"
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
// (kByteTallyBytes) where its work items are too short for them. PreparedCall::shape is a given call's.
struct HistogramPlan {
  Tier tier = Tier::kGlobal;
  int cluster_size = 1;
  int threads = 0;
  int64_t bins_per_block = 0;  // bins each block keeps in shared memory (0 for the global tier)
  int replicas = 1;            // tier cluster: blocks of a cluster that keep the same bins (ClusterLaunch)
  int64_t shared_bytes = 0;    // dynamic shared memory per block
};

// What planning answered (and each tier's `fit`, which words its own refusals): a plan, a failed CUDA runtime query, or
// a refusal (a forced tier that cannot take the call; in the planner's order, a tier that leaves it to the next).
struct PlanStatus {
  cudaError_t cuda_error = cudaSuccess;
  const char* refusal = nullptr;  // why, in the refusing tier's words (static text)

  bool ok() const { return cuda_error == cudaSuccess && refusal == nullptr; }
  static PlanStatus fits() { return PlanStatus{}; }
  static PlanStatus declines(const char* why) { return PlanStatus{cudaSuccess, why}; }
  static PlanStatus query_failed(cudaError_t err) { return PlanStatus{err, nullptr}; }
};

// How a kernel's workers (blocks, or clusters) flush their shared-memory bins: settle_flushes_and_stores (tier_host.h)
// decides; the traversal reads it (traversal.cuh). Part of the launch arguments of every tier with such bins.
struct Flushing {
  // Every output row is counted by exactly one worker, which stores all its bins (no zeroing of the output
  // beforehand, no atomics into it).
  bool store_rows = false;
  // Flush a worker's bins after every item, not only when the output row changes, so no 32-bit shared-memory count
  // can wrap however many elements one worker sees (only huge or stride-0 inputs need it).
  bool flush_each_item = false;
};

// A tier kernel's second parameter, its launch arguments: the tier's own struct (each unit defines `Launch`), which
// its shape function writes here (set) and the launcher passes as it is.
struct TierArgs {
  static constexpr size_t kBytes = 32;
  alignas(8) unsigned char bytes[kBytes] = {};

  template <typename Launch>
  void set(const Launch& launch) {
    static_assert(sizeof(Launch) <= kBytes && alignof(Launch) <= 8, "a tier's launch arguments fit TierArgs");
    static_assert(std::is_trivially_copyable<Launch>::value, "a kernel parameter is copied byte for byte");
    std::memcpy(bytes, &launch, sizeof(Launch));
  }
};

// What a planned call launches (its tier's shape function's answer): work items per row, grid, block size, cluster
// dims, shared memory, which of the tier's kernels, and that kernel's launch arguments.
struct LaunchShape {
  int64_t segments = 1;
  int64_t grid = 1;  // blocks (for a cluster launch: a multiple of cluster_dim)
  int threads = kBlockThreads;
  int cluster_dim = 0;       // > 0: launch as clusters of this many blocks
  Flushing flushing;         // (the launcher zeroes the output first unless flushing.store_rows)
  int64_t shared_bytes = 0;  // dynamic shared memory per block: the plan's, unless the tier's shape changes it
  int kernel_variant = 0;    // which of the tier's kernels runs (KernelSet::tier_kernel): 0 unless the shape picks
  TierArgs args;             // the kernel's second parameter
};

// One call made ready to launch (prepare_histogram): the request, its plan, the device and kernels the plan was made
// with, the launch the call gets and the device workspace the caller provides for it. Planned once per call; the
// plan itself is kept per request, so a repeated shape costs one lookup.
struct PreparedCall {
  PlanRequest request;
  HistogramPlan plan;
  DeviceCaps caps;
  KernelSet kernels;
  bool cluster_code = false;  // the loaded binary holds sm_90 cluster code (cluster_code_available)
  LaunchShape shape;          // the planned tier's launch of the call (unset for a call with no elements)
  int64_t workspace_bytes = 0;
};

// Plans `request` (planner.cu: the one place where tiers are chosen) and, for a call of p's shape (rows, row_length,
// output_row_stride, strides: no pointer is read), its launch and workspace. The automatic plan asks the tiers the
// planner may pick in the table's order; a forced tier is asked alone, and its refusal is the caller's error. Host
// queries only (device_caps.h); like a launch, it may raise a kernel's shared-memory limits. p.elements() == 0: the
// plan only.
PlanStatus prepare_histogram(const HistogramParams& p, const PlanRequest& request, PreparedCall* call);

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

// The bin-edges stage (edge_bins.cu): writes the int32 flat bin of each point of p's chunk to p.out on `stream`
// (edges_bodies.h then counts them with launch_histogram in index mode), through the one pass's cell lookup where it
// serves the call (*by_lookup set), else by edge_bins.cu's own search. Never synchronises with the host.
cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream, bool* by_lookup);

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
  int replicas = 0;         // copies of the bins in a block (mode shared)
  int owners = 0;           // blocks that split the bins (mode owned; 1 elsewhere)
  int edges_per_entry = 0;  // edges a cell's table entry holds (2 for float edges where the table fits, else 1)
  bool packed = false;      // counts two 16-bit halves to a shared 32-bit word (modes shared and owned)
  const void* kernel = nullptr;
};
cudaError_t launch_edge_histogram(const EdgeBinParams& p, const EdgeCountParams& c, int device, cudaStream_t stream,
                                  EdgeHistogramPlan* plan);

// Runs a prepared call of p on `stream`: the planned tier (zeroing the output first unless p.accumulate or every row
// is stored whole), or the three deterministic steps for AccKind::kFixed (fixed_point.cu). p.workspace holds
// call.workspace_bytes (256-byte aligned). When p.device_range is set, the keys must already be there
// (launch_finite_range earlier on the same stream, or keys merged across ranks). Never synchronises with the host.
cudaError_t launch_histogram(const HistogramParams& p, const PreparedCall& call, cudaStream_t stream);

}  // namespace dsmhist
