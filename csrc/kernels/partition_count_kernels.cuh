// Kernel 3 of tier "partition" (tier_partition.cuh holds the unit; partition_kernels.cuh the slice, its workspace
// layout and kernel 1; partition_item_kernels.cuh kernel 2, which cuts the items): counting the items in shared
// memory. Device code; no torch header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "partition_kernels.cuh"

namespace dsmhist {
namespace partition_tier {

namespace detail_count {

// The run of vector `v` of a batch laid end to end: the largest r < used with firsts[r] <= v (firsts ascending from
// firsts[0] = 0, v < firsts[used]), from `hint` by steps doubling away from it, then halving. A hint a run or two off
// costs two or three loads; a bad one at most about twice a plain binary search.
__device__ __forceinline__ int run_of_vector(const uint32_t* firsts, int used, uint32_t v, int hint) {
  int low = hint, high = hint, step = 1;  // firsts[low] <= v < firsts[high] (high == used: past the last run)
  if (firsts[hint] <= v) {
    while (low + step < used && firsts[low + step] <= v) {
      low += step;
      step *= 2;
    }
    high = min(low + step, used);
  } else {
    while (high - step > 0 && firsts[high - step] > v) {
      high -= step;
      step *= 2;
    }
    low = max(high - step, 0);
  }
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    if (firsts[middle] <= v) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

// Which of the 8 entries of the `vector`-th 16-byte vector of a tile lie in the run [first, stop) (tile-relative), as
// bits: all of them but at the run's two ends.
__device__ __forceinline__ uint32_t entries_in_run(uint32_t vector, uint32_t first, uint32_t stop) {
  const uint32_t base = vector * 8u;
  const uint32_t begin = first > base ? min(first - base, 8u) : 0u;
  const uint32_t end = stop > base ? min(stop - base, 8u) : 0u;
  return end > begin ? ((1u << end) - 1u) & ~((1u << begin) - 1u) : 0u;
}

// Counts of one 16-byte vector (8 entries; the `vector`-th of its tile) into a block's 32-bit shared bins at
// `bins_address`: its entries in the run [first, stop) (tile-relative) add 1 each. Warp-collective. No branch per
// entry: where some lane's vector is cut by its run's ends, an entry outside the run adds to the lane's spare word
// (`lane_spare`, never read) instead, so it neither adds to a bin nor conflicts with another lane's add.
__device__ __forceinline__ void count_vector(uint32_t bins_address, uint32_t lane_spare, const uint4& raw,
                                             uint32_t vector, uint32_t first, uint32_t stop) {
  uint32_t inside = entries_in_run(vector, first, stop);
  if (!__any_sync(0xffffffffu, inside != 0u)) return;  // a warp past its runs' ends
  const uint32_t local0 = raw.x & 0xffffu;
  // A vector of one bin (sorted data) adds once, and a warp of such vectors of one bin (one hot bin) adds once.
  const bool one_bin = inside == 0xffu && raw.x == raw.y && raw.y == raw.z && raw.z == raw.w && (raw.x >> 16) == local0;
  if (__any_sync(0xffffffffu, one_bin)) {
    const uint32_t lead = __shfl_sync(0xffffffffu, local0, 0);
    if (__all_sync(0xffffffffu, one_bin && local0 == lead)) {
      if ((threadIdx.x & 31u) == 0u) dsmhist::detail::red_shared(bins_address + 4u * lead, 8u * 32u);
      return;
    }
    if (one_bin) {
      dsmhist::detail::red_shared(bins_address + 4u * local0, 8u);
      inside = 0u;
    }
  }
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if (__all_sync(0xffffffffu, inside == 0xffu)) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      dsmhist::detail::red_shared(bins_address + 4u * (words[w] & 0xffffu), 1u);
      dsmhist::detail::red_shared(bins_address + 4u * (words[w] >> 16), 1u);
    }
    return;
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const bool low_in = ((inside >> (2 * w)) & 1u) != 0u, high_in = ((inside >> (2 * w + 1)) & 1u) != 0u;
    dsmhist::detail::red_shared(low_in ? bins_address + 4u * (words[w] & 0xffffu) : lane_spare, 1u);
    dsmhist::detail::red_shared(high_in ? bins_address + 4u * (words[w] >> 16) : lane_spare, 1u);
  }
}

}  // namespace detail_count

// Kernel 3: a persistent grid whose blocks claim the items in turn; chunk bins in shared memory (Policy's
// accumulator).
template <typename Policy>
__global__ void __launch_bounds__(kPartitionCountThreads, 1) count_kernel(const HistogramParams p, const Slice s) {
  using Acc = typename Policy::Acc;
  constexpr bool kCounts = std::is_same<Policy, detail::CountPolicy>::value;
  // Dynamic shared memory: the batch's runs, the scan of their vector counts and the claimed item
  // (kCountScratchBytes), then the bins.
  uint32_t* batch_runs = dsmhist::detail::shared_bins<uint32_t>();
  uint32_t* batch_vectors = batch_runs + kPartitionCountThreads;
  uint32_t* vector_firsts = batch_vectors + kPartitionCountThreads;
  uint32_t* warp_sums = vector_firsts + kPartitionCountThreads + 32;
  // In dynamic shared memory too: the kernel may take all of it that the device allows, leaving none static.
  uint32_t* claimed = warp_sums + 32;
  // Where count_vector's entries outside their run add (never read): one word per lane, so they meet no other lane's.
  const uint32_t lane_spare = static_cast<uint32_t>(__cvta_generic_to_shared(claimed + 4 + (threadIdx.x & 31)));
  Acc* bins = reinterpret_cast<Acc*>(dsmhist::detail::shared_bins<unsigned char>() + kCountScratchBytes);
  const int64_t chunk_bins = int64_t(1) << s.chunk_shift;
  const uint32_t bins_address = static_cast<uint32_t>(__cvta_generic_to_shared(bins));
  const int lane = threadIdx.x & 31;
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) s.next_counters->item_count = s.next_counters->item_claims = 0u;
    for (int c = threadIdx.x; c < kPartitionMaxChunks; c += blockDim.x) s.next_counters->chunk_totals[c] = 0u;
  }
  dsmhist::detail::zero_bins(bins, chunk_bins);
  __syncthreads();  // every bin must be zero before any thread counts into it
  const uint32_t items = s.counters->item_count;
  const uint4* vectors = reinterpret_cast<const uint4*>(s.entries);  // a tile's entries start on a 16-byte boundary

  for (;;) {
    // Items are claimed in turn, so a block that drew short items (a chunk's tail, a small chunk) takes more.
    if (threadIdx.x == 0) *claimed = atomicAdd(&s.counters->item_claims, 1u);
    __syncthreads();  // the claim must be in place before it is read
    const uint32_t index = *claimed;
    __syncthreads();  // every thread has read the claim before the next one replaces it
    if (index >= items) break;
    const Item item = s.items[index];
    if (item.values == 0u) continue;  // the same for every thread of the block
    const int64_t flat_first = s.flat_base + (int64_t(item.chunk) << s.chunk_shift);
    // Few elements do not pay for a pass over the chunk's bins: they go straight to the output.
    const bool direct = int64_t(item.values) * kPartitionDirectRatio < chunk_bins;
    const uint32_t* runs = s.runs + int64_t(item.chunk) * s.tiles;
    // `contribution` to bin `local` of the chunk (for counts: that many elements).
    auto add = [&](uint32_t local, Acc contribution) {
      if (direct) {
        Policy::add_global(p, flat_first + local, contribution);
      } else {
        Policy::add_shared(bins + local, contribution);
      }
    };
    // The entries of one 16-byte vector (the `vector`-th of tile `tile`'s entries) that lie in the run
    // [first, stop) (tile-relative). Every thread of the warp calls it together (past the end: an empty run).
    auto add_vector = [&](const uint4& raw, int64_t tile, uint32_t vector, uint32_t first, uint32_t stop) {
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint32_t local[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) local[j] = (words[j / 2] >> (16 * (j % 2))) & 0xffffu;
      const uint32_t base = vector * 8u;
      const uint32_t inside = detail_count::entries_in_run(vector, first, stop);
      // Each entry's contribution: 1 for counts, else its value (read for the run's entries only).
      Acc value[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if constexpr (kCounts) {
          value[j] = 1u;
        } else {
          value[j] = ((inside >> j) & 1u) != 0u ? static_cast<const Acc*>(s.values)[tile * kTile + base + uint32_t(j)]
                                                : Acc(0);
        }
      }
      // A vector of one bin (sorted data) adds once, and a warp of such vectors of one bin (one hot bin) adds once.
      bool one_bin = inside == 0xffu;
#pragma unroll
      for (int j = 1; j < 8; ++j) one_bin = one_bin && local[j] == local[0];
      Acc vector_total = value[0];
#pragma unroll
      for (int j = 1; j < 8; ++j) vector_total = Policy::combine(vector_total, value[j]);
      const uint32_t lead = __shfl_sync(0xffffffffu, local[0], 0);
      if (__all_sync(0xffffffffu, one_bin && local[0] == lead)) {
        Acc warp_total = Acc(8u * 32u);
        if constexpr (!kCounts) warp_total = dsmhist::detail::warp_combine<Policy>(vector_total);
        if (lane == 0) add(lead, warp_total);
        return;
      }
      if (one_bin) {
        add(local[0], vector_total);
        return;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (((inside >> j) & 1u) != 0u) add(local[j], value[j]);
      }
    };
    // Up to one tile's run per thread at a time (a batch), read as 16-byte vectors (8 entries; a run's first and last
    // vector masked to it). Counts whose every run in the batch is a few vectors (many chunks: 4M-16M bins) take one
    // run a thread, a group of vectors loaded at once, with no scan, no search and no further barrier (the batch's
    // shared runs go unread). Else (a chunk's elements bunched into some tiles, few chunks, or weighted sums, which
    // lost 10% the other way) the runs are laid end to end across the block: each warp takes a group of consecutive
    // vectors of that sequence per round (kPartitionEndToEndCountGroup, kPartitionEndToEndSumGroup vectors a lane),
    // lane l the group's l-th, (l + 32)-th, ...: each load is 512 contiguous bytes but at a run's ends, and many
    // are in flight whatever the runs' lengths. Counts of an item whose every run is short (kernel 2 found its chunk's
    // longest) take one run a thread throughout, with no barrier: the warps go on independently. `in_shared` (a
    // constant): counts into the block's shared bins, with count_vector; else add_vector.
    // A thread's run of the next batch is asked for while the block counts the current one.
    auto count_item = [&](auto in_shared) {
      constexpr bool kInShared = decltype(in_shared)::value;
      auto add_group_vector = [&](const uint4& raw, int64_t tile, uint32_t vector, uint32_t first, uint32_t stop) {
        if constexpr (kInShared) {
          detail_count::count_vector(bins_address, lane_spare, raw, vector, first, stop);
        } else {
          add_vector(raw, tile, vector, first, stop);
        }
      };
      auto vectors_of_run = [](uint32_t run) {
        const uint32_t first = run >> 16, stop = first + (run & 0xffffu);
        return stop == first ? 0u : (stop + 7u) / 8u - first / 8u;
      };
      // One run a thread (the run of tile own_tile), a group of its vectors loaded at once. Warp-collective.
      auto count_own_run = [&](int64_t own_tile, uint32_t own_run) {
        const uint32_t own_first = own_run >> 16, own_stop = own_first + (own_run & 0xffffu);
        const uint32_t own_vectors = vectors_of_run(own_run);
        const uint32_t warp_vectors = __reduce_max_sync(0xffffffffu, own_vectors);
        const uint32_t first_vector = own_first / 8u;
        for (uint32_t group = 0; group < warp_vectors; group += kPartitionOwnRunGroup) {
          uint4 raw[kPartitionOwnRunGroup];
#pragma unroll
          for (int u = 0; u < kPartitionOwnRunGroup; ++u) {
            raw[u] = group + u < own_vectors ? vectors[own_tile * (kTile / 8) + first_vector + group + u]
                                             : make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int u = 0; u < kPartitionOwnRunGroup; ++u) {
            add_group_vector(raw[u], own_tile, first_vector + group + u, own_first,
                             group + u < own_vectors ? own_stop : own_first);
          }
        }
      };
      uint32_t next_run = item.tile_begin + threadIdx.x < item.tile_end ? runs[item.tile_begin + threadIdx.x] : 0u;
      // The most vectors a run of n entries touches is (n + 14) / 8 (it starts on a vector's last entry).
      if (kCounts && (item.longest_run + 14u) / 8u <= kPartitionOwnRunMaxVectors) {
        for (int64_t warp_tile = item.tile_begin + (threadIdx.x & ~31u); warp_tile < item.tile_end;
             warp_tile += blockDim.x) {
          const int64_t own_tile = warp_tile + lane;
          const uint32_t own_run = next_run;
          next_run = own_tile + blockDim.x < item.tile_end ? runs[own_tile + blockDim.x] : 0u;
          count_own_run(own_tile, own_run);
        }
        return;
      }
      for (int64_t batch = item.tile_begin; batch < item.tile_end; batch += blockDim.x) {
        const int64_t own_tile = batch + threadIdx.x;
        const uint32_t own_run = next_run;
        next_run = own_tile + blockDim.x < item.tile_end ? runs[own_tile + blockDim.x] : 0u;
        const uint32_t own_vectors = vectors_of_run(own_run);
        batch_runs[threadIdx.x] = own_run;
        batch_vectors[threadIdx.x] = own_vectors;
        bool own_runs = false;  // one run a thread (above)
        if constexpr (kCounts) {
          own_runs = !__syncthreads_or(own_vectors > kPartitionOwnRunMaxVectors);  // also: the runs are in place
        } else {
          __syncthreads();  // the batch's runs must be in place before they are scanned
        }
        if (own_runs) {
          count_own_run(own_tile, own_run);
          continue;
        }
        detail_partition::exclusive_scan<kPartitionCountThreads>(batch_vectors, vector_firsts, kPartitionCountThreads,
                                                                 warp_sums, [](int, uint32_t, uint32_t) {});
        __syncthreads();  // the scan must be complete before it is searched
        const uint32_t total = vector_firsts[blockDim.x];
        // Runs past the item's last tile are empty: the search stops before them.
        const int batch_runs_used = static_cast<int>(min(item.tile_end - batch, int64_t(blockDim.x)));
        // A run's place guessed from a vector's: exact for runs of one length, a run or two off for a batch of
        // independent tiles (uniform, normal, Zipf data).
        const float runs_per_vector = float(batch_runs_used) / float(max(total, 1u));
        constexpr int kGroup = kCounts ? kPartitionEndToEndCountGroup : kPartitionEndToEndSumGroup;
        // Rounds are the same for every thread (the adds are warp-collective); past the end a thread adds nothing.
        for (uint32_t round = 0; round < total; round += kGroup * blockDim.x) {
          const uint32_t lane_first = round + (threadIdx.x & ~31u) * kGroup + uint32_t(lane);
          int run = min(batch_runs_used - 1, int(float(lane_first) * runs_per_vector));
          // The group's vectors are all loaded before any is counted.
          uint4 raw[kGroup];
          uint32_t first[kGroup], stop[kGroup], vector[kGroup];
          int run_of[kGroup];
#pragma unroll
          for (int u = 0; u < kGroup; ++u) {
            const uint32_t v = lane_first + 32u * uint32_t(u);
            if (v < total) run = detail_count::run_of_vector(vector_firsts, batch_runs_used, v, run);
            run_of[u] = run;
            first[u] = batch_runs[run] >> 16;
            stop[u] = v < total ? first[u] + (batch_runs[run] & 0xffffu) : first[u];  // past the end: nothing
            vector[u] = first[u] / 8u + (v - vector_firsts[run]);
            raw[u] = v < total ? vectors[(batch + run) * (kTile / 8) + vector[u]] : make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int u = 0; u < kGroup; ++u) add_group_vector(raw[u], batch + run_of[u], vector[u], first[u], stop[u]);
        }
        __syncthreads();  // every thread is done with the batch's runs before they are replaced
      }
    };
    if constexpr (kCounts) {
      if (!direct) {
        count_item(std::true_type());
      } else {
        count_item(std::false_type());
      }
    } else {
      count_item(std::false_type());
    }
    if (direct) continue;  // the same for every thread of the block; the bins were not touched
    __syncthreads();       // every add of the item must land before its bins are flushed
    for (int64_t i = threadIdx.x; i < chunk_bins; i += blockDim.x) {
      const Acc total = bins[i];
      if (total != Acc(0)) {
        bins[i] = Acc(0);
        Policy::add_global(p, flat_first + i, total);
      }
    }
    __syncthreads();  // the bins must be zero again before the next item counts into them
  }
}

}  // namespace partition_tier
}  // namespace dsmhist
