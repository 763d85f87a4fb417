// The kernels of tier "partition" (tier_partition.cuh holds the unit: fit, shape, workspace and the per-slice
// launches). Device code; no torch header.
#pragma once

#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hot_bin_cache.cuh"
#include "policies.cuh"
#include "traversal.cuh"

namespace dsmhist {
namespace partition_tier {

constexpr int64_t kTile = int64_t(kPartitionThreads) * kPartitionValuesPerThread;
constexpr uint32_t kNoEntry = 0xffffffffu;
// Kernel 3's shared memory before its bins: the batch's runs, their vector counts, the counts' scan (with room for the
// total), warp sums, the claimed item (padded to 16 bytes) and a spare word per lane.
constexpr int64_t kCountScratchBytes = (3 * int64_t(kPartitionCountThreads) + 64 + 4 + 32) * 4;
static_assert(kCountScratchBytes % 16 == 0, "the bins after the scratch must stay 16-byte aligned");
static_assert(kTile <= 65535, "a run's start and length are packed as 16 bits each");

// One work item of kernel 3: the runs of chunk `chunk` in tiles [tile_begin, tile_end), `values` elements in all.
struct Item {
  uint32_t chunk;
  uint32_t tile_begin;
  uint32_t tile_end;
  uint32_t first_value;  // elements of the chunk in the tiles before tile_begin (build_items only)
  uint32_t values;
  uint32_t longest_run;  // entries of the chunk's longest run in a tile of the slice
};

// A slice's counters in the workspace. Two sets take turns: slice i uses set i % 2, and its kernel 3 zeroes the other
// for slice i + 1 (nobody reads that set between).
struct SliceCounters {
  uint32_t item_count;                         // items kernel 2 cut
  uint32_t item_claims;                        // items kernel 3's blocks have claimed
  uint32_t chunk_totals[kPartitionMaxChunks];  // elements per chunk: kernel 1 adds, kernel 2 reads
};

// One slice: elements [element_begin, element_begin + elements) in row-major order of the call's rows, adding into
// flat bins (output row * bins + bin) [flat_base, flat_base + chunks << chunk_shift).
struct Slice {
  int64_t element_begin = 0;
  int64_t elements = 0;
  int64_t flat_base = 0;
  int32_t chunks = 0;
  int32_t chunk_shift = 0;
  int64_t tiles = 0;
  uint16_t* entries = nullptr;  // [tiles][kTile]: bin within the chunk, grouped by chunk within each tile
  void* values = nullptr;       // [tiles][kTile]: each entry's contribution (weighted policies only)
  uint32_t* runs = nullptr;     // [chunks][tiles]: (start << 16) | length of the chunk's run in the tile
  Item* items = nullptr;
  SliceCounters* counters = nullptr;       // this slice's, zero before kernel 1
  SliceCounters* next_counters = nullptr;  // the next slice's, zeroed by this slice's kernel 3
  int64_t min_item_values = 0;  // the shortest item kernel 2 cuts (a flush of the chunk's bins stays cheap beside it)
  int64_t count_blocks = 0;     // kernel 3's grid
};

namespace detail_partition {

// Where element `e` (row-major over the call's rows) lies in input and weight, and its output row.
__device__ __forceinline__ void locate(const HistogramParams& p, int64_t e, int64_t* input_offset,
                                       int64_t* weight_offset, int64_t* output_row) {
  if (p.rows == 1) {
    *input_offset = e * p.inner_input_stride;
    *weight_offset = e * p.inner_weight_stride;
    *output_row = 0;
    return;
  }
  const int64_t row = e / p.row_length;
  const int64_t column = e - row * p.row_length;
  int64_t row_input = 0, row_weight = 0;
  if (p.layout.ndim > 0) p.layout.offsets(row, &row_input, &row_weight);
  *input_offset = row_input + column * p.inner_input_stride;
  *weight_offset = row_weight + column * p.inner_weight_stride;
  *output_row = p.output_row(row);
}

// Exclusive prefix sums of in[0, n) into out[0, n], out[n] = the total; n <= kPartitionMaxChunks. Every thread of
// the block calls it; `warp_sums` holds 32 entries. The caller syncs before reading out. `visit(i, start, length)`
// sees every entry once, on the thread that writes its start (which may use it at once). The block has kThreads
// threads (a constant, so the division below is a shift).
template <int kThreads, typename Visit>
__device__ __forceinline__ void exclusive_scan(const uint32_t* in, uint32_t* out, int n, uint32_t* warp_sums,
                                               Visit visit) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = kThreads >> 5;
  const int per_thread = (n + kThreads - 1) / kThreads;
  const int first = threadIdx.x * per_thread;
  uint32_t own = 0;
  for (int j = 0; j < per_thread; ++j) own += first + j < n ? in[first + j] : 0u;
  uint32_t inclusive = own;
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();  // every warp's total must be in place before warp 0 scans them
  if (warp == 0) {
    const uint32_t total = lane < warps ? warp_sums[lane] : 0u;
    uint32_t scanned = total;
    for (int offset = 1; offset < 32; offset *= 2) {
      const uint32_t below = __shfl_up_sync(0xffffffffu, scanned, offset);
      if (lane >= offset) scanned += below;
    }
    __syncwarp();
    if (lane < warps) warp_sums[lane] = scanned - total;
  }
  __syncthreads();  // the warps' offsets must be in place before any thread uses its own
  uint32_t running = warp_sums[warp] + inclusive - own;
  for (int j = 0; j < per_thread; ++j) {
    if (first + j < n) {
      const uint32_t length = in[first + j];
      out[first + j] = running;
      visit(first + j, running, length);
      running += length;
    }
  }
  if (threadIdx.x == kThreads - 1) out[n] = running;
}

// The key of one element: (chunk << 16) | bin within the chunk, kNoEntry when it adds nothing; `add` its
// contribution (weighted policies).
template <typename T, typename Policy>
__device__ __forceinline__ uint32_t element_key(const HistogramParams& p, const Slice& s, const Binner<T>& binner,
                                                T value, int64_t weight_offset, int64_t output_row,
                                                typename Policy::Acc* add) {
  const int64_t bin = binner(value);
  if (bin < 0) return kNoEntry;
  const int64_t flat = output_row * p.bins + bin;
  const typename Policy::Acc contribution = Policy::contribution(p, flat, weight_offset);
  if (contribution == typename Policy::Acc(0)) return kNoEntry;
  *add = contribution;
  const uint32_t relative = static_cast<uint32_t>(flat - s.flat_base);
  return ((relative >> s.chunk_shift) << 16) | (relative & ((1u << s.chunk_shift) - 1u));
}

// `old = *address; *address += amount` when `add` (0 when not): one shared-memory atomic under a predicate, on a
// 32-bit shared address. ptxas still branches around it at kernel 1's 64 registers, and recomputes the shared
// window's base per use; the rank loop built on it issues 8% fewer instructions than `has ? atomicAdd(...) : 0` with
// two atomics on the lead-chunk path did (benchmarks/NOTES.md, sixth version of the tier).
__device__ __forceinline__ uint32_t shared_fetch_add_if(bool add, uint32_t shared_address, uint32_t amount) {
  uint32_t old = 0;
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\t@p atom.shared.add.u32 %0, [%2], %3;\n\t}"
               : "+r"(old)
               : "r"(uint32_t(add)), "r"(shared_address), "r"(amount)
               : "memory");
  return old;
}

}  // namespace detail_partition

// Kernel 1: the tier's kernel of the tier table (per input type and policy). Per tile: bin every element, give it a
// place among the tile's elements of its chunk, then write the tile grouped by chunk and each chunk's run.
template <typename T, typename Policy>
__global__ void __launch_bounds__(kPartitionThreads, 2) kernel(const HistogramParams p, const Slice s) {
  using Acc = typename Policy::Acc;
  constexpr bool kCounts = std::is_same<Policy, detail::CountPolicy>::value;
  constexpr int kPer = kPartitionValuesPerThread;
  constexpr int kPerVector = 16 / int(sizeof(T));
  static_assert(kPer % kPerVector == 0, "a thread's values are whole 16-byte vectors");
  // Dynamic shared memory (partition_shared_bytes): counts first hold two tiles of raw input (weighted sums load
  // straight into registers: their staged values leave no room for them), then the rest.
  T* raw_tiles = dsmhist::detail::shared_bins<T>();
  uint32_t* chunk_fill = reinterpret_cast<uint32_t*>(raw_tiles + (kCounts ? 2 * kTile : 0));
  uint32_t* chunk_start = chunk_fill + kPartitionMaxChunks;
  uint32_t* warp_sums = chunk_start + kPartitionMaxChunks + 32;
  uint32_t* block_chunk_totals = warp_sums + 32;  // the block's elements per chunk over its tiles
  uint16_t* staged = reinterpret_cast<uint16_t*>(block_chunk_totals + kPartitionMaxChunks);
  Acc* staged_values = reinterpret_cast<Acc*>(staged + kTile);
  // Counts only: runs of one bin (a thread's vector, or a whole warp's step) skip the partition through this cache.
  using Cache = HotBinCache<detail::CountPolicy>;
  Cache cache(staged_values + (kCounts ? 0 : kTile), kCounts && p.output_rows() * p.bins < int64_t(Cache::kEmpty));
  const T* input = static_cast<const T*>(p.input);
  const Binner<T> binner(p);
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  auto flat_of = [&](uint32_t key) {
    return s.flat_base + (int64_t(key >> 16) << s.chunk_shift) + int64_t(key & 0xffffu);
  };
  // One 1-D dense input starting on a 16-byte boundary: full tiles load 16-byte vectors (slices start on tiles).
  const bool dense = p.rows == 1 && p.inner_input_stride == 1 && (reinterpret_cast<uintptr_t>(input) & 15u) == 0;

  // A full tile of a dense input is copied into shared memory asynchronously one tile ahead, so the block's next
  // loads are in flight while it partitions the current tile. Thread t copies and later reads the tile's 16-byte
  // vectors t, t + blockDim, ...: its own copies, so waiting for its own copy group is enough.
  auto prefetchable = [&](int64_t tile) { return dense && tile < s.tiles && (tile + 1) * kTile <= s.elements; };
  const uint32_t chunk_fill_address = static_cast<uint32_t>(__cvta_generic_to_shared(chunk_fill));
  auto prefetch = [&](int64_t tile, int buffer) {
    if constexpr (!kCounts) return;  // weighted sums load straight into registers
    if (prefetchable(tile)) {
      const uint4* from = reinterpret_cast<const uint4*>(input + s.element_begin + tile * kTile);
      uint4* to = reinterpret_cast<uint4*>(raw_tiles + buffer * kTile);
#pragma unroll
      for (int v = 0; v < kPer / kPerVector; ++v) {
        const int64_t at = int64_t(v) * kPartitionThreads + threadIdx.x;
        __pipeline_memcpy_async(to + at, from + at, 16);
      }
    }
    __pipeline_commit();  // one group per tile, empty or not, so "all but the newest group" is always the current tile
  };
  // Counts with no clamp of an integer input binned by index, or of an input over a range computed in float (the
  // common counts): a key is the bin in 32 bits (value_bin; Binner::narrow_range_bin, with no branch), a compare, a
  // subtract and two shifts, not the Binner's general path (64-bit bins, the range branch).
  constexpr bool kNarrowInteger = std::is_integral<T>::value && sizeof(T) <= 4;
  constexpr bool kNarrowRange = detail::kFloatRangeCounts<T, Policy>;
  const bool counts_dropping = kCounts && !binner.clamp;
  const bool by_index = kNarrowInteger && binner.mode == BinMode::kIndex;
  const bool plain_index = counts_dropping && (by_index || (kNarrowRange && binner.narrow_range_applies()));
  const uint32_t chunk_mask = (1u << s.chunk_shift) - 1u;
  auto plain_key = [&](T value) -> uint32_t {
    uint32_t index = 0xffffffffu;  // not reached without a plain key: plain_index is false
    if constexpr (kNarrowInteger && kNarrowRange) {
      index = by_index ? value_bin<OutOfRange::kIgnore>(value, /*last_bin (unused)=*/0)
                       : binner.template narrow_range_bin<OutOfRange::kIgnore>(value);
    } else if constexpr (kNarrowInteger) {
      index = value_bin<OutOfRange::kIgnore>(value, /*last_bin (unused)=*/0);
    } else if constexpr (kNarrowRange) {
      index = binner.template narrow_range_bin<OutOfRange::kIgnore>(value);
    }
    const uint32_t relative = index - static_cast<uint32_t>(s.flat_base);
    return index < binner.narrow_bins ? ((relative >> s.chunk_shift) << 16) | (relative & chunk_mask) : kNoEntry;
  };

  for (int c = threadIdx.x; c < s.chunks; c += kPartitionThreads) chunk_fill[c] = block_chunk_totals[c] = 0u;
  __syncthreads();  // the fills must be zero (and the cache set up) before the first tile counts into them
  prefetch(blockIdx.x, 0);
  int buffer = 0;
  for (int64_t tile = blockIdx.x; tile < s.tiles; tile += gridDim.x, buffer ^= 1) {
    prefetch(tile + gridDim.x,
             buffer ^ 1);  // that buffer's last reader finished before the previous tile's last barrier

    const int64_t tile_first = tile * kTile;
    uint32_t key[kPer];
    Acc add[kCounts ? 1 : kPer];
    if (prefetchable(tile)) {
      union Vector {
        uint4 raw;
        T values[kPerVector];
      };
      Vector batch[kPer / kPerVector];
      if constexpr (kCounts) {
        __pipeline_wait_prior(1);
        const uint4* vectors = reinterpret_cast<const uint4*>(raw_tiles + buffer * kTile);
#pragma unroll
        for (int v = 0; v < kPer / kPerVector; ++v) batch[v].raw = vectors[v * kPartitionThreads + threadIdx.x];
      } else {
        const uint4* vectors = reinterpret_cast<const uint4*>(input + s.element_begin + tile_first);
#pragma unroll
        for (int v = 0; v < kPer / kPerVector; ++v) batch[v].raw = __ldg(vectors + v * kPartitionThreads + threadIdx.x);
      }
      if (plain_index) {
#pragma unroll
        for (int v = 0; v < kPer / kPerVector; ++v) {
#pragma unroll
          for (int j = 0; j < kPerVector; ++j) key[v * kPerVector + j] = plain_key(batch[v].values[j]);
        }
      } else {
#pragma unroll
        for (int v = 0; v < kPer / kPerVector; ++v) {
#pragma unroll
          for (int j = 0; j < kPerVector; ++j) {
            const int64_t e =
                s.element_begin + tile_first + (int64_t(v) * kPartitionThreads + threadIdx.x) * kPerVector + j;
            key[v * kPerVector + j] = detail_partition::element_key<T, Policy>(
                p, s, binner, batch[v].values[j], e * p.inner_weight_stride, 0, &add[kCounts ? 0 : v * kPerVector + j]);
          }
        }
      }
      if constexpr (kCounts) {
#pragma unroll
        for (int v = 0; v < kPer / kPerVector; ++v) {
          // Sorted data, one hot bin: a vector of one bin is counted in the cache (a warp of such vectors of one bin
          // adds once), not partitioned.
          bool one_bin = key[v * kPerVector] != kNoEntry;
#pragma unroll
          for (int j = 1; j < kPerVector; ++j) one_bin = one_bin && key[v * kPerVector + j] == key[v * kPerVector];
          // Neighbouring lanes whose vectors are of one same bin (sorted data: a bin spans lanes; one hot bin: the
          // whole warp) add once, from the first lane of their run.
          const uint32_t own_key = key[v * kPerVector];
          const uint32_t one_bin_lanes = __ballot_sync(0xffffffffu, one_bin);
          if (one_bin_lanes != 0u) {
            const uint32_t below_key = __shfl_up_sync(0xffffffffu, own_key, 1);
            const bool continues = lane > 0 && ((one_bin_lanes >> (lane - 1)) & 1u) && below_key == own_key;
            const uint32_t run_heads = __ballot_sync(0xffffffffu, one_bin && !continues);
            if (one_bin && !continues) {
              // The run ends at the next lane that starts a run or has no one-bin vector.
              const uint32_t ends_above = (run_heads | ~one_bin_lanes) & ~((2u << lane) - 1u);
              const uint32_t end = ends_above == 0u ? 32u : uint32_t(__ffs(ends_above) - 1);
              cache.add(p, flat_of(own_key), (end - uint32_t(lane)) * kPerVector);
            }
          }
          if (one_bin) {
#pragma unroll
            for (int j = 0; j < kPerVector; ++j) key[v * kPerVector + j] = kNoEntry;
          }
        }
      }
    } else {
      // Any layout, any tile: where an element lies is computed per element (twice: the offsets are not kept, two
      // 64-bit offsets per element would halve the resident threads).
      T value[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int64_t i = tile_first + int64_t(k) * kPartitionThreads + threadIdx.x;
        if (i < s.elements) {
          int64_t input_offset, weight_offset, output_row;
          detail_partition::locate(p, s.element_begin + i, &input_offset, &weight_offset, &output_row);
          value[k] = input[input_offset];
        }
      }
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        key[k] = kNoEntry;
        const int64_t i = tile_first + int64_t(k) * kPartitionThreads + threadIdx.x;
        if (i < s.elements) {
          int64_t input_offset, weight_offset, output_row;
          detail_partition::locate(p, s.element_begin + i, &input_offset, &weight_offset, &output_row);
          key[k] = detail_partition::element_key<T, Policy>(p, s, binner, value[k], weight_offset, output_row,
                                                            &add[kCounts ? 0 : k]);
        }
      }
    }

    // A warp with nothing left to partition (one hot bin, sorted data: all in the cache) skips ranking and placing.
    bool own_entries = false;
#pragma unroll
    for (int k = 0; k < kPer; ++k) own_entries = own_entries || key[k] != kNoEntry;
    const bool warp_entries = __any_sync(0xffffffffu, own_entries);
    uint32_t rank[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) rank[k] = 0u;  // defined on every path: spares registers (ptxas spilled without)
    if (warp_entries) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        // Places within the tile's run of each chunk, from shared-memory atomics, one per element. Where most of the
        // warp shares lane 0's chunk (one hot chunk: Zipf, a narrow bell) those lanes take theirs with one atomic
        // from lane 0 instead, as same-address atomics of one warp serialise.
        const bool has = key[k] != kNoEntry;
        const uint32_t chunk = key[k] >> 16;  // kNoEntry >> 16 is no chunk
        const uint32_t lead_chunk = __shfl_sync(0xffffffffu, chunk, 0);
        const uint32_t with_lead = __ballot_sync(0xffffffffu, chunk == lead_chunk);
        if (__popc(with_lead) >= kPartitionLeadShare && lead_chunk != (kNoEntry >> 16)) {
          const bool in_lead = chunk == lead_chunk;
          const uint32_t old = detail_partition::shared_fetch_add_if(
              has && (!in_lead || lane == 0), chunk_fill_address + chunk * 4u, in_lead ? __popc(with_lead) : 1u);
          const uint32_t lead_base = __shfl_sync(0xffffffffu, old, 0);
          rank[k] = in_lead ? lead_base + __popc(with_lead & lanes_below) : old;
        } else {
          rank[k] = detail_partition::shared_fetch_add_if(has, chunk_fill_address + chunk * 4u, 1u);
        }
      }
    }
    __syncthreads();  // every element must have its place before the fills are summed
    // Each chunk's run of the tile is written, and added to the block's total of the chunk, by the thread that
    // computes its start (the same thread for a chunk on every tile).
    detail_partition::exclusive_scan<kPartitionThreads>(chunk_fill, chunk_start, s.chunks, warp_sums,
                                                        [&](int c, uint32_t start, uint32_t length) {
                                                          s.runs[int64_t(c) * s.tiles + tile] = (start << 16) | length;
                                                          block_chunk_totals[c] += length;
                                                        });
    __syncthreads();  // the chunks' starts must be complete before elements are placed by them
    // The fills were last read by the scan: zero them for the next tile (its ranks follow the next barrier).
    for (int c = threadIdx.x; c < s.chunks; c += kPartitionThreads) chunk_fill[c] = 0u;
    if (warp_entries) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (key[k] != kNoEntry) {
          const uint32_t place = chunk_start[key[k] >> 16] + rank[k];
          staged[place] = static_cast<uint16_t>(key[k] & 0xffffu);
          if constexpr (!kCounts) staged_values[place] = add[k];
        }
      }
    }
    __syncthreads();  // the staged tile must be complete before it is copied out
    // No barrier after the copy: the next tile places into the staging (and rewrites the starts) only after two more
    // barriers, which every thread reaches after its share of this copy.
    const uint32_t total = chunk_start[s.chunks];
    const int64_t entry_vectors = (int64_t(total) * 2 + 15) / 16;
    uint4* entries_out = reinterpret_cast<uint4*>(s.entries + tile_first);
    for (int64_t v = threadIdx.x; v < entry_vectors; v += kPartitionThreads) {
      entries_out[v] = reinterpret_cast<const uint4*>(staged)[v];
    }
    if constexpr (!kCounts) {
      const int64_t value_vectors = (int64_t(total) * sizeof(Acc) + 15) / 16;
      uint4* values_out = reinterpret_cast<uint4*>(static_cast<Acc*>(s.values) + tile_first);
      for (int64_t v = threadIdx.x; v < value_vectors; v += kPartitionThreads) {
        values_out[v] = reinterpret_cast<const uint4*>(staged_values)[v];
      }
    }
  }
  cache.flush(p);  // the last tile's barriers follow every add into the cache
  // The last tile's barriers also follow every add into the block's chunk totals.
  for (int c = threadIdx.x; c < s.chunks; c += kPartitionThreads) {
    if (block_chunk_totals[c] != 0u) atomicAdd(s.counters->chunk_totals + c, block_chunk_totals[c]);
  }
}

}  // namespace partition_tier
}  // namespace dsmhist
