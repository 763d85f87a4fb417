// Device capabilities and occupancy, kept per device and kernel (KeptAnswers, kept_answers.h; see device_caps.h).
#include "device_caps.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "kept_answers.h"

namespace dsmhist {

cudaError_t device_caps(int device, DeviceCaps* caps) {
  static KeptAnswers<int, DeviceCaps> cache;
  return cache.get(device, caps, [device](DeviceCaps* c) {
    int optin = 0, per_sm = 0, cluster = 0, cooperative = 0, l2 = 0;
    cudaError_t err = cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    c->shared_optin = optin;
    c->shared_per_sm = per_sm;
    c->cluster_launch = cluster != 0;
    c->cooperative_launch = cooperative != 0;
    c->l2_bytes = l2;
    return err;
  });
}

cudaError_t configure_kernel(const void* kernel, int device, const DeviceCaps& caps, bool is_cluster_kernel) {
  static KeptAnswers<std::pair<const void*, int>, bool> cache;
  bool configured = false;
  return cache.get(std::make_pair(kernel, device), &configured, [&](bool* done) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(caps.shared_optin));
    if (err != cudaSuccess) return err;
    if (is_cluster_kernel && caps.cluster_launch) {
      // Devices that cannot run 16-block clusters refuse this; the occupancy query then rules size 16 out.
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        cudaGetLastError();
      }
    }
    *done = true;
    return cudaSuccess;
  });
}

bool cluster_code_available(const void* cluster_kernel, int device, const DeviceCaps& caps) {
  if (caps.cc_major < 9 || !caps.cluster_launch) return false;
  static KeptAnswers<std::pair<const void*, int>, bool> cache;
  bool available = false;
  cache.get(std::make_pair(cluster_kernel, device), &available, [&](bool* answer) {
    cudaFuncAttributes attributes;
    if (cudaFuncGetAttributes(&attributes, cluster_kernel) == cudaSuccess) {
      *answer = attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
    } else {
      cudaGetLastError();  // no attributes: no usable cluster code, which is an answer, not a failure
      *answer = false;
    }
    return cudaSuccess;
  });
  return available;
}

cudaError_t blocks_per_sm(const void* kernel, int device, const DeviceCaps& caps, int threads, int64_t shared_bytes,
                          int* blocks) {
  cudaError_t err = configure_kernel(kernel, device, caps, /*is_cluster_kernel=*/false);
  if (err != cudaSuccess) return err;
  static KeptAnswers<std::tuple<const void*, int, int, int64_t>, int> cache;
  return cache.get(std::make_tuple(kernel, device, threads, shared_bytes), blocks, [&](int* b) {
    const cudaError_t query =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(b, kernel, threads, static_cast<size_t>(shared_bytes));
    *b = std::max(*b, 1);
    return query;
  });
}

cudaLaunchConfig_t cluster_launch_config(int64_t grid, int cluster_size, int threads, int64_t shared_bytes,
                                         cudaStream_t stream, cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  config.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
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

cudaError_t max_active_clusters(const void* kernel, int device, const DeviceCaps& caps, int cluster_size, int threads,
                                int64_t shared_bytes, int* clusters) {
  cudaError_t err = configure_kernel(kernel, device, caps, /*is_cluster_kernel=*/true);
  if (err != cudaSuccess) return err;
  static KeptAnswers<std::tuple<const void*, int, int, int, int64_t>, int> cache;
  return cache.get(std::make_tuple(kernel, device, cluster_size, threads, shared_bytes), clusters, [&](int* answer) {
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config =
        cluster_launch_config(cluster_size, cluster_size, threads, shared_bytes, nullptr, &attribute);
    if (cudaOccupancyMaxActiveClusters(answer, kernel, &config) != cudaSuccess) {
      cudaGetLastError();  // an unsupported size is an answer ("none"), not a failure of the call
      *answer = 0;
    }
    return cudaSuccess;
  });
}

}  // namespace dsmhist
