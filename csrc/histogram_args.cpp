#include "histogram_args.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <vector>

namespace dsmhist {

namespace {

const char* kInputDtypes = "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64";

bool computes_in_double(InputType type) {
  return type == InputType::kInt32 || type == InputType::kInt64 || type == InputType::kFloat64;
}

bool is_floating(InputType type) {
  return type == InputType::kFloat16 || type == InputType::kBFloat16 || type == InputType::kFloat32 ||
         type == InputType::kFloat64;
}

// min < max and (max - min) finite in the precision the bins are computed in, so no bin width is 0 or inf.
template <typename C>
void check_range_in(double min, double max) {
  const C lo = static_cast<C>(min), hi = static_cast<C>(max);
  TORCH_CHECK_VALUE(lo < hi, "dsmhist.histogram: min (", min, ") must be less than max (", max,
                    ") in the precision the input is binned in");
  TORCH_CHECK_VALUE(std::isfinite(lo) && std::isfinite(hi) && std::isfinite(hi - lo), "dsmhist.histogram: the range [",
                    min, ", ", max, "] is not finite in the precision the input is binned in");
}

}  // namespace

InputType input_type_of(at::ScalarType dtype, const char* argument) {
  switch (dtype) {
    case at::kByte:
      return InputType::kUInt8;
    case at::kChar:
      return InputType::kInt8;
    case at::kShort:
      return InputType::kInt16;
    case at::kInt:
      return InputType::kInt32;
    case at::kLong:
      return InputType::kInt64;
    case at::kHalf:
      return InputType::kFloat16;
    case at::kBFloat16:
      return InputType::kBFloat16;
    case at::kFloat:
      return InputType::kFloat32;
    case at::kDouble:
      return InputType::kFloat64;
    default:
      TORCH_CHECK_VALUE(false, "dsmhist.histogram: ", argument, " has dtype ", dtype, "; allowed dtypes are ",
                        kInputDtypes);
  }
}

AccKind acc_kind_for(std::optional<at::ScalarType> weight_dtype) {
  if (!weight_dtype.has_value()) return AccKind::kCount;
  return *weight_dtype == at::kDouble ? AccKind::kDouble : AccKind::kFloat;
}

HistogramArgs check_histogram_args(const at::Tensor& input, int64_t bins, std::optional<double> min,
                                   std::optional<double> max, const std::optional<at::Tensor>& weight,
                                   c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  HistogramArgs args;
  TORCH_CHECK_VALUE(input.defined(), "dsmhist.histogram: input must be a tensor");
  args.input_type = input_type_of(input.scalar_type(), "input");
  TORCH_CHECK_VALUE(bins > 0, "dsmhist.histogram: bins must be > 0, got ", bins);

  if (out_of_range == "ignore") {
    args.clamp = false;
  } else if (out_of_range == "clamp") {
    args.clamp = true;
  } else {
    TORCH_CHECK_VALUE(false, "dsmhist.histogram: out_of_range must be \"ignore\" or \"clamp\", got \"",
                      std::string(out_of_range), "\"");
  }

  TORCH_CHECK_VALUE(min.has_value() == max.has_value(),
                    "dsmhist.histogram: give both min and max, or neither (got only ", min.has_value() ? "min" : "max",
                    ")");
  if (min.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*min) && std::isfinite(*max), "dsmhist.histogram: min and max must be finite, got [",
                      *min, ", ", *max, "]");
    TORCH_CHECK_VALUE(*min < *max, "dsmhist.histogram: min (", *min, ") must be less than max (", *max, ")");
    if (computes_in_double(args.input_type)) {
      check_range_in<double>(*min, *max);
    } else {
      check_range_in<float>(*min, *max);
    }
    args.mode = BinMode::kRange;
    args.lo = *min;
    args.hi = *max;
  } else if (is_floating(args.input_type)) {
    args.mode = BinMode::kRange;
    args.data_range = true;
  } else {
    args.mode = BinMode::kIndex;
  }

  if (weight.has_value() && weight->defined()) {
    const at::Tensor& w = *weight;
    const at::ScalarType wt = w.scalar_type();
    TORCH_CHECK_VALUE(wt == at::kHalf || wt == at::kBFloat16 || wt == at::kFloat || wt == at::kDouble,
                      "dsmhist.histogram: weight must be floating (float16, bfloat16, float32, float64), got ", wt);
    TORCH_CHECK_VALUE(w.sizes() == input.sizes(), "dsmhist.histogram: weight must have the shape of input ",
                      input.sizes(), ", got ", w.sizes());
    TORCH_CHECK_VALUE(w.device() == input.device(), "dsmhist.histogram: weight is on ", w.device(),
                      " but input is on ", input.device(), "; both must be on the same device");
    args.weight_type = wt == at::kHalf       ? WeightType::kFloat16
                       : wt == at::kBFloat16 ? WeightType::kBFloat16
                       : wt == at::kFloat    ? WeightType::kFloat32
                                             : WeightType::kFloat64;
    args.acc = acc_kind_for(wt);
    args.output_dtype = wt == at::kDouble ? at::kDouble : at::kFloat;
    args.output_type = wt == at::kDouble ? OutputType::kFloat64 : OutputType::kFloat32;
    TORCH_CHECK_VALUE(!dtype.has_value() || *dtype == args.output_dtype,
                      "dsmhist.histogram: with weight the output dtype is ", args.output_dtype,
                      " (float32 for float16/bfloat16/float32 weights, float64 for float64); dtype must be None or ",
                      args.output_dtype, ", got ", *dtype);
  } else {
    const at::ScalarType out = dtype.value_or(at::kLong);
    TORCH_CHECK_VALUE(out == at::kLong || out == at::kInt,
                      "dsmhist.histogram: dtype (the count dtype) must be torch.int64 or torch.int32, got ", out);
    args.acc = AccKind::kCount;
    args.output_dtype = out;
    args.output_type = out == at::kLong ? OutputType::kInt64 : OutputType::kInt32;
  }
  return args;
}

namespace {

struct Dim {
  int64_t size, input_stride, weight_stride;
};

// Drops size-1 dims and merges neighbours that are contiguous with each other in both input and weight.
std::vector<Dim> collapse_dims(const at::Tensor& input, const at::Tensor* weight) {
  std::vector<Dim> dims;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (input.size(d) == 1) continue;
    const Dim inner{input.size(d), input.stride(d), weight ? weight->stride(d) : input.stride(d)};
    if (!dims.empty()) {
      Dim& outer = dims.back();
      if (outer.input_stride == inner.input_stride * inner.size &&
          outer.weight_stride == inner.weight_stride * inner.size) {
        outer = Dim{outer.size * inner.size, inner.input_stride, inner.weight_stride};
        continue;
      }
    }
    dims.push_back(inner);
  }
  return dims;
}

}  // namespace

HistogramParams make_params(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                            int64_t bins, at::Tensor& output) {
  const bool weighted = weight.has_value() && weight->defined();
  std::vector<Dim> dims = collapse_dims(input, weighted ? &*weight : nullptr);
  if (static_cast<int>(dims.size()) > kMaxDims) {
    input = input.contiguous();
    if (weighted) weight = weight->contiguous();
    dims = collapse_dims(input, weighted ? &*weight : nullptr);
  }
  HistogramParams p;
  p.input = input.const_data_ptr();
  p.input_type = args.input_type;
  p.weight = weighted ? weight->const_data_ptr() : nullptr;
  p.weight_type = weighted ? args.weight_type : WeightType::kNone;
  p.output = output.mutable_data_ptr();
  p.output_type = args.output_type;
  p.numel = input.numel();
  p.bins = bins;
  p.mode = args.mode;
  p.clamp = args.clamp;
  p.lo = args.lo;
  p.hi = args.hi;
  p.contiguous = dims.empty() || (dims.size() == 1 && dims[0].input_stride == 1 && dims[0].weight_stride == 1);
  p.layout.ndim = static_cast<int32_t>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    p.layout.sizes[d] = dims[d].size;
    p.layout.input_strides[d] = dims[d].input_stride;
    p.layout.weight_strides[d] = dims[d].weight_stride;
  }
  return p;
}

TierOverride& tier_override() {
  static thread_local TierOverride value;
  return value;
}

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kShared:
      return "shared";
    case Tier::kCluster:
      return "cluster";
    case Tier::kGlobal:
      return "global";
    default:
      return "auto";
  }
}

}  // namespace dsmhist
