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
    detail_partition::exclusive_scan(lengths, starts, blockDim.x, warp_sums, [](int, uint32_t, uint32_t) {});
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
  // Dynamic shared memory: the batch's runs and the scan of their vector counts (kCountScratchBytes), then the bins.
  uint32_t* batch_runs = dsmhist::detail::shared_bins<uint32_t>();
  uint32_t* batch_vectors = batch_runs + kPartitionCountThreads;
  uint32_t* vector_firsts = batch_vectors + kPartitionCountThreads;
  uint32_t* warp_sums = vector_firsts + kPartitionCountThreads + 32;
  Acc* bins = reinterpret_cast<Acc*>(dsmhist::detail::shared_bins<unsigned char>() + kCountScratchBytes);
  const int64_t chunk_bins = int64_t(1) << s.chunk_shift;
  const int lane = threadIdx.x & 31;
  if (blockIdx.x == 0 && threadIdx.x == 0) *s.next_item_count = 0u;
  dsmhist::detail::zero_bins(bins, chunk_bins);
  __syncthreads();  // every bin must be zero before any thread counts into it
  const uint32_t items = *s.item_count;
  const uint4* vectors = reinterpret_cast<const uint4*>(s.entries);  // a tile's entries start on a 16-byte boundary

  for (uint32_t index = blockIdx.x; index < items; index += gridDim.x) {
    const Item item = s.items[index];
    if (item.values == 0u) continue;  // the same for every thread of the block
    const int64_t flat_first = s.flat_base + (int64_t(item.chunk) << s.chunk_shift);
    // Few elements do not pay for a pass over the chunk's bins: they go straight to the output.
    const bool direct = int64_t(item.values) * kPartitionDirectRatio < chunk_bins;
    const uint32_t* runs = s.runs + int64_t(item.chunk) * s.tiles;
    auto add = [&](uint32_t local, int64_t at) {
      if constexpr (kCounts) {
        // A warp whose elements all fall in one bin (one hot bin, sorted data) adds once.
        const uint32_t lead = __shfl_sync(0xffffffffu, local, 0);
        if (__all_sync(0xffffffffu, local == lead)) {
          if (lane == 0 && lead != kNoEntry) {
            if (direct) {
              Policy::add_global(p, flat_first + lead, 32u);
            } else {
              atomicAdd(bins + lead, 32u);
            }
          }
          return;
        }
      }
      if (local == kNoEntry) return;
      Acc contribution;
      if constexpr (kCounts) {
        contribution = 1u;
      } else {
        contribution = static_cast<const Acc*>(s.values)[at];
      }
      if (direct) {
        Policy::add_global(p, flat_first + local, contribution);
      } else {
        Policy::add_shared(bins + local, contribution);
      }
    };
    // The entries of one 16-byte vector (the `vector`-th of tile `tile`'s entries) that lie in the run
    // [first, stop) (tile-relative), each passed to add (kNoEntry outside the run; every thread adds all eight).
    auto add_vector = [&](const uint4& raw, int64_t tile, uint32_t vector, uint32_t first, uint32_t stop) {
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t at = vector * 8u + uint32_t(j);
        const uint32_t local = (words[j / 2] >> (16 * (j % 2))) & 0xffffu;
        add(at >= first && at < stop ? local : kNoEntry, tile * kTile + at);
      }
    };
    // Up to one tile's run per thread at a time, read as 16-byte vectors (8 entries; a run's first and last vector
    // masked to it) laid end to end across the block: thread i takes two consecutive vectors of that sequence per
    // round, so loads are wide and many are in flight whether the runs are long (few chunks, a hot chunk) or a few
    // entries each (many chunks).
    for (int64_t batch = item.tile_begin; batch < item.tile_end; batch += blockDim.x) {
      const int64_t own_tile = batch + threadIdx.x;
      const uint32_t own_run = own_tile < item.tile_end ? runs[own_tile] : 0u;
      const uint32_t own_first = own_run >> 16, own_stop = own_first + (own_run & 0xffffu);
      batch_runs[threadIdx.x] = own_run;
      batch_vectors[threadIdx.x] = own_stop == own_first ? 0u : (own_stop + 7u) / 8u - own_first / 8u;
      __syncthreads();  // the batch's runs must be in place before they are scanned
      detail_partition::exclusive_scan(batch_vectors, vector_firsts, blockDim.x, warp_sums,
                                       [](int, uint32_t, uint32_t) {});
      __syncthreads();  // the scan must be complete before it is searched
      const uint32_t total = vector_firsts[blockDim.x];
      // Rounds are the same for every thread (add() is warp-collective); past the end a thread adds nothing.
      for (uint32_t round = 0; round < total; round += 2u * blockDim.x) {
        const uint32_t v0 = round + 2u * threadIdx.x;
        int low = 0, high = blockDim.x;  // vector_firsts[low] <= v0 < vector_firsts[high]
        while (high - low > 1) {
          const int middle = (low + high) / 2;
          if (vector_firsts[middle] <= v0) {
            low = middle;
          } else {
            high = middle;
          }
        }
        // Both vectors are loaded before either is counted. The second may lie in a later run (empty runs between).
        uint4 raw[2];
        uint32_t first[2], stop[2], vector[2];
        int64_t tile[2];
        int run = low;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t v = v0 + uint32_t(u);
          while (run + 1 < int(blockDim.x) && vector_firsts[run + 1] <= v) ++run;
          first[u] = batch_runs[run] >> 16;
          stop[u] = v < total ? first[u] + (batch_runs[run] & 0xffffu) : first[u];  // past the end: nothing
          vector[u] = first[u] / 8u + (v - vector_firsts[run]);
          tile[u] = batch + run;
          raw[u] = v < total ? vectors[tile[u] * (kTile / 8) + vector[u]] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) add_vector(raw[u], tile[u], vector[u], first[u], stop[u]);
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
