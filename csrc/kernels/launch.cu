// The launcher: runs a planned call on a stream. Each launch asks the planned tier's unit for its shape (tier_*.cuh),
// then launches that tier's kernel the one way every tier is launched (as clusters when the shape says so). Also the
// two kernels without bins: the range pass and the per-element bin indices. Never synchronises with the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "device_caps.h"
#include "kernels.h"
#include "tier_host.h"
#include "tier_launch.h"
#include "tier_units.cuh"

namespace dsmhist {

KernelSet kernels_for(InputType type, AccKind acc) {
  return visit_input_type(type, [acc](auto tag) { return kernel_set_for<typename decltype(tag)::type>(acc); });
}

cudaError_t run_planned_tier(const HistogramParams& p, const PlanRequest& request, const DeviceCaps& caps,
                             const HistogramPlan& plan, AccKind acc, bool may_store, bool zero_unstored_output,
                             cudaStream_t stream) {
  const KernelSet kernels = kernels_for(request.input_type, acc);
  const TierContext ctx{request, caps, kernels, cluster_code_of(kernels, request.device, caps)};
  // The shape functions of the tiers with shared-memory bins ask the kernel's occupancy, which first raises its
  // shared-memory limits (device_caps.h): that is where a kernel is configured, before its launch.
  const TierUnit& unit = tier_unit(plan.tier);
  if (unit.custom.launch != nullptr) return unit.custom.launch(p, ctx, plan, acc, zero_unstored_output, stream);
  LaunchShape shape;
  shape.shared_bytes = plan.shared_bytes;
  cudaError_t err = unit.shape(p, ctx, plan, acc, may_store, &shape);
  if (err != cudaSuccess) return err;
  if (zero_unstored_output && !shape.store_rows) {
    const size_t output_size = static_cast<size_t>(p.output_rows() * p.bins * output_bytes(p.output_type));
    err = cudaMemsetAsync(p.output, 0, output_size, stream);
    if (err != cudaSuccess) return err;
  }
  HistogramParams params = p;
  params.segments_per_row = shape.segments;
  params.store_rows = shape.store_rows;
  params.flush_each_item = shape.flush_each_item;
  params.reduce_through_dsmem = shape.reduce_through_dsmem;
  params.tally_byte_values = shape.tally_byte_values;
  params.bins_per_block = plan.bins_per_block;
  params.cluster_replicas = plan.replicas;
  void* args[] = {&params};
  const void* kernel = kernels.tier_kernel(plan.tier, shape.kernel_variant);
  if (shape.cluster_dim > 0) {
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config =
        cluster_launch_config(shape.grid, shape.cluster_dim, shape.threads, shape.shared_bytes, stream, &attribute);
    return cudaLaunchKernelExC(&config, kernel, args);
  }
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(shape.grid)), dim3(shape.threads), args,
                          static_cast<size_t>(shape.shared_bytes), stream);
}

namespace {

// Calls ask(ctx) with the context the request's tier is asked in at launch (the device, the request's kernels):
// what plan() and the caller's workspace allocation learn from a tier without launching it.
template <typename Ask>
cudaError_t ask_planned_tier(const PlanRequest& request, Ask&& ask) {
  DeviceCaps caps;
  const cudaError_t err = device_caps(request.device, &caps);
  if (err != cudaSuccess) return err;
  const KernelSet kernels = kernels_for(request.input_type, request.acc);
  return ask(TierContext{request, caps, kernels, cluster_code_of(kernels, request.device, caps)});
}

}  // namespace

cudaError_t describe_launch(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                            LaunchReport* report) {
  *report = LaunchReport{};
  if (p.elements() == 0) return cudaSuccess;
  return ask_planned_tier(request, [&](const TierContext& ctx) {
    LaunchShape shape;
    shape.shared_bytes = plan.shared_bytes;
    const cudaError_t err = tier_unit(plan.tier).shape(p, ctx, plan, request.acc, /*may_store=*/true, &shape);
    if (err != cudaSuccess) return err;
    report->threads = shape.threads;
    report->shared_bytes = shape.shared_bytes;
    report->cluster_size = shape.cluster_dim > 0 ? shape.cluster_dim : 1;
    report->grid = shape.grid;
    return cudaSuccess;
  });
}

cudaError_t tier_workspace_bytes(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                                 int64_t* bytes) {
  *bytes = 0;
  const TierUnit& unit = tier_unit(plan.tier);
  if (unit.custom.workspace_bytes == nullptr || p.elements() == 0) return cudaSuccess;
  return ask_planned_tier(request, [&](const TierContext& ctx) {
    *bytes = unit.custom.workspace_bytes(p, ctx, plan);
    return cudaSuccess;
  });
}

cudaError_t launch_histogram(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                             cudaStream_t stream) {
  if (p.elements() == 0) {
    const size_t output_size = static_cast<size_t>(p.output_rows() * p.bins * output_bytes(p.output_type));
    return p.accumulate ? cudaSuccess : cudaMemsetAsync(p.output, 0, output_size, stream);
  }
  DeviceCaps caps;
  const cudaError_t err = device_caps(request.device, &caps);
  if (err != cudaSuccess) return err;
  if (request.acc == AccKind::kFixed) return launch_fixed_point_histogram(p, request, plan, caps, stream);
  return run_planned_tier(p, request, caps, plan, request.acc, /*may_store=*/true,
                          /*zero_unstored_output=*/!p.accumulate, stream);
}

namespace {

// The grid of a kernel without bins (kRangeThreads threads a block) over `input`'s elements, whose segments it sets.
cudaError_t shape_without_bins(InputDescription& input, const PlanRequest& request, LaunchShape* shape) {
  DeviceCaps caps;
  const cudaError_t err = device_caps(request.device, &caps);
  if (err != cudaSuccess) return err;
  shape_stateless(input, caps, kRangeThreads, shape);
  input.segments_per_row = shape->segments;
  return cudaSuccess;
}

template <typename Params>
cudaError_t launch_without_bins(const void* kernel, Params params, const LaunchShape& shape, cudaStream_t stream) {
  void* args[] = {&params};
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(shape.grid)), dim3(shape.threads), args, 0, stream);
}

}  // namespace

cudaError_t launch_finite_range(const RangeParams& p, const PlanRequest& request, cudaStream_t stream) {
  // Zeroed slots mean "no finite value seen", the answer for an empty input.
  cudaError_t err = cudaMemsetAsync(p.keys, 0, 2 * sizeof(unsigned long long), stream);
  if (err != cudaSuccess || p.input.elements() == 0) return err;
  RangeParams params = p;
  LaunchShape shape;
  err = shape_without_bins(params.input, request, &shape);
  if (err != cudaSuccess) return err;
  return launch_without_bins(kernels_for(request.input_type, request.acc).finite_range, params, shape, stream);
}

cudaError_t launch_bin_indices(const HistogramParams& p, const PlanRequest& request, cudaStream_t stream) {
  if (p.elements() == 0) return cudaSuccess;
  HistogramParams params = p;
  LaunchShape shape;
  const cudaError_t err = shape_without_bins(params, request, &shape);
  if (err != cudaSuccess) return err;
  return launch_without_bins(kernels_for(request.input_type, AccKind::kCount).bin_index, params, shape, stream);
}

}  // namespace dsmhist
