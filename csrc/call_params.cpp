// Building a call's parameters from its checked arguments and tensors (shared by the CPU and CUDA implementations):
// how the input's dims collapse into rows, and the params each kind of call hands its device.
#include "call_params.h"

#include <c10/util/Exception.h>

#include <vector>

namespace dsmhist {

namespace {

struct Dim {
  int64_t size, input_stride, weight_stride;
};

// Dims [0, end) of input (and weight) with size-1 dims dropped and neighbours that are contiguous with each other in
// both merged.
std::vector<Dim> collapse_dims(const at::Tensor& input, const at::Tensor* weight, int64_t end) {
  std::vector<Dim> dims;
  for (int64_t d = 0; d < end; ++d) {
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

// Rows of the input: for one histogram, the last collapsed dim is the row and the others are row dims; for one
// histogram per row, the input's last dim is the row and the dims before it are row dims.
struct RowShape {
  std::vector<Dim> row_dims;
  Dim inner{1, 1, 1};
};

RowShape row_shape(const at::Tensor& input, const at::Tensor* weight, bool batched) {
  RowShape shape;
  if (batched) {
    const int64_t last = input.dim() - 1;
    shape.row_dims = collapse_dims(input, weight, last);
    if (input.size(last) > 1) {
      shape.inner = Dim{input.size(last), input.stride(last), weight ? weight->stride(last) : input.stride(last)};
    } else {
      shape.inner = Dim{input.size(last), 1, 1};
    }
    return shape;
  }
  shape.row_dims = collapse_dims(input, weight, input.dim());
  if (!shape.row_dims.empty()) {
    shape.inner = shape.row_dims.back();
    shape.row_dims.pop_back();
  } else {
    shape.inner = Dim{input.numel(), 1, 1};  // a single element (or none)
  }
  return shape;
}

}  // namespace

InputDescription describe_input(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                                bool batched) {
  const bool weighted = weight.has_value() && weight->defined();
  RowShape shape = row_shape(input, weighted ? &*weight : nullptr, batched);
  if (static_cast<int>(shape.row_dims.size()) > kMaxDims) {
    input = input.contiguous();
    if (weighted) weight = weight->contiguous();
    shape = row_shape(input, weighted ? &*weight : nullptr, batched);
  }
  InputDescription in;
  in.input = input.const_data_ptr();
  in.input_type = args.input_type;
  in.weight = weighted ? weight->const_data_ptr() : nullptr;
  in.weight_type = weighted ? args.weight_type : WeightType::kNone;
  in.row_length = shape.inner.size;
  in.inner_input_stride = shape.inner.input_stride;
  in.inner_weight_stride = shape.inner.weight_stride;
  in.rows = 1;  // the product of the row dims: collapsing drops size-1 dims only, so a size-0 dim leaves 0 rows
  in.layout.ndim = static_cast<int32_t>(shape.row_dims.size());
  for (size_t d = 0; d < shape.row_dims.size(); ++d) {
    in.rows *= shape.row_dims[d].size;
    in.layout.sizes[d] = shape.row_dims[d].size;
    in.layout.input_strides[d] = shape.row_dims[d].input_stride;
    in.layout.weight_strides[d] = shape.row_dims[d].weight_stride;
  }
  return in;
}

HistogramParams make_params(const HistogramArgs& args, at::Tensor& input, std::optional<at::Tensor>& weight,
                            int64_t bins, at::Tensor& output, bool batched, bool accumulate) {
  HistogramParams p;
  static_cast<InputDescription&>(p) = describe_input(args, input, weight, batched);
  p.output = output.mutable_data_ptr();
  p.output_type = args.output_type;
  p.bins = bins;
  p.mode = args.mode;
  p.out_of_range = args.out_of_range;
  p.lo = args.lo;
  p.hi = args.hi;
  p.range_from_data = args.data_range;
  p.output_row_stride = batched ? bins : 0;
  p.accumulate = accumulate;
  return p;
}

RangeParams make_range_params(const HistogramArgs& args, at::Tensor& input, at::Tensor& keys) {
  std::optional<at::Tensor> no_weight;
  return range_pass_params(describe_input(args, input, no_weight, /*batched=*/false),
                           static_cast<unsigned long long*>(keys.mutable_data_ptr()));
}

HistogramParams make_bin_index_params(const HistogramArgs& args, at::Tensor& input, at::Tensor& indices, int64_t bins) {
  // The indices stand in for a weight of input's shape: the traversal hands every element its offset there.
  std::optional<at::Tensor> as_weight = indices;
  HistogramParams p = make_params(args, input, as_weight, bins, indices, /*batched=*/false, /*accumulate=*/false);
  p.weight_type = WeightType::kNone;
  return p;
}

}  // namespace dsmhist
