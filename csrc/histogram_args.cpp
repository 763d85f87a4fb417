#include "histogram_args.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace dsmhist {

namespace {

// "uint8, int8, ...": the input dtypes of the dtype table (common/dtypes.h), for messages.
std::string input_dtype_names() {
  std::string names;
  for (const InputType type : kInputTypes) names += (names.empty() ? "" : ", ") + std::string(input_type_name(type));
  return names;
}

// Both ends finite in the precision the bins are computed in. (max - min) may overflow it, and min < max may round
// to min == max in it: the Binner handles both (common/binning.h).
template <typename C>
void check_range_in(const char* op, double min, double max) {
  const C lo = static_cast<C>(min), hi = static_cast<C>(max);
  TORCH_CHECK_VALUE(std::isfinite(lo) && std::isfinite(hi), op, ": the range [", min, ", ", max,
                    "] is not finite in the precision the input is binned in");
}

}  // namespace

InputType input_type_of(at::ScalarType dtype, const char* argument, const char* op) {
  switch (dtype) {
#define DSMHIST_INPUT_FROM_TORCH(e, T, name, C, torch_type) \
  case at::ScalarType::torch_type:                          \
    return InputType::e;
    DSMHIST_FOR_EACH_INPUT_TYPE(DSMHIST_INPUT_FROM_TORCH)
#undef DSMHIST_INPUT_FROM_TORCH
    default:
      TORCH_CHECK_VALUE(false, op, ": ", argument, " has dtype ", torch_dtype_name(dtype), "; allowed dtypes are ",
                        input_dtype_names());
  }
}

AccKind acc_kind_for(std::optional<at::ScalarType> weight_dtype, at::ScalarType output_dtype) {
  if (!weight_dtype.has_value()) return AccKind::kCount;
  if (at::globalContext().deterministicAlgorithms()) return AccKind::kFixed;
  return output_dtype == at::kDouble ? AccKind::kDouble : AccKind::kFloat;
}

namespace {

c10::SymInt element_count(c10::SymIntArrayRef shape) {
  c10::SymInt n = 1;
  for (const c10::SymInt& size : shape) n *= size;
  return n;
}

void check_weight(const char* op, const TensorFacts& input, const TensorFacts& w) {
  const at::ScalarType wt = w.dtype;
  TORCH_CHECK_VALUE(wt == at::kHalf || wt == at::kBFloat16 || wt == at::kFloat || wt == at::kDouble, op,
                    ": weight must be floating (torch.float16, bfloat16, float32, float64), got ",
                    torch_dtype_name(wt));
  TORCH_CHECK_VALUE(w.shape.size() == input.shape.size() && w.shape == input.shape, op,
                    ": weight must have the shape of input ", input.shape, ", got ", w.shape);
  TORCH_CHECK_VALUE(w.device == input.device, op, ": weight is on ", w.device, " but input is on ", input.device,
                    "; both must be on the same device");
}

}  // namespace

HistogramArgs check_histogram_args(const char* op, const TensorFacts& input, int64_t bins, std::optional<double> min,
                                   std::optional<double> max, const std::optional<TensorFacts>& weight,
                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype, bool batched) {
  HistogramArgs args;
  args.input_type = input_type_of(input.dtype, "input", op);
  TORCH_CHECK_VALUE(bins > 0, op, ": bins must be > 0, got ", bins);
  TORCH_CHECK_VALUE(!batched || !input.shape.empty(), op,
                    ": input must have at least 1 dim ([..., N]: one histogram "
                    "per leading index), got a 0-d tensor");

  if (out_of_range == "ignore") {
    args.out_of_range = OutOfRange::kIgnore;
  } else if (out_of_range == "clamp") {
    args.out_of_range = OutOfRange::kClamp;
  } else {
    TORCH_CHECK_VALUE(false, op, ": out_of_range must be \"ignore\" or \"clamp\", got \"", std::string(out_of_range),
                      "\"");
  }

  TORCH_CHECK_VALUE(min.has_value() == max.has_value(), op, ": give both min and max, or neither (got only ",
                    min.has_value() ? "min" : "max", ")");
  if (min.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*min) && std::isfinite(*max), op, ": min and max must be finite, got [", *min, ", ",
                      *max, "]");
    TORCH_CHECK_VALUE(*min < *max, op, ": min (", *min, ") must be less than max (", *max, ")",
                      *min == *max ? "; to take the range from the data, pass neither min nor max" : "");
    if (computes_in_double(args.input_type)) {
      check_range_in<double>(op, *min, *max);
    } else {
      check_range_in<float>(op, *min, *max);
    }
    args.mode = BinMode::kRange;
    args.lo = *min;
    args.hi = *max;
  } else {
    args.mode = mode_without_range(args.input_type);
    args.data_range = args.mode == BinMode::kRange;
  }

  if (weight.has_value()) {
    check_weight(op, input, *weight);
    const at::ScalarType wt = weight->dtype;
    args.weight_type = wt == at::kHalf       ? WeightType::kFloat16
                       : wt == at::kBFloat16 ? WeightType::kBFloat16
                       : wt == at::kFloat    ? WeightType::kFloat32
                                             : WeightType::kFloat64;
    args.output_dtype = wt == at::kDouble ? at::kDouble : at::kFloat;
    args.acc = acc_kind_for(wt, args.output_dtype);
    args.output_type = wt == at::kDouble ? OutputType::kFloat64 : OutputType::kFloat32;
    TORCH_CHECK_VALUE(!dtype.has_value() || *dtype == args.output_dtype, op, ": with weight the output dtype is ",
                      torch_dtype_name(args.output_dtype),
                      " (float32 for float16/bfloat16/float32 weights, float64 for float64); dtype must be None or ",
                      torch_dtype_name(args.output_dtype), ", got ", torch_dtype_name(*dtype));
  } else {
    const at::ScalarType out = dtype.value_or(at::kLong);
    TORCH_CHECK_VALUE(out == at::kLong || out == at::kInt, op,
                      ": dtype (the count dtype) must be torch.int64 or torch.int32, got ", torch_dtype_name(out));
    args.acc = AccKind::kCount;
    args.output_dtype = out;
    args.output_type = out == at::kLong ? OutputType::kInt64 : OutputType::kInt32;
    // A bin can receive every element of its histogram; past 2^31 - 1 of them an int32 count could overflow, which
    // only a host sync could detect afterwards, so it is refused up front. (histogram_add_ adding into an int32 hist
    // across calls wraps modulo 2^32, like int32 tensor addition: documented.)
    if (out == at::kInt) {
      const c10::SymInt per_histogram = batched ? input.shape.back() : element_count(input.shape);
      TORCH_CHECK_VALUE(per_histogram <= std::numeric_limits<int32_t>::max(), op,
                        ": int32 counts cannot hold the count of ", per_histogram, " elements (a bin could exceed ",
                        "2^31 - 1); use int64 counts (dtype=torch.int64, or an int64 hist for histogram_add_)");
    }
  }
  return args;
}

at::Tensor allocate_output(const char* op, const HistogramArgs& args, const at::Tensor& input, int64_t bins,
                           bool batched) {
  const std::vector<int64_t> shape = batched ? batched_output_shape(op, input, bins) : std::vector<int64_t>{bins};
  return allocate_named(op, "the output for bins=" + std::to_string(bins), shape,
                        input.options().dtype(args.output_dtype));
}

const char* into_target_name(const char* op) {
  // histogram_add_ calls it hist; histogram(out=) (dsmhist._histogram_out, whose messages say dsmhist.histogram) out.
  return std::strcmp(op, "torch_dsmhist.histogram_add_") == 0 ? "hist" : "out";
}

HistogramArgs check_histogram_into_args(const char* op, const TensorFacts& target, const TensorFacts& input,
                                        std::optional<double> min, std::optional<double> max,
                                        const std::optional<TensorFacts>& weight, c10::string_view out_of_range,
                                        std::optional<at::ScalarType> dtype, bool accumulate) {
  const char* name = into_target_name(op);
  TORCH_CHECK_VALUE(target.shape.size() == 1 && target.shape[0] > 0, op, ": ", name,
                    " must be a non-empty 1-D tensor (the histogram to write into), got shape ", target.shape);
  TORCH_CHECK_VALUE(target.device == input.device, op, ": ", name, " is on ", target.device, " but input is on ",
                    input.device, "; both must be on the same device");
  const at::ScalarType ht = target.dtype;
  if (weight.has_value()) {
    TORCH_CHECK_VALUE(ht == at::kFloat || ht == at::kDouble, op, ": with weight, ", name,
                      " must be torch.float32 or torch.float64 (the sums accumulate in its dtype), got ",
                      torch_dtype_name(ht));
  } else {
    TORCH_CHECK_VALUE(ht == at::kLong || ht == at::kInt || ht == at::kFloat || ht == at::kDouble, op,
                      ": without weight, ", name, " must hold counts as torch.int64, int32, float32 or float64, got ",
                      torch_dtype_name(ht));
  }
  TORCH_CHECK_VALUE(!dtype.has_value() || *dtype == ht, op, ": ", name, " has dtype ", torch_dtype_name(ht),
                    " but dtype=", torch_dtype_name(*dtype), " was given");
  const bool counts_into_float = !weight.has_value() && (ht == at::kFloat || ht == at::kDouble);
  // Weighted: any floating weight adds into a float32 or float64 target; check with the dtype the weight implies,
  // then take the target's. Counts into a floating target are made as int64 first.
  std::optional<at::ScalarType> count_dtype;
  if (!weight.has_value()) count_dtype = counts_into_float ? at::kLong : ht;
  HistogramArgs args =
      check_histogram_args(op, input, static_cast<int64_t>(target.shape[0].guard_int(__FILE__, __LINE__)), min, max,
                           weight, out_of_range, count_dtype);
  if (counts_into_float) {
    // A call's count of a bin is at most its element count; past the significand (2^24, 2^53) a float would round it.
    const int64_t exact_limit = ht == at::kFloat ? (int64_t{1} << 24) : (int64_t{1} << 53);
    const c10::SymInt elements = element_count(input.shape);
    TORCH_CHECK_VALUE(elements <= exact_limit, op, ": a ", torch_dtype_name(ht), " ", name,
                      " holds counts exactly up to 2^", ht == at::kFloat ? 24 : 53, ", but this call counts ", elements,
                      " elements; split the call, or use an int64 ", name);
    args.counts_into_float = true;
  }
  TORCH_CHECK_VALUE(!(accumulate && args.data_range), op, ": floating input needs min and max when adding into ", name,
                    " (a range taken from each call's data would give different bins from call to call)");
  if (weight.has_value()) {
    args.output_dtype = ht;
    args.output_type = ht == at::kDouble ? OutputType::kFloat64 : OutputType::kFloat32;
    args.acc = acc_kind_for(weight->dtype, ht);
  }
  return args;
}

void check_into_memory(const char* op, const char* name, const at::Tensor& target, const at::Tensor& input,
                       const std::optional<at::Tensor>& weight) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(target) != at::MemOverlap::Yes, op, ": ", name,
                    " has elements that share memory (an expanded view, say); pass a tensor with distinct elements");
  const auto overlaps = [](const at::Tensor& a, const at::Tensor& b) {
    const at::MemOverlapStatus status = at::get_overlap_status(a, b);
    return status == at::MemOverlapStatus::Full || status == at::MemOverlapStatus::Partial;
  };
  TORCH_CHECK_VALUE(!(input.defined() && overlaps(target, input)), op, ": ", name,
                    " and input share memory; the histogram cannot be written over its own input (clone one)");
  TORCH_CHECK_VALUE(!(weight.has_value() && weight->defined() && overlaps(target, *weight)), op, ": ", name,
                    " and weight share memory; the histogram cannot be written over its weights (clone one)");
}

HistogramArgs check_finite_range_args(const char* op, const TensorFacts& input) {
  TORCH_CHECK_VALUE(at::isFloatingType(input.dtype), op,
                    ": input must be floating (float16, bfloat16, float32, float64), got ",
                    torch_dtype_name(input.dtype));
  return check_histogram_args(op, input, 1, std::nullopt, std::nullopt, std::nullopt, "ignore", std::nullopt);
}

namespace {

void check_range_keys(const char* op, const TensorFacts& input, const TensorFacts& keys) {
  TORCH_CHECK_VALUE(keys.dtype == at::kLong && keys.shape.size() == 1 && keys.shape[0] == 2, op,
                    ": range_keys must be an int64 tensor of shape [2] (from dsmhist._finite_range_keys)");
  TORCH_CHECK_VALUE(keys.device == input.device, op, ": range_keys is on ", keys.device, " but input is on ",
                    input.device, "; both must be on the same device");
}

}  // namespace

HistogramArgs check_histogram_with_range_keys_args(const char* op, const TensorFacts& input, int64_t bins,
                                                   const TensorFacts& range_keys,
                                                   const std::optional<TensorFacts>& weight,
                                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype,
                                                   bool batched) {
  const HistogramArgs args =
      check_histogram_args(op, input, bins, std::nullopt, std::nullopt, weight, out_of_range, dtype, batched);
  TORCH_CHECK_VALUE(args.data_range, op,
                    ": input must be floating (only floating input takes its range from the "
                    "data), got ",
                    torch_dtype_name(input.dtype));
  check_range_keys(op, input, range_keys);
  return args;
}

HistogramArgs check_bin_indices_args(const char* op, const TensorFacts& input, int64_t bins, std::optional<double> min,
                                     std::optional<double> max, c10::string_view out_of_range,
                                     const std::optional<TensorFacts>& range_keys) {
  const HistogramArgs args = check_histogram_args(op, input, bins, min, max, std::nullopt, out_of_range, std::nullopt);
  if (range_keys.has_value()) {
    TORCH_CHECK_VALUE(args.data_range, op, ": range_keys applies only to floating input without min and max");
    check_range_keys(op, input, *range_keys);
  }
  return args;
}

std::string output_dtype_name(const HistogramArgs& args) { return torch_dtype_name(args.output_dtype); }

std::vector<int64_t> batched_output_shape(const char* op, const at::Tensor& input, int64_t bins) {
  TORCH_CHECK_VALUE(input.dim() >= 1, op,
                    ": input must have at least 1 dim ([..., N]: one histogram per leading "
                    "index), got a 0-d tensor");
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end() - 1);
  shape.push_back(bins);
  return shape;
}

TierOverride& tier_override() {
  static thread_local TierOverride value;
  return value;
}

}  // namespace dsmhist
