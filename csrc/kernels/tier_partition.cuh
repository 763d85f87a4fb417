// Tier "partition": bins far past one block's shared memory (256K to tens of millions), counted in shared memory
// anyway. The input is processed in slices; each slice takes three kernels:
//   1. partition: every block bins a tile of kPartitionTile elements, groups the tile's elements by chunk (a chunk is
//      the 2^chunk_shift consecutive bins one block of kernel 3 holds in shared memory) and writes each element's bin
//      within its chunk as 16 bits (plus its weight, for weighted sums), the tile's run of each chunk, and adds the
//      chunks' elements to the slice's totals;
//   2. build_items: per chunk, cuts its runs over the tiles into work items of equal length, chosen from the slice's
//      chunk totals so that kernel 3's blocks finish together (one item each when the chunks are even), and a chunk
//      that receives most of the data (one hot bin, Zipf) is counted by many blocks;
//   3. count: a persistent grid claims the items in turn; a block counts an item's elements into its chunk's bins in
//      shared memory and flushes the nonzero ones into the output (an item with few elements goes straight to the
//      output).
// The global tier does one global atomic per element; here an element costs shared-memory atomics and 2 bytes of
// workspace written and read, and the output sees one add per bin per item. Workspace: one slice (tier_partition
// workspace_bytes, at most kPartitionWorkspaceBytes), from the caller (torch's caching allocator).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "partition_count_kernels.cuh"
#include "partition_item_kernels.cuh"
#include "tier_host.h"

namespace dsmhist {
namespace partition_tier {

// ----- Host side -------------------------------------------------------------------------------------------------

// Bins of one chunk: kPartitionChunkBytes of the plan's accumulator (32768 32-bit counts, 16384 64-bit sums).
inline int chunk_shift_for(AccKind acc) {
  int shift = 0;
  while ((int64_t(2) << shift) * accumulator_bytes(acc) <= kPartitionChunkBytes) ++shift;
  return shift;
}

// The most bins per row the tier takes: a slice's bins, one chunk of misalignment included, fit kPartitionMaxChunks.
inline int64_t max_bins(AccKind acc) { return (int64_t(kPartitionMaxChunks) - 1) << chunk_shift_for(acc); }

// The most bins the planner leaves to the tiers before it: tier cluster's automatic bins where the cluster tiers run
// (cluster_auto_max_count_bins: 232448 on an H100); without them (a GPU before sm_90, or a binary without sm_90 code)
// none, so it takes every count tier "shared" declines, which the planner asks first (measured: tuning.h).
inline int64_t auto_min_bins(const TierContext& ctx) {
  return ctx.cluster_code ? cluster_auto_max_count_bins(ctx.caps) : 0;
}

// The planner takes it for counts past auto_min_bins with kPartitionAutoMinElements elements or more a histogram
// (measured: tuning.h); forced, for any call it holds.
static_assert(kClusterAutoMaxBlocks == 2 && kPartitionAutoMinElements == (int64_t(1) << 23),
              "kNotChosen states kClusterAutoMaxBlocks and kPartitionAutoMinElements");
constexpr const char* kNotChosen =
    "the planner takes tier 'partition' only for counts past the bins two blocks of tier 'cluster' hold (232448 on an "
    "H100; without the cluster tiers, past tier 'shared'), 2^23 elements or more";
constexpr const char* kTooManyBins =
    "tier 'partition' holds at most 33521664 bins per row for counts and float32 sums, 16760832 for float64 and "
    "deterministic sums";

inline PlanStatus fit(const TierContext& ctx, bool automatic, HistogramPlan* plan) {
  const AccKind acc = ctx.request.acc;
  if (ctx.request.bins > max_bins(acc)) return PlanStatus::declines(kTooManyBins);
  if (automatic && (acc != AccKind::kCount || ctx.request.bins <= auto_min_bins(ctx) ||
                    ctx.request.elements_per_histogram < kPartitionAutoMinElements)) {
    return PlanStatus::declines(kNotChosen);
  }
  const int shift = chunk_shift_for(acc);
  plan->tier = Tier::kPartition;
  plan->cluster_size = 1;
  plan->threads = kPartitionCountThreads;
  plan->bins_per_block = int64_t(1) << shift;
  plan->shared_bytes = kCountScratchBytes + (int64_t(1) << shift) * accumulator_bytes(acc);
  return PlanStatus::fits();
}

// How a call is cut into slices, and where a slice's parts lie in the workspace.
struct Geometry {
  int32_t chunk_shift = 0;
  int64_t max_chunks = 0;       // chunks of any slice
  int64_t slice_elements = 0;   // a multiple of kTile (the last slice may be shorter)
  int64_t rows_per_slice = 0;   // batched rows no longer than a slice: whole rows per slice
  int64_t value_bytes = 0;      // per entry, beside its 2 bytes (weighted sums)
  int64_t min_item_values = 0;  // the shortest work item of kernel 3
  int64_t item_capacity = 0;
  int64_t entries_bytes = 0, values_bytes = 0, runs_bytes = 0, items_bytes = 0;
  int64_t total_bytes = 0;
};

inline int64_t align_up(int64_t bytes, int64_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

// The workspace's counters: two sets, taken in turn by the slices.
constexpr int64_t kCountersBytes = 2 * int64_t(sizeof(SliceCounters));

// `count_workers`: resident blocks of kernel 3. Depends only on the call, the plan's accumulator and the device.
inline Geometry geometry(const HistogramParams& p, AccKind plan_acc, int64_t count_workers) {
  Geometry g;
  g.chunk_shift = chunk_shift_for(plan_acc);
  const int64_t chunk_bins = int64_t(1) << g.chunk_shift;
  const bool batched = p.output_row_stride != 0;
  const int64_t all_flat_bins = p.output_rows() * p.bins;
  g.max_chunks = std::min<int64_t>(kPartitionMaxChunks, ceil_div(all_flat_bins, chunk_bins) + 1);
  g.value_bytes = plan_acc == AccKind::kCount ? 0 : accumulator_bytes(plan_acc);
  const int64_t per_tile = kTile * (2 + g.value_bytes) + g.max_chunks * 4;
  const int64_t budget_tiles = std::max<int64_t>(1, (kPartitionWorkspaceBytes - kPartitionItemsReserve) / per_tile);
  const int64_t tiles = std::min(budget_tiles, ceil_div(p.elements(), kTile));
  g.slice_elements = std::max<int64_t>(tiles, 1) * kTile;
  if (batched && p.row_length <= g.slice_elements) {
    const int64_t by_bins = std::max<int64_t>(1, ((kPartitionMaxChunks - 1) * chunk_bins) / p.bins);
    g.rows_per_slice = std::max<int64_t>(1, std::min(g.slice_elements / p.row_length, by_bins));
  }
  // Items of at least kPartitionMinItemElementsPerBin elements per bin of the chunk, so a flush stays cheap beside
  // the adds. Kernel 2 cuts at most (fewest rounds + kPartitionItemRoundsTried) rounds of kernel 3's blocks.
  g.min_item_values = chunk_bins * kPartitionMinItemElementsPerBin;
  g.item_capacity = g.max_chunks + (1 + kPartitionItemRoundsTried) * std::max<int64_t>(1, count_workers) + 1;
  const int64_t slice_tiles = g.slice_elements / kTile;
  g.entries_bytes = align_up(slice_tiles * kTile * 2, 256);
  g.values_bytes = align_up(slice_tiles * kTile * g.value_bytes, 256);
  g.runs_bytes = align_up(g.max_chunks * slice_tiles * 4, 256);
  g.items_bytes = align_up(g.item_capacity * int64_t(sizeof(Item)), 256);
  g.total_bytes = g.entries_bytes + g.values_bytes + g.runs_bytes + g.items_bytes + kCountersBytes;
  return g;
}

// Shared memory of kernel 1: the chunks' fills and starts, a scan's warp sums, the staged tile and its values; counts
// also two tiles of input (first) and the hot-bin cache (last).
inline int64_t partition_shared_bytes(InputType input_type, int64_t value_bytes) {
  const int64_t input_bytes =
      visit_input_type(input_type, [](auto tag) { return int64_t(sizeof(typename decltype(tag)::type)); });
  const bool counts = value_bytes == 0;  // counts prefetch two tiles of input and keep a hot-bin cache
  return (counts ? 2 * kTile * input_bytes + HotBinCache<detail::CountPolicy>::kSharedBytes : 0) +
         (3 * int64_t(kPartitionMaxChunks) + 64) * 4 + kTile * 2 + kTile * value_bytes;
}

template <typename Policy>
const void* build_items_kernel_of() {
  return reinterpret_cast<const void*>(&build_items_kernel<Policy>);
}
template <typename Policy>
const void* count_kernel_of() {
  return reinterpret_cast<const void*>(&count_kernel<Policy>);
}

// Kernels 2 and 3 of an accumulator (they do not depend on the input type).
inline void slice_kernels(AccKind acc, const void** build_items, const void** count) {
  switch (acc) {
    case AccKind::kFloat:
      *build_items = build_items_kernel_of<detail::WeightPolicy<float>>();
      *count = count_kernel_of<detail::WeightPolicy<float>>();
      return;
    case AccKind::kDouble:
      *build_items = build_items_kernel_of<detail::WeightPolicy<double>>();
      *count = count_kernel_of<detail::WeightPolicy<double>>();
      return;
    case AccKind::kExponent:
      *build_items = build_items_kernel_of<detail::ExponentPolicy>();
      *count = count_kernel_of<detail::ExponentPolicy>();
      return;
    case AccKind::kFixed:
      *build_items = build_items_kernel_of<detail::FixedPointPolicy>();
      *count = count_kernel_of<detail::FixedPointPolicy>();
      return;
    default:
      *build_items = build_items_kernel_of<detail::CountPolicy>();
      *count = count_kernel_of<detail::CountPolicy>();
  }
}

inline cudaError_t count_workers(const TierContext& ctx, const HistogramPlan& plan, int64_t* workers) {
  const void* build_items = nullptr;
  const void* count = nullptr;
  slice_kernels(ctx.request.acc, &build_items, &count);
  int per_sm = 1;
  const cudaError_t err =
      blocks_per_sm(count, ctx.request.device, ctx.caps, kPartitionCountThreads, plan.shared_bytes, &per_sm);
  *workers = int64_t(per_sm) * ctx.caps.sm_count;
  return err;
}

// What kernel 3 runs as (what plan() reports); the launch below runs the three kernels per slice itself.
inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind /*acc*/,
                         bool /*may_store*/, LaunchShape* shape) {
  int64_t workers = 1;
  const cudaError_t err = count_workers(ctx, plan, &workers);
  shape->threads = kPartitionCountThreads;
  shape->grid = std::max<int64_t>(1, std::min(workers, ceil_div(p.elements(), kTile)));
  shape->segments = 1;
  return err;
}

inline int64_t workspace_bytes(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan) {
  int64_t workers = 1;
  if (count_workers(ctx, plan, &workers) != cudaSuccess) workers = ctx.caps.sm_count;
  return geometry(p, ctx.request.acc, workers).total_bytes;
}

// Runs the call slice by slice on `stream` into p.output (zeroed first unless accumulating), with p.workspace of
// workspace_bytes(p, ...). `acc` is the pass being run (the deterministic sum runs two passes with one workspace).
inline cudaError_t launch(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                          bool zero_output, cudaStream_t stream) {
  int64_t workers = 1;
  cudaError_t err = count_workers(ctx, plan, &workers);
  if (err != cudaSuccess) return err;
  const Geometry g = geometry(p, ctx.request.acc, workers);
  if (p.workspace == nullptr || p.workspace_bytes < g.total_bytes) return cudaErrorInvalidValue;
  if (zero_output) {
    err = cudaMemsetAsync(p.output, 0, static_cast<size_t>(p.output_rows() * p.bins * output_bytes(p.output_type)),
                          stream);
    if (err != cudaSuccess) return err;
  }
  unsigned char* workspace = static_cast<unsigned char*>(p.workspace);
  Slice s;
  s.chunk_shift = g.chunk_shift;
  s.entries = reinterpret_cast<uint16_t*>(workspace);
  s.values = workspace + g.entries_bytes;
  s.runs = reinterpret_cast<uint32_t*>(workspace + g.entries_bytes + g.values_bytes);
  s.items = reinterpret_cast<Item*>(workspace + g.entries_bytes + g.values_bytes + g.runs_bytes);
  SliceCounters* counters =
      reinterpret_cast<SliceCounters*>(workspace + g.entries_bytes + g.values_bytes + g.runs_bytes + g.items_bytes);
  s.min_item_values = g.min_item_values;
  err = cudaMemsetAsync(counters, 0, kCountersBytes, stream);
  if (err != cudaSuccess) return err;

  const void* partition = ctx.kernels.tier_kernel(Tier::kPartition);
  const void* build_items = nullptr;
  const void* count = nullptr;
  slice_kernels(acc, &build_items, &count);
  // The deterministic sum's first pass runs other kernels than the plan's accumulator names: raise their limits too.
  err = configure_kernel(count, ctx.request.device, ctx.caps, /*is_cluster_kernel=*/false);
  if (err != cudaSuccess) return err;
  const int64_t value_bytes = acc == AccKind::kCount ? 0 : accumulator_bytes(acc);
  const int64_t partition_shared = partition_shared_bytes(p.input_type, value_bytes);
  int partition_per_sm = 1;
  err = blocks_per_sm(partition, ctx.request.device, ctx.caps, kPartitionThreads, partition_shared, &partition_per_sm);
  if (err != cudaSuccess) return err;

  const int64_t chunk_bins = int64_t(1) << g.chunk_shift;
  const int64_t elements = p.elements();
  const bool batched = p.output_row_stride != 0;
  int64_t slice_index = 0;
  for (int64_t begin = 0; begin < elements; ++slice_index) {
    int64_t end, flat_low, flat_high;
    if (batched) {
      const int64_t first_row = begin / p.row_length;
      if (g.rows_per_slice > 0) {
        end = std::min(elements, begin + g.rows_per_slice * p.row_length);
      } else {
        end = std::min({elements, begin + g.slice_elements, (first_row + 1) * p.row_length});
      }
      flat_low = first_row * p.bins;
      flat_high = ((end - 1) / p.row_length + 1) * p.bins;
    } else {
      end = std::min(elements, begin + g.slice_elements);
      flat_low = 0;
      flat_high = p.bins;
    }
    s.element_begin = begin;
    s.elements = end - begin;
    s.flat_base = flat_low / chunk_bins * chunk_bins;
    s.chunks = static_cast<int32_t>(ceil_div(flat_high - s.flat_base, chunk_bins));
    s.tiles = ceil_div(s.elements, kTile);
    s.count_blocks =
        std::max<int64_t>(1, std::min<int64_t>(workers, ceil_div(s.elements, s.min_item_values) + s.chunks));
    s.counters = counters + (slice_index & 1);
    s.next_counters = counters + ((slice_index + 1) & 1);
    void* partition_args[] = {const_cast<HistogramParams*>(&p), &s};
    const int64_t partition_grid = std::min<int64_t>(s.tiles, int64_t(partition_per_sm) * ctx.caps.sm_count);
    err = cudaLaunchKernel(partition, dim3(static_cast<unsigned>(partition_grid)), dim3(kPartitionThreads),
                           partition_args, static_cast<size_t>(partition_shared), stream);
    if (err != cudaSuccess) return err;
    void* item_args[] = {&s};
    err = cudaLaunchKernel(build_items, dim3(static_cast<unsigned>(s.chunks)), dim3(kPartitionItemThreads), item_args,
                           0, stream);
    if (err != cudaSuccess) return err;
    err = cudaLaunchKernel(count, dim3(static_cast<unsigned>(s.count_blocks)), dim3(kPartitionCountThreads),
                           partition_args, static_cast<size_t>(plan.shared_bytes), stream);
    if (err != cudaSuccess) return err;
    begin = end;
  }
  return cudaSuccess;
}

// This tier runs its own launches (three kernels per slice) and needs a workspace.
constexpr CustomLaunch custom_launch{&launch, &workspace_bytes};

}  // namespace partition_tier
}  // namespace dsmhist
