// A block's cache of hot bins (counts only), used by the global tier for every element and by the partition tier for
// runs of one bin: kGlobalCacheSlots slots of (tag, count) in shared memory. A bin goes to slot flat_bin mod slots;
// the first bin to land in an empty slot claims it (atomicCAS) for the rest of the kernel, and its counts stay in
// shared memory until the block flushes them; any other bin of that slot goes to the output. Tags are flat output
// bins, so one cache serves every row of a batched call. The owner turns it off when a flat bin does not fit a 32-bit
// tag, or when one block could count 2^32 values (a 32-bit slot could wrap).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "policies.cuh"
#include "tuning.h"

namespace dsmhist {

struct HotBinCache {
  static constexpr uint32_t kEmpty = 0xffffffffu;
  static constexpr int64_t kSharedBytes = int64_t(kGlobalCacheSlots) * 8;
  uint32_t* tags;
  uint32_t* counts;
  bool enabled;

  // `storage`: kSharedBytes of shared memory, untouched when the cache is off. Every thread of the block constructs
  // it; the block syncs before use.
  __device__ HotBinCache(uint32_t* storage, bool on) : tags(storage), counts(storage + kGlobalCacheSlots), enabled(on) {
    if (!on) return;
    for (int i = threadIdx.x; i < kGlobalCacheSlots; i += blockDim.x) {
      tags[i] = kEmpty;
      counts[i] = 0u;
    }
  }

  __device__ void add(const HistogramParams& p, int64_t flat_bin, uint32_t count) {
    if (enabled) {
      const uint32_t tag = static_cast<uint32_t>(flat_bin);
      const uint32_t slot = tag & (kGlobalCacheSlots - 1);
      uint32_t owner = *static_cast<volatile uint32_t*>(tags + slot);
      if (owner == kEmpty) {
        owner = atomicCAS(tags + slot, kEmpty, tag);
        if (owner == kEmpty) owner = tag;
      }
      if (owner == tag) {
        atomicAdd(counts + slot, count);
        return;
      }
    }
    detail::CountPolicy::add_global(p, flat_bin, count);
  }

  // Every thread of the block calls it, after a sync that follows the block's last add.
  __device__ void flush(const HistogramParams& p) {
    if (!enabled) return;
    for (int i = threadIdx.x; i < kGlobalCacheSlots; i += blockDim.x) {
      if (tags[i] != kEmpty && counts[i] != 0u) detail::CountPolicy::add_global(p, tags[i], counts[i]);
    }
  }
};

}  // namespace dsmhist
