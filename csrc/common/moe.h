// What one call of the MoE routing ops is (moe_align_block_size, moe_routing): MoeParams, read by the CPU
// implementation and the CUDA kernel alike, and the rules both apply per id and per expert. No torch, no CUDA header.
//
// The result, for ids in flat order: an id e is kept when 0 <= e < num_experts and the expert map (if any) sends e to
// a local id >= 0; every other id is dropped. Expert e's share is its kept ids rounded up to whole blocks; shares
// follow each other in expert order; within a share the ids' flat indices increase (a stable order, the same on
// every run and device). Every slot of sorted_ids that holds no index holds n, every block past the used ones -1.
#pragma once

#include <climits>
#include <cstdint>

#include "host_device.h"

namespace dsmhist {

// The largest num_experts the ops take: the CUDA kernel keeps a few int32 per expert per warp in shared memory.
constexpr int64_t kMoeMaxExperts = 8192;

struct MoeParams {
  const void* ids = nullptr;  // n ids, int32 or int64 (ids_int64), contiguous
  bool ids_int64 = false;
  int64_t n = 0;
  int32_t num_experts = 1;
  int32_t block_size = 1;
  const void* expert_map = nullptr;  // [num_experts] global -> local id (negative: dropped), or null
  bool map_int64 = false;
  int32_t* sorted_ids = nullptr;  // [sorted_size]
  int64_t sorted_size = 0;
  int32_t* expert_ids = nullptr;  // [expert_blocks] or null (moe_routing)
  int64_t expert_blocks = 0;
  int32_t* total = nullptr;      // [1] the padded total (num_tokens_post_pad), or null
  int32_t* counts = nullptr;     // [num_experts] kept ids per expert, or null
  int32_t* offsets = nullptr;    // [num_experts + 1] where each share starts, then the total, or null
  int32_t* workspace = nullptr;  // CUDA, a grid past one cluster: its scratch (MoeLaunch::workspace_words int32)
};

// The local id of expert e (e itself without a map); -1 when the map drops e: a negative entry, or an int64 one past
// int32 (the outputs are int32; such an entry names no local expert, and refusing it would need a host sync).
DSMHIST_HD int32_t moe_local_id(const MoeParams& p, int32_t e) {
  if (p.expert_map == nullptr) return e;
  const int64_t local =
      p.map_int64 ? static_cast<const int64_t*>(p.expert_map)[e] : static_cast<const int32_t*>(p.expert_map)[e];
  return local < 0 || local > INT32_MAX ? -1 : static_cast<int32_t>(local);
}

// The expert id i names, or -1 when it names none: out of [0, num_experts) (ids read as int64, so no wrap) or, with
// `local_of` (the experts' local ids), an expert the map drops.
template <typename LocalIds>
DSMHIST_HD int32_t moe_expert_of(const MoeParams& p, int64_t i, const LocalIds& local_of) {
  const int64_t id = p.ids_int64 ? static_cast<const int64_t*>(p.ids)[i] : static_cast<const int32_t*>(p.ids)[i];
  if (id < 0 || id >= p.num_experts) return -1;
  const int32_t e = static_cast<int32_t>(id);
  return local_of(e) < 0 ? -1 : e;
}

// Expert e's share of sorted_ids: its kept ids rounded up to whole blocks (0 for none).
DSMHIST_HD int64_t moe_share(int64_t count, int32_t block_size) {
  return (count + block_size - 1) / block_size * block_size;
}

}  // namespace dsmhist
