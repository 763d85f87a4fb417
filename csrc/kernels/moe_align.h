// The CUDA kernel of the MoE routing ops (common/moe.h says what it computes), reached through MoeParams and a
// stream; no torch header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/moe.h"

namespace dsmhist {

// What a launch used (for DSMHIST_LOG_LAUNCHES).
struct MoeLaunch {
  int blocks = 0;  // one block, or one cluster of this many blocks
  int threads = 0;
  int64_t shared_bytes = 0;
};

// One launch on `stream`; never synchronises. cudaErrorInvalidConfiguration when the device's shared memory cannot
// hold num_experts' counters (num_experts above about 3000 on pre-sm_80 GPUs).
cudaError_t launch_moe_align(const MoeParams& p, int device, cudaStream_t stream, MoeLaunch* launch);

}  // namespace dsmhist
