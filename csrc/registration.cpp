// Every schema of the dsmhist library, in one place. The CPU and CUDA implementations register themselves with
// TORCH_LIBRARY_IMPL in their own files; the Python package registers the fake (meta) kernels.
#include <Python.h>
#include <torch/library.h>

#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "edges_args.h"
#include "histogram_args.h"
#include "ops.h"

namespace dsmhist {

namespace {

// A tier by its name in the tier table (common/tiers.h), "auto" included.
Tier parse_tier(c10::string_view name) {
  Tier tier = Tier::kAuto;
  TORCH_CHECK_VALUE(parse_tier_name(std::string_view(name.data(), name.size()), &tier),
                    "torch_dsmhist: tier must be one of ", quoted_tier_names(), ", got \"", std::string(name), "\"");
  return tier;
}

void set_tier_override(c10::string_view tier, int64_t cluster_size, int64_t max_cluster_size) {
  const Tier parsed = parse_tier(tier);
  TORCH_CHECK_VALUE(cluster_size >= 0 && cluster_size <= 16,
                    "torch_dsmhist: cluster_size must be between 1 and 16 (or 0 for the planner's choice), got ",
                    cluster_size);
  TORCH_CHECK_VALUE(cluster_size == 0 || (parsed != Tier::kAuto && tier_info(parsed).cluster_kernel),
                    "torch_dsmhist: cluster_size applies only to tiers ", quoted_tier_names(/*cluster_only=*/true));
  TORCH_CHECK_VALUE(max_cluster_size >= 0 && max_cluster_size <= 16,
                    "torch_dsmhist: max_cluster_size must be between 1 and 16 (or 0 for the device's own limit), got ",
                    max_cluster_size);
  tier_override() = TierOverride{parsed, static_cast<int>(cluster_size), static_cast<int>(max_cluster_size)};
}

std::tuple<std::string, int64_t, int64_t> get_tier_override() {
  const TierOverride& current = tier_override();
  return {tier_name(current.tier), current.cluster_size, current.max_cluster_size};
}

// The tier table, for Python (torch_dsmhist._api.tier_table): each tier's name, whether the planner may pick it, and
// whether it runs as a cluster (so its cluster size may be forced), in the table's order.
std::tuple<std::vector<std::string>, c10::List<bool>, c10::List<bool>> tiers_op() {
  std::vector<std::string> names;
  c10::List<bool> planner_may_pick, cluster_kernel;
  for (const TierInfo& info : kTiers) {
    names.emplace_back(info.name);
    planner_may_pick.push_back(info.planner_may_pick);
    cluster_kernel.push_back(info.cluster_kernel);
  }
  return {names, planner_may_pick, cluster_kernel};
}

// (tier name, cluster_size, shared_bytes_per_block, threads_per_block, bins_per_block) of the plan, then (threads,
// cluster_size, grid, shared_bytes) of the launch of a call of `rows` rows of `row_length` elements (batched: one
// histogram per row), zeros when rows is 0; tier "cpu" and zeros on the CPU.
using PlanTuple = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
PlanTuple plan_op(int64_t bins, c10::Device device, at::ScalarType input_dtype,
                  std::optional<at::ScalarType> weight_dtype, int64_t rows, int64_t row_length, bool batched) {
  TORCH_CHECK_VALUE(bins > 0, "torch_dsmhist.plan: bins must be > 0, got ", bins);
  TORCH_CHECK_VALUE(rows >= 0 && row_length >= 0, "torch_dsmhist.plan: rows and row_length must be >= 0, got ", rows,
                    " and ", row_length);
  input_type_of(input_dtype, "dtype", "torch_dsmhist.plan");
  TORCH_CHECK_VALUE(!weight_dtype.has_value() || at::isFloatingType(*weight_dtype),
                    "torch_dsmhist.plan: weight_dtype must be floating, got ", torch_dtype_name(*weight_dtype));
  if (device.is_cpu()) return {"cpu", 0, 0, 0, 0, 0, 0, 0, 0};
  TORCH_CHECK_VALUE(device.is_cuda(), "torch_dsmhist.plan: device must be cpu or cuda, got ", device);
#ifdef DSMHIST_WITH_CUDA
  const std::vector<int64_t> plan = plan_cuda(bins, device.has_index() ? device.index() : -1, input_dtype,
                                             weight_dtype, rows, row_length, batched);
  return {tier_name(static_cast<Tier>(plan[0])), plan[1], plan[2], plan[3], plan[4], plan[5], plan[6], plan[7],
          plan[8]};
#else
  TORCH_CHECK(false, "torch_dsmhist.plan: this build of torch_dsmhist has no CUDA support (built CPU-only)");
#endif
}

// The fake (meta) kernels' way to the one rule set: they pass what they know of each tensor (dtype, shape, device)
// and get the checks of the real op and its output dtype's name. `kind` says which op's rules apply: "histogram"
// (histogram, batched_histogram), "into" (histogram_add_, histogram(out=): target is hist / out), "range_keys"
// (_histogram_with_range_keys: target is range_keys), "finite_range", "bin_indices" (target: optional range_keys).
std::string check_args(c10::string_view kind, c10::string_view op_name, at::ScalarType input_dtype,
                       c10::SymIntArrayRef input_shape, c10::Device input_device, int64_t bins,
                       std::optional<double> min, std::optional<double> max,
                       std::optional<at::ScalarType> weight_dtype, at::OptionalSymIntArrayRef weight_shape,
                       std::optional<c10::Device> weight_device, c10::string_view out_of_range,
                       std::optional<at::ScalarType> dtype, bool batched, std::optional<at::ScalarType> target_dtype,
                       at::OptionalSymIntArrayRef target_shape, std::optional<c10::Device> target_device,
                       bool accumulate) {
  const std::string op(op_name);
  const TensorFacts input{input_dtype, input_shape, input_device};
  std::optional<TensorFacts> weight;
  if (weight_dtype.has_value()) {
    TORCH_CHECK_VALUE(weight_shape.has_value() && weight_device.has_value(),
                      "torch_dsmhist._check_args: weight needs its dtype, shape and device");
    weight = TensorFacts{*weight_dtype, *weight_shape, *weight_device};
  }
  std::optional<TensorFacts> target;
  if (target_dtype.has_value()) {
    TORCH_CHECK_VALUE(target_shape.has_value() && target_device.has_value(),
                      "torch_dsmhist._check_args: the target tensor needs its dtype, shape and device");
    target = TensorFacts{*target_dtype, *target_shape, *target_device};
  }
  const auto need_target = [&]() -> const TensorFacts& {
    TORCH_CHECK_VALUE(target.has_value(), "torch_dsmhist._check_args: kind \"", std::string(kind), "\" needs a target");
    return *target;
  };
  HistogramArgs args;
  if (kind == "histogram") {
    args = check_histogram_args(op.c_str(), input, bins, min, max, weight, out_of_range, dtype, batched);
  } else if (kind == "into") {
    args = check_histogram_into_args(op.c_str(), need_target(), input, min, max, weight, out_of_range, dtype,
                                     accumulate);
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
  std::optional<TensorFacts> weight;
  if (weight_dtype.has_value()) {
    TORCH_CHECK_VALUE(weight_shape.has_value() && weight_device.has_value(),
                      "torch_dsmhist._check_edges_args: weight needs its dtype, shape and device");
    weight = TensorFacts{*weight_dtype, *weight_shape, *weight_device};
  }
  const EdgesArgs args =
      check_edges_args(op.c_str(), TensorFacts{input_dtype, input_shape, input_device}, edges, weight, out_of_range,
                       dtype, nd);
  return output_dtype_name(args.count);
}

// For torch_dsmhist.distributed, which must refuse a target before the ranks exchange anything: the memory checks
// histogram_add_ and histogram(out=) make before they write.
void check_into_memory_op(c10::string_view op, c10::string_view name, const at::Tensor& target,
                          const std::optional<at::Tensor>& input, const std::optional<at::Tensor>& weight) {
  const std::string op_text(op), name_text(name);
  check_into_memory(op_text.c_str(), name_text.c_str(), target, input.has_value() ? *input : at::Tensor(), weight);
}

bool built_with_cuda() {
#ifdef DSMHIST_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

TORCH_LIBRARY(dsmhist, m) {
  m.def(
      "histogram(Tensor input, int bins, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None) -> Tensor");
  // Mutates hist and returns nothing: torch.compile cannot functionalize custom ops whose outputs alias an input.
  // (torch_dsmhist.histogram_add_ returns hist.)
  m.def(
      "histogram_add_(Tensor(a!) hist, Tensor input, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\") -> ()");
  // histogram(out=, accumulate=): into `out`, replacing (histogram's rules) or adding (histogram_add_'s rules).
  m.def(
      "_histogram_out(Tensor(a!) out, Tensor input, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None, bool accumulate=False) -> ()");
  m.def(
      "batched_histogram(Tensor input, int bins, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None) -> Tensor");
  // For torch_dsmhist.distributed (not part of the public contract): a data-derived range merged across ranks. The
  // keys ([2] int64) of floating input's finite min and max; the keys of several inputs merge by an elementwise max
  // once their sign bits are flipped (unsigned order as signed). Then the histogram binned over merged keys.
  m.def("_finite_range_keys(Tensor input) -> Tensor");
  m.def(
      "_histogram_with_range_keys(Tensor input, int bins, Tensor range_keys, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None, bool batched=False) -> Tensor");
  // Each element's bin (-1: dropped), for the backward of the weighted ops; range_keys as for
  // _histogram_with_range_keys.
  m.def(
      "_bin_indices(Tensor input, int bins, float? min=None, float? max=None, str out_of_range=\"ignore\", "
      "Tensor? range_keys=None) -> Tensor");
  // Histograms over bin edges (torch.histogram's rule: [e_i, e_{i+1}), the last bin closed): of every element of
  // input over one 1-D edges tensor, and of the points of an [N, D] input over one edges tensor per dim.
  m.def(
      "histogram_edges(Tensor input, Tensor edges, Tensor? weight=None, str out_of_range=\"ignore\", "
      "ScalarType? dtype=None) -> Tensor");
  m.def(
      "histogramdd(Tensor input, Tensor[] edges, Tensor? weight=None, str out_of_range=\"ignore\", "
      "ScalarType? dtype=None) -> Tensor");
  // Each point's flat bin of histogramdd (int32, -1: dropped), for the backward of the weighted edges ops.
  m.def("_edge_bin_indices(Tensor input, Tensor[] edges, str out_of_range=\"ignore\") -> Tensor");
  m.def(
      "_check_edges_args(str op, ScalarType input_dtype, SymInt[] input_shape, Device input_device, "
      "ScalarType[] edge_dtypes, int[] edge_ranks, SymInt[] edge_sizes, Device[] edge_devices, "
      "ScalarType? weight_dtype, SymInt[]? weight_shape, Device? weight_device, str out_of_range, "
      "ScalarType? dtype, bool nd) -> str",
      &check_edges_args_op);
  m.def("_check_into_memory(str op, str name, Tensor target, Tensor? input, Tensor? weight) -> ()", &check_into_memory_op);
  // The argument checks of every op, for the fake kernels (see check_args).
  m.def(
      "_check_args(str kind, str op, ScalarType input_dtype, SymInt[] input_shape, Device input_device, int bins, "
      "float? min, float? max, ScalarType? weight_dtype, SymInt[]? weight_shape, Device? weight_device, "
      "str out_of_range, ScalarType? dtype, bool batched, ScalarType? target_dtype=None, "
      "SymInt[]? target_shape=None, Device? target_device=None, bool accumulate=False) -> str",
      &check_args);
  // Introspection and test hooks (not part of the public contract; the Python package wraps them).
  m.def(
      "_plan(int bins, Device device, ScalarType dtype, ScalarType? weight_dtype=None, int rows=0, int row_length=0, "
      "bool batched=False) -> (str, int, int, int, int, int, int, int, int)",
      &plan_op);
  m.def("_tiers() -> (str[], bool[], bool[])", &tiers_op);
  m.def("_set_tier_override(str tier, int cluster_size=0, int max_cluster_size=0) -> ()", &set_tier_override);
  m.def("_get_tier_override() -> (str, int, int)", &get_tier_override);
  m.def("_built_with_cuda() -> bool", &built_with_cuda);
}


}  // namespace dsmhist

// `from . import _C` loads this shared library, which runs the registrations above; the module itself is empty.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
