// Host dispatch: device capabilities, the tier planner, grid sizing from occupancy, and the launches.
//
// Every runtime query here is host-side (attributes and occupancy), never a stream operation, so planning neither
// synchronises nor breaks CUDA-graph capture. Results are cached per device and kernel behind one mutex.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels.h"

namespace dsmhist {

namespace {

// Bins above which the automatic plan leaves the cluster tier for global atomics. Measured on an H100 80GB HBM3
// (benchmarks/RESULTS.md, commit 44c1cd9, 2^28 uniform int32, median ms, 2026-11-22): cluster vs global atomics =
// 1.63 vs 3.44 at 65536 bins, 2.71 vs 3.19 at 131072, 3.42 vs 3.19 at 262144 (two earlier runs, 1cafe45 and b8c0a1e,
// agreed within 4%). The guide's remote-atomic cluster kernel still wins at 128K bins and loses at 256K; this is the
// largest measured count where it wins (the performance issue refines it).
constexpr int64_t kClusterAutoMaxBins = 131072;
// Largest cluster the hardware may run (16 needs the non-portable attribute, sm_90).
constexpr int kMaxClusterSize = 16;
// A block (or cluster) should see at least this many elements per thread before its bins are worth zeroing and
// flushing; small inputs get fewer blocks instead.
constexpr int64_t kMinElementsPerThread = 16;

struct DeviceCaps {
  int sm_count = 0;
  int cc_major = 0;
  int64_t shared_optin = 0;  // largest dynamic shared memory one block may opt into
  bool cluster_launch = false;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

cudaError_t device_caps(int device, DeviceCaps* caps) {
  static std::map<int, DeviceCaps> cache;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache.find(device);
    if (it != cache.end()) {
      *caps = it->second;
      return cudaSuccess;
    }
  }
  DeviceCaps c;
  int optin = 0, cluster = 0;
  cudaError_t err = cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&c.cc_major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device);
  if (err != cudaSuccess) return err;
  c.shared_optin = optin;
  c.cluster_launch = cluster != 0;
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache[device] = c;
  *caps = c;
  return cudaSuccess;
}

// Raises a kernel's dynamic shared-memory limit to the device's opt-in maximum (and allows 16-block clusters for the
// cluster kernel), once per kernel and device. Must run with `device` current.
cudaError_t configure_kernel(const void* kernel, int device, const DeviceCaps& caps, bool is_cluster_kernel) {
  static std::map<std::pair<const void*, int>, bool> configured;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    if (configured.count({kernel, device})) return cudaSuccess;
  }
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(caps.shared_optin));
  if (err != cudaSuccess) return err;
  if (is_cluster_kernel && caps.cluster_launch) {
    // Devices that cannot run 16-block clusters refuse this; the occupancy query then rules size 16 out.
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
      cudaGetLastError();
    }
  }
  std::lock_guard<std::mutex> lock(cache_mutex());
  configured[{kernel, device}] = true;
  return cudaSuccess;
}

// Whether the cluster kernel as loaded was compiled for sm_90+. A "+PTX" build for an older target is JIT-compiled
// on an H100 from PTX in which the cluster body was compiled out: its ptxVersion tells.
bool cluster_code_available(const void* cluster_kernel, int device, const DeviceCaps& caps) {
  if (caps.cc_major < 9 || !caps.cluster_launch) return false;
  static std::map<std::pair<const void*, int>, bool> cache;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache.find({cluster_kernel, device});
    if (it != cache.end()) return it->second;
  }
  cudaFuncAttributes attributes;
  bool available = false;
  if (cudaFuncGetAttributes(&attributes, cluster_kernel) == cudaSuccess) {
    available = attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
  } else {
    cudaGetLastError();
  }
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache[{cluster_kernel, device}] = available;
  return available;
}

// Resident blocks per SM of a (non-cluster) kernel with the given block size and shared memory.
cudaError_t blocks_per_sm(const void* kernel, int device, int threads, int64_t shared_bytes, int* blocks) {
  static std::map<std::tuple<const void*, int, int64_t>, int> cache;
  const auto key = std::make_tuple(kernel, device, shared_bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache.find(key);
    if (it != cache.end()) {
      *blocks = it->second;
      return cudaSuccess;
    }
  }
  int b = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, static_cast<size_t>(shared_bytes));
  if (err != cudaSuccess) return err;
  b = std::max(b, 1);
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache[key] = b;
  *blocks = b;
  return cudaSuccess;
}

cudaLaunchConfig_t cluster_launch_config(int grid, int cluster_size, int64_t shared_bytes, cudaStream_t stream,
                                         cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid, 1, 1);
  config.blockDim = dim3(kBlockThreads, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(shared_bytes);
  config.stream = stream;
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = cluster_size;
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// How many clusters of `cluster_size` blocks with `shared_bytes` each can be resident at once on the device (0 when
// such a cluster cannot be launched at all).
int max_active_clusters(const void* kernel, int device, int cluster_size, int64_t shared_bytes) {
  static std::map<std::tuple<const void*, int, int, int64_t>, int> cache;
  const auto key = std::make_tuple(kernel, device, cluster_size, shared_bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config = cluster_launch_config(cluster_size, cluster_size, shared_bytes, nullptr, &attribute);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();  // an unsupported size is an answer ("none"), not a failure of the call
    clusters = 0;
  }
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache[key] = clusters;
  return clusters;
}

KernelSet kernels_for(InputType type, AccKind acc) {
  return visit_input_type(type, [acc](auto tag) { return kernel_set_for<typename decltype(tag)::type>(acc); });
}

int64_t accumulator_bytes(AccKind acc) { return acc == AccKind::kDouble ? 8 : 4; }

int64_t output_element_bytes(OutputType type) {
  return (type == OutputType::kInt32 || type == OutputType::kFloat32) ? 4 : 8;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest cluster (or the forced size) whose blocks' shared memory holds the bins and that can be resident.
PlanStatus plan_cluster(const PlanRequest& request, const DeviceCaps& caps, const KernelSet& kernels,
                        HistogramPlan* plan) {
  const int64_t acc_bytes = accumulator_bytes(request.acc);
  const int first = request.forced_cluster_size > 0 ? request.forced_cluster_size : 2;
  const int last = request.forced_cluster_size > 0 ? request.forced_cluster_size : kMaxClusterSize;
  bool fitted = false;
  for (int size = first; size <= last; ++size) {
    const int64_t per_block = ceil_div(request.bins, size);
    const int64_t bytes = per_block * acc_bytes;
    if (bytes > caps.shared_optin) continue;
    fitted = true;
    if (max_active_clusters(kernels.cluster, request.device, size, bytes) < 1) continue;
    plan->tier = Tier::kCluster;
    plan->cluster_size = size;
    plan->threads = kBlockThreads;
    plan->bins_per_block = per_block;
    plan->shared_bytes = bytes;
    return PlanStatus::kOk;
  }
  if (!fitted) return PlanStatus::kClusterTooSmall;
  return request.forced_cluster_size > 0 ? PlanStatus::kClusterSizeUnsupported : PlanStatus::kClusterTooSmall;
}

}  // namespace

const char* plan_status_message(PlanStatus status) {
  switch (status) {
    case PlanStatus::kOk:
      return "ok";
    case PlanStatus::kCudaError:
      return "a CUDA runtime query failed";
    case PlanStatus::kSharedTooSmall:
      return "tier 'shared' needs all bins in one block's shared memory, and these bins do not fit";
    case PlanStatus::kClusterUnavailable:
      return "tier 'cluster' needs a device of compute capability 9.0+ and an extension built with sm_90 code "
             "(TORCH_CUDA_ARCH_LIST including 9.0)";
    case PlanStatus::kClusterTooSmall:
      return "tier 'cluster' cannot hold these bins: they do not fit the shared memory of any launchable cluster";
    case PlanStatus::kClusterSizeUnsupported:
      return "the forced cluster size cannot be launched on this device with the shared memory these bins need";
  }
  return "unknown planning status";
}

// The tier choice, in one place:
//   1. shared  - every block holds all bins: bins * accumulator bytes <= the opt-in shared memory per block
//                (227 KB on H100: 58112 32-bit counters);
//   2. cluster - sm_90 code on an sm_90+ device, bins <= kClusterAutoMaxBins (measured, see above), and the
//                smallest cluster whose combined shared memory holds the bins can be resident;
//   3. global  - everything else (and, before sm_90, everything beyond tier 1).
PlanStatus make_plan(const PlanRequest& request, HistogramPlan* plan, cudaError_t* cuda_error) {
  DeviceCaps caps;
  *cuda_error = device_caps(request.device, &caps);
  if (*cuda_error != cudaSuccess) return PlanStatus::kCudaError;
  const KernelSet kernels = kernels_for(request.input_type, request.acc);
  const int64_t acc_bytes = accumulator_bytes(request.acc);
  const int64_t shared_capacity = caps.shared_optin / acc_bytes;

  for (const void* kernel : {kernels.shared, kernels.cluster}) {
    *cuda_error = configure_kernel(kernel, request.device, caps, kernel == kernels.cluster);
    if (*cuda_error != cudaSuccess) return PlanStatus::kCudaError;
  }

  auto plan_shared = [&] {
    plan->tier = Tier::kShared;
    plan->cluster_size = 1;
    plan->threads = kBlockThreads;
    plan->bins_per_block = request.bins;
    plan->shared_bytes = request.bins * acc_bytes;
    return PlanStatus::kOk;
  };
  auto plan_global = [&] {
    plan->tier = Tier::kGlobal;
    plan->cluster_size = 1;
    plan->threads = kGlobalThreads;
    plan->bins_per_block = 0;
    plan->shared_bytes = 0;
    return PlanStatus::kOk;
  };
  const bool cluster_ok = cluster_code_available(kernels.cluster, request.device, caps);

  switch (request.forced_tier) {
    case Tier::kShared:
      return request.bins <= shared_capacity ? plan_shared() : PlanStatus::kSharedTooSmall;
    case Tier::kGlobal:
      return plan_global();
    case Tier::kCluster:
      return cluster_ok ? plan_cluster(request, caps, kernels, plan) : PlanStatus::kClusterUnavailable;
    default:
      break;
  }
  if (request.bins <= shared_capacity) return plan_shared();
  if (cluster_ok && request.bins <= kClusterAutoMaxBins &&
      plan_cluster(request, caps, kernels, plan) == PlanStatus::kOk) {
    return PlanStatus::kOk;
  }
  return plan_global();
}

cudaError_t launch_histogram(const HistogramParams& p, const PlanRequest& request, const HistogramPlan& plan,
                             cudaStream_t stream) {
  cudaError_t err =
      cudaMemsetAsync(p.output, 0, static_cast<size_t>(p.bins * output_element_bytes(p.output_type)), stream);
  if (err != cudaSuccess || p.numel == 0) return err;

  DeviceCaps caps;
  err = device_caps(request.device, &caps);
  if (err != cudaSuccess) return err;
  const KernelSet kernels = kernels_for(request.input_type, request.acc);
  HistogramParams params = p;
  void* args[] = {&params};

  if (params.device_range != nullptr) {
    err = cudaMemsetAsync(const_cast<unsigned long long*>(params.device_range), 0, 2 * sizeof(unsigned long long),
                          stream);
    if (err != cudaSuccess) return err;
    const int64_t grid = std::min<int64_t>(ceil_div(p.numel, kRangeThreads * kMinElementsPerThread),
                                           int64_t(caps.sm_count) * (2048 / kRangeThreads));
    err = cudaLaunchKernel(kernels.finite_range, dim3(static_cast<unsigned>(grid)), dim3(kRangeThreads), args, 0,
                           stream);
    if (err != cudaSuccess) return err;
  }

  switch (plan.tier) {
    case Tier::kShared: {
      int per_sm = 1;
      err = blocks_per_sm(kernels.shared, request.device, kBlockThreads, plan.shared_bytes, &per_sm);
      if (err != cudaSuccess) return err;
      const int64_t per_block = std::max<int64_t>(kBlockThreads * kMinElementsPerThread, 2 * plan.bins_per_block);
      const int64_t grid = std::min<int64_t>(ceil_div(p.numel, per_block), int64_t(per_sm) * caps.sm_count);
      return cudaLaunchKernel(kernels.shared, dim3(static_cast<unsigned>(grid)), dim3(kBlockThreads), args,
                              static_cast<size_t>(plan.shared_bytes), stream);
    }
    case Tier::kCluster: {
      params.bins_per_block = plan.bins_per_block;
      const int resident =
          max_active_clusters(kernels.cluster, request.device, plan.cluster_size, plan.shared_bytes);
      const int64_t per_cluster = std::max<int64_t>(
          int64_t(plan.cluster_size) * kBlockThreads * kMinElementsPerThread, 2 * p.bins);
      const int64_t clusters = std::max<int64_t>(1, std::min<int64_t>(ceil_div(p.numel, per_cluster), resident));
      cudaLaunchAttribute attribute;
      const cudaLaunchConfig_t config = cluster_launch_config(static_cast<int>(clusters * plan.cluster_size),
                                                              plan.cluster_size, plan.shared_bytes, stream, &attribute);
      return cudaLaunchKernelExC(&config, kernels.cluster, args);
    }
    default: {
      const int64_t grid = std::min<int64_t>(ceil_div(p.numel, kGlobalThreads * kMinElementsPerThread),
                                             int64_t(caps.sm_count) * (2048 / kGlobalThreads));
      return cudaLaunchKernel(kernels.global, dim3(static_cast<unsigned>(grid)), dim3(kGlobalThreads), args, 0,
                              stream);
    }
  }
}

}  // namespace dsmhist
