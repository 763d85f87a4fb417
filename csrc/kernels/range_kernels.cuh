// The kernels without bins: the range pass (the finite min and max of floating input with no min/max) and each
// element's bin (the backward of the weighted ops). They share the traversal and the Binner with the tiers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tuning.h"
#include "traversal.cuh"

namespace dsmhist {

// Range pass for floating input with no min/max: the min and max of the finite values, as two keys kept with
// atomicMax (slot 0 holds ~key(min)); p.keys points at the zeroed slots.
template <typename T>
__global__ void __launch_bounds__(kRangeThreads) finite_range_kernel(const RangeParams p) {
  using C = compute_t<T>;
  double lo = 0.0, hi = 0.0;
  bool any = false;
  detail::for_each_input_element<T>(p.input, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x, [&](T value, int64_t) {
    const C x = to_compute(value);
    if (is_finite_value(x)) {
      const double d = static_cast<double>(x);
      lo = any ? fmin(lo, d) : d;
      hi = any ? fmax(hi, d) : d;
      any = true;
    }
  });
  uint64_t keys[2];
  encode_data_range(any, lo, hi, keys);
  uint64_t min_slot = keys[0], max_slot = keys[1];
  for (int offset = 16; offset > 0; offset /= 2) {
    const uint64_t other_min = __shfl_xor_sync(0xffffffffu, min_slot, offset);
    const uint64_t other_max = __shfl_xor_sync(0xffffffffu, max_slot, offset);
    min_slot = other_min > min_slot ? other_min : min_slot;
    max_slot = other_max > max_slot ? other_max : max_slot;
  }
  if ((threadIdx.x & 31) == 0 && max_slot != 0) {
    atomicMax(p.keys + 0, static_cast<unsigned long long>(min_slot));
    atomicMax(p.keys + 1, static_cast<unsigned long long>(max_slot));
  }
}

// Each element's bin, -1 where it is dropped (the backward of the weighted ops: grad_weight[i] = grad[bin(x_i)]).
// p.output is an int64 tensor of input's shape that the elements address by their weight offsets; a data-derived
// range is read from p.device_range, as the histogram kernels read it, so both bin every value alike.
template <typename T>
__global__ void __launch_bounds__(kRangeThreads) bin_index_kernel(const HistogramParams p) {
  const Binner<T> binner(p);
  int64_t* indices = static_cast<int64_t*>(p.output);
  detail::for_each_input_element<T>(p, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
                                    [&](T value, int64_t offset) { indices[offset] = binner(value); });
}

}  // namespace dsmhist
