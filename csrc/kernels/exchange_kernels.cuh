// The pieces of tier "exchange" (tier_exchange.cuh): its shared-memory layout, the work a cluster takes round by
// round, and one round's steps (load a tile, rank it by owner, place it, count a group from another block's staging).
// Device code needs sm_90 (clusters); the layout is host code too, for the planner. No torch header.
//
// A cluster of C blocks owns the bins interleaved: bin b belongs to block b mod C, at its local index b / C. A key
// (a bin below 2^20: C <= 16 blocks of at most 65536 bins) and its rank among its warp's values of the same owner
// share one 32-bit word.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/binning.h"
#include "../common/call.h"
#include "tuning.h"

namespace dsmhist {
namespace detail {
namespace exchange {

constexpr int kWarps = kExchangeThreads / 32;
constexpr int kMaxBlocks = kMaxClusterSize;
constexpr int kRowStride = kMaxBlocks + 1;  // one warp's counters; +1 so a column read hits 32 banks
constexpr int kSpare = kMaxBlocks;          // the column a value not counted takes its rank on
constexpr uint32_t kNoKey = 0xffffffffu;
constexpr int kKeyBits = 20;
constexpr uint32_t kKeyMask = (uint32_t(1) << kKeyBits) - 1;
constexpr int64_t kMaxBlockBins = 65536;  // a local bin travels as 16 bits

// Values a thread takes per round for an element of `element_bytes`.
DSMHIST_HD constexpr int values_per_thread(int element_bytes) {
  return kExchangeTileBytes / element_bytes < kExchangeMaxValuesPerThread ? kExchangeTileBytes / element_bytes
                                                                          : kExchangeMaxValuesPerThread;
}

// A round's tile for an element of `element_bytes`, and the shared memory of everything but the bins: two rounds of
// staging (16-bit local bins, one spare vector for the values not counted), the rank counters of two rounds, each
// warp's group bases, the group table of two rounds, the Work and the prefetch cursor.
struct Layout {
  int per_thread;
  int per_vector;  // elements a 16-byte vector holds
  int64_t tile;
  int64_t staging_entries;
  int64_t counters_offset, warp_base_offset, groups_offset, work_offset, cursor_offset, bins_offset;

  DSMHIST_HD constexpr explicit Layout(int element_bytes)
      : per_thread(values_per_thread(element_bytes)),
        per_vector(16 / element_bytes),
        tile(int64_t(kExchangeThreads) * per_thread),
        staging_entries(tile + 8),
        counters_offset(2 * staging_entries * 2),
        warp_base_offset(counters_offset + 2 * kWarps * kRowStride * 4),
        groups_offset(warp_base_offset + kWarps * kRowStride * 4),
        work_offset(groups_offset + 2 * 2 * kMaxBlocks * 4),
        cursor_offset(work_offset + 64),
        bins_offset(cursor_offset + 32) {}
  DSMHIST_HD constexpr int64_t shared_bytes(int64_t block_bins) const { return bins_offset + block_bins * 4; }
};

// Bins and cluster size -> owner and local index, with no division: local = key / C as a multiply-high, exact for
// keys below 2^27 and any C from 1 to 16 (magic = ceil(2^31 / C)).
struct Owners {
  uint32_t blocks;
  uint32_t magic;
  __device__ explicit Owners(uint32_t cluster_blocks)
      : blocks(cluster_blocks), magic((0x80000000u + cluster_blocks - 1) / cluster_blocks) {}
  __device__ __forceinline__ uint32_t local(uint32_t key) const { return __umulhi(key << 1, magic); }
  __device__ __forceinline__ uint32_t owner(uint32_t key) const { return key - local(key) * blocks; }
};

// The same for a cluster size known at compile time (a power of two): a mask and a shift, and no register.
template <uint32_t kBlocks>
struct FixedOwners {
  static_assert(kBlocks != 0 && (kBlocks & (kBlocks - 1)) == 0, "a power of two");
  static constexpr uint32_t blocks = kBlocks;
  __device__ explicit FixedOwners(uint32_t /*cluster_blocks*/) {}
  __device__ __forceinline__ uint32_t local(uint32_t key) const { return key / kBlocks; }
  __device__ __forceinline__ uint32_t owner(uint32_t key) const { return key % kBlocks; }
};

// The values of one thread for one round, as loaded (16-byte vectors where the tile allows), and which are elements.
template <typename T>
struct Tile {
  static constexpr int kPerThread = values_per_thread(int(sizeof(T)));
  static constexpr int kPerVector = 16 / int(sizeof(T));
  static constexpr int kVectors = kPerThread / kPerVector;
  static constexpr int64_t kTile = int64_t(kExchangeThreads) * kPerThread;
  static_assert(kPerThread % kPerVector == 0, "a thread's values are whole vectors");
  static_assert(32 * kPerThread < (1 << (32 - kKeyBits)), "a rank fits beside its key");
  union {
    uint4 vectors[kVectors];
    T values[kPerThread];
  } lanes;
  uint32_t valid;  // bit k: values[k] is an element

  // Position of value k in its tile: vector (k / kPerVector) of the thread, vectors a block-width apart.
  __device__ static int64_t position(int k) {
    return (int64_t(k / kPerVector) * kExchangeThreads + threadIdx.x) * kPerVector + k % kPerVector;
  }
};

// How a launch walks its input: output histograms ("groups": each batched row, or all rows of a 1-D call), each cut
// into tiles, dealt round by round to every block of every cluster; a pass is at most `rounds_per_pass` rounds of one
// group, so no 32-bit shared count can wrap before the pass flushes. The kernel keeps it in shared memory (its
// registers are all taken) and reads it once a round.
// (The host shapes the grid from the same tile count: tier_exchange.cuh, shape.)
struct Work {
  int64_t groups, rows_per_group, tiles_per_row, tiles_per_group, rounds_per_group, rounds_per_pass;

  DSMHIST_HD Work(const HistogramParams& p, const Layout& layout, int64_t cluster_blocks, int64_t slots) {
    const bool batched = p.output_row_stride != 0;
    groups = batched ? p.rows : 1;
    rows_per_group = batched ? 1 : p.rows;
    // A dense row may start mid-vector: its tiles are counted from the vector boundary before it.
    const int64_t lead = p.inner_input_stride == 1 ? layout.per_vector - 1 : 0;
    tiles_per_row = (p.row_length + lead + layout.tile - 1) / layout.tile;
    tiles_per_group = rows_per_group * tiles_per_row;
    rounds_per_group = (tiles_per_group + slots - 1) / slots;
    rounds_per_pass = int64_t(UINT32_MAX) / (cluster_blocks * layout.tile);
  }
};
static_assert(sizeof(Work) <= 64, "Layout reserves 64 bytes for the Work");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// Loads tile `tile_index` of group `group` (past the group's tiles: no elements). kDense: the rows' inner stride is
// known to be 1.
template <typename T, bool kDense>
__device__ __forceinline__ void load_tile(const HistogramParams& p, const Work& w, int64_t group, int64_t tile_index,
                                          Tile<T>& t) {
  using Shape = Tile<T>;
  t.valid = 0;
  if (tile_index >= w.tiles_per_group) return;
  // A group of one row (a 1-D call, a batched row) needs no division, which every thread would repeat every round.
  const int64_t row_in_group = w.rows_per_group == 1 ? 0 : tile_index / w.tiles_per_row;
  const int64_t first = (tile_index - row_in_group * w.tiles_per_row) * Shape::kTile;
  int64_t row_input = 0, row_weight = 0;
  if (p.layout.ndim > 0) p.layout.offsets(group * w.rows_per_group + row_in_group, &row_input, &row_weight);
  const T* __restrict__ input = static_cast<const T*>(p.input) + row_input;
  const int64_t n = p.row_length;
  const int64_t stride = kDense ? 1 : p.inner_input_stride;
  // Dense rows are read from the vector boundary at or before their start: element i sits at position i + lead.
  const int64_t lead = stride == 1 ? int64_t(reinterpret_cast<uintptr_t>(input) % 16 / sizeof(T)) : 0;
  if (stride == 1 && first >= lead && first + Shape::kTile <= n + lead) {
    const uint4* __restrict__ vectors = reinterpret_cast<const uint4*>(input - lead + first);
#pragma unroll
    for (int v = 0; v < Shape::kVectors; ++v) t.lanes.vectors[v] = __ldcs(vectors + v * kExchangeThreads + threadIdx.x);
    t.valid = (uint32_t(1) << Shape::kPerThread) - 1;
    return;
  }
#pragma unroll
  for (int k = 0; k < Shape::kPerThread; ++k) {
    const int64_t i = first + Shape::position(k) - lead;
    t.lanes.values[k] = T{};
    if (i >= 0 && i < n) {
      t.lanes.values[k] = input[i * stride];
      t.valid |= uint32_t(1) << k;
    }
  }
}

// Where thread 0's L2 prefetches of a pass go (tuning.h, kExchangePrefetchRounds): the next tile's first byte, the
// step between this block's tiles, and the end of the row's whole 16-byte vectors (0: the pass prefetches nothing).
// It lives in shared memory: no register of the round is left to hold it.
struct PrefetchCursor {
  uintptr_t next, step, end;
};
static_assert(sizeof(PrefetchCursor) <= 32, "Layout reserves 32 bytes for the prefetch cursor");

// A pass's first prefetched round: rounds 0 and 1 are loaded before its loop, and round r prefetches round
// r + kFirstPrefetchedRound.
constexpr int64_t kFirstPrefetchedRound = 2 + kExchangePrefetchRounds;

// Aims the cursor at this block's tile of round kFirstPrefetchedRound of the pass starting at round `pass_start` of
// group `group` (its tile of round r: (pass_start + r) * gridDim.x + blockIdx.x), stepping a round at a time. Only a
// group of one row, with at most one row dim, is prefetched: its tiles are one contiguous span, and its start needs
// no division (the registers of the general row walk would spill the round's).
template <typename T>
__device__ __forceinline__ void aim_prefetch(const HistogramParams& p, const Work& w, int64_t group, int64_t pass_start,
                                             volatile PrefetchCursor* c) {
  constexpr uintptr_t kTileBytes = uintptr_t(Tile<T>::kTile) * sizeof(T);
  const int64_t tile_index = (pass_start + kFirstPrefetchedRound) * gridDim.x + blockIdx.x;
  const bool prefetched = w.rows_per_group == 1 && p.layout.ndim <= 1;
  const int64_t row_input = p.layout.ndim == 1 ? group * p.layout.input_strides[0] : 0;
  const uintptr_t row = reinterpret_cast<uintptr_t>(static_cast<const T*>(p.input) + row_input);
  // Tile t starts at the vector boundary at or before the row's start (load_tile's lead), plus t tiles.
  c->next = (row & ~uintptr_t(15)) + uintptr_t(tile_index) * kTileBytes;
  c->step = uintptr_t(gridDim.x) * kTileBytes;
  c->end = prefetched ? (row + uintptr_t(p.row_length) * sizeof(T)) & ~uintptr_t(15) : 0;
}

// One bulk L2 prefetch of the cursor's tile, cut at the row's last whole vector (a hint: it waits for nothing, and
// reads no byte outside the row's vectors), then the cursor moves on a round.
template <typename T>
__device__ __forceinline__ void prefetch_next(volatile PrefetchCursor* c) {
  constexpr uintptr_t kTileBytes = uintptr_t(Tile<T>::kTile) * sizeof(T);
  const uintptr_t next = c->next, end = c->end;
  if (next < end) {
    const uint32_t bytes = static_cast<uint32_t>(end - next < kTileBytes ? end - next : kTileBytes);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(next), "r"(bytes) : "memory");
  }
  c->next = next + c->step;
}

// A value's key (its bin) or kNoKey when it is not counted, by the binner: any input (kByValue false), or integer
// input binned by value, where the range arithmetic is dead code and its registers free.
template <typename T, bool kByValue>
struct BinnerKeys {
  Binner<T> binner;
  __device__ explicit BinnerKeys(const HistogramParams& p) : binner(p) {
    if constexpr (kByValue) binner.mode = BinMode::kIndex;
  }
  __device__ __forceinline__ uint32_t operator()(T value) const {
    const int64_t bin = binner(value);
    return bin >= 0 ? static_cast<uint32_t>(bin) : kNoKey;
  }
};

// The same for integer input binned by value, with out_of_range known at compile time and no 64-bit bin: the
// binner's rule as value_bin (binning.h) has it, dropped one unsigned compare, clamped a clamp.
template <typename T, OutOfRange kOutOfRange = OutOfRange::kIgnore>
struct ValueKeys {
  uint32_t bins;  // below 2^20 (kKeyBits)
  __device__ explicit ValueKeys(const HistogramParams& p) : bins(static_cast<uint32_t>(p.bins)) {}
  __device__ __forceinline__ uint32_t operator()(T value) const {
    const auto bin = value_bin<kOutOfRange>(value, static_cast<narrow_signed_t<T>>(bins) - 1);
    if constexpr (kOutOfRange == OutOfRange::kClamp) return static_cast<uint32_t>(bin);
    return bin < bins ? static_cast<uint32_t>(bin) : kNoKey;
  }
};

// A warp's current run of one bin (kNoKey: none): its count is added to the owner's bins when the run ends.
struct WarpRun {
  uint32_t key = kNoKey;
  uint32_t count = 0;

  template <typename OwnersT>
  __device__ __forceinline__ void flush(const OwnersT& owners, uint32_t* bins,
                                        const cooperative_groups::cluster_group& cluster) {
    if (key != kNoKey && threadIdx.x % 32 == 0) {
      atomicAdd(cluster.map_shared_rank(bins, static_cast<int>(owners.owner(key))) + owners.local(key), count);
    }
    key = kNoKey;
    count = 0;
  }
};

// Bins each value and takes its rank on its warp's counter for its owner: ranked[k] = key | rank << kKeyBits, or
// kNoKey for a value not counted. A warp step whose 32 values are one bin extends the warp's run instead, so one hot
// bin and sorted runs skip the exchange and add once per run; a step of no counted value skips it too. Bit k of
// `exchanged` (the same in every lane of the warp): step k goes through the exchange, and ranked[k] is set.
template <typename T, typename Keys, typename OwnersT>
__device__ __forceinline__ void rank_tile(const Tile<T>& t, const Keys& keys, const OwnersT& owners,
                                          uint32_t* warp_counters, uint32_t* bins,
                                          const cooperative_groups::cluster_group& cluster,
                                          uint32_t (&ranked)[Tile<T>::kPerThread], uint32_t& exchanged, WarpRun& run) {
  exchanged = 0;
#pragma unroll
  for (int k = 0; k < Tile<T>::kPerThread; ++k) {
    // No branch: a lane that is not an element holds T{}, binned and then dropped (or-ed with all ones: kNoKey).
    const uint32_t key = keys(t.lanes.values[k]) | (((t.valid >> k) & 1u) - 1u);
    const uint32_t lead = __shfl_sync(0xffffffffu, key, 0);
    if (__all_sync(0xffffffffu, key == lead)) {  // warp-uniform
      if (key != kNoKey) {
        if (key != run.key) {
          run.flush(owners, bins, cluster);
          run.key = key;
        }
        run.count += 32;
      }
      continue;
    }
    exchanged |= uint32_t(1) << k;
    // No branch: a value not counted takes its rank on the spare column.
    const uint32_t rank = atomicAdd(&warp_counters[key != kNoKey ? owners.owner(key) : kSpare], 1u);
    ranked[k] = key != kNoKey ? key | (rank << kKeyBits) : kNoKey;
  }
}

// Warp d (d < C) turns owner d's counters of every warp into the warps' bases in the staging and the group's start
// and length (the groups are laid out by owner, each warp's values of an owner together).
__device__ __forceinline__ void scan_groups(const uint32_t* counters, uint32_t* warp_base, uint32_t* groups, int owner,
                                            int lane) {
  const uint32_t mine = counters[lane * kRowStride + owner];
  uint32_t inclusive = mine;
#pragma unroll
  for (int step = 1; step < 32; step *= 2) {
    const uint32_t below = __shfl_up_sync(0xffffffffu, inclusive, step);
    if (lane >= step) inclusive += below;
  }
  uint32_t lower_owners = 0;  // this warp's values of owners below `owner`: summed over the warps, the group's start
#pragma unroll
  for (int e = 0; e < kMaxBlocks; ++e) lower_owners += e < owner ? counters[lane * kRowStride + e] : 0u;
  const uint32_t start = __reduce_add_sync(0xffffffffu, lower_owners);
  warp_base[lane * kRowStride + owner] = start + inclusive - mine;
  if (lane == 31) {
    groups[owner] = start;
    groups[kMaxBlocks + owner] = inclusive;
  }
}

// Writes the local bin of each ranked value of the exchanged steps to its slot of the staging (no branch within a
// step: a value not counted goes to the spare slot at `tile`; the branch on a step is the same for the whole warp).
template <int kPerThread, typename OwnersT>
__device__ __forceinline__ void place_tile(const uint32_t (&ranked)[kPerThread], uint32_t exchanged,
                                           const OwnersT& owners, const uint32_t* warp_base, uint16_t* staging,
                                           int64_t tile) {
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    if (((exchanged >> k) & 1u) == 0) continue;
    const uint32_t key = ranked[k] & kKeyMask;
    const uint32_t slot = warp_base[owners.owner(key)] + (ranked[k] >> kKeyBits);
    staging[ranked[k] != kNoKey ? slot : static_cast<uint32_t>(tile)] = static_cast<uint16_t>(owners.local(key));
  }
}

// Counts this block's group of one source block's staging (read through DSMEM) into `bins`: 16-byte vectors of 8
// entries, split over the `warps` warps reading that source; a vector of one bin adds once.
__device__ __forceinline__ void count_group(const uint16_t* source_staging, uint32_t start, uint32_t length,
                                            uint32_t* bins, int source_warp, int warps, int lane) {
  const uint32_t end = start + length;
  const uint4* vectors = reinterpret_cast<const uint4*>(source_staging);
  for (uint32_t first = start / 8 + source_warp * 32; first * 8 < end; first += warps * 32) {
    const uint32_t vi = first + lane;
    if (vi * 8 >= end) continue;
    const uint4 q = vectors[vi];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    if (vi * 8 >= start && vi * 8 + 8 <= end) {  // all eight entries are the group's
      if (q.x == q.y && q.x == q.z && q.x == q.w && (q.x & 0xffffu) == (q.x >> 16)) {
        atomicAdd(&bins[q.x & 0xffffu], 8u);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) atomicAdd(&bins[(words[j / 2] >> (16 * (j % 2))) & 0xffffu], 1u);
      }
    } else {  // the group's first or last vector
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t e = vi * 8 + j;
        if (e >= start && e < end) atomicAdd(&bins[(words[j / 2] >> (16 * (j % 2))) & 0xffffu], 1u);
      }
    }
  }
}

__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_fence() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

#endif

}  // namespace exchange
}  // namespace detail
}  // namespace dsmhist
