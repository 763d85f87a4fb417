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
  __shared__ uint32_t item_sums[3];  // the search's sums, in turn: a slot is zeroed two calls before it is reused
  const uint32_t chunk = blockIdx.x;
  const uint32_t* runs = s.runs + int64_t(chunk) * s.tiles;
  const int lane = threadIdx.x & 31;

  // Thread c holds chunk c's total (kernel 1 summed each chunk's runs); the largest total bounds the search.
  const uint32_t own_total = threadIdx.x < uint32_t(s.chunks) ? s.counters->chunk_totals[threadIdx.x] : 0u;
  uint32_t largest = __reduce_max_sync(0xffffffffu, own_total);
  if (lane == 0) warp_sums[threadIdx.x >> 5] = largest;
  if (threadIdx.x < 3) item_sums[threadIdx.x] = 0u;
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
  Item* out = s.items + first_item;
  if (items == 1u) {  // the whole chunk: no cut to find
    if (threadIdx.x == 0) out[0] = Item{chunk, 0u, static_cast<uint32_t>(s.tiles), 0u, total};
    return;
  }
  auto item_of = [&](uint32_t before) { return uint32_t(uint64_t(before) * items / total); };

  // Each thread walks a range of consecutive tiles, starting from the chunk's elements before its range.
  const int64_t per_thread = (s.tiles + blockDim.x - 1) / blockDim.x;
  const int64_t first_tile = int64_t(threadIdx.x) * per_thread < s.tiles ? int64_t(threadIdx.x) * per_thread : s.tiles;
  const int64_t end_tile = first_tile + per_thread < s.tiles ? first_tile + per_thread : s.tiles;
  uint32_t own = 0u;
  for (int64_t t = first_tile; t < end_tile; ++t) own += runs[t] & 0xffffu;
  lengths[threadIdx.x] = own;
  __syncthreads();  // every range's length must be in place before they are scanned
  detail_partition::exclusive_scan<kPartitionItemThreads>(lengths, starts, kPartitionItemThreads, warp_sums,
                                                          [](int, uint32_t, uint32_t) {});
  __syncthreads();  // the scan must be complete before it is read
  uint32_t before = starts[threadIdx.x];
  // The item of the tile before the range (-1 before the first tile).
  int64_t previous_item = first_tile == 0 || first_tile == end_tile
                              ? -1
                              : int64_t(item_of(before - (runs[first_tile - 1] & 0xffffu)));
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
  }
}

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
  Acc* bins = reinterpret_cast<Acc*>(dsmhist::detail::shared_bins<unsigned char>() + kCountScratchBytes);
  const int64_t chunk_bins = int64_t(1) << s.chunk_shift;
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
      // The run's entries among the vector's eight: all of them but at the run's two ends.
      const uint32_t base = vector * 8u;
      const uint32_t begin = first > base ? min(first - base, 8u) : 0u;
      const uint32_t end = stop > base ? min(stop - base, 8u) : 0u;
      const uint32_t inside = end > begin ? ((1u << end) - 1u) & ~((1u << begin) - 1u) : 0u;
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
    // lost 10% the other way) the runs are laid end to end across the block: thread i takes a group of consecutive
    // vectors of that sequence per round (kPartitionEndToEndCountGroup, kPartitionEndToEndSumGroup), so loads are wide
    // and many are in flight whatever the runs' lengths.
    // A thread's run of the next batch is asked for while the block counts the current one.
    uint32_t next_run = item.tile_begin + threadIdx.x < item.tile_end ? runs[item.tile_begin + threadIdx.x] : 0u;
    for (int64_t batch = item.tile_begin; batch < item.tile_end; batch += blockDim.x) {
      const int64_t own_tile = batch + threadIdx.x;
      const uint32_t own_run = next_run;
      next_run = own_tile + blockDim.x < item.tile_end ? runs[own_tile + blockDim.x] : 0u;
      const uint32_t own_first = own_run >> 16, own_stop = own_first + (own_run & 0xffffu);
      const uint32_t own_vectors = own_stop == own_first ? 0u : (own_stop + 7u) / 8u - own_first / 8u;
      batch_runs[threadIdx.x] = own_run;
      batch_vectors[threadIdx.x] = own_vectors;
      bool own_runs = false;  // one run a thread (above)
      if constexpr (kCounts) {
        own_runs = !__syncthreads_or(own_vectors > kPartitionOwnRunMaxVectors);  // also: the runs are in place
      } else {
        __syncthreads();  // the batch's runs must be in place before they are scanned
      }
      if (own_runs) {
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
            add_vector(raw[u], own_tile, first_vector + group + u, own_first,
                       group + u < own_vectors ? own_stop : own_first);
          }
        }
        continue;
      }
      detail_partition::exclusive_scan<kPartitionCountThreads>(batch_vectors, vector_firsts, kPartitionCountThreads,
                                                               warp_sums, [](int, uint32_t, uint32_t) {});
      __syncthreads();  // the scan must be complete before it is searched
      const uint32_t total = vector_firsts[blockDim.x];
      // Runs past the item's last tile are empty: the search stops before them.
      const int batch_runs_used = static_cast<int>(min(item.tile_end - batch, int64_t(blockDim.x)));
      constexpr int kGroup = kCounts ? kPartitionEndToEndCountGroup : kPartitionEndToEndSumGroup;
      // Rounds are the same for every thread (add_vector is warp-collective); past the end a thread adds nothing.
      for (uint32_t round = 0; round < total; round += kGroup * blockDim.x) {
        const uint32_t v0 = round + kGroup * threadIdx.x;
        int low = 0, high = batch_runs_used;  // vector_firsts[low] <= v0 < vector_firsts[high]
        while (high - low > 1) {
          const int middle = (low + high) / 2;
          if (vector_firsts[middle] <= v0) {
            low = middle;
          } else {
            high = middle;
          }
        }
        // The group's vectors are all loaded before any is counted. One may lie in a later run (empty runs between).
        uint4 raw[kGroup];
        uint32_t first[kGroup], stop[kGroup], vector[kGroup];
        int run_of[kGroup];
        int run = low;
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          const uint32_t v = v0 + uint32_t(u);
          while (run + 1 < batch_runs_used && vector_firsts[run + 1] <= v) ++run;
          run_of[u] = run;
          first[u] = batch_runs[run] >> 16;
          stop[u] = v < total ? first[u] + (batch_runs[run] & 0xffffu) : first[u];  // past the end: nothing
          vector[u] = first[u] / 8u + (v - vector_firsts[run]);
          raw[u] = v < total ? vectors[(batch + run) * (kTile / 8) + vector[u]] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < kGroup; ++u) add_vector(raw[u], batch + run_of[u], vector[u], first[u], stop[u]);
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
