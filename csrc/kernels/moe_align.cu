// MoE routing in one launch: one block, one cluster whose blocks share their counts through DSMEM (sm_90), or a
// cooperative grid whose blocks share them through global memory (a workspace) across one grid-wide barrier. This
// file plans and launches; moe_align_body.cuh is what every block runs.
#include <algorithm>

#include "device_caps.h"
#include "moe_align.h"
#include "moe_align_body.cuh"

// benchmarks/moe_kernel_harness.cu builds against older copies of this file too: this one plans, then launches.
#define DSMHIST_MOE_PLANNED 1

namespace dsmhist {

namespace {

using namespace moe_align_detail;  // NOLINT: the kernel's own tuning and body

__global__ void __launch_bounds__(kMaxWarps * 32) moe_align_block_kernel(const MoeParams p) {
  moe_align_body<Span::kBlock>(p);
}

__global__ void __launch_bounds__(kMaxWarps * 32) moe_align_cluster_kernel(const MoeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  moe_align_body<Span::kCluster>(p);
#endif
}

__global__ void __launch_bounds__(kMaxWarps * 32) moe_align_grid_kernel(const MoeParams p) {
  moe_align_body<Span::kGrid>(p);
}

// One launch's shape.
struct MoePlan {
  Span span = Span::kBlock;
  int blocks = 1;
  int threads = 32;
  int64_t shared_bytes = 0;
};

cudaError_t plan_moe(const MoeParams& p, int device, const DeviceCaps& caps, bool allow_grid, MoePlan* plan) {
  const int64_t words_budget = caps.shared_optin / 4;
  int warps = kMaxWarps;
  while (warps > 1 && shared_words(warps, p.num_experts) > words_budget) --warps;
  if (shared_words(warps, p.num_experts) > words_budget) return cudaErrorInvalidConfiguration;
  const void* cluster_kernel = reinterpret_cast<const void*>(&moe_align_cluster_kernel);
  const void* grid_kernel = reinterpret_cast<const void*>(&moe_align_grid_kernel);
  Span span = Span::kBlock;
  int blocks = 1;
  const int64_t wanted_blocks =
      std::max((p.n + kIdsPerBlock - 1) / kIdsPerBlock, (p.sorted_size + kSlotsPerBlock - 1) / kSlotsPerBlock);
  // A grid's every block reads every block's counts: blocks * E words each, so fewer blocks for many experts.
  const int64_t grid_blocks = std::min<int64_t>({caps.sm_count, (p.n + kIdsPerGridBlock - 1) / kIdsPerGridBlock,
                                                 std::max<int64_t>(1, kGridSumWords / p.num_experts)});
  if (allow_grid && p.n > kGridMinIds && caps.cooperative_launch && grid_blocks > kMaxClusterBlocks) {
    span = Span::kGrid;
    blocks = static_cast<int>(grid_blocks);
  } else if (wanted_blocks > 1 && cluster_code_available(cluster_kernel, device, caps)) {
    span = Span::kCluster;
    blocks = static_cast<int>(std::min<int64_t>(kMaxClusterBlocks, wanted_blocks));
  }
  // Fewer warps where a block's ids are few: less to zero and scan, the same single pass.
  const auto shared_bytes_for = [&](int span_blocks) {
    const int64_t per_block = (p.n + span_blocks - 1) / span_blocks;
    return shared_words(id_warps_for(warps, per_block), p.num_experts) * 4;
  };
  {
    const int64_t per_block = (p.n + blocks - 1) / blocks;
    // At most 8 experts per warp in the per-expert steps (a warp writes its experts' padding one at a time).
    const int64_t wanted = std::max<int64_t>({int64_t{kMinWarps}, (p.num_experts + 7) / 8, (per_block + 31) / 32});
    warps = static_cast<int>(std::min<int64_t>(warps, wanted));
  }
  const int threads = warps * 32;
  int64_t shared_bytes = shared_bytes_for(blocks);
  if (span == Span::kGrid) {  // a cooperative grid must be resident at once: no more blocks than the device holds
    int per_sm = 0;
    cudaError_t err = blocks_per_sm(grid_kernel, device, caps, threads, shared_bytes, &per_sm);
    if (err != cudaSuccess) return err;
    blocks = std::min(blocks, per_sm * caps.sm_count);
    shared_bytes = shared_bytes_for(blocks);
  }
  while (span == Span::kCluster && blocks > 1) {  // a cluster the device cannot hold (its SMs taken) runs smaller
    int clusters = 0;
    cudaError_t err = max_active_clusters(cluster_kernel, device, caps, blocks, threads, shared_bytes, &clusters);
    if (err != cudaSuccess) return err;
    if (clusters > 0) break;
    blocks /= 2;
    shared_bytes = shared_bytes_for(blocks);
  }
  if (blocks == 1) span = Span::kBlock;
  plan->span = span;
  plan->blocks = blocks;
  plan->threads = threads;
  plan->shared_bytes = shared_bytes;
  return cudaSuccess;
}

cudaError_t launch_planned(const MoeParams& p, const MoePlan& plan, int device, const DeviceCaps& caps,
                           cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  switch (plan.span) {
    case Span::kBlock: {
      err = configure_kernel(reinterpret_cast<const void*>(&moe_align_block_kernel), device, caps,
                             /*is_cluster_kernel=*/false);
      if (err != cudaSuccess) return err;
      moe_align_block_kernel<<<1, plan.threads, plan.shared_bytes, stream>>>(p);
      return cudaGetLastError();
    }
    case Span::kCluster: {
      err = configure_kernel(reinterpret_cast<const void*>(&moe_align_cluster_kernel), device, caps,
                             /*is_cluster_kernel=*/true);
      if (err != cudaSuccess) return err;
      cudaLaunchAttribute attribute;
      const cudaLaunchConfig_t config =
          cluster_launch_config(plan.blocks, plan.blocks, plan.threads, plan.shared_bytes, stream, &attribute);
      return cudaLaunchKernelEx(&config, moe_align_cluster_kernel, p);
    }
    case Span::kGrid: {
      err = configure_kernel(reinterpret_cast<const void*>(&moe_align_grid_kernel), device, caps,
                             /*is_cluster_kernel=*/false);
      if (err != cudaSuccess) return err;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(static_cast<unsigned>(plan.blocks), 1, 1);
      config.blockDim = dim3(static_cast<unsigned>(plan.threads), 1, 1);
      config.dynamicSmemBytes = static_cast<size_t>(plan.shared_bytes);
      config.stream = stream;
      cudaLaunchAttribute attribute;
      attribute.id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid's barrier waits on all
      attribute.val.cooperative = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      return cudaLaunchKernelEx(&config, moe_align_grid_kernel, p);
    }
  }
  return cudaErrorInvalidValue;
}

MoeLaunch described(const MoePlan& plan, int64_t experts) {
  MoeLaunch launch;
  launch.blocks = plan.blocks;
  launch.threads = plan.threads;
  launch.shared_bytes = plan.shared_bytes;
  launch.grid = plan.span == Span::kGrid;
  launch.workspace_words = launch.grid ? int64_t(plan.blocks) * experts : 0;
  return launch;
}

MoePlan from_launch(const MoeLaunch& launch) {
  MoePlan plan;
  plan.span = launch.grid ? Span::kGrid : (launch.blocks > 1 ? Span::kCluster : Span::kBlock);
  plan.blocks = launch.blocks;
  plan.threads = launch.threads;
  plan.shared_bytes = launch.shared_bytes;
  return plan;
}

}  // namespace

cudaError_t plan_moe_align(const MoeParams& p, int device, MoeLaunch* launch) {
  DeviceCaps caps;
  cudaError_t err = device_caps(device, &caps);
  if (err != cudaSuccess) return err;
  MoePlan plan;
  err = plan_moe(p, device, caps, /*allow_grid=*/true, &plan);
  if (err == cudaSuccess) *launch = described(plan, p.num_experts);
  return err;
}

cudaError_t launch_moe_align(const MoeParams& p, const MoeLaunch& launch, int device, cudaStream_t stream,
                             MoeLaunch* ran) {
  DeviceCaps caps;
  cudaError_t err = device_caps(device, &caps);
  if (err != cudaSuccess) return err;
  *ran = launch;
  err = launch_planned(p, from_launch(launch), device, caps, stream);
  if (err != cudaErrorCooperativeLaunchTooLarge) return err;
  // The device holds fewer blocks than it promised (its SMs shared with other processes): one cluster then.
  cudaGetLastError();
  MoePlan plan;
  err = plan_moe(p, device, caps, /*allow_grid=*/false, &plan);
  if (err != cudaSuccess) return err;
  *ran = described(plan, p.num_experts);
  return launch_planned(p, plan, device, caps, stream);
}

}  // namespace dsmhist
