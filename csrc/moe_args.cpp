// The argument rules of the MoE routing ops (moe_args.h), and dsmhist::_check_moe_args, their way into the fake
// kernels (torch_dsmhist/_fake.py): the same checks over a fake tensor's dtype, shape and device, and the sizes.
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "moe_args.h"

namespace dsmhist {

namespace {

bool check_index_dtype(const char* op, const char* name, at::ScalarType dtype) {
  TORCH_CHECK_VALUE(dtype == at::kInt || dtype == at::kLong, op, ": ", name,
                    " must be torch.int32 or torch.int64, got ", torch_dtype_name(dtype));
  return dtype == at::kLong;
}

}  // namespace

MoeArgs check_moe_args(const char* op, const TensorFacts& ids, int64_t block_size, int64_t num_experts,
                       const std::optional<TensorFacts>& expert_map, bool pad_sorted_ids) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  MoeArgs args;
  args.ids_int64 = check_index_dtype(op, "topk_ids", ids.dtype);
  TORCH_CHECK_VALUE(block_size >= 1 && block_size <= kInt32Max, op, ": block_size must be between 1 and 2^31 - 1, got ",
                    block_size);
  TORCH_CHECK_VALUE(num_experts >= 1 && num_experts <= kMoeMaxExperts, op, ": num_experts must be between 1 and ",
                    kMoeMaxExperts, ", got ", num_experts);
  if (expert_map.has_value()) {
    args.map_int64 = check_index_dtype(op, "expert_map", expert_map->dtype);
    TORCH_CHECK_VALUE(expert_map->shape.size() == 1 && expert_map->shape[0] == num_experts, op,
                      ": expert_map must have shape (num_experts,) = (", num_experts, ",), got ", expert_map->shape);
    TORCH_CHECK_VALUE(expert_map->device == ids.device, op, ": expert_map is on ", expert_map->device,
                      " but topk_ids is on ", ids.device, "; both must be on the same device");
  }
  c10::SymInt n = 1;
  for (const c10::SymInt& size : ids.shape) n *= size;
  // The outputs hold flat indices and the sentinel n as int32.
  TORCH_CHECK_VALUE(n <= kInt32Max, op, ": topk_ids has ", n,
                    " elements; the int32 outputs hold flat indices below 2^31 - 1");
  // vLLM's sizes: room for every id plus a partial block per expert, at most a block per id.
  c10::SymInt sorted = n + num_experts * (block_size - 1);
  if (pad_sorted_ids) sorted = (sorted + (block_size - 1)) / block_size * block_size;
  sorted = sorted.min(n * block_size);
  TORCH_CHECK_VALUE(sorted <= kInt32Max, op, ": the sorted ids would need ", sorted, " slots (the smaller of ", n,
                    " * block_size and ", n, " + num_experts * (block_size - 1)), beyond int32 indices");
  args.n = n;
  args.sorted_size = sorted;
  args.expert_blocks = (sorted + (block_size - 1)) / block_size;
  return args;
}

namespace {

// [sorted size, expert blocks] of a call, after its checks.
std::vector<c10::SymInt> check_moe_args_op(c10::string_view op_name, at::ScalarType ids_dtype,
                                           c10::SymIntArrayRef ids_shape, c10::Device ids_device, int64_t block_size,
                                           int64_t num_experts, std::optional<at::ScalarType> map_dtype,
                                           at::OptionalSymIntArrayRef map_shape, std::optional<c10::Device> map_device,
                                           bool pad_sorted_ids) {
  const std::string op(op_name);
  const std::optional<TensorFacts> map =
      facts_of("torch_dsmhist._check_moe_args", "expert_map", map_dtype, map_shape, map_device);
  const MoeArgs args = check_moe_args(op.c_str(), TensorFacts{ids_dtype, ids_shape, ids_device}, block_size,
                                      num_experts, map, pad_sorted_ids);
  return {args.sorted_size, args.expert_blocks};
}

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CompositeImplicitAutograd, m) { m.impl("_check_moe_args", &check_moe_args_op); }

}  // namespace dsmhist
