// Argument checking and parameter building shared by the CPU and CUDA implementations of the ops.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

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

// Checks every argument of histogram() / batched_histogram() (`op` names the op in messages; `batched`: one histogram
// per row of input's last dim); throws c10::ValueError naming the bad argument and the allowed values.
HistogramArgs check_histogram_args(const char* op, const at::Tensor& input, int64_t bins, std::optional<double> min,
                                   std::optional<double> max, const std::optional<at::Tensor>& weight,
                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype,
                                   bool batched = false);

// The output of histogram() ([bins]) or, when `batched`, batched_histogram() ([..., bins]) on input's device. A
// shape whose size overflows, or an allocation that fails, throws an error naming bins and the bytes asked for
// (c10::OutOfMemoryError when the allocator ran out of memory).
at::Tensor allocate_output(const char* op, const HistogramArgs& args, const at::Tensor& input, int64_t bins,
                           bool batched);

// Checks histogram_add_'s arguments: hist 1-D, on input's device, int32/int64 for counts or float32/float64 for
// weight sums (the sums accumulate in hist's dtype), and a fixed range for floating input.
HistogramArgs check_histogram_add_args(const at::Tensor& hist, const at::Tensor& input, std::optional<double> min,
                                       std::optional<double> max, const std::optional<at::Tensor>& weight,
                                       c10::string_view out_of_range);

// Checks dsmhist._finite_range_keys's input: floating (only floating input takes its range from the data).
HistogramArgs check_finite_range_args(const char* op, const at::Tensor& input);

// Checks dsmhist._histogram_with_range_keys's arguments: those of histogram() / batched_histogram() without min and
// max, for floating input, and range_keys an int64 tensor [2] on input's device holding the keys of
// _finite_range_keys (merged across ranks).
HistogramArgs check_histogram_with_range_keys_args(const char* op, const at::Tensor& input, int64_t bins,
                                                   const at::Tensor& range_keys,
                                                   const std::optional<at::Tensor>& weight,
                                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype,
                                                   bool batched);

// Maps a torch dtype to an input type; throws naming `argument` when the dtype is not supported.
InputType input_type_of(at::ScalarType dtype, const char* argument, const char* op = "dsmhist.histogram");

// The accumulator a histogram needs: counts; weight sums in the output's precision; or, under
// torch.use_deterministic_algorithms(True), the deterministic fixed-point sum (CUDA; the CPU path is always
// deterministic).
AccKind acc_kind_for(std::optional<at::ScalarType> weight_dtype, at::ScalarType output_dtype);

// Params for one call: one histogram of all elements, or (batched) one per index of input's leading dims, into
// `output` (replaced, or added to when `accumulate`). `input` / `weight` are replaced by contiguous copies only when
// their row dims do not collapse to kMaxDims dims (the copies must outlive the launch: the caller keeps them).
HistogramParams make_params(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                            int64_t bins, at::Tensor& output, bool batched, bool accumulate);

// batched_histogram's output shape: input's leading dims, then bins. Throws naming input when it is 0-d.
std::vector<int64_t> batched_output_shape(const char* op, const at::Tensor& input, int64_t bins);

// Runs `add_into(h)` on hist itself when it is contiguous, else on a contiguous copy that is then copied back.
template <typename AddInto>
void add_into_contiguous(at::Tensor& hist, AddInto&& add_into) {
  if (hist.is_contiguous()) {
    add_into(hist);
    return;
  }
  at::Tensor dense = hist.contiguous();
  add_into(dense);
  hist.copy_(dense);
}

// The tier a thread forces (tests, benchmarks): Tier::kAuto for the planner's choice. Thread-local.
struct TierOverride {
  Tier tier = Tier::kAuto;
  int cluster_size = 0;
  int max_cluster_size = 0;  // > 0: plan as on a device whose largest launchable cluster has this many blocks
};
TierOverride& tier_override();

const char* tier_name(Tier tier);

}  // namespace dsmhist
