// A block's cache of hot bins in shared memory: kGlobalCacheSlots slots of (tag, sum of the policy's accumulator),
// used by the global tier for every element (counts and weighted sums) and by the partition tier for runs of one bin
// (counts). A bin goes to slot flat_bin mod slots; the first bin to land in an empty slot claims it (atomicCAS) for
// the rest of the kernel, and its adds stay in shared memory until the block flushes them; any other bin of that slot
// goes to the output. With kClaimOnRepeat a bin claims an empty slot only on its second add in the block (a slot
// remembers the last bin seen there, by atomicExch, so of the threads that meet a new bin at once one goes to the
// output and the rest claim): a bin seen once, as most of a Zipf tail is, leaves the slot to a bin that repeats.
// Tags are flat output bins, so one cache serves every row of a batched call. The owner turns it
// off when a flat bin does not fit a 32-bit tag, or (counts) when one block could count 2^32 values (a 32-bit slot
// could wrap). Sums need no such bound: float sums are added in the output's precision either way, the fixed-point
// sums wrap modulo 2^64 in shared memory exactly as in the output, and a maximum cannot overflow.
// A hit is a shared-memory atomic the thread waits for, where a miss's global reduction is posted: data that hits on
// every add, as sorted data does, pays for the cache (weighted sums 1.3-1.7x slower sorted, 7-13x faster Zipf on
// the H100; benchmarks/NOTES.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "policies.cuh"
#include "tuning.h"

namespace dsmhist {

// Shared memory of a cache whose sums take `acc_bytes` each (the host sizes the launch with it).
constexpr int64_t hot_bin_cache_bytes(int64_t acc_bytes, bool claim_on_repeat = false) {
  return int64_t(kGlobalCacheSlots) * ((claim_on_repeat ? 8 : 4) + acc_bytes);
}

template <typename Policy, bool kClaimOnRepeat = false>
struct HotBinCache {
  using Acc = typename Policy::Acc;
  static constexpr uint32_t kEmpty = 0xffffffffu;
  static constexpr int64_t kSharedBytes = hot_bin_cache_bytes(sizeof(Acc), kClaimOnRepeat);
  // Tags first, then (kClaimOnRepeat) the last bin seen per slot, 4 bytes a slot each, then the sums: 2048 x 4 bytes
  // keeps the sums 8-byte aligned.
  uint32_t* tags;
  uint32_t* seen;
  Acc* sums;
  bool enabled;

  // `storage`: kSharedBytes of shared memory (8-byte aligned), untouched when the cache is off. Every thread of the
  // block constructs it; the block syncs before use.
  __device__ HotBinCache(void* storage, bool on)
      : tags(static_cast<uint32_t*>(storage)),
        seen(static_cast<uint32_t*>(storage) + kGlobalCacheSlots),
        sums(reinterpret_cast<Acc*>(static_cast<uint32_t*>(storage) + (kClaimOnRepeat ? 2 : 1) * kGlobalCacheSlots)),
        enabled(on) {
    if (!on) return;
    for (int i = threadIdx.x; i < kGlobalCacheSlots; i += blockDim.x) {
      tags[i] = kEmpty;
      if (kClaimOnRepeat) seen[i] = kEmpty;
      sums[i] = Acc(0);
    }
  }

  __device__ void add(const HistogramParams& p, int64_t flat_bin, Acc value) {
    if (enabled) {
      const uint32_t tag = static_cast<uint32_t>(flat_bin);
      const uint32_t slot = tag & (kGlobalCacheSlots - 1);
      uint32_t owner = *static_cast<volatile uint32_t*>(tags + slot);
      if (owner == kEmpty) {
        if (kClaimOnRepeat && atomicExch(seen + slot, tag) != tag) {  // first add of this bin at this slot
          Policy::add_global(p, flat_bin, value);
          return;
        }
        owner = atomicCAS(tags + slot, kEmpty, tag);
        if (owner == kEmpty) owner = tag;
      }
      if (owner == tag) {
        Policy::add_shared(sums + slot, value);
        return;
      }
    }
    Policy::add_global(p, flat_bin, value);
  }

  // Every thread of the block calls it, after a sync that follows the block's last add. A slot whose sum is the
  // policy's zero adds nothing (a count or sum of 0, a maximum of no exponent).
  __device__ void flush(const HistogramParams& p) {
    if (!enabled) return;
    for (int i = threadIdx.x; i < kGlobalCacheSlots; i += blockDim.x) {
      if (tags[i] != kEmpty && sums[i] != Acc(0)) Policy::add_global(p, tags[i], sums[i]);
    }
  }
};

}  // namespace dsmhist
