// Kernels 2 and 3 of tier "partition" (tier_partition.cuh holds the unit; partition_kernels.cuh the slice, its
// workspace layout and kernel 1): cutting each chunk's runs into work items, then counting the items in shared
// memory. Device code; no torch header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "partition_kernels.cuh"

namespace dsmhist {
namespace partition_tier {

// Kernel 2: one block per chunk. An item is a range of tiles whose runs of the chunk add up to about item_values
// elements: tile t belongs to item floor(elements of the chunk before t / item_values).
template <typename Policy>
__global__ void __launch_bounds__(kPartitionItemThreads) build_items_kernel(const Slice s) {
  __shared__ uint32_t warp_sums[32];
  __shared__ uint32_t lengths[kPartitionItemThreads + 1];
  __shared__ uint32_t starts[kPartitionItemThreads + 1];
  __shared__ uint32_t chunk_total, first_item, carried;
  const uint32_t chunk = blockIdx.x;
  const uint32_t* runs = s.runs + int64_t(chunk) * s.tiles;
  const uint32_t per_item = static_cast<uint32_t>(s.item_values);

  if (threadIdx.x == 0) chunk_total = 0u;
  __syncthreads();  // the total must be zero before any thread adds to it
  uint32_t own = 0;
  for (int64_t t = threadIdx.x; t < s.tiles; t += blockDim.x) own += runs[t] & 0xffffu;
  if (own != 0u) atomicAdd(&chunk_total, own);
  __syncthreads();  // the chunk's total must be complete before items are counted from it
  const uint32_t total = chunk_total;
  const uint32_t items = (total + per_item - 1) / per_item;
  if (threadIdx.x == 0) {
    first_item = items == 0 ? 0u : atomicAdd(s.item_count, items);
    carried = 0u;
  }
  __syncthreads();  // every thread needs the chunk's first item
  if (items == 0) return;
  Item* out = s.items + first_item;

  for (int64_t batch = 0; batch < s.tiles; batch += blockDim.x) {
    const int64_t t = batch + threadIdx.x;
    lengths[threadIdx.x] = t < s.tiles ? (runs[t] & 0xffffu) : 0u;
    __syncthreads();  // the batch's lengths must be in place before they are scanned
    detail_partition::exclusive_scan(lengths, starts, blockDim.x, warp_sums);
    __syncthreads();  // the scan must be complete before it is read
    if (t < s.tiles) {
      const uint32_t before = carried + starts[threadIdx.x];
      const int64_t item = before / per_item;
      // The item of tile t - 1: the chunk's elements before it are `before` less tile t - 1's length.
      const uint32_t before_previous =
          t == 0 ? 0u : before - (threadIdx.x > 0 ? lengths[threadIdx.x - 1] : lengths[kPartitionItemThreads]);
      const int64_t previous_item = t == 0 ? -1 : int64_t(before_previous / per_item);
      // Items previous_item + 1 .. item start at tile t (those strictly between are empty).
      for (int64_t i = previous_item + 1; i <= item && i < items; ++i) {
        out[i].chunk = chunk;
        out[i].tile_begin = static_cast<uint32_t>(t);
        out[i].first_value = before;
      }
      if (t == s.tiles - 1) {
        // Items past the last tile's (a run longer than item_values at the end) are empty.
        for (int64_t i = item + 1; i < items; ++i) {
          out[i].chunk = chunk;
          out[i].tile_begin = static_cast<uint32_t>(s.tiles);
          out[i].first_value = total;
        }
      }
    }
    __syncthreads();  // every thread has read the batch's lengths and starts before they are replaced
    if (threadIdx.x == 0) {
      lengths[kPartitionItemThreads] = lengths[blockDim.x - 1];  // the last length, for the next batch's first tile
      carried += starts[blockDim.x];
    }
    __syncthreads();  // the carried count must be updated before the next batch reads it
  }
  // Item i ends where item i + 1 begins; item starts were written by other threads of this block above.
  for (uint32_t i = threadIdx.x; i < items; i += blockDim.x) {
    const bool last = i + 1 == items;
    out[i].tile_end = last ? static_cast<uint32_t>(s.tiles) : out[i + 1].tile_begin;
    out[i].values = (last ? total : out[i + 1].first_value) - out[i].first_value;
  }
}

// Kernel 3: a persistent grid over the items; chunk bins in shared memory (Policy's accumulator).
template <typename Policy>
__global__ void __launch_bounds__(kPartitionCountThreads) count_kernel(const HistogramParams p, const Slice s) {
  using Acc = typename Policy::Acc;
  constexpr bool kCounts = std::is_same<Policy, detail::CountPolicy>::value;
  constexpr int kSpan = 8;
  // Dynamic shared memory: the batch's runs and their scan (kCountScratchBytes), then the chunk's bins.
  uint32_t* run_starts = dsmhist::detail::shared_bins<uint32_t>();
  uint32_t* run_lengths = run_starts + kPartitionCountThreads;
  uint32_t* run_firsts = run_lengths + kPartitionCountThreads;
  uint32_t* warp_sums = run_firsts + kPartitionCountThreads + 32;
  Acc* bins = reinterpret_cast<Acc*>(dsmhist::detail::shared_bins<unsigned char>() + kCountScratchBytes);
  const int64_t chunk_bins = int64_t(1) << s.chunk_shift;
  const int lane = threadIdx.x & 31;
  if (blockIdx.x == 0 && threadIdx.x == 0) *s.next_item_count = 0u;
  dsmhist::detail::zero_bins(bins, chunk_bins);
  __syncthreads();  // every bin must be zero before any thread counts into it
  const uint32_t items = *s.item_count;

  for (uint32_t index = blockIdx.x; index < items; index += gridDim.x) {
    const Item item = s.items[index];
    if (item.values == 0u) continue;  // the same for every thread of the block
    const int64_t flat_first = s.flat_base + (int64_t(item.chunk) << s.chunk_shift);
    // Few elements do not pay for a pass over the chunk's bins: they go straight to the output.
    const bool direct = int64_t(item.values) * kPartitionDirectRatio < chunk_bins;
    const uint32_t* runs = s.runs + int64_t(item.chunk) * s.tiles;
    auto add = [&](uint32_t local, Acc contribution) {
      if constexpr (kCounts) {
        // A warp whose elements all fall in one bin (one hot bin, sorted data) adds once.
        const uint32_t first = __shfl_sync(0xffffffffu, local, 0);
        if (__all_sync(0xffffffffu, local == first)) {
          if (lane == 0 && first != kNoEntry) {
            if (direct) {
              Policy::add_global(p, flat_first + first, 32u);
            } else {
              atomicAdd(bins + first, 32u);
            }
          }
          return;
        }
      }
      if (local == kNoEntry) return;
      if (direct) {
        Policy::add_global(p, flat_first + local, contribution);
      } else {
        Policy::add_shared(bins + local, contribution);
      }
    };
    // The item's runs, up to one tile per thread at a time, laid end to end: thread i takes kSpan consecutive
    // entries of that sequence per round, so every thread has work whether the runs are long (few chunks, a hot
    // chunk) or a few entries each (many chunks).
    for (int64_t batch = item.tile_begin; batch < item.tile_end; batch += blockDim.x) {
      const int64_t own_tile = batch + threadIdx.x;
      const uint32_t own_run = own_tile < item.tile_end ? runs[own_tile] : 0u;
      run_starts[threadIdx.x] = own_run >> 16;
      run_lengths[threadIdx.x] = own_run & 0xffffu;
      __syncthreads();  // the batch's runs must be in place before they are scanned
      detail_partition::exclusive_scan(run_lengths, run_firsts, blockDim.x, warp_sums);
      __syncthreads();  // the scan must be complete before it is searched
      const uint32_t total = run_firsts[blockDim.x];
      // Rounds are the same for every thread (add() is warp-collective); past the end a thread adds nothing.
      for (uint32_t round = 0; round < total; round += blockDim.x * kSpan) {
        const uint32_t first = round + threadIdx.x * kSpan;
        int low = 0, high = blockDim.x;  // run_firsts[low] <= first < run_firsts[high]
        while (high - low > 1) {
          const int middle = (low + high) / 2;
          if (run_firsts[middle] <= first) {
            low = middle;
          } else {
            high = middle;
          }
        }
        int run = low;
        uint32_t local[kSpan];
        Acc contribution[kSpan];
#pragma unroll
        for (int j = 0; j < kSpan; ++j) {
          const uint32_t v = first + j;
          local[j] = kNoEntry;
          contribution[j] = Acc(0);
          if (v < total) {
            while (v >= run_firsts[run + 1]) ++run;
            const int64_t at = (batch + run) * kTile + run_starts[run] + (v - run_firsts[run]);
            local[j] = s.entries[at];
            if constexpr (kCounts) {
              contribution[j] = 1u;
            } else {
              contribution[j] = static_cast<const Acc*>(s.values)[at];
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kSpan; ++j) add(local[j], contribution[j]);
      }
      __syncthreads();  // every thread is done with the batch's runs before they are replaced
    }
    if (direct) continue;  // the same for every thread of the block; the bins were not touched
    __syncthreads();  // every add of the item must land before its bins are flushed
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
