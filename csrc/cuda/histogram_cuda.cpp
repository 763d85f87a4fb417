// CUDA implementation of dsmhist.histogram: checks the arguments, plans the tier, allocates the output and calls the
// kernel launcher on the current stream of the input's device. Nothing here synchronises with the host.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../histogram_args.h"
#include "../kernels/kernels.h"
#include "../ops.h"

namespace dsmhist {

namespace {

PlanRequest make_request(int device, int64_t bins, InputType input_type, AccKind acc) {
  PlanRequest request;
  request.device = device;
  request.bins = bins;
  request.input_type = input_type;
  request.acc = acc;
  request.forced_tier = tier_override().tier;
  request.forced_cluster_size = tier_override().cluster_size;
  return request;
}

HistogramPlan plan_or_throw(const PlanRequest& request) {
  HistogramPlan plan;
  cudaError_t cuda_error = cudaSuccess;
  const PlanStatus status = make_plan(request, &plan, &cuda_error);
  if (status == PlanStatus::kCudaError) C10_CUDA_CHECK(cuda_error);
  TORCH_CHECK_VALUE(status == PlanStatus::kOk, "dsmhist.histogram: ", plan_status_message(status),
                    " (bins=", request.bins, ", forced tier \"", tier_name(request.forced_tier), "\"",
                    request.forced_cluster_size ? ", cluster_size=" + std::to_string(request.forced_cluster_size) : "",
                    ")");
  return plan;
}

}  // namespace

at::Tensor histogram_cuda(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                          const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                          std::optional<at::ScalarType> dtype) {
  const HistogramArgs args = check_histogram_args(input, bins, min, max, weight, out_of_range, dtype);
  TORCH_CHECK(input.is_cuda(), "dsmhist.histogram (CUDA): input must be on a CUDA device, got ", input.device());
  if (args.weight_type != WeightType::kNone) {
    at::globalContext().alertNotDeterministic("dsmhist.histogram with weight on CUDA (floating-point atomics)");
  }
  const c10::cuda::CUDAGuard guard(input.device());
  const PlanRequest request = make_request(input.get_device(), bins, args.input_type, args.acc);
  const HistogramPlan plan = plan_or_throw(request);

  at::Tensor in = input;
  std::optional<at::Tensor> w = weight;
  at::Tensor output = at::empty({bins}, input.options().dtype(args.output_dtype));
  HistogramParams params = make_params(args, in, w, bins, output);
  at::Tensor range_keys;  // two 64-bit keys: the data's finite min and max, found on the device
  if (args.data_range) {
    range_keys = at::empty({2}, input.options().dtype(at::kLong));
    params.device_range = static_cast<const unsigned long long*>(range_keys.const_data_ptr());
  }
  C10_CUDA_CHECK(launch_histogram(params, request, plan, c10::cuda::getCurrentCUDAStream()));
  return output;
}

std::vector<int64_t> plan_cuda(int64_t bins, int64_t device_index, at::ScalarType input_dtype,
                               std::optional<at::ScalarType> weight_dtype) {
  const int64_t device_count = c10::cuda::device_count();
  TORCH_CHECK(device_count > 0, "dsmhist.plan: no CUDA device is available");
  const int64_t device = device_index < 0 ? c10::cuda::current_device() : device_index;
  TORCH_CHECK_VALUE(device < device_count, "dsmhist.plan: device cuda:", device, " does not exist (", device_count,
                    " CUDA devices)");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const PlanRequest request =
      make_request(static_cast<int>(device), bins, input_type_of(input_dtype, "dtype"), acc_kind_for(weight_dtype));
  const HistogramPlan plan = plan_or_throw(request);
  return {static_cast<int64_t>(plan.tier), plan.cluster_size, plan.shared_bytes, plan.threads, plan.bins_per_block};
}

TORCH_LIBRARY_IMPL(dsmhist, CUDA, m) { m.impl("histogram", &histogram_cuda); }

}  // namespace dsmhist
