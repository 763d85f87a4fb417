// MoE routing in one launch: one block, one cluster whose blocks share their counts through DSMEM (sm_90), or a
// cooperative grid whose blocks share them through global memory (a workspace) across one grid-wide barrier. This
// file plans and launches; moe_align_body.cuh is what every block runs.
#include <algorithm>
#include <tuple>

#include "device_caps.h"
#include "kept_answers.h"
#include "moe_align.h"
#include "moe_align_body.cuh"

namespace dsmhist {

namespace {

using namespace moe_align_detail;  // NOLINT: the kernel's body and shared-memory layout (its tuning: tuning.h)

// Plans kept at most (KeptAnswers starts over past this).
constexpr size_t kMaxKeptPlans = 256;

__global__ void __launch_bounds__(kMoeMaxWarps * 32) moe_align_block_kernel(const MoeParams p) {
  moe_align_body<Span::kBlock>(p);
}

__global__ void __launch_bounds__(kMoeMaxWarps * 32) moe_align_cluster_kernel(const MoeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  moe_align_body<Span::kCluster>(p);
#endif
}

__global__ void __launch_bounds__(kMoeMaxWarps * 32) moe_align_grid_kernel(const MoeParams p) {
  moe_align_body<Span::kGrid>(p);
}

Span span_of(const MoeLaunch& launch) {
  return launch.grid ? Span::kGrid : (launch.blocks > 1 ? Span::kCluster : Span::kBlock);
}

const void* kernel_of(Span span) {
  switch (span) {
    case Span::kBlock:
      return reinterpret_cast<const void*>(&moe_align_block_kernel);
    case Span::kCluster:
      return reinterpret_cast<const void*>(&moe_align_cluster_kernel);
    case Span::kGrid:
      return reinterpret_cast<const void*>(&moe_align_grid_kernel);
  }
  return nullptr;
}

// The launch for p, its kernel configured (its shared-memory limit raised) so that launching needs no device query.
cudaError_t plan_moe(const MoeParams& p, int device, const DeviceCaps& caps, bool allow_grid, MoeLaunch* launch) {
  const int64_t words_budget = caps.shared_optin / 4;
  int warps = kMoeMaxWarps;
  while (warps > 1 && shared_words(warps, p.num_experts) > words_budget) --warps;
  if (shared_words(warps, p.num_experts) > words_budget) return cudaErrorInvalidConfiguration;
  Span span = Span::kBlock;
  int blocks = 1;
  const int64_t wanted_blocks = std::max((p.n + kMoeIdsPerBlock - 1) / kMoeIdsPerBlock,
                                         (p.sorted_size + kMoeSlotsPerBlock - 1) / kMoeSlotsPerBlock);
  // A grid's every block reads every block's counts: blocks * E words each, so fewer blocks for many experts.
  const int64_t grid_blocks = std::min<int64_t>({caps.sm_count, (p.n + kMoeIdsPerGridBlock - 1) / kMoeIdsPerGridBlock,
                                                 std::max<int64_t>(1, kMoeGridSumWords / p.num_experts)});
  if (allow_grid && p.n > kMoeGridMinIds && caps.cooperative_launch && grid_blocks > kMoeMaxClusterBlocks) {
    span = Span::kGrid;
    blocks = static_cast<int>(grid_blocks);
  } else if (wanted_blocks > 1 && cluster_code_available(kernel_of(Span::kCluster), device, caps)) {
    span = Span::kCluster;
    blocks = static_cast<int>(std::min<int64_t>(kMoeMaxClusterBlocks, wanted_blocks));
  }
  // Fewer warps where a block's ids are few: less to zero and scan, the same single pass.
  const auto shared_bytes_for = [&](int span_blocks) {
    const int64_t per_block = (p.n + span_blocks - 1) / span_blocks;
    return shared_words(id_warps_for(warps, per_block), p.num_experts) * 4;
  };
  {
    const int64_t per_block = (p.n + blocks - 1) / blocks;
    // At most 8 experts per warp in the per-expert steps (a warp writes its experts' padding one at a time).
    const int64_t wanted = std::max<int64_t>({int64_t{kMoeMinWarps}, (p.num_experts + 7) / 8, (per_block + 31) / 32});
    warps = static_cast<int>(std::min<int64_t>(warps, wanted));
  }
  const int threads = warps * 32;
  int64_t shared_bytes = shared_bytes_for(blocks);
  if (span == Span::kGrid) {  // a cooperative grid must be resident at once: no more blocks than the device holds
    int per_sm = 0;
    cudaError_t err = blocks_per_sm(kernel_of(Span::kGrid), device, caps, threads, shared_bytes, &per_sm);
    if (err != cudaSuccess) return err;
    blocks = std::min(blocks, per_sm * caps.sm_count);
    shared_bytes = shared_bytes_for(blocks);
  }
  while (span == Span::kCluster && blocks > 1) {  // a cluster the device cannot hold (its SMs taken) runs smaller
    int clusters = 0;
    cudaError_t err =
        max_active_clusters(kernel_of(Span::kCluster), device, caps, blocks, threads, shared_bytes, &clusters);
    if (err != cudaSuccess) return err;
    if (clusters > 0) break;
    blocks /= 2;
    shared_bytes = shared_bytes_for(blocks);
  }
  if (blocks == 1) span = Span::kBlock;
  launch->blocks = blocks;
  launch->threads = threads;
  launch->shared_bytes = shared_bytes;
  launch->grid = span == Span::kGrid;
  launch->workspace_words = launch->grid ? int64_t(blocks) * p.num_experts : 0;
  return configure_kernel(kernel_of(span), device, caps, /*is_cluster_kernel=*/span == Span::kCluster);
}

cudaError_t launch_planned(const MoeParams& p, const MoeLaunch& launch, cudaStream_t stream) {
  const Span span = span_of(launch);
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config = {};
  if (span == Span::kCluster) {
    config =
        cluster_launch_config(launch.blocks, launch.blocks, launch.threads, launch.shared_bytes, stream, &attribute);
  } else {
    config.gridDim = dim3(static_cast<unsigned>(launch.blocks), 1, 1);
    config.blockDim = dim3(static_cast<unsigned>(launch.threads), 1, 1);
    config.dynamicSmemBytes = static_cast<size_t>(launch.shared_bytes);
    config.stream = stream;
    if (span == Span::kGrid) {
      attribute.id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid's barrier waits on all
      attribute.val.cooperative = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
    }
  }
  MoeParams params = p;
  void* args[] = {&params};
  return cudaLaunchKernelExC(&config, kernel_of(span), args);
}

// What decides a launch: the device and the sizes (p's pointers, block_size and expert map do not).
using PlanKey = std::tuple<int, int64_t, int32_t, int64_t>;

}  // namespace

cudaError_t plan_moe_align(const MoeParams& p, int device, MoeLaunch* launch) {
  // Plans are kept per shape: a model calls with a handful of shapes, and a kept plan costs one lookup where planning
  // asks several device caches.
  static KeptAnswers<PlanKey, MoeLaunch> plans(kMaxKeptPlans);
  return plans.get(PlanKey{device, p.n, p.num_experts, p.sorted_size}, launch, [&](MoeLaunch* planned) {
    DeviceCaps caps;
    const cudaError_t err = device_caps(device, &caps);
    return err != cudaSuccess ? err : plan_moe(p, device, caps, /*allow_grid=*/true, planned);
  });
}

cudaError_t launch_moe_align(const MoeParams& p, const MoeLaunch& launch, int device, cudaStream_t stream,
                             MoeLaunch* ran) {
  *ran = launch;
  cudaError_t err = launch_planned(p, launch, stream);
  if (err != cudaErrorCooperativeLaunchTooLarge) return err;
  // The device holds fewer blocks than it promised (its SMs shared with other processes): one cluster then.
  cudaGetLastError();
  DeviceCaps caps;
  err = device_caps(device, &caps);
  if (err == cudaSuccess) err = plan_moe(p, device, caps, /*allow_grid=*/false, ran);
  if (err != cudaSuccess) return err;
  return launch_planned(p, *ran, stream);
}

}  // namespace dsmhist
