// Histogram kernels: a traversal of the input shared by every tier, one "bin storage" policy per tier, and thin
// __global__ entries. Included by the per-dtype translation units, which instantiate the kernels and hand their
// addresses to the host dispatch (dispatch.cu). No torch header: raw pointers and HistogramParams only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"
#include "params.h"

namespace dsmhist {
namespace detail {

// How many 16-byte vectors a thread loads before it bins any of them, so several loads are in flight.
constexpr int kVectorsInFlight = 4;

// Calls visit(value, weight_offset) for every element that thread `rank` of `count` threads owns.
// Contiguous inputs are read with 16-byte loads (an unaligned head and the tail element by element);
// other layouts go through StridedLayout::offsets.
template <typename T, typename Visit>
__device__ __forceinline__ void for_each_element(const HistogramParams& p, int64_t rank, int64_t count,
                                                 Visit&& visit) {
  const T* __restrict__ input = static_cast<const T*>(p.input);
  const int64_t n = p.numel;
  if (!p.contiguous) {
    for (int64_t i = rank; i < n; i += count) {
      int64_t in_off, w_off;
      p.layout.offsets(i, &in_off, &w_off);
      visit(input[in_off], w_off);
    }
    return;
  }
  constexpr int kPerVector = 16 / sizeof(T);
  const uintptr_t address = reinterpret_cast<uintptr_t>(input);
  int64_t head = static_cast<int64_t>(((16 - address % 16) % 16) / sizeof(T));
  if (head > n) head = n;
  const int64_t vectors = (n - head) / kPerVector;
  const int64_t tail_start = head + vectors * kPerVector;

  // The head and the tail together are under 2 * kPerVector elements: a few threads take one each.
  for (int64_t i = rank; i < head; i += count) visit(input[i], i);
  for (int64_t i = tail_start + rank; i < n; i += count) visit(input[i], i);

  union Vector {
    uint4 raw;
    T values[kPerVector];
  };
  const uint4* __restrict__ body = reinterpret_cast<const uint4*>(input + head);
  for (int64_t base = rank; base < vectors; base += count * kVectorsInFlight) {
    Vector batch[kVectorsInFlight];
#pragma unroll
    for (int k = 0; k < kVectorsInFlight; ++k) {
      const int64_t v = base + k * count;
      if (v < vectors) batch[k].raw = __ldg(body + v);
    }
#pragma unroll
    for (int k = 0; k < kVectorsInFlight; ++k) {
      const int64_t v = base + k * count;
      if (v < vectors) {
#pragma unroll
        for (int j = 0; j < kPerVector; ++j) visit(batch[k].values[j], head + v * kPerVector + j);
      }
    }
  }
}

// 32-bit counts in shared memory are widened when flushed to int64 (or added as uint32 to int32) global counts.
template <typename Acc>
__device__ __forceinline__ void add_to_output(const HistogramParams& p, int64_t bin, Acc value) {
  if constexpr (std::is_same<Acc, uint32_t>::value) {
    if (p.output_type == OutputType::kInt64) {
      atomicAdd(static_cast<unsigned long long*>(p.output) + bin, static_cast<unsigned long long>(value));
    } else {
      atomicAdd(static_cast<unsigned int*>(p.output) + bin, value);
    }
  } else {
    atomicAdd(static_cast<Acc*>(p.output) + bin, value);
  }
}

template <typename Acc>
__device__ __forceinline__ Acc element_weight(const HistogramParams& p, int64_t weight_offset) {
  if constexpr (std::is_same<Acc, uint32_t>::value) {
    return 1u;
  } else {
    return load_weight<Acc>(p.weight, p.weight_type, weight_offset);
  }
}

template <typename Acc>
__device__ __forceinline__ Acc* shared_bins() {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  return reinterpret_cast<Acc*>(shared_storage);
}

template <typename Acc>
__device__ __forceinline__ void zero_bins(Acc* bins, int64_t count) {
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) bins[i] = Acc(0);
}

// Adds a block's private bins [0, count) into output bins [first, first + count), skipping empty ones.
template <typename Acc>
__device__ __forceinline__ void flush_bins(const HistogramParams& p, const Acc* bins, int64_t first, int64_t count) {
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const Acc value = bins[i];
    if (value != Acc(0)) add_to_output(p, first + i, value);
  }
}

}  // namespace detail

// Tier 1: every block keeps all bins in its own shared memory; a persistent grid, one flush per block.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kBlockThreads) shared_tier_kernel(const HistogramParams p) {
  Acc* bins = detail::shared_bins<Acc>();
  detail::zero_bins(bins, p.bins);
  __syncthreads();  // no thread may count into a bin another thread has not zeroed yet
  const Binner<T> binner(p);
  detail::for_each_element<T>(p, int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x,
                              [&](T value, int64_t weight_offset) {
                                const int64_t bin = binner(value);
                                if (bin >= 0) atomicAdd(bins + bin, detail::element_weight<Acc>(p, weight_offset));
                              });
  __syncthreads();  // the flush reads bins that other threads of the block may still be adding to
  detail::flush_bins(p, bins, 0, p.bins);
}

// Tier 2: the bins are split across the blocks of a cluster (p.bins_per_block each, the last block fewer) and
// every thread adds into the owning block's shared memory through distributed shared memory.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kBlockThreads) cluster_tier_kernel(const HistogramParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  Acc* bins = detail::shared_bins<Acc>();
  // Cluster capacity is far below 2^32 bins, so the owner arithmetic runs in 32 bits.
  const uint32_t per_block = static_cast<uint32_t>(p.bins_per_block);
  const int64_t first = int64_t(cluster.block_rank()) * per_block;
  const int64_t owned = first >= p.bins ? 0 : (p.bins - first < per_block ? p.bins - first : per_block);
  detail::zero_bins(bins, owned);
  cluster.sync();  // other blocks add into these bins remotely: they must all be zeroed first
  const Binner<T> binner(p);
  detail::for_each_element<T>(p, int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x,
                              [&](T value, int64_t weight_offset) {
                                const int64_t bin = binner(value);
                                if (bin >= 0) {
                                  const uint32_t b = static_cast<uint32_t>(bin);
                                  const uint32_t owner = b / per_block;
                                  Acc* owner_bins = cluster.map_shared_rank(bins, owner);
                                  atomicAdd(owner_bins + (b - owner * per_block),
                                            detail::element_weight<Acc>(p, weight_offset));
                                }
                              });
  cluster.sync();  // every block's remote adds into our bins must land before we flush them (and before exit)
  detail::flush_bins(p, bins, first, owned);
#endif
  // Without sm_90 code this body is empty; the host launches this tier only after checking that the loaded
  // binary was compiled for sm_90 or newer (see cluster_code_available in dispatch.cu).
}

// Tier 3: atomics straight into the (zeroed) output.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kGlobalThreads) global_tier_kernel(const HistogramParams p) {
  const Binner<T> binner(p);
  detail::for_each_element<T>(p, int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x,
                              [&](T value, int64_t weight_offset) {
                                const int64_t bin = binner(value);
                                if (bin >= 0) detail::add_to_output(p, bin, detail::element_weight<Acc>(p, weight_offset));
                              });
}

// Range pass for floating input with no min/max: the min and max of the finite values, as two keys kept with
// atomicMax (slot 0 holds ~key(min)); p.device_range points at the zeroed slots.
template <typename T>
__global__ void __launch_bounds__(kRangeThreads) finite_range_kernel(const HistogramParams p) {
  using C = compute_t<T>;
  double lo = 0.0, hi = 0.0;
  bool any = false;
  detail::for_each_element<T>(p, int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x,
                              [&](T value, int64_t) {
                                const C x = to_compute(value);
                                if (is_finite_value(x)) {
                                  const double d = static_cast<double>(x);
                                  lo = any ? fmin(lo, d) : d;
                                  hi = any ? fmax(hi, d) : d;
                                  any = true;
                                }
                              });
  uint64_t min_slot = any ? ~encode_range_key(lo) : 0;
  uint64_t max_slot = any ? encode_range_key(hi) : 0;
  for (int offset = 16; offset > 0; offset /= 2) {
    const uint64_t other_min = __shfl_xor_sync(0xffffffffu, min_slot, offset);
    const uint64_t other_max = __shfl_xor_sync(0xffffffffu, max_slot, offset);
    min_slot = other_min > min_slot ? other_min : min_slot;
    max_slot = other_max > max_slot ? other_max : max_slot;
  }
  if ((threadIdx.x & 31) == 0 && max_slot != 0) {
    unsigned long long* slots = const_cast<unsigned long long*>(p.device_range);
    atomicMax(slots + 0, static_cast<unsigned long long>(min_slot));
    atomicMax(slots + 1, static_cast<unsigned long long>(max_slot));
  }
}

// The kernels of one input type and accumulator, for the host dispatch.
template <typename T, typename Acc>
KernelSet make_kernel_set() {
  KernelSet set;
  set.shared = reinterpret_cast<const void*>(&shared_tier_kernel<T, Acc>);
  set.cluster = reinterpret_cast<const void*>(&cluster_tier_kernel<T, Acc>);
  set.global = reinterpret_cast<const void*>(&global_tier_kernel<T, Acc>);
  if constexpr (std::is_integral<T>::value) {
    set.finite_range = nullptr;  // integer input without a range bins by value: no range pass
  } else {
    set.finite_range = reinterpret_cast<const void*>(&finite_range_kernel<T>);
  }
  return set;
}

template <typename T>
KernelSet kernel_set_for(AccKind acc) {
  switch (acc) {
    case AccKind::kFloat:
      return make_kernel_set<T, float>();
    case AccKind::kDouble:
      return make_kernel_set<T, double>();
    default:
      return make_kernel_set<T, uint32_t>();
  }
}

}  // namespace dsmhist
