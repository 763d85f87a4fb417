// The traversal every kernel shares: work items (segment s of row r; HistogramParams::segments_per_row segments a
// row), the elements of an item, and a block's shared-memory bins (zeroing and flushing). Device code only; no
// torch header.
//
// A block (or, in the cluster tiers, a cluster) takes items blockIdx.x, blockIdx.x + gridDim.x, ...; its shared-memory
// bins are flushed only when the next item adds into another output row, so the 1-D ops flush once per block. The
// segments of a row interleave (segment s reads the row's 16-byte vectors s, s + S, ... in thread-sized strides), so
// all blocks sweep the input together: on the H100 that read 2^30 uint8 ~10% faster than one contiguous chunk per
// block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/binning.h"
#include "../common/call.h"
#include "kernels.h"
#include "tuning.h"

namespace dsmhist {
namespace detail {

// One work item: segment `segment` of input row `row`, whose first element is at `input` (weights from
// `weight_base`); the row's length and inner strides are the call's (InputDescription). `output_row`: the histogram
// the row adds into (for_each_item sets it; the input row elsewhere).
template <typename T>
struct ItemSpan {
  const T* input;
  int64_t weight_base;
  int64_t segment;
  int64_t row;
  int64_t output_row;
};

template <typename T>
__device__ __forceinline__ ItemSpan<T> item_span(const InputDescription& in, int64_t item) {
  const int64_t row = item / in.segments_per_row;
  int64_t row_input = 0, row_weight = 0;
  if (in.layout.ndim > 0) in.layout.offsets(row, &row_input, &row_weight);
  return ItemSpan<T>{static_cast<const T*>(in.input) + row_input, row_weight, item - row * in.segments_per_row, row,
                     row};
}

// A unit-stride row of n elements from `input`, as 16-byte vectors: `head` elements before its first vector boundary,
// then `vectors` whole vectors, then the tail from `tail_start` (head and tail under a vector each).
struct VectorSplit {
  int64_t head, vectors, tail_start;
};

template <typename T>
__device__ __forceinline__ VectorSplit split_into_vectors(const T* input, int64_t n) {
  constexpr int kPerVector = 16 / sizeof(T);
  const uintptr_t address = reinterpret_cast<uintptr_t>(input);
  int64_t head = static_cast<int64_t>(((16 - address % 16) % 16) / sizeof(T));
  if (head > n) head = n;
  const int64_t vectors = (n - head) / kPerVector;
  return VectorSplit{head, vectors, head + vectors * kPerVector};
}

// The float32 weights of one input vector, loaded beside it (for_each_element with kWithWeights).
template <int kCount>
struct WeightVector {
  float values[kCount];
};

// kCount float32 weights from `weights`; `aligned`: its address is a multiple of the widest load that fits them
// (16 bytes, or 8 for two), else they are read one by one.
template <int kCount>
__device__ __forceinline__ WeightVector<kCount> load_weight_vector(const float* __restrict__ weights, bool aligned) {
  WeightVector<kCount> out;
  if constexpr (kCount % 4 == 0) {
    if (aligned) {
#pragma unroll
      for (int i = 0; i < kCount / 4; ++i) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(weights) + i);
        out.values[4 * i] = f.x, out.values[4 * i + 1] = f.y, out.values[4 * i + 2] = f.z, out.values[4 * i + 3] = f.w;
      }
      return out;
    }
  } else if constexpr (kCount == 2) {
    if (aligned) {
      const float2 f = __ldg(reinterpret_cast<const float2*>(weights));
      out.values[0] = f.x, out.values[1] = f.y;
      return out;
    }
  }
#pragma unroll
  for (int i = 0; i < kCount; ++i) out.values[i] = __ldg(weights + i);
  return out;
}

// Calls visit(value, weight_offset) for every element of the row of `span` that thread `rank` of `count` threads
// owns. Unit-stride rows are read with 16-byte loads (an unaligned head and the tail element by element), a batch of
// kInFlight at a time; with `prefetch`, L2 is asked for the next batch while this one is binned.
// kWithWeights (float32 weights only): visit(value, weight_offset, weight), each batch's weights loaded with its
// values, so no weight load waits behind the adds of the values before it (a plain load may not pass a shared-memory
// atomic); at most 16 weights a thread in flight, for the registers.
template <typename T, int kInFlight = kVectorsInFlight, bool kWithWeights = false, typename Visit>
__device__ __forceinline__ void for_each_element(const InputDescription& p, const ItemSpan<T>& span, int64_t rank,
                                                 int64_t count, bool prefetch, Visit&& visit) {
  const T* __restrict__ input = span.input;
  const float* __restrict__ weights = static_cast<const float*>(p.weight);
  const int64_t n = p.row_length;
  const auto visit_one = [&](T value, int64_t weight_offset) {
    if constexpr (kWithWeights) {
      visit(value, weight_offset, __ldg(weights + weight_offset));
    } else {
      visit(value, weight_offset);
    }
  };
  if (!p.unit_stride()) {
    for (int64_t i = rank; i < n; i += count) {
      visit_one(input[i * p.inner_input_stride], span.weight_base + i * p.inner_weight_stride);
    }
    return;
  }
  constexpr int kPerVector = 16 / sizeof(T);
  constexpr int kBatch = kWithWeights && kInFlight > 16 / kPerVector ? 16 / kPerVector : kInFlight;
  const VectorSplit split = split_into_vectors(input, n);
  const int64_t head = split.head, vectors = split.vectors, tail_start = split.tail_start;
  const int64_t w = span.weight_base;

  // The head and the tail together are under 2 * kPerVector elements: a few threads take one each.
  for (int64_t i = rank; i < head; i += count) visit_one(input[i], w + i);
  for (int64_t i = tail_start + rank; i < n; i += count) visit_one(input[i], w + i);

  union Vector {
    uint4 raw;
    T values[kPerVector];
  };
  const uint4* __restrict__ body = reinterpret_cast<const uint4*>(input + head);
  const float* __restrict__ body_weights = kWithWeights ? weights + w + head : nullptr;
  constexpr uintptr_t kWeightLoad = kPerVector * 4 >= 16 ? 16 : kPerVector * 4;
  const bool weights_aligned = kWithWeights && reinterpret_cast<uintptr_t>(body_weights) % kWeightLoad == 0;
  for (int64_t base = rank; base < vectors; base += count * kBatch) {
    Vector batch[kBatch];
    WeightVector<kPerVector> batch_weights[kWithWeights ? kBatch : 1];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t v = base + k * count;
      if (v < vectors) {
        batch[k].raw = __ldg(body + v);
        if constexpr (kWithWeights) {
          batch_weights[k] = load_weight_vector<kPerVector>(body_weights + v * kPerVector, weights_aligned);
        }
      }
    }
    if (prefetch) {  // while this batch is binned, L2 fetches the next: its loads then wait on L2, not on HBM
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t v = base + (kBatch + k) * count;
        if (v < vectors) asm volatile("prefetch.global.L2 [%0];" ::"l"(body + v));
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t v = base + k * count;
      if (v < vectors) {
#pragma unroll
        for (int j = 0; j < kPerVector; ++j) {
          if constexpr (kWithWeights) {
            visit(batch[k].values[j], w + head + v * kPerVector + j, batch_weights[k].values[j]);
          } else {
            visit(batch[k].values[j], w + head + v * kPerVector + j);
          }
        }
      }
    }
  }
}

template <typename Acc>
__device__ __forceinline__ Acc* shared_bins() {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  return reinterpret_cast<Acc*>(shared_storage);
}

// `*shared_address += n` with no returned value (red.shared: no thread waits for the atomic), on a 32-bit shared
// address.
__device__ __forceinline__ void red_shared(uint32_t shared_address, uint32_t n) {
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(shared_address), "r"(n) : "memory");
}

template <typename Acc>
__device__ __forceinline__ void zero_bins(Acc* bins, int64_t count) {
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) bins[i] = Acc(0);
}

// Moves a block's bins [0, count) into output bins [first, first + count) of output row `row`, and zeroes them for
// the next item; with `copies`, bin i is the sum of bins[i], bins[count + i], ... (one copy after another). Each
// thread touches only its own indices, so flush and re-zero need no barrier between them. Stores the bins instead of
// adding them where the launch stores rows (Flushing).
template <typename Policy>
__device__ __forceinline__ void flush_bins(const HistogramParams& p, const Flushing& flushing,
                                           typename Policy::Acc* bins, int64_t row, int64_t first, int64_t count,
                                           int copies = 1) {
  using Acc = typename Policy::Acc;
  const int64_t base = row * p.bins + first;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    Acc value = bins[i];
    bins[i] = Acc(0);
    for (int c = 1; c < copies; ++c) {
      value = Policy::combine(value, bins[c * count + i]);
      bins[c * count + i] = Acc(0);
    }
    if constexpr (Policy::kMayStore) {
      if (flushing.store_rows) {
        Policy::store(p, base + i, value);
        continue;
      }
    }
    if (value != Acc(0)) Policy::add_global(p, base + i, value);
  }
}

// Whether a traversal that bins each value as it reads it prefetches (tuning.h, kPrefetchWhenBinningByRange): when it
// bins by range. (Tier shared's byte tallies bin at the flush, not per value: that walk does not.)
__device__ __forceinline__ bool prefetches_next_batch(const HistogramParams& p) {
  return kPrefetchWhenBinningByRange && p.mode == BinMode::kRange;
}

// Walks a worker's items (a worker: a block, or a cluster): walk(span) for each, with span.output_row set; calls
// flush(row) before moving to an item of another output row (or to any other item, with flushing.flush_each_item) and
// once at the end, with the barriers that flushing needs around it.
template <typename T, typename Walk, typename Barrier, typename Flush>
__device__ __forceinline__ void for_each_item_span(const HistogramParams& p, const Flushing& flushing,
                                                   int64_t first_item, int64_t item_stride, Walk&& walk,
                                                   Barrier&& barrier, Flush&& flush) {
  const int64_t items = p.rows * p.segments_per_row;
  int64_t current_row = -1;
  for (int64_t item = first_item; item < items; item += item_stride) {
    ItemSpan<T> span = item_span<T>(p, item);
    span.output_row = p.output_row(span.row);
    if (current_row >= 0 && (span.output_row != current_row || flushing.flush_each_item)) {
      barrier();  // every add of the previous row must land before its bins are flushed
      flush(current_row);
      barrier();  // the bins must be re-zeroed everywhere before the next row adds into them
    }
    current_row = span.output_row;
    walk(span);
  }
  if (current_row >= 0) {
    barrier();  // every add must land before the final flush
    flush(current_row);
  }
}

// Visits the elements of a worker's items (for_each_item_span; this thread is `worker_rank` of the worker's
// `worker_threads`): visit(span, value, weight_offset), and the float32 weight after them with kWithWeights.
// kInFlight: 16-byte vectors a thread loads at once (for_each_element). kBinsEachValue: the visit bins each value as
// it reads it, so the walk prefetches where prefetches_next_batch says (tier shared's byte tallies bin at the flush).
template <typename T, int kInFlight = kVectorsInFlight, bool kWithWeights = false, bool kBinsEachValue = true,
          typename Visit, typename Barrier, typename Flush>
__device__ __forceinline__ void for_each_item(const HistogramParams& p, const Flushing& flushing, int64_t first_item,
                                              int64_t item_stride, int64_t worker_rank, int64_t worker_threads,
                                              Visit&& visit, Barrier&& barrier, Flush&& flush) {
  for_each_item_span<T>(
      p, flushing, first_item, item_stride,
      [&](const ItemSpan<T>& span) {
        for_each_element<T, kInFlight, kWithWeights>(
            p, span, span.segment * worker_threads + worker_rank, p.segments_per_row * worker_threads,
            kBinsEachValue && prefetches_next_batch(p),
            [&](T value, int64_t weight_offset, auto... weight) { visit(span, value, weight_offset, weight...); });
      },
      barrier, flush);
}

// Visits every element of a worker's items, for the kernels without bins (nothing to flush): visit(value,
// weight_offset).
template <typename T, typename Visit>
__device__ __forceinline__ void for_each_input_element(const InputDescription& in, int64_t first_item,
                                                       int64_t item_stride, int64_t worker_rank, int64_t worker_threads,
                                                       Visit&& visit) {
  const int64_t items = in.rows * in.segments_per_row;
  for (int64_t item = first_item; item < items; item += item_stride) {
    const ItemSpan<T> span = item_span<T>(in, item);
    for_each_element(in, span, span.segment * worker_threads + worker_rank, in.segments_per_row * worker_threads,
                     /*prefetch=*/false, visit);
  }
}

}  // namespace detail
}  // namespace dsmhist
