// What registration.cpp needs from the backends: the CUDA planner behind dsmhist._plan. The op implementations
// register themselves with TORCH_LIBRARY_IMPL in their own files (cpu/, cuda/).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace dsmhist {

#ifdef DSMHIST_WITH_CUDA
// [tier (a Tier value, common/tiers.h), cluster_size, shared_bytes_per_block, threads_per_block, bins_per_block]
// for a CUDA device, then what the launch of a call of `rows` rows of `row_length` elements uses (one histogram, or
// one per row when `batched`): [threads, cluster_size, grid, shared_bytes], all 0 when rows is 0 (no call given).
std::vector<int64_t> plan_cuda(int64_t bins, int64_t device_index, at::ScalarType input_dtype,
                               std::optional<at::ScalarType> weight_dtype, int64_t rows, int64_t row_length,
                               bool batched);
#endif

}  // namespace dsmhist
