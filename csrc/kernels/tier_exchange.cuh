// Tier "exchange": counts with the bins owned interleaved by the blocks of a cluster (bin b by block b mod C), each
// value read once from global memory and passed to its owner through distributed shared memory. Per round every
// block takes a tile of values, ranks them by owner, places their local bins grouped by owner in its staging; after
// one cluster barrier each block counts its group from every block's staging (16-byte DSMEM loads) with local
// shared-memory atomics. The next round is ranked while the cluster gathers, and (dense bodies) the tile after it is
// asked of L2. Counts only: weighted and deterministic sums take the other tiers. The pieces: exchange_kernels.cuh.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "exchange_kernels.cuh"
#include "policies.cuh"
#include "tier_host.h"

namespace dsmhist {
namespace exchange_tier {

// The tier's launch arguments (its shape function's).
struct Launch {
  int64_t bins_per_block = 0;  // bins each block of a cluster owns, interleaved (bin i * blocks + rank)
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The kernel's body. Keys: how a value gets its key (exchange_kernels.cuh: BinnerKeys, ValueKeys). OwnersT: the
// cluster size known at run time (Owners) or at compile time (FixedOwners). kDense: the rows' inner stride is 1. The
// kernel runs at its 64-register limit (1024 threads), so what a round needs only once (the Work) lives in shared
// memory, and the shared arrays sit at offsets known at compile time.
template <typename T, typename Keys, typename OwnersT, bool kDense>
__device__ __forceinline__ void count_by_exchange(const HistogramParams& p, const Launch& launch) {
  namespace cg = cooperative_groups;
  namespace ex = detail::exchange;
  using Tile = ex::Tile<T>;
  constexpr ex::Layout layout(sizeof(T));
  static_assert(layout.tile == Tile::kTile && layout.per_vector == Tile::kPerVector,
                "the host's layout and the kernel's tile agree");
  const cg::cluster_group cluster = cg::this_cluster();
  const OwnersT owners(cluster.num_blocks());
  const uint32_t blocks = owners.blocks;  // a constant with FixedOwners
  const int me = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ __align__(16) unsigned char shared[];
  uint16_t* staging = reinterpret_cast<uint16_t*>(shared);
  uint32_t* rank_counters = reinterpret_cast<uint32_t*>(shared + layout.counters_offset);
  uint32_t* warp_base = reinterpret_cast<uint32_t*>(shared + layout.warp_base_offset);
  uint32_t* groups = reinterpret_cast<uint32_t*>(shared + layout.groups_offset);
  ex::Work& work = *reinterpret_cast<ex::Work*>(shared + layout.work_offset);
  uint32_t* bins = reinterpret_cast<uint32_t*>(shared + layout.bins_offset);
  volatile ex::PrefetchCursor* cursor = reinterpret_cast<volatile ex::PrefetchCursor*>(shared + layout.cursor_offset);
  if (threadIdx.x == 0) {
    work = ex::Work(p, layout, blocks, gridDim.x);
    if constexpr (kDense) ex::aim_prefetch<T>(p, work, 0, 0, cursor);
  }
  for (int64_t i = threadIdx.x; i < launch.bins_per_block; i += kExchangeThreads) bins[i] = 0;
  for (int i = threadIdx.x; i < 2 * ex::kWarps * ex::kRowStride; i += kExchangeThreads) rank_counters[i] = 0;
  cluster.sync();  // every block's bins and counters are zeroed (and its Work written) before any block adds

  const Keys keys(p);
  Tile tile;
  uint32_t ranked[Tile::kPerThread];
  uint32_t exchanged = 0;  // which steps of `ranked` are set (rank_tile)
  ex::WarpRun run;
  for (int64_t group = 0; group < work.groups; ++group) {
    for (int64_t pass_start = 0; pass_start < work.rounds_per_group; pass_start += work.rounds_per_pass) {
      const int64_t left = work.rounds_per_group - pass_start;
      const uint32_t rounds = static_cast<uint32_t>(left < work.rounds_per_pass ? left : work.rounds_per_pass);
      // This block's tile of round r of the pass: pass_tile + r * gridDim.x (none past the pass).
      const int64_t pass_tile = pass_start * gridDim.x + blockIdx.x;
      const auto tile_of = [&](uint32_t round) {
        return round < rounds ? pass_tile + int64_t(round) * gridDim.x : INT64_MAX;
      };
      ex::load_tile<T, kDense>(p, work, group, tile_of(0), tile);
      ex::rank_tile<T>(tile, keys, owners, rank_counters + warp * ex::kRowStride, bins, cluster, ranked, exchanged,
                       run);
      ex::load_tile<T, kDense>(p, work, group, tile_of(1), tile);
      __syncthreads();  // round 0's ranks are all taken: its counters are final

      for (uint32_t round = 0; round < rounds; ++round) {
        const uint32_t buffer = round & 1u;
        uint32_t* counters = rank_counters + buffer * (ex::kWarps * ex::kRowStride);
        if (warp < int(blocks)) ex::scan_groups(counters, warp_base, groups + buffer * 2 * ex::kMaxBlocks, warp, lane);
        __syncthreads();  // bases written and every counter of the round read: place, and re-zero the counters

        if (threadIdx.x < ex::kWarps * ex::kRowStride) counters[threadIdx.x] = 0;
        ex::place_tile<Tile::kPerThread>(ranked, exchanged, owners, warp_base + warp * ex::kRowStride,
                                         staging + buffer * layout.staging_entries, Tile::kTile);
        __syncthreads();  // every entry is placed before thread 0 publishes the staging to the cluster
        if (threadIdx.x == 0) ex::cluster_fence();
        ex::cluster_arrive_relaxed();  // with thread 0's fence: this block's round is visible to the cluster

        if constexpr (kDense) {
          if (threadIdx.x == 0 && round + ex::kFirstPrefetchedRound < rounds) ex::prefetch_next<T>(cursor);
        }
        if (round + 1 < rounds) {  // while the cluster gathers: rank the next round, load the one after
          ex::rank_tile<T>(tile, keys, owners,
                           rank_counters + (buffer ^ 1u) * (ex::kWarps * ex::kRowStride) + warp * ex::kRowStride, bins,
                           cluster, ranked, exchanged, run);
          ex::load_tile<T, kDense>(p, work, group, tile_of(round + 2), tile);
        }
        ex::cluster_wait();  // every block's staging of the round is visible (acquire)

        // Warps split over the source blocks (kWarps / blocks each); each counts its group of one source's staging.
        const int source_warps = ex::kWarps / static_cast<int>(blocks);
        const int source = warp / source_warps;
        if (source < int(blocks)) {
          const unsigned char* remote = cluster.map_shared_rank(shared, source);
          const uint32_t* g =
              reinterpret_cast<const uint32_t*>(remote + layout.groups_offset) + buffer * 2 * ex::kMaxBlocks;
          ex::count_group(reinterpret_cast<const uint16_t*>(remote) + buffer * layout.staging_entries, g[me],
                          g[ex::kMaxBlocks + me], bins, warp % source_warps, source_warps, lane);
        }
        __syncthreads();  // the next round's ranks are all taken before its counters are scanned
      }
      run.flush(owners, bins, cluster);
      cluster.sync();  // every add of the pass has landed, and no block reads another's staging any more

      // Flush this block's bins (bin i * blocks + me) into the group's histogram and re-zero them.
      const int64_t base = (p.output_row_stride != 0 ? group : 0) * p.bins;
      for (int64_t i = threadIdx.x; i < launch.bins_per_block; i += kExchangeThreads) {
        const uint32_t count = bins[i];
        bins[i] = 0;
        const int64_t bin = i * blocks + me;
        if (count != 0 && bin < p.bins) detail::CountPolicy::add_global(p, base + bin, count);
      }
      const bool next_in_group = pass_start + work.rounds_per_pass < work.rounds_per_group;
      if (next_in_group || group + 1 < work.groups) {
        if constexpr (kDense) {
          if (threadIdx.x == 0) {
            ex::aim_prefetch<T>(p, work, next_in_group ? group : group + 1,
                                next_in_group ? pass_start + work.rounds_per_pass : 0, cursor);
          }
        }
        cluster.sync();  // every block's bins are re-zeroed before the next pass adds into them
      }
    }
  }
}
#endif

// The kernel's bodies, each its own kernel (together in one kernel they spilled: 828 bytes for int32, against none
// for a dense by-value body and 12-16 bytes for the others alone, ptxas): any input (variant 0), integer input binned
// by value (1), and that with dense rows at the two automatic cluster sizes, values out of range dropped (2, 3) or
// clamped (4, 5), where a key is one compare (two to clamp), the owner of a bin a mask and its local index a shift.
enum Body : int {
  kAnyInput = 0,
  kByValue = 1,
  kDenseByValueSmall = 2,
  kDenseByValueLarge = 3,
  kDenseClampedSmall = 4,
  kDenseClampedLarge = 5
};

template <typename T, typename Policy, int kBody = kAnyInput>
__global__ void __launch_bounds__(kExchangeThreads, 1) kernel(const HistogramParams p, const Launch launch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace ex = detail::exchange;
  if constexpr (std::is_same<Policy, detail::CountPolicy>::value) {
    if constexpr (kBody == kAnyInput) count_by_exchange<T, ex::BinnerKeys<T, false>, ex::Owners, false>(p, launch);
    if constexpr (kBody == kByValue) count_by_exchange<T, ex::BinnerKeys<T, true>, ex::Owners, false>(p, launch);
    if constexpr (kBody == kDenseByValueSmall) {
      count_by_exchange<T, ex::ValueKeys<T>, ex::FixedOwners<kExchangeSmallCluster>, true>(p, launch);
    }
    if constexpr (kBody == kDenseByValueLarge) {
      count_by_exchange<T, ex::ValueKeys<T>, ex::FixedOwners<kMaxClusterSize>, true>(p, launch);
    }
    if constexpr (kBody == kDenseClampedSmall) {
      count_by_exchange<T, ex::ValueKeys<T, OutOfRange::kClamp>, ex::FixedOwners<kExchangeSmallCluster>, true>(p,
                                                                                                               launch);
    }
    if constexpr (kBody == kDenseClampedLarge) {
      count_by_exchange<T, ex::ValueKeys<T, OutOfRange::kClamp>, ex::FixedOwners<kMaxClusterSize>, true>(p, launch);
    }
  }
#endif
  // Without sm_90 code (and for sums, which the tier declines) this body is empty; the host launches the cluster
  // tiers only after checking that the loaded binary was compiled for sm_90 or newer (cluster_code_available).
}

}  // namespace exchange_tier

// The by-value bodies exist for integer input and counts only.
template <typename T, typename Policy>
struct TierKernelVariants<Tier::kExchange, T, Policy>
    : KernelBodies<detail::kIntegerCounts<T, Policy>, exchange_tier::kDenseClampedLarge> {};

namespace exchange_tier {

// ----- Host side -------------------------------------------------------------------------------------------------

inline detail::exchange::Layout layout_for(InputType type) {
  return detail::exchange::Layout(static_cast<int>(input_bytes(type)));
}

// Whether a call binned by `mode` can take the by-value bodies: integer input binned by value (their kernels exist
// only for integer input and counts).
inline bool by_value(BinMode mode, const TierContext& ctx) {
  return mode == BinMode::kIndex && ctx.kernels.tier_kernel(Tier::kExchange, kByValue) != nullptr;
}

// The most bins the planner gives the tier: what a cluster of kMaxClusterSize blocks holds in the layout of 4-byte
// input (640000 on an H100; the layout of 1- and 2-byte input is the same, 8-byte input holds more).
inline int64_t auto_max_bins(const DeviceCaps& caps) {
  constexpr detail::exchange::Layout kFourByteLayout(4);
  return kMaxClusterSize * std::max<int64_t>(0, (caps.shared_optin - kFourByteLayout.bins_offset) / 4);
}

// The planner's rule (measured: tuning.h): counts of integer input binned by value, past tier cluster's automatic bins
// up to auto_max_bins, at least kExchangeAutoMinElements elements a histogram.
inline bool planner_takes(const TierContext& ctx) {
  const PlanRequest& request = ctx.request;
  return by_value(request.mode, ctx) && request.bins > cluster_auto_max_count_bins(ctx.caps) &&
         request.bins <= auto_max_bins(ctx.caps) && request.elements_per_histogram >= kExchangeAutoMinElements;
}

// Counts only. The forced cluster size, or kExchangeSmallCluster blocks where that keeps at most kExchangeBlockBins
// bins a block, else kMaxClusterSize (measured: tuning.h); failing those, the smallest that holds the bins.
static_assert(kClusterAutoMaxBlocks == 2 && kMaxClusterSize == 16 && kExchangeAutoMinElements == (int64_t(1) << 23),
              "kNotChosen states kClusterAutoMaxBlocks, kMaxClusterSize and kExchangeAutoMinElements");
constexpr const char* kNotChosen =
    "the planner takes tier 'exchange' only for counts of integer input by value past the bins two blocks of tier "
    "'cluster' hold, up to what a 16-block cluster holds of 4-byte input (232449-640000 bins on an H100), 2^23 "
    "elements or more";
constexpr const char* kCountsOnly =
    "tier 'exchange' adds counts only: weighted sums (deterministic or not) take another tier";

inline PlanStatus fit(const TierContext& ctx, bool automatic, HistogramPlan* plan) {
  const PlanRequest& request = ctx.request;
  if (!ctx.cluster_code) return PlanStatus::declines(kClusterUnavailable);
  if (request.acc != AccKind::kCount) return PlanStatus::declines(kCountsOnly);
  if (automatic && !planner_takes(ctx)) return PlanStatus::declines(kNotChosen);
  int sizes[kMaxClusterSize + 2];
  int count = 0;
  if (request.forced_cluster_size > 0) {
    sizes[count++] = request.forced_cluster_size;
  } else {
    const bool small = ceil_div(request.bins, kExchangeSmallCluster) <= kExchangeBlockBins;
    sizes[count++] = small ? kExchangeSmallCluster : kMaxClusterSize;
    for (int size = 1; size <= kMaxClusterSize; ++size) sizes[count++] = size;
  }
  const detail::exchange::Layout layout = layout_for(request.input_type);
  return fit_first_cluster_size(
      ctx, Tier::kExchange, sizes, /*replicas=*/nullptr, count, kExchangeThreads, detail::exchange::kMaxBlockBins,
      [&layout](int64_t block_bins) { return layout.shared_bytes(block_bins); }, plan);
}

// The most specialised body that runs the call (its kernel exists for integer input counted by value).
inline int body_for(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan) {
  if (!by_value(p.mode, ctx)) return kAnyInput;
  if (p.inner_input_stride != 1) return kByValue;
  if (p.out_of_range != OutOfRange::kIgnore && p.out_of_range != OutOfRange::kClamp) return kByValue;
  const bool clamped = p.out_of_range == OutOfRange::kClamp;
  if (plan.cluster_size == kExchangeSmallCluster) return clamped ? kDenseClampedSmall : kDenseByValueSmall;
  if (plan.cluster_size == kMaxClusterSize) return clamped ? kDenseClampedLarge : kDenseByValueLarge;
  return kByValue;
}

// As many clusters as can be resident, fewer when a group has fewer tiles than their blocks. The output is zeroed
// first (or added to): every cluster adds its own copy of the bins.
inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind /*acc*/,
                         bool /*may_store*/, LaunchShape* shape) {
  shape->threads = kExchangeThreads;
  shape->cluster_dim = plan.cluster_size;
  shape->segments = 1;
  shape->kernel_variant = body_for(p, ctx, plan);
  int resident = 0;
  const cudaError_t err =
      max_active_clusters(ctx.kernels.tier_kernel(Tier::kExchange, shape->kernel_variant), ctx.request.device, ctx.caps,
                          plan.cluster_size, kExchangeThreads, plan.shared_bytes, &resident);
  if (err != cudaSuccess) return err;
  const int64_t tiles =
      detail::exchange::Work(p, layout_for(ctx.request.input_type), plan.cluster_size, resident).tiles_per_group;
  shape->grid =
      std::max<int64_t>(1, std::min<int64_t>(resident, ceil_div(tiles, plan.cluster_size))) * plan.cluster_size;
  Launch launch;
  launch.bins_per_block = plan.bins_per_block;
  shape->args.set(launch);
  return cudaSuccess;
}

// One kernel, no workspace: the common launch.
constexpr CustomLaunch custom_launch{};

}  // namespace exchange_tier
}  // namespace dsmhist
