// CUDA backend of the dsmhist ops (op_bodies.h checks, allocates and builds the params): plans the tier and calls
// the kernel launcher on the current stream of the input's device. Nothing here synchronises with the host.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>

#include "../histogram_args.h"
#include "../launch_log.h"
#include "../op_bodies.h"
#include "../kernels/kernels.h"
#include "../ops.h"

namespace dsmhist {

namespace {

// `mode` and `elements_per_histogram`: see PlanRequest (the defaults: a large call binned by value).
PlanRequest make_request(int device, int64_t bins, InputType input_type, AccKind acc,
                         int64_t elements_per_histogram = INT64_MAX, BinMode mode = BinMode::kIndex) {
  PlanRequest request;
  request.device = device;
  request.bins = bins;
  request.elements_per_histogram = elements_per_histogram;
  request.input_type = input_type;
  request.mode = mode;
  request.acc = acc;
  request.forced_tier = tier_override().tier;
  request.forced_cluster_size = tier_override().cluster_size;
  request.max_cluster_size = tier_override().max_cluster_size;
  return request;
}

// The call of p made ready (its plan, launch and workspace), or the planner's refusal as a ValueError.
PreparedCall prepare_or_throw(const char* op, const HistogramParams& p, const PlanRequest& request) {
  PreparedCall call;
  const PlanStatus status = prepare_histogram(p, request, &call);
  C10_CUDA_CHECK(status.cuda_error);
  TORCH_CHECK_VALUE(status.ok(), op, ": ", status.refusal, " (bins=", request.bins, ", forced tier \"",
                    tier_name(request.forced_tier), "\"",
                    request.forced_cluster_size ? ", cluster_size=" + std::to_string(request.forced_cluster_size) : "",
                    ")");
  return call;
}

// Where a call's range comes from the data and no keys were given, finds them on the device (the range pass) into
// `keys`, which the caller keeps alive until the launch is enqueued.
void find_range_keys(const HistogramArgs& args, HistogramParams& p, const at::Tensor& input, const PlanRequest& request,
                     cudaStream_t stream, at::Tensor* keys) {
  if (!args.data_range || p.device_range != nullptr) return;
  *keys = at::empty({2}, input.options().dtype(at::kLong));
  unsigned long long* slots = static_cast<unsigned long long*>(keys->mutable_data_ptr());
  p.device_range = slots;
  C10_CUDA_CHECK(launch_finite_range(range_pass_params(p, slots), request, stream));
}

// The launch log's line for one launch (launch_log.h).
const char* acc_name(AccKind acc) {
  switch (acc) {
    case AccKind::kCount:
      return "counts";
    case AccKind::kFloat:
      return "float32 sums";
    case AccKind::kDouble:
      return "float64 sums";
    case AccKind::kExponent:
      return "deterministic sums (exponent pass)";
    default:
      return "deterministic sums";
  }
}

void log_launch(const char* op, const HistogramParams& p, const PreparedCall& call) {
  const PlanRequest& request = call.request;
  const LaunchShape& launch = call.shape;
  std::fprintf(stderr,
               "torch_dsmhist launch: %s on cuda:%d: tier %s, variant %s of %s %s, bins %lld, rows %lld x %lld, "
               "grid %lld, cluster %d, threads %d, shared %lld bytes/block, workspace %lld bytes\n",
               op, request.device, tier_name(call.plan.tier), acc_name(request.acc),
               input_type_name(request.input_type), request.mode == BinMode::kIndex ? "by value" : "by range",
               static_cast<long long>(p.bins), static_cast<long long>(p.rows), static_cast<long long>(p.row_length),
               static_cast<long long>(launch.grid), std::max(launch.cluster_dim, 1), launch.threads,
               static_cast<long long>(launch.shared_bytes), static_cast<long long>(call.workspace_bytes));
  std::fflush(stderr);
}

// The CUDA part of every op (op_bodies.h: the checks, the output and the params come from there): plan, scratch
// through the caching allocator, and the launch on the current stream of input's device. Never synchronises.
struct CudaBackend {
  static constexpr int64_t kEdgeChunkPoints = kEdgeCudaChunkPoints;
  static void check_device(const char* op, const at::Tensor& input) {
    TORCH_CHECK(input.is_cuda(), op, " (CUDA): input must be on a CUDA device, got ", input.device());
  }

  static void histogram(const char* op, const HistogramArgs& args, HistogramParams& p, const at::Tensor& input) {
    const c10::cuda::CUDAGuard guard(input.device());
    const PlanRequest request =
        make_request(input.get_device(), p.bins, args.input_type, args.acc, p.elements_per_histogram(), p.mode);
    const PreparedCall call = prepare_or_throw(op, p, request);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    at::Tensor range_keys;  // the data's finite min and max, found on the device
    find_range_keys(args, p, input, request, stream, &range_keys);
    at::Tensor deterministic_scratch;
    if (args.acc == AccKind::kFixed) {
      const int64_t bytes = deterministic_scratch_bytes(p.output_rows() * p.bins);
      deterministic_scratch = at::empty({bytes / 8}, input.options().dtype(at::kLong));
      p.deterministic.sums = static_cast<unsigned long long*>(deterministic_scratch.mutable_data_ptr());
    }
    at::Tensor workspace;  // the tier's own device memory (tier "partition"), from the caching allocator
    if (call.workspace_bytes > 0) {
      workspace = at::empty({call.workspace_bytes}, input.options().dtype(at::kByte));
      p.workspace = workspace.mutable_data_ptr();
      p.workspace_bytes = call.workspace_bytes;
    }
    if (log_launches()) log_launch(op, p, call);
    C10_CUDA_CHECK(launch_histogram(p, call, stream));
  }

  static void finite_range(const HistogramArgs& args, const RangeParams& p, const at::Tensor& input) {
    const c10::cuda::CUDAGuard guard(input.device());
    const PlanRequest request = make_request(input.get_device(), 1, args.input_type, args.acc);
    C10_CUDA_CHECK(launch_finite_range(p, request, c10::cuda::getCurrentCUDAStream()));
  }

  static void bin_indices(const HistogramArgs& args, HistogramParams& p, const at::Tensor& input) {
    const c10::cuda::CUDAGuard guard(input.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const PlanRequest request = make_request(input.get_device(), p.bins, args.input_type, AccKind::kCount);
    at::Tensor range_keys;  // as the forward call found them: the same range pass over the same input
    find_range_keys(args, p, input, request, stream, &range_keys);
    C10_CUDA_CHECK(launch_bin_indices(p, request, stream));
  }

  // Unsorted edges are not detected on CUDA (that would synchronise): their bins are unspecified, never outside.
  static void check_edges(const char*, const std::vector<at::Tensor>&, bool) {}

  // The fused path where the planner is choosing (auto): a forced tier counts in two stages, through that tier.
  static bool edge_histogram(const char* op, const EdgeBinParams& p, const EdgeCountParams& counts,
                             const at::Tensor& input) {
    if (tier_override().tier != Tier::kAuto) return false;
    const c10::cuda::CUDAGuard guard(input.device());
    const int device = input.get_device();
    EdgeHistogramPlan plan;
    C10_CUDA_CHECK(launch_edge_histogram(p, counts, device, c10::cuda::getCurrentCUDAStream(), &plan));
    if (!plan.fused) return false;
    if (log_launches()) {
      std::fprintf(
          stderr,
          "torch_dsmhist launch: %s on cuda:%d: fused edges, mode %s, %s of %s, dims %d, bins %lld, points "
          "%lld, grid %lld, threads %d, shared %lld bytes/block, replicas %d, owners %d, edges a cell entry %d, "
          "packed %d, rows %lld\n",
          op, device, plan.mode, acc_name(counts.acc), input_type_name(p.input_type), p.dims,
          static_cast<long long>(counts.bins), static_cast<long long>(p.points), static_cast<long long>(plan.grid),
          plan.threads, static_cast<long long>(plan.shared_bytes), plan.replicas, plan.owners, plan.edges_per_entry,
          int(plan.packed), static_cast<long long>(p.rows));
      std::fflush(stderr);
    }
    return true;
  }

  static void edge_bins(const EdgeBinParams& p, const at::Tensor& input) {
    const c10::cuda::CUDAGuard guard(input.device());
    bool by_lookup = false;
    C10_CUDA_CHECK(launch_edge_bins(p, input.get_device(), c10::cuda::getCurrentCUDAStream(), &by_lookup));
    if (log_launches() && p.points > 0) {
      std::fprintf(stderr, "torch_dsmhist launch: edge bins on cuda:%d: %s, %s, dims %d, points %lld\n",
                   input.get_device(), by_lookup ? "one-pass lookup" : "search kernel", input_type_name(p.input_type),
                   p.dims, static_cast<long long>(p.points));
      std::fflush(stderr);
    }
  }
};

}  // namespace

std::vector<int64_t> plan_cuda(int64_t bins, int64_t device_index, at::ScalarType input_dtype,
                               std::optional<at::ScalarType> weight_dtype, int64_t rows, int64_t row_length,
                               bool batched) {
  const int64_t device_count = c10::cuda::device_count();
  TORCH_CHECK(device_count > 0, "torch_dsmhist.plan: no CUDA device is available");
  const int64_t device = device_index < 0 ? c10::cuda::current_device() : device_index;
  TORCH_CHECK_VALUE(device < device_count, "torch_dsmhist.plan: device cuda:", device, " does not exist (",
                    device_count, " CUDA devices)");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  HistogramParams call;  // the given call's shape only (rows 0: none given): the shape functions read no pointer
  call.input_type = input_type_of(input_dtype, "dtype", "torch_dsmhist.plan");
  call.rows = rows;
  call.row_length = row_length;
  call.bins = bins;
  call.output_row_stride = batched ? bins : 0;
  call.mode = mode_without_range(call.input_type);  // the call reported is one without a range
  call.range_from_data = call.mode == BinMode::kRange;
  const PlanRequest request =
      make_request(static_cast<int>(device), bins, call.input_type,
                   acc_kind_for(weight_dtype, weight_dtype == at::kDouble ? at::kDouble : at::kFloat),
                   rows == 0 ? INT64_MAX : call.elements_per_histogram(), call.mode);
  const PreparedCall prepared = prepare_or_throw("torch_dsmhist.plan", call, request);
  const HistogramPlan& plan = prepared.plan;
  // A call with no elements launches nothing: its launch is reported as zeros (prepare_histogram shapes none).
  const LaunchShape& shape = prepared.shape;
  const bool launched = call.elements() > 0;
  return {static_cast<int64_t>(plan.tier),
          plan.cluster_size,
          plan.shared_bytes,
          plan.threads,
          plan.bins_per_block,
          launched ? shape.threads : 0,
          launched ? std::max(shape.cluster_dim, 1) : 0,
          launched ? shape.grid : 0,
          launched ? shape.shared_bytes : 0};
}

TORCH_LIBRARY_IMPL(dsmhist, CUDA, m) { register_op_bodies<CudaBackend>(m); }

}  // namespace dsmhist
