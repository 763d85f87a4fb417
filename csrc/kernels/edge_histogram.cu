// The one pass of the CUDA bin-edges ops (docs/tiers/edges.md): launch_edge_histogram plans a call and, where it
// takes it, bins each point and adds it, with no index written to memory. The bins live in shared memory when they fit:
// every block keeps all of them (kShared, in a few copies when they are few, so hot bins contend less), or each block
// of a group of 2-kEdgeMaxOwnerBlocks owns a range of them and counts only the points that land there (kOwned: every
// block of a group reads the group's points; the second read comes from L2). Past that the points add straight into the
// output with global atomics, counts aggregated per warp (kGlobal), while the output fits comfortably in L2. What it
// declines (counts past one block over kEdgeTwoStageMinPoints points, deterministic sums, a forced tier, an output
// past L2, edges that do not fit in shared memory) takes the two stages (edge_bins.cu), whose first stage bins through
// the same staging and lookup where the edges fit (edge_keys_kernel, mode kKeys). Each block stages the edges and a
// table of cells over each dim's edge range in shared memory (edge_fused.cuh; common/edge_binning.h says why a cell
// lookup is exact), laid out by edge_fused_layout.cuh. No host sync, no allocation: safe in CUDA graphs.
#include "kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../common/edge_binning.h"
#include "device_caps.h"
#include "edge_fused.cuh"
#include "edge_fused_layout.cuh"
#include "edge_staging.h"
#include "tier_host.h"
#include "tuning.h"

namespace dsmhist {

namespace {

// ----- The fused path -----------------------------------------------------------------------------------------------

// Adds a block's bins [lo, lo + f.bins_per_block) (the sum of their copies) into `output_row` of the output, and
// with `rezero` zeroes them for the next row. The caller's barrier has made every add visible.
template <typename Acc>
__device__ __forceinline__ void flush_bins(const EdgeCountParams& c, const FusedShape& f, Acc* bins, int32_t lo,
                                           int64_t output_row, bool rezero) {
  for (int32_t j = threadIdx.x; j < f.bins_per_block; j += blockDim.x) {
    const int64_t bin = int64_t(lo) + j;
    if (bin >= c.bins) break;
    Acc sum = Acc(0);
    for (int32_t r = 0; r < f.replicas; ++r) {
      sum += bins[r * f.bins_per_block + j];
      if (rezero) bins[r * f.bins_per_block + j] = Acc(0);
    }
    if (sum != Acc(0)) add_to_output<Acc>(c, output_row * c.bins + bin, sum);
  }
}

// Batched rows (p.rows > 1, bins in shared memory): block b counts a contiguous share of the rows' points, taken row
// by row: each row's part into its bins, flushed into that row of the output before the next row's part. A row split
// between blocks is added by each (atomically).
template <typename T, typename Acc, int kDims, int kEdges, OutOfRange kRule>
__device__ __forceinline__ void count_rows_and_flush(const EdgeBinParams& p, const EdgeCountParams& c,
                                                     const FusedShape& f, const DimFacts<edge_t<T>>* facts,
                                                     const edge_t<T>* edges, const CellEntry<edge_t<T>, kEdges>* table,
                                                     Acc* bins) {
  auto counter =
      block_counter<FusedMode::kShared, T, Acc, kDims, kEdges, false, kRule>(p, c, f, facts, edges, table, bins);
  const int64_t total = p.rows * p.points;
  const int64_t share = (total + gridDim.x - 1) / gridDim.x;
  int64_t begin = int64_t(blockIdx.x) * share < total ? int64_t(blockIdx.x) * share : total;
  const int64_t end = begin + share < total ? begin + share : total;
  while (begin < end) {
    const int64_t row = begin / p.points;
    const int64_t first = begin - row * p.points;
    const int64_t last = end - row * p.points < p.points ? end - row * p.points : p.points;
    const T* row_input = static_cast<const T*>(p.input) + row * p.row_stride;
    counter.weight_offset = row * c.weight_row_stride;
    count_strided<T, kDims>(p, counter, row_input, first, last, threadIdx.x - counter.lane, blockDim.x, [] {});
    __syncthreads();  // every add of this row's part lands before the bins are flushed
    flush_bins<Acc>(c, f, bins, 0, row, /*rezero=*/true);
    __syncthreads();  // the bins are zero again before the next row's adds
    begin = row * p.points + last;
  }
}

// One block's share of a call in mode kMode: count its points, then (bins in shared memory) flush its bins. Packed
// counts (one output row) are swept every kPackedSweepValues points a block and flushed word by word.
template <FusedMode kMode, typename T, typename Acc, int kDims, int kEdges, bool kPacked, OutOfRange kRule>
__device__ __forceinline__ void count_and_flush(const EdgeBinParams& p, const EdgeCountParams& c, const FusedShape& f,
                                                const DimFacts<edge_t<T>>* facts, const edge_t<T>* edges,
                                                const CellEntry<edge_t<T>, kEdges>* table, Acc* bins) {
  const auto counter = block_counter<kMode, T, Acc, kDims, kEdges, kPacked, kRule>(p, c, f, facts, edges, table, bins);
  if constexpr (kPacked) {
    constexpr int kRoundsPerSweep =
        static_cast<int>(detail::kPackedSweepValues / (kEdgeFusedThreads * kEdgePointsPerStep));
    static_assert(kRoundsPerSweep >= 1, "a round stays within the points a sweep allows");
    const auto move_out = [&](int64_t local, uint32_t n) { add_to_output<uint32_t>(c, counter.lo + local, n); };
    int rounds = 0;
    count_points<T, kDims>(p, f, counter, [&] {
      if (++rounds < kRoundsPerSweep) return;
      rounds = 0;
      __syncthreads();  // every add since the last sweep has landed before its word is read
      counter.packed.sweep(move_out);
      __syncthreads();  // every word is swept before the next round adds to it
    });
    __syncthreads();  // every add into the block's words must land before they are flushed
    counter.packed.drain(move_out);
  } else {
    count_points<T, kDims>(p, f, counter, [] {});
    if constexpr (kMode != FusedMode::kGlobal) {
      __syncthreads();  // every add into the block's bins must land before they are flushed
      flush_bins<Acc>(c, f, bins, counter.lo, /*output_row=*/0, /*rezero=*/false);
    }
  }
}

// One pass: stage the edges, then bin and count every point (FusedMode says where the counts go). Shared memory:
// the bins, then each dim's facts, the edges and the packed tables (kEdges edges a table entry).
template <typename T, typename Acc, int kDims, int kEdges, bool kPacked = false>
__global__ void __launch_bounds__(kEdgeFusedThreads)
    edge_histogram_kernel(const EdgeBinParams p, const EdgeCountParams c, const EdgeTableShape shape,
                          const FusedShape f) {
  using E = edge_t<T>;
  extern __shared__ __align__(16) unsigned char shared[];
  Acc* bins = reinterpret_cast<Acc*>(shared);
  const int32_t slots =
      kPacked ? static_cast<int32_t>(detail::packed_words(f.bins_per_block)) : f.replicas * f.bins_per_block;
  for (int32_t j = threadIdx.x; j < slots; j += blockDim.x) bins[j] = Acc(0);
  const FusedStaging<E, kEdges> staged = stage_fused<E, kEdges>(p, shape, f, shared);
  const DimFacts<E>* facts = staged.facts;
  const E* edges = staged.edges;
  const CellEntry<E, kEdges>* table = staged.table;
  // The loop for the call's mode and out_of_range rule, each fixed at compile time.
  const auto count = [&](auto rule) {
    constexpr OutOfRange kRule = decltype(rule)::value;
    if constexpr (kPacked) {  // one output row, bins in shared memory
      if (f.mode == FusedMode::kShared) {
        count_and_flush<FusedMode::kShared, T, Acc, kDims, kEdges, true, kRule>(p, c, f, facts, edges, table, bins);
      } else {
        count_and_flush<FusedMode::kOwned, T, Acc, kDims, kEdges, true, kRule>(p, c, f, facts, edges, table, bins);
      }
    } else {
      switch (f.mode) {
        case FusedMode::kShared:
          if (p.rows > 1) {
            count_rows_and_flush<T, Acc, kDims, kEdges, kRule>(p, c, f, facts, edges, table, bins);
          } else {
            count_and_flush<FusedMode::kShared, T, Acc, kDims, kEdges, false, kRule>(p, c, f, facts, edges, table,
                                                                                     bins);
          }
          break;
        case FusedMode::kOwned:
          count_and_flush<FusedMode::kOwned, T, Acc, kDims, kEdges, false, kRule>(p, c, f, facts, edges, table, bins);
          break;
        default:
          count_and_flush<FusedMode::kGlobal, T, Acc, kDims, kEdges, false, kRule>(p, c, f, facts, edges, table, bins);
          break;
      }
    }
  };
  with_out_of_range_rule(p.out_of_range, count);
}

// The kernel for `dims` dims: 1-3 known at compile time (each dim's facts in registers, points of 4-byte coordinates
// loaded as vectors: 3-D 16^3 0.248 -> 0.179 ms against the generic kernel, H100, perf log 2026-11-26), more generic.
template <typename T, typename Acc, int kEdges, bool kPacked = false>
const void* fused_kernel(int dims) {
  if constexpr (kEdges == 2) {  // tables of two-edge entries are 1-D tables only (tuning.h)
    return dims == 1 ? reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 1, 2>) : nullptr;
  } else {
    switch (dims) {
      case 1:
        return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 1, 1, kPacked>);
      case 2:
        return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 2, 1, kPacked>);
      case 3:
        return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 3, 1, kPacked>);
      default:
        return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 0, 1, kPacked>);
    }
  }
}

// The kernel of a call: `packed` (counts two to a word) with one-edge entries only.
template <typename T, int kEdges>
const void* fused_kernel(AccKind acc, int dims, bool packed = false) {
  if constexpr (kEdges == 2 && !kTwoEdgeEntries<T>) {
    return nullptr;
  } else {
    if (packed) return acc == AccKind::kCount && kEdges == 1 ? fused_kernel<T, uint32_t, 1, true>(dims) : nullptr;
    switch (acc) {
      case AccKind::kCount:
        return fused_kernel<T, uint32_t, kEdges>(dims);
      case AccKind::kFloat:
        return fused_kernel<T, float, kEdges>(dims);
      case AccKind::kDouble:  // rare: float64 weights take the generic-dims kernel with one-edge entries only
        return kEdges == 1 ? reinterpret_cast<const void*>(&edge_histogram_kernel<T, double, 0, 1>) : nullptr;
      default:
        return nullptr;  // deterministic sums: two stages
    }
  }
}

// The fused launch of a call, or plan->fused = false where it declines.
template <typename T>
cudaError_t plan_typed(const EdgeBinParams& p, const EdgeCountParams& c, int device, EdgeHistogramPlan* plan,
                       FusedShape* f, EdgeTableShape* table) {
  *plan = EdgeHistogramPlan{};
  const void* kernel = fused_kernel<T, 1>(c.acc, p.dims);
  // int32 offsets in the search, 32-bit shared counts: edges and points past those bounds take two stages.
  if (kernel == nullptr || p.edge_offset[p.dims] > INT32_MAX / 2 || c.bins > INT32_MAX / 2) return cudaSuccess;
  DeviceCaps caps;
  cudaError_t err = device_caps(device, &caps);
  if (err != cudaSuccess) return err;
  const int64_t acc_bytes = accumulator_bytes(c.acc);
  const int64_t usable = caps.shared_optin - kFusedReservedBytes;
  const int64_t bins_bytes = c.bins * acc_bytes;
  // The bytes of a block's `bins`: 32-bit (or 8-byte) slots, or counts two to a word.
  const auto block_bins_bytes = [&](int64_t bins, bool packed) {
    return packed ? detail::packed_words(bins) * 4 : bins * acc_bytes;
  };
  if (bins_bytes + kFusedMinStagingBytes <= usable) {
    f->mode = FusedMode::kShared;
    f->replicas = static_cast<int32_t>(std::max<int64_t>(
        1, std::min<int64_t>(kEdgeMaxReplicas, kEdgeReplicaBytes / std::max<int64_t>(bins_bytes, 1))));
    while (f->replicas & (f->replicas - 1)) --f->replicas;  // a power of two: warps spread evenly over the copies
    f->owners = 1;
    f->bins_per_block = static_cast<int32_t>(c.bins);
  } else if (p.rows > 1) {
    return cudaSuccess;  // batched rows count in shared memory only: more bins take two stages
  } else {
    // Counts past one block's 32-bit slots pack two to a word: one block, or a group of half the blocks.
    f->packed = c.acc == AccKind::kCount;
    f->owners = 0;
    for (int owners = f->packed ? 1 : 2; owners <= kEdgeMaxOwnerBlocks; ++owners) {
      if (block_bins_bytes((c.bins + owners - 1) / owners, f->packed) + kFusedMinStagingBytes <= usable) {
        f->owners = owners;
        break;
      }
    }
    // Counts that no one block holds, over many points: the two stages' lookup and tier count them faster than
    // groups of blocks or global atomics (tuning.h).
    if (c.acc == AccKind::kCount && f->owners != 1 && p.points >= kEdgeTwoStageMinPoints) return cudaSuccess;
    if (f->owners > 0) {
      f->mode = f->owners == 1 ? FusedMode::kShared : FusedMode::kOwned;
      f->replicas = 1;
      f->bins_per_block = static_cast<int32_t>((c.bins + f->owners - 1) / f->owners);
      if (f->packed) kernel = fused_kernel<T, 1>(c.acc, p.dims, /*packed=*/true);
    } else if (c.bins * output_bytes(c.output_type) <= caps.l2_bytes / kEdgeGlobalOutputL2Divisor) {
      f->mode = FusedMode::kGlobal;
      f->packed = false;
      f->owners = 1;
      f->replicas = 1;
      f->bins_per_block = 0;
    } else {
      return cudaSuccess;  // an output past L2: two stages, whose counting tiers are built for it
    }
  }
  const int64_t bins_region = round_up16(f->replicas * block_bins_bytes(f->bins_per_block, f->packed));
  err = lay_out_fused<T>(p, device, caps, kernel, fused_kernel<T, 2>(c.acc, p.dims, f->packed), bins_region, f, table,
                         plan);
  if (err != cudaSuccess || !plan->fused) return err;
  // A block's 32-bit counts: at most points / groups adds from its own group, rounded up to its threads' steps.
  const int64_t groups = plan->grid / f->owners;
  if (f->mode != FusedMode::kGlobal &&
      (p.rows * p.points / groups + int64_t(plan->threads) * kEdgePointsPerStep) >= UINT32_MAX) {
    plan->fused = false;
    return cudaSuccess;
  }
  plan->mode = f->mode == FusedMode::kShared ? "shared" : (f->mode == FusedMode::kOwned ? "owned" : "global");
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_edge_histogram(const EdgeBinParams& p, const EdgeCountParams& c, int device, cudaStream_t stream,
                                  EdgeHistogramPlan* plan) {
  FusedShape f;
  EdgeTableShape table;
  cudaError_t err = visit_input_type(
      p.input_type, [&](auto tag) { return plan_typed<typename decltype(tag)::type>(p, c, device, plan, &f, &table); });
  if (err != cudaSuccess || !plan->fused) return err;  // declined: nothing launched, nothing written
  err = cudaMemsetAsync(c.output, 0, static_cast<size_t>(p.rows * c.bins * output_bytes(c.output_type)), stream);
  if (err != cudaSuccess || p.points == 0) return err;
  void* args[] = {const_cast<EdgeBinParams*>(&p), const_cast<EdgeCountParams*>(&c), &table, &f};
  err = cudaLaunchKernel(plan->kernel, dim3(static_cast<unsigned int>(plan->grid)), dim3(plan->threads), args,
                         static_cast<size_t>(plan->shared_bytes), stream);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace dsmhist
