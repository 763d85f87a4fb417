// The CUDA device of the MoE routing ops: one launch of kernels/moe_align.cu on the current stream of topk_ids'
// device. Nothing here synchronises with the host.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdio>

#include "../kernels/moe_align.h"
#include "../launch_log.h"
#include "../moe_args.h"

namespace dsmhist {

namespace {

struct CudaMoeBackend {
  static void moe(const MoeParams& params, const at::Tensor& ids) {
    TORCH_CHECK(ids.is_cuda(), "torch_dsmhist MoE routing (CUDA): topk_ids must be on a CUDA device, got ",
                ids.device());
    const c10::cuda::CUDAGuard guard(ids.device());
    MoeLaunch plan;
    cudaError_t err = plan_moe_align(params, ids.get_device(), &plan);
    TORCH_CHECK(err != cudaErrorInvalidConfiguration, "torch_dsmhist MoE routing: num_experts=", params.num_experts,
                " needs more shared memory per block than cuda:", ids.get_device(), " has");
    C10_CUDA_CHECK(err);
    // A grid wider than one cluster shares its blocks' counts through this scratch (from the caching allocator, on
    // the current stream: freed at once, reused only after the kernel).
    MoeParams p = params;
    at::Tensor workspace;
    if (plan.workspace_words > 0) {
      workspace = at::empty({plan.workspace_words}, ids.options().dtype(at::kInt));
      p.workspace = workspace.mutable_data_ptr<int32_t>();
    }
    MoeLaunch launch;
    err = launch_moe_align(p, plan, ids.get_device(), c10::cuda::getCurrentCUDAStream(), &launch);
    C10_CUDA_CHECK(err);
    if (log_launches()) {
      std::fprintf(stderr,
                   "torch_dsmhist launch: MoE routing on cuda:%d: %lld ids, %d experts, block_size %d, %d block(s) "
                   "of %d threads%s, shared %lld bytes/block\n",
                   ids.get_device(), static_cast<long long>(p.n), p.num_experts, p.block_size, launch.blocks,
                   launch.threads,
                   launch.grid ? " in a cooperative grid" : (launch.blocks > 1 ? " in one cluster" : ""),
                   static_cast<long long>(launch.shared_bytes));
      std::fflush(stderr);
    }
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CUDA, m) { register_moe_bodies<CudaMoeBackend>(m); }

}  // namespace dsmhist
