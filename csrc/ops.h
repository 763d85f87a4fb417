// The implementations behind the schemas registered in registration.cpp.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace dsmhist {

at::Tensor histogram_cpu(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                         const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                         std::optional<at::ScalarType> dtype);

void histogram_add_cpu(at::Tensor& hist, const at::Tensor& input, std::optional<double> min,
                              std::optional<double> max, const std::optional<at::Tensor>& weight,
                              c10::string_view out_of_range);

at::Tensor batched_histogram_cpu(const at::Tensor& input, int64_t bins, std::optional<double> min,
                                 std::optional<double> max, const std::optional<at::Tensor>& weight,
                                 c10::string_view out_of_range, std::optional<at::ScalarType> dtype);

#ifdef DSMHIST_WITH_CUDA
// [tier, cluster_size, shared_bytes_per_block, threads_per_block, bins_per_block] for a CUDA device.
std::vector<int64_t> plan_cuda(int64_t bins, int64_t device_index, at::ScalarType input_dtype,
                               std::optional<at::ScalarType> weight_dtype);
#endif

}  // namespace dsmhist
