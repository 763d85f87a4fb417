// Argument checking and parameter building shared by the CPU and CUDA implementations of the ops.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "kernels/params.h"

namespace dsmhist {

// The validated meaning of one call's arguments.
struct HistogramArgs {
  InputType input_type = InputType::kInt64;
  BinMode mode = BinMode::kIndex;
  bool clamp = false;
  bool data_range = false;  // floating input without min/max: the range comes from the data
  double lo = 0.0, hi = 0.0;
  WeightType weight_type = WeightType::kNone;
  AccKind acc = AccKind::kCount;
  OutputType output_type = OutputType::kInt64;
  at::ScalarType output_dtype = at::kLong;
};

// Checks every argument of histogram(); throws c10::ValueError naming the bad argument and the allowed values.
HistogramArgs check_histogram_args(const at::Tensor& input, int64_t bins, std::optional<double> min,
                                   std::optional<double> max, const std::optional<at::Tensor>& weight,
                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype);

// Maps a torch dtype to an input type; throws naming `argument` when the dtype is not supported.
InputType input_type_of(at::ScalarType dtype, const char* argument);

// The accumulator a weighted or unweighted histogram needs.
AccKind acc_kind_for(std::optional<at::ScalarType> weight_dtype);

// Params for one call. `input` / `weight` are replaced by contiguous copies only when their layout does not collapse
// to kMaxDims dims (the copies must outlive the launch: the caller keeps them).
HistogramParams make_params(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                            int64_t bins, at::Tensor& output);

// The tier a thread forces (tests, benchmarks): Tier::kAuto for the planner's choice. Thread-local.
struct TierOverride {
  Tier tier = Tier::kAuto;
  int cluster_size = 0;
};
TierOverride& tier_override();

const char* tier_name(Tier tier);

}  // namespace dsmhist
