// Every schema of the dsmhist library, in one place. The CPU and CUDA implementations register themselves with
// TORCH_LIBRARY_IMPL in their own files; the Python package registers the fake (meta) kernels.
#include <Python.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "histogram_args.h"
#include "ops.h"

namespace dsmhist {

namespace {

Tier parse_tier(c10::string_view name) {
  if (name == "auto") return Tier::kAuto;
  if (name == "shared") return Tier::kShared;
  if (name == "cluster") return Tier::kCluster;
  if (name == "global") return Tier::kGlobal;
  if (name == "cluster_dsmem") return Tier::kClusterDsmem;
  TORCH_CHECK_VALUE(false,
                    "dsmhist: tier must be one of \"auto\", \"shared\", \"cluster\", \"global\", \"cluster_dsmem\", "
                    "got \"",
                    std::string(name), "\"");
}

void set_tier_override(c10::string_view tier, int64_t cluster_size, int64_t max_cluster_size) {
  const Tier parsed = parse_tier(tier);
  TORCH_CHECK_VALUE(cluster_size >= 0 && cluster_size <= 16,
                    "dsmhist: cluster_size must be between 1 and 16 (or 0 for the planner's choice), got ",
                    cluster_size);
  TORCH_CHECK_VALUE(cluster_size == 0 || parsed == Tier::kCluster || parsed == Tier::kClusterDsmem,
                    "dsmhist: cluster_size applies only to tiers \"cluster\" and \"cluster_dsmem\"");
  TORCH_CHECK_VALUE(max_cluster_size >= 0 && max_cluster_size <= 16,
                    "dsmhist: max_cluster_size must be between 1 and 16 (or 0 for the device's own limit), got ",
                    max_cluster_size);
  tier_override() = TierOverride{parsed, static_cast<int>(cluster_size), static_cast<int>(max_cluster_size)};
}

std::tuple<std::string, int64_t, int64_t> get_tier_override() {
  const TierOverride& current = tier_override();
  return {tier_name(current.tier), current.cluster_size, current.max_cluster_size};
}

std::vector<int64_t> plan_op(int64_t bins, c10::Device device, at::ScalarType input_dtype,
                             std::optional<at::ScalarType> weight_dtype) {
  TORCH_CHECK_VALUE(bins > 0, "dsmhist.plan: bins must be > 0, got ", bins);
  input_type_of(input_dtype, "dtype", "dsmhist.plan");
  TORCH_CHECK_VALUE(!weight_dtype.has_value() || at::isFloatingType(*weight_dtype),
                    "dsmhist.plan: weight_dtype must be floating, got ", *weight_dtype);
  if (device.is_cpu()) return {0, 0, 0, 0, 0};
  TORCH_CHECK_VALUE(device.is_cuda(), "dsmhist.plan: device must be cpu or cuda, got ", device);
#ifdef DSMHIST_WITH_CUDA
  return plan_cuda(bins, device.has_index() ? device.index() : -1, input_dtype, weight_dtype);
#else
  TORCH_CHECK(false, "dsmhist.plan: this build of torch_dsmhist has no CUDA support (built CPU-only)");
#endif
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
  // Introspection and test hooks (not part of the public contract; the Python package wraps them).
  m.def("_plan(int bins, Device device, ScalarType dtype, ScalarType? weight_dtype=None) -> int[]", &plan_op);
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
