// The checks the fake (meta) kernels run (torch_dsmhist/_fake.py through torch_dsmhist/_rules.py): the real ops'
// argument rules over what a fake tensor knows (dtype, shape, device), and the memory check distributed calls make
// before the ranks exchange anything.
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "edges_args.h"
#include "histogram_args.h"

namespace dsmhist {

namespace {

// The fake (meta) kernels' way to the one rule set: they pass what they know of each tensor (dtype, shape, device)
// and get the checks of the real op and its output dtype's name. `kind` says which op's rules apply: "histogram"
// (histogram, batched_histogram), "into" (histogram_add_, histogram(out=): target is hist / out), "range_keys"
// (_histogram_with_range_keys: target is range_keys), "finite_range", "bin_indices" (target: optional range_keys).
std::string check_args(c10::string_view kind, c10::string_view op_name, at::ScalarType input_dtype,
                       c10::SymIntArrayRef input_shape, c10::Device input_device, int64_t bins,
                       std::optional<double> min, std::optional<double> max, std::optional<at::ScalarType> weight_dtype,
                       at::OptionalSymIntArrayRef weight_shape, std::optional<c10::Device> weight_device,
                       c10::string_view out_of_range, std::optional<at::ScalarType> dtype, bool batched,
                       std::optional<at::ScalarType> target_dtype, at::OptionalSymIntArrayRef target_shape,
                       std::optional<c10::Device> target_device, bool accumulate) {
  const std::string op(op_name);
  const TensorFacts input{input_dtype, input_shape, input_device};
  constexpr const char* kCheckOp = "torch_dsmhist._check_args";
  const std::optional<TensorFacts> weight = facts_of(kCheckOp, "weight", weight_dtype, weight_shape, weight_device);
  const std::optional<TensorFacts> target =
      facts_of(kCheckOp, "the target tensor", target_dtype, target_shape, target_device);
  const auto need_target = [&]() -> const TensorFacts& {
    TORCH_CHECK_VALUE(target.has_value(), "torch_dsmhist._check_args: kind \"", std::string(kind), "\" needs a target");
    return *target;
  };
  HistogramArgs args;
  if (kind == "histogram") {
    args = check_histogram_args(op.c_str(), input, bins, min, max, weight, out_of_range, dtype, batched);
  } else if (kind == "into") {
    args =
        check_histogram_into_args(op.c_str(), need_target(), input, min, max, weight, out_of_range, dtype, accumulate);
  } else if (kind == "range_keys") {
    args = check_histogram_with_range_keys_args(op.c_str(), input, bins, need_target(), weight, out_of_range, dtype,
                                                batched);
  } else if (kind == "finite_range") {
    args = check_finite_range_args(op.c_str(), input);
  } else if (kind == "bin_indices") {
    args = check_bin_indices_args(op.c_str(), input, bins, min, max, out_of_range, target);
  } else {
    TORCH_CHECK_VALUE(false, "torch_dsmhist._check_args: unknown kind \"", std::string(kind), "\"");
  }
  return output_dtype_name(args);
}

// The checks of the bin-edges ops, for their fake kernels: the facts of each edges tensor as parallel lists (its
// dtype, its rank, its sizes concatenated over all tensors in edge_sizes, its device).
std::string check_edges_args_op(c10::string_view op_name, at::ScalarType input_dtype, c10::SymIntArrayRef input_shape,
                                c10::Device input_device, std::vector<at::ScalarType> edge_dtypes,
                                std::vector<int64_t> edge_ranks, c10::SymIntArrayRef edge_sizes,
                                std::vector<c10::Device> edge_devices, std::optional<at::ScalarType> weight_dtype,
                                at::OptionalSymIntArrayRef weight_shape, std::optional<c10::Device> weight_device,
                                c10::string_view out_of_range, std::optional<at::ScalarType> dtype, bool nd) {
  const std::string op(op_name);
  TORCH_CHECK_VALUE(edge_dtypes.size() == edge_ranks.size() && edge_dtypes.size() == edge_devices.size(),
                    "torch_dsmhist._check_edges_args: one dtype, rank and device per edges tensor");
  EdgeFacts edges;
  size_t next_size = 0;
  for (size_t d = 0; d < edge_dtypes.size(); ++d) {
    const size_t rank = static_cast<size_t>(edge_ranks[d]);
    TORCH_CHECK_VALUE(next_size + rank <= edge_sizes.size(), "torch_dsmhist._check_edges_args: edge_sizes too short");
    edges.push_back(TensorFacts{edge_dtypes[d], edge_sizes.slice(next_size, rank), edge_devices[d]});
    next_size += rank;
  }
  const std::optional<TensorFacts> weight =
      facts_of("torch_dsmhist._check_edges_args", "weight", weight_dtype, weight_shape, weight_device);
  const EdgesArgs args = check_edges_args(op.c_str(), TensorFacts{input_dtype, input_shape, input_device}, edges,
                                          weight, out_of_range, dtype, nd);
  return output_dtype_name(args.count);
}

// For torch_dsmhist.distributed, which must refuse a target before the ranks exchange anything: the memory checks
// histogram_add_ and histogram(out=) make before they write.
void check_into_memory_op(c10::string_view op, c10::string_view name, const at::Tensor& target,
                          const std::optional<at::Tensor>& input, const std::optional<at::Tensor>& weight) {
  const std::string op_text(op), name_text(name);
  check_into_memory(op_text.c_str(), name_text.c_str(), target, input.has_value() ? *input : at::Tensor(), weight);
}

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CompositeImplicitAutograd, m) {
  m.impl("_check_args", &check_args);
  m.impl("_check_edges_args", &check_edges_args_op);
  m.impl("_check_into_memory", &check_into_memory_op);
}

}  // namespace dsmhist
