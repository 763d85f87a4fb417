// The MoE routing ops (moe_align_block_size, moe_routing), written once for every device: the argument checks and
// output sizes (one rule set, which the fake kernels reach through dsmhist::_check_moe_args), then the bodies, which
// check -> allocate -> build MoeParams -> hand them to the device's backend (cpu/moe_cpu.cpp, cuda/moe_cuda.cpp: a
// struct with `static void moe(const MoeParams&, const at::Tensor& ids)`).
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "common/moe.h"
#include "histogram_args.h"

namespace dsmhist {

// The validated call, and its outputs' sizes (symbolic under torch.compile: the fake kernels ask for them too).
struct MoeArgs {
  bool ids_int64 = false;
  bool map_int64 = false;
  c10::SymInt n = 0;
  c10::SymInt sorted_size = 0;    // sorted_token_ids / permutation
  c10::SymInt expert_blocks = 0;  // expert_ids
};

// Throws c10::ValueError naming the bad argument. `pad_sorted_ids` only changes the sizes.
MoeArgs check_moe_args(const char* op, const TensorFacts& ids, int64_t block_size, int64_t num_experts,
                       const std::optional<TensorFacts>& expert_map, bool pad_sorted_ids);

namespace moe_bodies {

// The call's ids and sizes; the outputs are the body's to set.
inline MoeParams moe_params(const MoeArgs& args, const at::Tensor& ids, int64_t num_experts, int64_t block_size) {
  MoeParams p;
  p.ids = ids.const_data_ptr();
  p.ids_int64 = args.ids_int64;
  p.n = args.n.expect_int();
  p.num_experts = static_cast<int32_t>(num_experts);
  p.block_size = static_cast<int32_t>(block_size);
  return p;
}

template <typename Backend>
std::tuple<at::Tensor, at::Tensor, at::Tensor> align_block_size(const at::Tensor& topk_ids, int64_t block_size,
                                                                int64_t num_experts,
                                                                const std::optional<at::Tensor>& expert_map,
                                                                bool pad_sorted_ids) {
  const char* op = "torch_dsmhist.moe_align_block_size";
  const MoeArgs args =
      check_moe_args(op, facts_of(topk_ids), block_size, num_experts, facts_of(expert_map), pad_sorted_ids);
  const at::TensorOptions int32 = topk_ids.options().dtype(at::kInt);
  at::Tensor sorted_ids = at::empty({args.sorted_size.expect_int()}, int32);
  at::Tensor expert_ids = at::empty({args.expert_blocks.expect_int()}, int32);
  at::Tensor total = at::empty({1}, int32);
  const at::Tensor ids = topk_ids.contiguous();
  const std::optional<at::Tensor> map = expert_map.has_value() && expert_map->defined()
                                            ? std::optional<at::Tensor>(expert_map->contiguous())
                                            : std::nullopt;
  MoeParams p = moe_params(args, ids, num_experts, block_size);
  if (map.has_value()) {
    p.expert_map = map->const_data_ptr();
    p.map_int64 = args.map_int64;
  }
  p.sorted_ids = sorted_ids.mutable_data_ptr<int32_t>();
  p.sorted_size = sorted_ids.numel();
  p.expert_ids = expert_ids.mutable_data_ptr<int32_t>();
  p.expert_blocks = expert_ids.numel();
  p.total = total.mutable_data_ptr<int32_t>();
  Backend::moe(p, ids);
  return {sorted_ids, expert_ids, total};
}

template <typename Backend>
std::tuple<at::Tensor, at::Tensor, at::Tensor> routing(const at::Tensor& topk_ids, int64_t num_experts,
                                                       int64_t block_size) {
  const char* op = "torch_dsmhist.moe_routing";
  const MoeArgs args =
      check_moe_args(op, facts_of(topk_ids), block_size, num_experts, std::nullopt, /*pad_sorted_ids=*/false);
  const at::TensorOptions int32 = topk_ids.options().dtype(at::kInt);
  at::Tensor counts = at::empty({num_experts}, int32);
  at::Tensor offsets = at::empty({num_experts + 1}, int32);
  at::Tensor permutation = at::empty({args.sorted_size.expect_int()}, int32);
  const at::Tensor ids = topk_ids.contiguous();
  MoeParams p = moe_params(args, ids, num_experts, block_size);
  p.sorted_ids = permutation.mutable_data_ptr<int32_t>();
  p.sorted_size = permutation.numel();
  p.counts = counts.mutable_data_ptr<int32_t>();
  p.offsets = offsets.mutable_data_ptr<int32_t>();
  Backend::moe(p, ids);
  return {counts, offsets, permutation};
}

}  // namespace moe_bodies

template <typename Backend>
void register_moe_bodies(torch::Library& m) {
  m.impl("moe_align_block_size", &moe_bodies::align_block_size<Backend>);
  m.impl("moe_routing", &moe_bodies::routing<Backend>);
}

}  // namespace dsmhist
