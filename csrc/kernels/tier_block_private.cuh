// Tier "shared": every block keeps all bins in its own shared memory (a block-private copy) and flushes them once;
// a persistent grid over the work items. Small 1-D calls take another path of the same kernel: one cluster of up to
// kSmallCallMaxBlocks blocks whose private copies are summed through DSMEM and stored, one launch with no zeroing.
// Counts of a 1-byte input with long enough work items count byte values first (tallies, tuning.h), binned at each
// flush.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "policies.cuh"
#include "tier_host.h"
#include "traversal.cuh"

namespace dsmhist {
namespace block_private_tier {

// Whether the kernel of T and Policy has the byte-tally path: counts of a 1-byte input.
template <typename T, typename Policy>
constexpr bool kMayTallyBytes = sizeof(T) == 1 && std::is_same<Policy, detail::CountPolicy>::value;

// Sums the lane copies of each byte value's tally (zeroing them) and adds it into the value's bin: one warp per
// value at a time, each lane reading its own bank.
template <typename T>
__device__ __forceinline__ void merge_byte_tallies(uint32_t* tally, uint32_t* bins, const Binner<T>& binner) {
  const int lane = threadIdx.x % kByteTallyLanes;
  for (int value = threadIdx.x / kByteTallyLanes; value < 256; value += blockDim.x / kByteTallyLanes) {
    uint32_t* slot = tally + value * kByteTallyLanes + lane;
    const uint32_t count = __reduce_add_sync(0xffffffffu, *slot);
    *slot = 0u;
    if (lane != 0 || count == 0u) continue;
    const int64_t bin = binner(static_cast<T>(static_cast<uint8_t>(value)));
    if (bin >= 0) atomicAdd(bins + bin, count);
  }
}

// The kernel's bodies: any call (0), and sums (weighted, or a pass of the deterministic path) of integer input binned
// by value, values out of range dropped (1) or clamped (2), whose bin is a compare (value_bin), not the general
// Binner: weighted float32 sums, 2^27 values at 4096 bins, 0.459 -> 0.421 ms (H100, 2026-11-27). Counts gain nothing
// there (at the read floor) and keep one body.
enum Body : int { kAnyCall = 0, kSumsByValue = 1, kSumsByValueClamped = 2 };

// value's bin by the body's rule (-1: dropped): the Binner's for any call, value_bin's in the by-value bodies (bins
// below 2^31 here: one block's shared memory holds them).
template <int kBody, typename T>
__device__ __forceinline__ int64_t bin_of(const Binner<T>& binner, T value) {
  if constexpr (kBody == kAnyCall || !std::is_integral<T>::value) {
    return binner(value);
  } else {
    constexpr OutOfRange kRule = kBody == kSumsByValueClamped ? OutOfRange::kClamp : OutOfRange::kIgnore;
    const auto bin = value_bin<kRule>(value, static_cast<narrow_signed_t<T>>(binner.narrow_bins - 1));
    return bin < binner.narrow_bins ? static_cast<int64_t>(bin) : int64_t(-1);
  }
}

// The launch's dynamic shared memory in bytes.
__device__ __forceinline__ uint32_t dynamic_shared_bytes() {
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

// The tier's launch arguments (its shape function's).
struct Launch {
  Flushing flushing;
  // Small calls: the grid is one cluster whose blocks each count a part of one 1-D histogram into block-private
  // bins; at the end each block sums a share of the bins over every block's shared memory (DSMEM) and stores it, so
  // a small call is one launch with no zeroing of the output.
  bool reduce_through_dsmem = false;
  // A 1-byte input counted per byte value into lane-striped tallies (kByteTallyBytes of shared memory before the
  // bins), which each flush bins into the block's bins first.
  bool tally_byte_values = false;
};

template <typename T, typename Policy, int kBody = kAnyCall>
__global__ void __launch_bounds__(kBlockThreads) kernel(const HistogramParams p, const Launch launch) {
  using Acc = typename Policy::Acc;
  const bool tallying = kMayTallyBytes<T, Policy> && launch.tally_byte_values;
  uint32_t* tally = detail::shared_bins<uint32_t>();
  const uint32_t first_bin = tallying ? kByteTallyBytes / sizeof(Acc) : 0;
  // Sums may keep copies of the bins (sum_copies), as many as the launch's shared memory holds; counted again at the
  // flush and addressed from the shared base, not kept in registers: the sums' loop runs at its register limit.
  const auto copies = [&] {
    return Policy::kTakesWeights ? max(1, static_cast<int>(dynamic_shared_bytes() / (p.bins * sizeof(Acc)))) : 1;
  };
  const uint32_t warp_first_bin = first_bin + static_cast<uint32_t>((threadIdx.x / 32) % copies() * p.bins);
  detail::zero_bins(detail::shared_bins<Acc>() + first_bin, copies() * p.bins);
  if (tallying) detail::zero_bins(tally, kByteTallyWords);
  __syncthreads();  // no thread may count into a bin another thread has not zeroed yet
  const Binner<T> binner(p);
  const auto flush = [&](int64_t row) {
    if (!launch.reduce_through_dsmem) {
      detail::flush_bins<Policy>(p, launch.flushing, detail::shared_bins<Acc>() + first_bin, row, 0, p.bins, copies());
    }
  };
  // with_weights (std::bool_constant): float32 weights loaded beside their values (for_each_element).
  const auto count_bins = [&](auto with_weights) {
    // Weighted and deterministic sums add a thread's consecutive contributions to one bin once (RunMerger).
    detail::RunMerger<Policy, uint32_t> run;
    const auto add_shared = [&](uint32_t bin, Acc total) {
      Policy::add_shared(detail::shared_bins<Acc>() + (warp_first_bin + bin), total);
    };
    constexpr bool kWithWeights = decltype(with_weights)::value;
    detail::for_each_item<T, kWithWeights ? kSharedWeightedVectorsInFlight : kVectorsInFlight, kWithWeights>(
        p, launch.flushing, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
        [&](const detail::ItemSpan<T>& span, T value, int64_t weight_offset, auto... weight) {
          const int64_t bin = bin_of<kBody>(binner, value);
          if (bin < 0) return;
          const Acc add = Policy::contribution(p, span.output_row * p.bins + bin, weight_offset, weight...);
          if (add != Acc(0)) run.push(static_cast<uint32_t>(bin), add, add_shared);
        },
        [&] {
          run.emit(add_shared);
          __syncthreads();  // (the traversal's barrier before and after a flush) the run's add must land first
        },
        flush);
  };
  const auto count_values = [&] { detail::with_weights_loaded<Policy>(p, count_bins); };
  if constexpr (kMayTallyBytes<T, Policy>) {
    if (tallying) {
      uint32_t* lane_tally = tally + threadIdx.x % kByteTallyLanes;
      detail::for_each_item<T, kVectorsInFlight, /*kWithWeights=*/false, /*kBinsEachValue=*/false>(
          p, launch.flushing, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
          [&](const detail::ItemSpan<T>&, T value, int64_t) {
            atomicAdd(lane_tally + uint32_t(static_cast<uint8_t>(value)) * kByteTallyLanes, 1u);
          },
          [] { __syncthreads(); },
          [&](int64_t row) {
            merge_byte_tallies<T>(tally, detail::shared_bins<uint32_t>() + first_bin, binner);
            __syncthreads();  // every value's count must be in its bin before the bins are flushed
            flush(row);
          });
    } else {
      count_values();
    }
  } else {
    count_values();
  }
  if constexpr (Policy::kMayStore) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (launch.reduce_through_dsmem) {
      namespace cg = cooperative_groups;
      const cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every block's counts must be complete before any block reads them
      const uint32_t size = cluster.num_blocks();
      for (int64_t i = int64_t(cluster.block_rank()) * blockDim.x + threadIdx.x; i < p.bins;
           i += int64_t(size) * blockDim.x) {
        Acc sum = Acc(0);
        for (uint32_t rank = 0; rank < size; ++rank)
          sum += cluster.map_shared_rank(detail::shared_bins<Acc>() + first_bin, rank)[i];
        Policy::store(p, i, sum);
      }
      cluster.sync();  // no block may exit while another still reads its shared memory
    }
#endif
  }
}

// A by-value body where one runs the call (sums of integer input binned by value), else the general one.
inline int body_for(const HistogramParams& p, const TierContext& ctx, AccKind acc) {
  if (acc == AccKind::kCount || p.mode != BinMode::kIndex) return kAnyCall;
  int body = kAnyCall;
  if (p.out_of_range == OutOfRange::kIgnore) body = kSumsByValue;
  if (p.out_of_range == OutOfRange::kClamp) body = kSumsByValueClamped;
  return ctx.kernels.tier_kernel(Tier::kShared, body) != nullptr ? body : kAnyCall;
}

// Whether the plan holds byte tallies beside the bins: counts of a 1-byte input whose bins leave kByteTallyBytes of
// the block's opt-in shared memory.
inline bool plans_byte_tallies(const TierContext& ctx) {
  const InputType type = ctx.request.input_type;
  return (type == InputType::kUInt8 || type == InputType::kInt8) && ctx.request.acc == AccKind::kCount &&
         ctx.request.bins * 4 + kByteTallyBytes <= ctx.caps.shared_optin;
}

// Fits when every bin fits one block's opt-in shared memory (227 KB on H100: 58112 32-bit counters). The plan's
// shared memory is a large 1-D call's: the bins, and the byte tallies where they fit.
constexpr const char* kTooManyBins =
    "tier 'shared' needs all bins in one block's shared memory, and these bins do not fit";

inline PlanStatus fit(const TierContext& ctx, bool automatic, HistogramPlan* plan) {
  const int64_t acc_bytes = accumulator_bytes(ctx.request.acc);
  if (ctx.request.bins > ctx.caps.shared_optin / acc_bytes) return PlanStatus::declines(kTooManyBins);
  if (automatic && few_elements_per_bin(ctx.request)) return PlanStatus::declines(kFewElementsPerBinRefusal);
  plan->tier = Tier::kShared;
  plan->cluster_size = 1;
  plan->threads = kBlockThreads;
  plan->bins_per_block = ctx.request.bins;
  plan->shared_bytes = ctx.request.bins * acc_bytes + (plans_byte_tallies(ctx) ? kByteTallyBytes : 0);
  return PlanStatus::fits();
}

// Block size. One histogram (1-D ops): the plan's full blocks, flushed once each. One histogram per row (batched):
// blocks just big enough for a row at kMinElementsPerThread each, so many short rows run in many small blocks at
// once, but never so small that shared memory (`bins_bytes` a block) caps the SM below full occupancy.
inline int block_threads(const HistogramParams& p, const DeviceCaps& caps, const HistogramPlan& plan,
                         int64_t bins_bytes) {
  if (p.output_row_stride == 0) return plan.threads;
  const int64_t by_work = ceil_pow2(ceil_div(p.row_length, kMinElementsPerThread));
  const int64_t blocks_fit = std::max<int64_t>(1, std::min<int64_t>(32, caps.shared_per_sm / (bins_bytes + 1024)));
  const int64_t by_occupancy = ceil_pow2(ceil_div(2048, blocks_fit));
  return static_cast<int>(std::min<int64_t>(plan.threads, std::max<int64_t>({64, by_work, by_occupancy})));
}

// Copies of the bins a block of a sum keeps (tuning.h: kSharedSumCopies for float sums, kSharedFixedPointCopies for
// the deterministic fixed-point pass); the kernel reads the count back from its shared memory. A copy for each element
// a block has per bin, up to that many, so zeroing and flushing the copies stays under the adds they spread. One for
// counts, the deterministic exponent pass (copies gained it nothing), batched rows (each row flushes every copy) and
// the small-call path (whose cluster sums one copy a block); never more than `per_sm` blocks on a SM leave room for.
inline int64_t sum_copies(const HistogramParams& p, const TierContext& ctx, AccKind acc, const LaunchShape& shape,
                          bool reduce_through_dsmem, int64_t bins_bytes, int per_sm) {
  if (p.output_row_stride != 0 || reduce_through_dsmem || acc == AccKind::kCount) return 1;
  const int64_t most = acc == AccKind::kExponent ? 1
                       : acc == AccKind::kFixed  ? kSharedFixedPointCopies
                                                 : kSharedSumCopies;
  const int64_t room = std::min<int64_t>(ctx.caps.shared_optin, ctx.caps.shared_per_sm / per_sm - 1024);
  const int64_t by_work = ceil_div(p.elements(), shape.grid) / p.bins;
  return std::max<int64_t>(1, std::min<int64_t>({most, room / bins_bytes, by_work}));
}

inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                         bool may_store, LaunchShape* shape) {
  const int64_t bins_bytes = plan.bins_per_block * accumulator_bytes(ctx.request.acc);
  const bool may_tally = plans_byte_tallies(ctx) && acc == AccKind::kCount && p.row_length >= kByteTallyMinItemElements;
  shape->threads = block_threads(p, ctx.caps, plan, bins_bytes);
  shape->kernel_variant = body_for(p, ctx, acc);
  int per_sm = 1;
  const cudaError_t err =
      blocks_per_sm(ctx.kernels.tier_kernel(Tier::kShared, shape->kernel_variant), ctx.request.device, ctx.caps,
                    shape->threads, bins_bytes + (may_tally ? kByteTallyBytes : 0), &per_sm);
  if (err != cudaSuccess) return err;
  shape_items(p, int64_t(per_sm) * ctx.caps.sm_count,
              std::max<int64_t>(shape->threads * kMinElementsPerThread, 2 * plan.bins_per_block), shape);
  Launch launch;
  if (p.output_row_stride == 0 && p.elements() <= kSmallCallMaxElements) {
    // The small-call path: one cluster summing through DSMEM (one block where the binary has no cluster code).
    int64_t blocks = std::min<int64_t>(kSmallCallMaxBlocks, ceil_div(p.elements(), kSmallCallElementsPerBlock));
    if (!ctx.cluster_code) blocks = 1;
    shape->segments = ceil_div(blocks, p.rows);
    shape->grid = blocks;
    launch.reduce_through_dsmem = blocks > 1;
  }
  settle_flushes_and_stores(p, shape->grid, acc, may_store, launch.reduce_through_dsmem, shape);
  launch.flushing = shape->flushing;
  // The DSMEM sum stores the rows: where they may not be stored, each block flushes its bins as usual.
  if (!launch.flushing.store_rows) launch.reduce_through_dsmem = false;
  shape->cluster_dim = launch.reduce_through_dsmem ? static_cast<int>(shape->grid) : 0;
  launch.tally_byte_values = may_tally && ceil_div(p.row_length, shape->segments) >= kByteTallyMinItemElements;
  shape->shared_bytes = bins_bytes * sum_copies(p, ctx, acc, *shape, launch.reduce_through_dsmem, bins_bytes, per_sm) +
                        (launch.tally_byte_values ? kByteTallyBytes : 0);
  shape->args.set(launch);
  return cudaSuccess;
}

// One kernel, no workspace: the common launch.
constexpr CustomLaunch custom_launch{};

}  // namespace block_private_tier

// The by-value bodies exist for integer input and sums only.
template <typename T, typename Policy>
struct TierKernelVariants<Tier::kShared, T, Policy>
    : KernelBodies<detail::kIntegerSums<T, Policy>, block_private_tier::kSumsByValueClamped> {};

}  // namespace dsmhist
