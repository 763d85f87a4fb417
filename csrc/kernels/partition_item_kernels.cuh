// Kernel 2 of tier "partition" (tier_partition.cuh holds the unit; partition_kernels.cuh the slice, its workspace
// layout and kernel 1; partition_count_kernels.cuh kernel 3): cutting each chunk's runs into work items for kernel 3.
// Device code; no torch header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "partition_kernels.cuh"

namespace dsmhist {
namespace partition_tier {

// Kernel 2: one block per chunk. Kernel 3's blocks claim the items in turn, so the slice is cut into items of about
// equal length, in as few rounds (items per block) as keep the longest short. For r rounds (from
// the fewest the chunks allow, one item per chunk, to kPartitionItemRoundsTried more), every block finds the same
// smallest item length `most` (at least min_item_values, within 3%) with sum over chunks of ceil(total / most) <= r *
// blocks, and keeps the r whose rounds * (most + the chunk's bins, for the flush: measured about one element's cost
// a bin) is the smallest. Its chunk is then cut into ceil(total / most) items of equal length, each a range of tiles:
// tile t belongs to item floor(elements of the chunk before t * items / total).
// Every item starts at some tile: a chunk cut into two items or more has items longer than half the shortest
// (min_item_values, at least this), so longer than a tile's run, and item_of steps by at most one per tile.
static_assert(kPartitionChunkBytes / 8 * kPartitionMinItemElementsPerBin / 2 > kTile,
              "an item of a chunk cut in two or more is longer than a tile");
template <typename Policy>
__global__ void __launch_bounds__(kPartitionItemThreads) build_items_kernel(const Slice s) {
  static_assert(kPartitionItemThreads >= kPartitionMaxChunks, "one thread per chunk when the item size is chosen");
  __shared__ uint32_t warp_sums[32];
  __shared__ uint32_t lengths[kPartitionItemThreads];
  __shared__ uint32_t starts[kPartitionItemThreads + 1];
  __shared__ uint32_t first_item;
  __shared__ uint32_t chunk_longest_run;
  __shared__ uint32_t item_sums[3];  // the search's sums, in turn: a slot is zeroed two calls before it is reused
  const uint32_t chunk = blockIdx.x;
  const uint32_t* runs = s.runs + int64_t(chunk) * s.tiles;
  const int lane = threadIdx.x & 31;

  // Thread c holds chunk c's total (kernel 1 summed each chunk's runs); the largest total bounds the search.
  const uint32_t own_total = threadIdx.x < uint32_t(s.chunks) ? s.counters->chunk_totals[threadIdx.x] : 0u;
  uint32_t largest = __reduce_max_sync(0xffffffffu, own_total);
  if (lane == 0) warp_sums[threadIdx.x >> 5] = largest;
  if (threadIdx.x < 3) item_sums[threadIdx.x] = 0u;
  if (threadIdx.x == 0) chunk_longest_run = 0u;
  __syncthreads();  // every warp's largest total (and the zeroed sums) must be in place before they are read
  largest = 0u;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) largest = max(largest, warp_sums[w]);
  const uint32_t total = s.counters->chunk_totals[chunk];
  // Items of the slice if no item is longer than `most` elements (the same on every thread).
  int call = 0;
  auto items_for = [&](uint32_t most) {
    const uint32_t own = own_total == 0u ? 0u : (own_total - 1u) / most + 1u;
    const uint32_t warp_items = __reduce_add_sync(0xffffffffu, own);
    if (lane == 0 && warp_items != 0u) atomicAdd(item_sums + call % 3, warp_items);
    __syncthreads();  // every warp's items must be added before the sum is read
    const uint32_t sum = item_sums[call % 3];
    // Every thread read the previous call's slot before this call's barrier: it serves the call after next.
    if (threadIdx.x == 0) item_sums[(call + 2) % 3] = 0u;
    ++call;
    return sum;
  };
  const uint32_t shortest = static_cast<uint32_t>(s.min_item_values);
  const uint32_t blocks = static_cast<uint32_t>(s.count_blocks);
  const uint32_t chunk_bins = 1u << s.chunk_shift;
  const uint32_t nonempty = items_for(0xffffffffu);  // one item per chunk
  const uint32_t slice_total = items_for(1u);        // one item per element
  uint32_t most = max(shortest, largest);
  uint64_t best_cost = ~uint64_t(0);
  const uint32_t fewest_rounds = max(1u, (nonempty + blocks - 1u) / blocks);
  for (uint32_t rounds = fewest_rounds; rounds <= fewest_rounds + kPartitionItemRoundsTried; ++rounds) {
    const uint32_t target = rounds * blocks;
    // `target` items of fewer than slice_total / target elements cannot hold the slice: no shorter length fits.
    const uint32_t least = max(shortest, (slice_total + target - 1u) / target);
    // That bound on this round's cost only grows with more rounds.
    if (uint64_t(rounds) * (uint64_t(least) + chunk_bins) >= best_cost) break;
    // items_for(fits) <= target (one item per chunk fits); `low` is below every length known to fit.
    uint32_t fits = max(shortest, largest), low = least - 1u;
    if (items_for(least) <= target) fits = least;
    // Halve the interval while it is wider than 1/32 of its lower end: lengths within 3% of the smallest.
    while (fits - low > max(1u, low / 32u)) {
      const uint32_t middle = low + (fits - low) / 2u;
      if (items_for(middle) <= target) {
        fits = middle;
      } else {
        low = middle;
      }
    }
    const uint64_t cost = uint64_t(rounds) * (uint64_t(fits) + chunk_bins);
    if (cost < best_cost) {
      best_cost = cost;
      most = fits;
    }
  }
  const uint32_t items = total == 0u ? 0u : (total - 1u) / most + 1u;
  if (threadIdx.x == 0) first_item = items == 0 ? 0u : atomicAdd(&s.counters->item_count, items);
  __syncthreads();  // every thread needs the chunk's first item
  if (items == 0) return;
  // Each thread walks a range of consecutive tiles: the chunk's elements in it (where its items' cuts start) and its
  // longest run (kernel 3 counts an item whose runs are all short with no barrier).
  const int64_t per_thread = (s.tiles + blockDim.x - 1) / blockDim.x;
  const int64_t first_tile = int64_t(threadIdx.x) * per_thread < s.tiles ? int64_t(threadIdx.x) * per_thread : s.tiles;
  const int64_t end_tile = first_tile + per_thread < s.tiles ? first_tile + per_thread : s.tiles;
  uint32_t own = 0u, own_longest = 0u;
  for (int64_t t = first_tile; t < end_tile; ++t) {
    const uint32_t length = runs[t] & 0xffffu;
    own += length;
    own_longest = max(own_longest, length);
  }
  lengths[threadIdx.x] = own;
  own_longest = __reduce_max_sync(0xffffffffu, own_longest);
  if (lane == 0) atomicMax(&chunk_longest_run, own_longest);
  __syncthreads();  // every range's length and longest run must be in place before they are read
  const uint32_t longest_run = chunk_longest_run;
  Item* out = s.items + first_item;
  if (items == 1u) {  // the whole chunk: no cut to find
    if (threadIdx.x == 0) out[0] = Item{chunk, 0u, static_cast<uint32_t>(s.tiles), 0u, total, longest_run};
    return;
  }
  auto item_of = [&](uint32_t before) { return uint32_t(uint64_t(before) * items / total); };

  detail_partition::exclusive_scan<kPartitionItemThreads>(lengths, starts, kPartitionItemThreads, warp_sums,
                                                          [](int, uint32_t, uint32_t) {});
  __syncthreads();  // the scan must be complete before it is read
  uint32_t before = starts[threadIdx.x];
  // The item of the tile before the range (-1 before the first tile).
  int64_t previous_item =
      first_tile == 0 || first_tile == end_tile ? -1 : int64_t(item_of(before - (runs[first_tile - 1] & 0xffffu)));
  for (int64_t t = first_tile; t < end_tile; ++t) {
    const int64_t item = before < total ? int64_t(item_of(before)) : int64_t(items);
    // Items previous_item + 1 .. item start at tile t (those strictly between are empty).
    for (int64_t i = previous_item + 1; i <= item && i < items; ++i) {
      out[i].chunk = chunk;
      out[i].tile_begin = static_cast<uint32_t>(t);
      out[i].first_value = before;
    }
    previous_item = item;
    before += runs[t] & 0xffffu;
  }
  __syncthreads();  // item starts were written by other threads of this block
  // Item i ends where item i + 1 begins.
  for (uint32_t i = threadIdx.x; i < items; i += blockDim.x) {
    const bool last = i + 1 == items;
    out[i].tile_end = last ? static_cast<uint32_t>(s.tiles) : out[i + 1].tile_begin;
    out[i].values = (last ? total : out[i + 1].first_value) - out[i].first_value;
    out[i].longest_run = longest_run;
  }
}

}  // namespace partition_tier
}  // namespace dsmhist
