// The introspection and test hooks (not part of the public contract; torch_dsmhist._api wraps them): the tier
// table, the planner's choice for a call (dsmhist._plan), forcing a tier, and whether the build has CUDA.
#include <torch/library.h>

#include <string>
#include <string_view>
#include <tuple>
#include <vector>

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
  const std::vector<int64_t> plan =
      plan_cuda(bins, device.has_index() ? device.index() : -1, input_dtype, weight_dtype, rows, row_length, batched);
  return {
      tier_name(static_cast<Tier>(plan[0])), plan[1], plan[2], plan[3], plan[4], plan[5], plan[6], plan[7], plan[8]};
#else
  TORCH_CHECK(false, "torch_dsmhist.plan: this build of torch_dsmhist has no CUDA support (built CPU-only)");
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

TORCH_LIBRARY_IMPL(dsmhist, CompositeImplicitAutograd, m) {
  m.impl("_plan", &plan_op);
  m.impl("_tiers", &tiers_op);
  m.impl("_set_tier_override", &set_tier_override);
  m.impl("_get_tier_override", &get_tier_override);
  m.impl("_built_with_cuda", &built_with_cuda);
}

}  // namespace dsmhist
