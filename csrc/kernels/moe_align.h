// The CUDA kernel of the MoE routing ops (common/moe.h says what it computes), reached through MoeParams and a
// stream; no torch header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/moe.h"

namespace dsmhist {

// One launch's shape (for DSMHIST_LOG_LAUNCHES too).
struct MoeLaunch {
  int blocks = 0;  // one block, one cluster of this many blocks, or (grid) a cooperative grid of them
  int threads = 0;
  int64_t shared_bytes = 0;
  bool grid = false;            // the blocks share their counts through p.workspace, not DSMEM
  int64_t workspace_words = 0;  // int32 words p.workspace must hold (0: none)
};

// The launch for p on `device` (p's pointers unused), its kernel configured: host-side queries only, the answer
// kept per device and sizes (n, num_experts, sorted_size), so a model's repeated shapes cost one lookup.
// cudaErrorInvalidConfiguration when the device's shared memory cannot hold num_experts' counters (num_experts above
// about 3000 on pre-sm_80 GPUs).
cudaError_t plan_moe_align(const MoeParams& p, int device, MoeLaunch* launch);

// Launches `launch` (plan_moe_align's for the same p and device) on `stream`, with p.workspace holding its
// workspace_words; never synchronises. `ran` is what ran: one cluster instead of a grid the device could not hold
// at once (its SMs shared with other processes).
cudaError_t launch_moe_align(const MoeParams& p, const MoeLaunch& launch, int device, cudaStream_t stream,
                             MoeLaunch* ran);

}  // namespace dsmhist
