// Counts packed two to a 32-bit shared-memory word, for tier cluster (tier_owned_range_cluster.cuh): a block holds
// twice the bins of 32-bit counters (116224 on an H100), so a cluster needs half the blocks, and every block of it
// reads the input once less. A count is a 16-bit half of its word, added to by a 32-bit shared atomic whose result
// no thread waits for. No half may reach 2^16 (it would carry into its neighbour), so the block sweeps its words
// every few rounds of its reads: the part of each half at or above kPackedSweepFloor moves to the output. After a
// sweep every half is below the floor, and before the next the block reads at most kPackedSweepValues values, so no
// half can wrap: kPackedSweepFloor - 1 + kPackedSweepValues < 2^16. (An earlier try, NOTES.md section 2, spilled each
// wrap as it happened from the atomic's returned value; every add then waited for it.) Blocks that keep the same
// bins (replicas, each reading a share of the input) sum their words through DSMEM at the flush, so the output gets
// one block's adds per cluster.
// Device code only; no torch header.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/binning.h"
#include "../common/call.h"
#include "traversal.cuh"
#include "tuning.h"

namespace dsmhist {
namespace detail {

// The most values a block reads between two sweeps, and the part of a half a sweep moves out.
constexpr uint32_t kPackedSweepFloor = 16384;
constexpr uint32_t kPackedSweepMask = 0xc000c000u;  // each half's bits at or above kPackedSweepFloor
constexpr int64_t kPackedSweepValues = 65536 - kPackedSweepFloor;
static_assert(kPackedSweepMask == (~(kPackedSweepFloor - 1) & 0xffffu) * 0x10001u, "the mask is the floor's");

// 16-byte vectors of input a thread loads per round: as many as kVectorsInFlight while a round of the block stays
// within the values a sweep allows (1-byte input: fewer).
template <typename T>
__host__ __device__ constexpr int packed_vectors_in_flight() {
  int k = kVectorsInFlight;
  while (k > 1 && int64_t(kBlockThreads) * k * int64_t(16 / sizeof(T)) > kPackedSweepValues) --k;
  return k;
}

// Rounds between two sweeps (a round: every thread of a block loads and counts its packed_vectors_in_flight vectors).
template <typename T>
__host__ __device__ constexpr int packed_rounds_per_sweep() {
  return static_cast<int>(kPackedSweepValues /
                          (int64_t(kBlockThreads) * packed_vectors_in_flight<T>() * int64_t(16 / sizeof(T))));
}

// Words of `block_bins` packed bins: half of them, rounded up to whole 16-byte vectors (the sweep reads vectors).
__host__ __device__ inline int64_t packed_words(int64_t block_bins) { return (block_bins + 7) / 8 * 4; }

// A block's packed bins: local bin l < words in the low half of word l, the others in the high half of word
// l - words (neighbouring bins sit in neighbouring words, so in different banks).
struct PackedBins {
  uint32_t* words;
  uint32_t count;         // words (a multiple of 4)
  uint32_t shared_words;  // `words` in the shared window (32-bit shared addresses: no generic conversion an add)
  uint32_t lane_word;     // the shared address a lane adds zero to (add_or_zero): its own word, banks apart

  PackedBins() = default;
  __device__ PackedBins(uint32_t* block_words, uint32_t word_count)
      : words(block_words),
        count(word_count),
        shared_words(static_cast<uint32_t>(__cvta_generic_to_shared(block_words))),
        lane_word(shared_words + 4u * (threadIdx.x % 32 % word_count)) {}

  // The shared address of local bin `local`'s word, and what adding n to it adds to the word.
  __device__ __forceinline__ uint32_t address(uint32_t local) const {
    return shared_words + 4u * (local >= count ? local - count : local);
  }
  __device__ __forceinline__ uint32_t amount(uint32_t local, uint32_t n) const { return local >= count ? n << 16 : n; }

  // Adds n (at most 2^15) to local bin `local`.
  __device__ __forceinline__ void add(uint32_t local, uint32_t n) const {
    red_shared(address(local), amount(local, n));
  }

  // The same where `take` (else nothing: `local` may be anything).
  __device__ __forceinline__ void add_if(bool take, uint32_t local, uint32_t n) const {
    if (take) add(local, n);
  }

  // The same, with no branch: a lane that does not take adds zero to its lane word. ptxas places a branch around a
  // predicated shared atomic (BSSY, BRA, BSYNC: about as many instructions as the add), and where about half the
  // lanes of a warp add (two ranges) the warp issues the add either way (NOTES.md: "Tier cluster: branchless adds").
  __device__ __forceinline__ void add_or_zero(bool take, uint32_t local, uint32_t n) const {
    red_shared(take ? address(local) : lane_word, take ? amount(local, n) : 0u);
  }

  // Moves the counts at or above kPackedSweepFloor out, calling move_out(local bin, n) for each nonzero part, and
  // leaves the rest. The block's threads take disjoint words; the caller puts a barrier on each side.
  template <typename MoveOut>
  __device__ __forceinline__ void sweep(MoveOut&& move_out) const {
    uint4* vectors = reinterpret_cast<uint4*>(words);
    for (uint32_t v = threadIdx.x; v < count / 4; v += blockDim.x) {
      uint4 q = vectors[v];
      if (((q.x | q.y | q.z | q.w) & kPackedSweepMask) == 0u) continue;
      uint32_t lanes[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t moved = lanes[j] & kPackedSweepMask;
        lanes[j] -= moved;
        move_halves(int64_t(v) * 4 + j, moved, move_out);
      }
      vectors[v] = make_uint4(lanes[0], lanes[1], lanes[2], lanes[3]);
    }
  }

  // Moves every count out (move_out as for sweep), leaving the words as they are. The block's threads take disjoint
  // words; the caller puts a barrier before it.
  template <typename MoveOut>
  __device__ __forceinline__ void drain(MoveOut&& move_out) const {
    for (uint32_t w = threadIdx.x; w < count; w += blockDim.x) move_halves(int64_t(w), words[w], move_out);
  }

 private:
  // move_out(local bin, n) for each nonzero half of `both`, the value of (or the part taken from) word w.
  template <typename MoveOut>
  __device__ __forceinline__ void move_halves(int64_t w, uint32_t both, MoveOut& move_out) const {
    if ((both & 0xffffu) != 0u) move_out(w, both & 0xffffu);
    if ((both >> 16) != 0u) move_out(int64_t(count) + w, both >> 16);
  }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The flush of a range kept by `replicas` blocks (consecutive ranks of the cluster, this block the `replica`th):
// each block takes a share of the range's words, sums each over every replica's copy (its own from shared memory,
// the others' through DSMEM; the halves apart, since a sum of halves may pass 2^16) and adds the sums into output
// bins [base, ...), leaving the words as they were (the next row's walk zeroes them: the last flush needs no
// zeroing). The range's global adds are one block's, whatever the replicas. Every block of the cluster calls it
// together, after a block barrier.
template <typename Policy>
__device__ __forceinline__ void flush_replicas(const cooperative_groups::cluster_group& cluster,
                                               const HistogramParams& p, const PackedBins& bins, int64_t base,
                                               uint32_t replica, uint32_t replicas) {
  // Words a thread takes per step, blockDim.x apart: their loads from one copy are in flight together, and the
  // lanes of a warp add into neighbouring bins (four to a 32-byte sector; a lane per 16-byte vector, a sector a
  // lane, took 3.8x the flush time: NOTES.md).
  constexpr int kWordsPerStep = 8;
  if (replicas > 1) cluster.sync();  // every replica's adds and sweeps have landed before another block reads them
  const uint32_t share = (bins.count + replicas - 1) / replicas;
  const uint32_t end = min(bins.count, (replica + 1) * share);
  const uint32_t first_rank = cluster.block_rank() - replica;
  const auto take = [&](const uint32_t* copy, uint32_t w0, uint32_t (&low)[kWordsPerStep],
                        uint32_t (&high)[kWordsPerStep]) {
    uint32_t both[kWordsPerStep];
#pragma unroll
    for (int j = 0; j < kWordsPerStep; ++j) {
      const uint32_t w = w0 + j * blockDim.x;
      both[j] = w < end ? copy[w] : 0u;
    }
#pragma unroll
    for (int j = 0; j < kWordsPerStep; ++j) {
      low[j] += both[j] & 0xffffu;
      high[j] += both[j] >> 16;
    }
  };
  for (uint32_t w0 = replica * share + threadIdx.x; w0 < end; w0 += kWordsPerStep * blockDim.x) {
    uint32_t low[kWordsPerStep] = {}, high[kWordsPerStep] = {};
    take(bins.words, w0, low, high);
    for (uint32_t k = 1; k < replicas; ++k) {  // the next replica first: blocks spread their remote reads
      take(cluster.map_shared_rank(bins.words, first_rank + (replica + k) % replicas), w0, low, high);
    }
#pragma unroll
    for (int j = 0; j < kWordsPerStep; ++j) {
      const int64_t w = w0 + j * blockDim.x;
      if (low[j] != 0u) Policy::add_global(p, base + w, low[j]);
      if (high[j] != 0u) Policy::add_global(p, base + bins.count + w, high[j]);
    }
  }
  if (replicas > 1) {
    // No block zeroes (or exits from) words another block still reads. Execution order is all this needs: every
    // remote load returned its value before the arrive (the adds above used them), hence no release.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  }
}

// Visits the elements of the row of `span` that this block takes, as for_each_element does (block_first: the
// block's first rank, `count` ranks in all, this thread's rank block_first + threadIdx.x; `count` is at least 32
// vectors' elements), in rounds of at most packed_vectors_in_flight<T>() vectors (or as many elements) a thread,
// calling between_rounds() after each (after the next round's loads are issued, before its visits). Every thread
// of the block takes the same rounds, so between_rounds may hold block barriers, and every lane of a warp calls the
// visitors together (a lane with no element passes `valid` false), so they may vote: visit_vector(values, valid)
// for a 16-byte vector of the row's aligned body or as many elements of a strided row, visit_one(value, valid) for
// an element of the unaligned head and tail (a round of their own) or of a strided row's last round.
template <typename T, typename VisitVector, typename VisitOne, typename BetweenRounds>
__device__ __forceinline__ void for_each_element_in_rounds(const InputDescription& p, const ItemSpan<T>& span,
                                                           int64_t block_first, int64_t count,
                                                           VisitVector&& visit_vector, VisitOne&& visit_one,
                                                           BetweenRounds&& between_rounds) {
  constexpr int kInFlight = packed_vectors_in_flight<T>();
  constexpr int kPerVector = 16 / sizeof(T);
  const T* __restrict__ input = span.input;
  const int64_t n = p.row_length;
  const int64_t rank = block_first + threadIdx.x;
  if (!p.unit_stride()) {
    // A thread's elements of 4- and 8-byte input, kPerVector at a time, visited as one vector where every lane of the
    // warp has them all (all but a row's last round): the visitors' vote is a vector's, not an element's (NOTES.md:
    // strided rows). Narrower input visits element by element (16 elements of 1 byte held at once spilled).
    for (int64_t start = block_first; start < n; start += count * kInFlight * kPerVector) {
      if constexpr (kPerVector > 4) {
#pragma unroll 4
        for (int k = 0; k < kInFlight * kPerVector; ++k) {
          const int64_t i = start + threadIdx.x + k * count;
          visit_one(i < n ? input[i * p.inner_input_stride] : T{}, i < n);
        }
      } else {
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) {
          const int64_t first = start + threadIdx.x + int64_t(k) * kPerVector * count;
          T values[kPerVector];
#pragma unroll
          for (int j = 0; j < kPerVector; ++j) {
            const int64_t i = first + j * count;
            values[j] = i < n ? input[i * p.inner_input_stride] : T{};
          }
          if (__all_sync(0xffffffffu, first + (kPerVector - 1) * count < n)) {
            visit_vector(values, true);
          } else {
#pragma unroll
            for (int j = 0; j < kPerVector; ++j) visit_one(values[j], first + j * count < n);
          }
        }
      }
      between_rounds();
    }
    return;
  }
  const VectorSplit split = split_into_vectors(input, n);
  const int64_t head = split.head, vectors = split.vectors, tail_start = split.tail_start;
  if (head > 0 || tail_start < n) {  // under a vector each: one element a thread at most
    visit_one(rank < head ? input[rank] : T{}, rank < head);
    visit_one(tail_start + rank < n ? input[tail_start + rank] : T{}, tail_start + rank < n);
    between_rounds();
  }
  union Vector {
    uint4 raw;
    T values[kPerVector];
  };
  const uint4* __restrict__ body = reinterpret_cast<const uint4*>(input + head);
  for (int64_t start = block_first; start < vectors; start += count * kInFlight) {
    Vector batch[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int64_t v = start + threadIdx.x + k * count;
      batch[k].raw = v < vectors ? __ldg(body + v) : make_uint4(0u, 0u, 0u, 0u);
    }
    // The previous round's between_rounds, while this round's loads are in flight (a sweep then stalls no read).
    if (start != block_first) between_rounds();
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) visit_vector(batch[k].values, start + threadIdx.x + k * count < vectors);
  }
  if (block_first < vectors) between_rounds();
}

// A value's bin less first_bin, when it is below `owned`, else kNotOwned (dropped, or another block's bin).
constexpr uint32_t kNotOwned = 0xffffffffu;

// By the binner: any input, any mode. A dropped value (-1) or another block's bin wraps to at least `owned`
// (bins < 2^31).
template <typename T>
struct BinnerLocalKeys {
  Binner<T> binner;
  int64_t first_bin;
  uint32_t owned;
  __device__ BinnerLocalKeys(const HistogramParams& p, int64_t first, uint32_t owned_bins)
      : binner(p), first_bin(first), owned(owned_bins) {}
  __device__ __forceinline__ uint32_t operator()(T value) const {
    const uint32_t local = static_cast<uint32_t>(binner(value) - first_bin);
    return local < owned ? local : kNotOwned;
  }
};

// Integer input binned by value: a subtraction and an unsigned compare a value, where the binner's general case
// spent about eleven instructions (SASS; NOTES.md). The value's bin is value_bin's (binning.h): dropped, it is at
// least bins, and a bin below first_bin wraps past `owned` in the unsigned difference, so since first_bin + owned <=
// bins, a key kept is an owned bin.
template <typename T, OutOfRange kOutOfRange>
struct ValueLocalKeys {
  using S = narrow_signed_t<T>;
  using U = std::make_unsigned_t<S>;
  U first_bin;
  uint32_t owned;
  S last_bin;  // bins - 1 (bins < 2^31)
  __device__ ValueLocalKeys(const HistogramParams& p, int64_t first, uint32_t owned_bins)
      : first_bin(static_cast<U>(first)), owned(owned_bins), last_bin(static_cast<S>(p.bins - 1)) {}
  __device__ __forceinline__ uint32_t operator()(T value) const {
    const U local = value_bin<kOutOfRange>(value, last_bin) - first_bin;  // modular
    return local < owned ? static_cast<uint32_t>(local) : kNotOwned;
  }
};

// Input binned over a range in float (Binner::narrow_range_applies): the Binner's bin in 32 bits with no branch
// (Binner::narrow_range_bin), then a subtraction and an unsigned compare as by value. A dropped value (0xffffffff)
// less first_bin stays past `owned`, since first_bin + owned <= bins <= 2^24.
template <typename T, OutOfRange kOutOfRange>
struct RangeLocalKeys {
  Binner<T> binner;
  uint32_t first_bin;
  uint32_t owned;
  __device__ RangeLocalKeys(const HistogramParams& p, int64_t first, uint32_t owned_bins)
      : binner(p), first_bin(static_cast<uint32_t>(first)), owned(owned_bins) {}
  __device__ __forceinline__ uint32_t operator()(T value) const {
    const uint32_t local = binner.template narrow_range_bin<kOutOfRange>(value) - first_bin;  // modular
    return local < owned ? local : kNotOwned;
  }
};

// Counts the values of bins [first_bin, first_bin + owned) of the cluster's items (first_item, first_item +
// item_stride, ...; every block of the cluster walks them all) into `bins`: this block is replica `replica` of the
// `replicas` blocks that keep these bins, and reads that share of each item's elements. It flushes (flush_replicas)
// before an item of another output row (or every item, with flushing.flush_each_item) and at the end, and zeroes its
// words before the next item. `bins` must be zeroed, with a barrier after, before the call.
//
// A warp whose lanes all add to one bin (one hot bin; sorted runs) adds once: lanes adding to one address would
// otherwise wait in turn, since an add of two sizes (1 or 2^16, by half) is no increment the hardware merges.
// LocalKeys: BinnerLocalKeys (any call), ValueLocalKeys (integer input binned by value) or RangeLocalKeys (a range
// computed in float).
template <typename T, typename Policy, typename LocalKeys>
__device__ __forceinline__ void count_packed(const cooperative_groups::cluster_group& cluster, const HistogramParams& p,
                                             const Flushing& flushing, const PackedBins& bins, int64_t first_bin,
                                             uint32_t owned, uint32_t replica, uint32_t replicas, int64_t first_item,
                                             int64_t item_stride) {
  constexpr int kRoundsPerSweep = packed_rounds_per_sweep<T>();
  static_assert(kRoundsPerSweep >= 1, "a round stays within the values a sweep allows");
  constexpr int kPerVector = 16 / sizeof(T);
  constexpr uint32_t kNone = kNotOwned;  // a key counted nowhere: no element, dropped, or another block's bin
  const LocalKeys local_key(p, first_bin, owned);
  int64_t current_row = -1;  // the row the walk adds into: where a sweep moves counts
  int rounds = 0;
  bool emptied = false;  // the words were flushed and not yet zeroed
  // The key of every lane's value, then the select (a lane with no element holds a zero value): no branch a value.
  const auto key = [&](T value, bool valid) {
    const uint32_t k = local_key(value);
    return valid ? k : kNone;
  };
  // Every lane of the warp together, each with its N keys: a warp whose keys are all one (one hot bin, a sorted run)
  // adds once, from lane 0; else every lane adds its keys, one branchless add each (add_or_zero).
  const auto add_warp = [&](const uint32_t* keys, auto key_count) {
    constexpr int kKeys = decltype(key_count)::value;
    const uint32_t lead = __shfl_sync(0xffffffffu, keys[0], 0);
    bool with_lead = true;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) with_lead = with_lead && keys[j] == lead;
    if (__all_sync(0xffffffffu, with_lead)) {
      bins.add_if(threadIdx.x % 32 == 0 && lead != kNone, lead, 32u * kKeys);
    } else {
#pragma unroll
      for (int j = 0; j < kKeys; ++j) bins.add_or_zero(keys[j] != kNone, keys[j], 1u);
    }
  };
  const auto visit_vector = [&](const T(&values)[kPerVector], bool valid) {
    uint32_t keys[kPerVector];
#pragma unroll
    for (int j = 0; j < kPerVector; ++j) keys[j] = key(values[j], valid);
    add_warp(keys, std::integral_constant<int, kPerVector>{});
  };
  const auto visit_one = [&](T value, bool valid) {
    const uint32_t keys[1] = {key(value, valid)};
    add_warp(keys, std::integral_constant<int, 1>{});
  };
  const auto between_rounds = [&] {
    if (++rounds < kRoundsPerSweep) return;
    rounds = 0;
    __syncthreads();  // every add since the last sweep has landed before its word is read
    const int64_t base = current_row * p.bins + first_bin;
    bins.sweep([&](int64_t local, uint32_t n) { Policy::add_global(p, base + local, n); });
    __syncthreads();  // every word is swept before the next round adds to it
  };
  for_each_item_span<T>(
      p, flushing, first_item, item_stride,
      [&](const ItemSpan<T>& span) {
        if (emptied) {  // a flush read the words: zero them for this row (the last flush leaves them)
          zero_bins(bins.words, bins.count);
          __syncthreads();  // no thread may count into a word another thread has not zeroed yet
          emptied = false;
        }
        current_row = span.output_row;
        for_each_element_in_rounds<T>(p, span, (span.segment * replicas + replica) * blockDim.x,
                                      p.segments_per_row * replicas * blockDim.x, visit_vector, visit_one,
                                      between_rounds);
      },
      [] { __syncthreads(); },
      [&](int64_t row) {
        flush_replicas<Policy>(cluster, p, bins, row * p.bins + first_bin, replica, replicas);
        emptied = true;
        rounds = 0;  // the words are zeroed before the next round adds to them
      });
}
#endif

}  // namespace detail
}  // namespace dsmhist
