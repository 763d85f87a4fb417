// A call's parameters from its checked arguments (histogram_args.h) and its tensors, shared by the CPU and CUDA
// implementations of the ops.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/call.h"
#include "histogram_args.h"

namespace dsmhist {

// What a call reads, from input (and weight; batched: input's last dim is a row). `input` / `weight` are replaced by
// contiguous copies only when their row dims do not collapse to kMaxDims dims (the copies must outlive the launch:
// the caller keeps them).
InputDescription describe_input(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                                bool batched);

// Params for one call: one histogram of all elements, or (batched) one per index of input's leading dims, into
// `output` (replaced, or added to when `accumulate`). `input` / `weight` are replaced by contiguous copies only when
// their row dims do not collapse to kMaxDims dims (the copies must outlive the launch: the caller keeps them).
HistogramParams make_params(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                            int64_t bins, at::Tensor& output, bool batched, bool accumulate);

// Params for dsmhist._bin_indices: input's elements binned into `indices` (int64, contiguous, input's shape). The
// element at weight offset o (HistogramParams::layout) writes indices[o], so any input strides map onto it.
HistogramParams make_bin_index_params(const HistogramArgs& args, at::Tensor& input, at::Tensor& indices, int64_t bins);

// Params for dsmhist._finite_range_keys: the range pass over all of input's elements into `keys` (two int64).
RangeParams make_range_params(const HistogramArgs& args, at::Tensor& input, at::Tensor& keys);

}  // namespace dsmhist
