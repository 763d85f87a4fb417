// Argument checking shared by the CPU and CUDA implementations of the ops (and, through dsmhist::_check_args, the
// fake kernels); building a call's params from the checked arguments is call_params.h.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "common/binning.h"
#include "common/call.h"
#include "common/dtypes.h"
#include "common/tiers.h"

namespace dsmhist {

// What the argument checks need to know of a tensor: its dtype, shape and device, and nothing of its data. The real
// ops take these facts from their tensors; the fake (meta) kernels pass them through dsmhist::_check_args, so both
// run the same checks (sizes may be symbolic under torch.compile: comparing them records a guard).
struct TensorFacts {
  at::ScalarType dtype;
  c10::SymIntArrayRef shape;
  c10::Device device;
};
inline TensorFacts facts_of(const at::Tensor& t) { return TensorFacts{t.scalar_type(), t.sym_sizes(), t.device()}; }
inline std::optional<TensorFacts> facts_of(const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return facts_of(*t);
}
// The facts of an optional tensor that a fake kernel passes to a check op as three optional parts (all or none):
// none without a dtype. `check_op` and `name` name the check op and the argument in the error.
inline std::optional<TensorFacts> facts_of(const char* check_op, const char* name, std::optional<at::ScalarType> dtype,
                                           at::OptionalSymIntArrayRef shape, std::optional<c10::Device> device) {
  if (!dtype.has_value()) return std::nullopt;
  TORCH_CHECK_VALUE(shape.has_value() && device.has_value(), check_op, ": ", name,
                    " needs its dtype, shape and device");
  return TensorFacts{*dtype, *shape, *device};
}

// A dtype as Python spells it ("torch.float32"), for messages: users pass torch.float32, not c10's "Float".
std::string torch_dtype_name(at::ScalarType dtype);

// An allocation of `shape` x `options` that names `op`, `what` is allocated and its size when it fails (the
// allocator's OutOfMemoryError stays one), instead of the allocator's bare message.
at::Tensor allocate_named(const char* op, const std::string& what, c10::IntArrayRef shape,
                          const at::TensorOptions& options);

// The validated meaning of one call's arguments.
struct HistogramArgs {
  InputType input_type = InputType::kInt64;
  BinMode mode = BinMode::kIndex;
  OutOfRange out_of_range = OutOfRange::kIgnore;
  bool data_range = false;  // floating input without min/max: the range comes from the data
  double lo = 0.0, hi = 0.0;
  WeightType weight_type = WeightType::kNone;
  AccKind acc = AccKind::kCount;
  OutputType output_type = OutputType::kInt64;
  at::ScalarType output_dtype = at::kLong;
  // histogram_add_ / histogram(out=) without weight into a float32 / float64 target: the counts are made as int64
  // (output_dtype) and then added into it (exact: a call's count of a bin fits the float's significand).
  bool counts_into_float = false;
};

// Checks every argument of histogram() / batched_histogram() (`op` names the op in messages; `batched`: one histogram
// per row of input's last dim); throws c10::ValueError naming the bad argument and the allowed values. The output
// dtype it settles (args.output_dtype) is the one rule for it: the fake kernels ask for it too.
HistogramArgs check_histogram_args(const char* op, const TensorFacts& input, int64_t bins, std::optional<double> min,
                                   std::optional<double> max, const std::optional<TensorFacts>& weight,
                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype,
                                   bool batched = false);

// The output of histogram() ([bins]) or, when `batched`, batched_histogram() ([..., bins]) on input's device. A
// shape whose size overflows, or an allocation that fails, throws an error naming bins and the bytes asked for
// (c10::OutOfMemoryError when the allocator ran out of memory).
at::Tensor allocate_output(const char* op, const HistogramArgs& args, const at::Tensor& input, int64_t bins,
                           bool batched);

// Checks the arguments of a histogram written into an existing tensor `target`: histogram_add_ (accumulate, no
// dtype) and histogram(out=) (dsmhist._histogram_out). target is a non-empty 1-D tensor on input's device whose
// length is the bin count and whose dtype the counts (int64, int32) or weight sums (float32, float64) accumulate in;
// `dtype`, when given, must be target's. Floating input needs min and max when accumulating (a range taken from each
// call's data would give different bins from call to call); replacing target takes the range from the data as
// histogram() does.
HistogramArgs check_histogram_into_args(const char* op, const TensorFacts& target, const TensorFacts& input,
                                        std::optional<double> min, std::optional<double> max,
                                        const std::optional<TensorFacts>& weight, c10::string_view out_of_range,
                                        std::optional<at::ScalarType> dtype, bool accumulate);

// The name the messages give the tensor written into: "hist" for histogram_add_, "out" for histogram(out=).
const char* into_target_name(const char* op);

// What only real tensors can be checked for (memory, not metadata): target must not overlap itself, input or weight.
void check_into_memory(const char* op, const char* name, const at::Tensor& target, const at::Tensor& input,
                       const std::optional<at::Tensor>& weight);

// Checks dsmhist._finite_range_keys's input: floating (only floating input takes its range from the data).
HistogramArgs check_finite_range_args(const char* op, const TensorFacts& input);

// Checks dsmhist._histogram_with_range_keys's arguments: those of histogram() / batched_histogram() without min and
// max, for floating input, and range_keys an int64 tensor [2] on input's device holding the keys of
// _finite_range_keys (merged across ranks).
HistogramArgs check_histogram_with_range_keys_args(const char* op, const TensorFacts& input, int64_t bins,
                                                   const TensorFacts& range_keys,
                                                   const std::optional<TensorFacts>& weight,
                                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype,
                                                   bool batched);

// Checks dsmhist._bin_indices's arguments (the binning arguments of histogram(); range_keys, when given, as for
// _histogram_with_range_keys). The op gives each element's bin, -1 where the value is dropped: the backward of the
// weighted ops (grad_weight[i] = grad_out[bin(input[i])]).
HistogramArgs check_bin_indices_args(const char* op, const TensorFacts& input, int64_t bins, std::optional<double> min,
                                     std::optional<double> max, c10::string_view out_of_range,
                                     const std::optional<TensorFacts>& range_keys);

// Maps a torch dtype to an input type; throws naming `argument` when the dtype is not supported.
InputType input_type_of(at::ScalarType dtype, const char* argument, const char* op = "torch_dsmhist.histogram");

// The accumulator a histogram needs: counts; weight sums in the output's precision; or, under
// torch.use_deterministic_algorithms(True), the deterministic fixed-point sum (CUDA; the CPU path is always
// deterministic).
AccKind acc_kind_for(std::optional<at::ScalarType> weight_dtype, at::ScalarType output_dtype);

// The output dtype's name as Python spells it ("torch.int64", ...; torch_dtype_name): what the fake kernels get.
std::string output_dtype_name(const HistogramArgs& args);

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

}  // namespace dsmhist
