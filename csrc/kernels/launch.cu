// The launcher: runs a prepared call (planner.cu) on a stream: the planned tier's kernel, launched the one way every
// tier is (as clusters when the call's shape says so), or the tier's own launch. Also the
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

namespace {

// Launches the planned tier's kernel of `kernels` as `shape` says: the one way every tier without a custom launch runs.
cudaError_t launch_shaped(const HistogramParams& p, const KernelSet& kernels, const HistogramPlan& plan,
                          const LaunchShape& shape, bool zero_unstored_output, cudaStream_t stream) {
  if (zero_unstored_output && !shape.flushing.store_rows) {
    const size_t output_size = static_cast<size_t>(p.output_rows() * p.bins * output_bytes(p.output_type));
    const cudaError_t err = cudaMemsetAsync(p.output, 0, output_size, stream);
    if (err != cudaSuccess) return err;
  }
  HistogramParams params = p;
  params.segments_per_row = shape.segments;
  // The tier's launch arguments, as its shape function wrote them (TierArgs): the kernel's second parameter.
  TierArgs tier_args = shape.args;
  void* args[] = {&params, tier_args.bytes};
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

}  // namespace

cudaError_t run_planned_tier(const HistogramParams& p, const PreparedCall& call, AccKind acc, bool may_store,
                             bool zero_unstored_output, cudaStream_t stream) {
  const KernelSet kernels = kernels_for(call.request.input_type, acc);
  const TierContext ctx{call.request, call.caps, kernels, call.cluster_code};
  const TierUnit& unit = tier_unit(call.plan.tier);
  if (unit.custom.launch != nullptr) return unit.custom.launch(p, ctx, call.plan, acc, zero_unstored_output, stream);
  LaunchShape shape;
  shape.shared_bytes = call.plan.shared_bytes;
  const cudaError_t err = unit.shape(p, ctx, call.plan, acc, may_store, &shape);
  if (err != cudaSuccess) return err;
  return launch_shaped(p, kernels, call.plan, shape, zero_unstored_output, stream);
}

cudaError_t launch_histogram(const HistogramParams& p, const PreparedCall& call, cudaStream_t stream) {
  if (p.elements() == 0) {
    const size_t output_size = static_cast<size_t>(p.output_rows() * p.bins * output_bytes(p.output_type));
    return p.accumulate ? cudaSuccess : cudaMemsetAsync(p.output, 0, output_size, stream);
  }
  if (call.request.acc == AccKind::kFixed) return launch_fixed_point_histogram(p, call, stream);
  const TierUnit& unit = tier_unit(call.plan.tier);
  if (unit.custom.launch != nullptr) {
    return unit.custom.launch(p, TierContext::of(call), call.plan, call.request.acc, !p.accumulate, stream);
  }
  return launch_shaped(p, call.kernels, call.plan, call.shape, /*zero_unstored_output=*/!p.accumulate, stream);
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
