// The CPU device of the MoE routing ops: one serial pass to count, one to place (a counting sort, stable by
// construction), then the padding. Routing batches are small next to the matmuls they feed; one thread keeps the
// order trivially deterministic.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "../common/moe.h"
#include "../moe_args.h"

namespace dsmhist {

namespace {

void moe_cpu(const MoeParams& p) {
  const int32_t experts = p.num_experts;
  std::vector<int32_t> local(experts);
  for (int32_t e = 0; e < experts; ++e) local[e] = moe_local_id(p, e);
  const auto local_of = [&](int32_t e) { return local[e]; };
  std::vector<int64_t> count(experts, 0);
  for (int64_t i = 0; i < p.n; ++i) {
    const int32_t e = moe_expert_of(p, i, local_of);
    if (e >= 0) ++count[e];
  }
  std::vector<int64_t> start(experts + 1, 0);
  for (int32_t e = 0; e < experts; ++e) start[e + 1] = start[e] + moe_share(count[e], p.block_size);
  const int64_t total = start[experts];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < p.n; ++i) {
    const int32_t e = moe_expert_of(p, i, local_of);
    if (e >= 0) p.sorted_ids[next[e]++] = static_cast<int32_t>(i);
  }
  const int32_t sentinel = static_cast<int32_t>(p.n);
  for (int32_t e = 0; e < experts; ++e) {
    for (int64_t slot = next[e]; slot < start[e + 1]; ++slot) p.sorted_ids[slot] = sentinel;
  }
  for (int64_t slot = total; slot < p.sorted_size; ++slot) p.sorted_ids[slot] = sentinel;
  if (p.expert_ids != nullptr) {
    for (int32_t e = 0; e < experts; ++e) {
      for (int64_t block = start[e] / p.block_size; block < start[e + 1] / p.block_size; ++block) {
        p.expert_ids[block] = local[e];
      }
    }
    for (int64_t block = total / p.block_size; block < p.expert_blocks; ++block) p.expert_ids[block] = -1;
  }
  if (p.total != nullptr) p.total[0] = static_cast<int32_t>(total);
  if (p.counts != nullptr) {
    for (int32_t e = 0; e < experts; ++e) p.counts[e] = static_cast<int32_t>(count[e]);
  }
  if (p.offsets != nullptr) {
    for (int32_t e = 0; e <= experts; ++e) p.offsets[e] = static_cast<int32_t>(start[e]);
  }
}

struct CpuMoeBackend {
  static void moe(const MoeParams& p, const at::Tensor& ids) {
    TORCH_CHECK(ids.device().is_cpu(), "torch_dsmhist MoE routing (CPU): topk_ids must be on the CPU, got ",
                ids.device());
    moe_cpu(p);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CPU, m) { register_moe_bodies<CpuMoeBackend>(m); }

}  // namespace dsmhist
