// What the CUDA path asks the device: its capabilities, whether the loaded binary holds cluster code, how many blocks
// or clusters of a kernel can be resident, and the kernel attributes a launch needs. Every answer is a host-side
// query (never a stream operation, so nothing here synchronises or breaks CUDA-graph capture), cached per device
// and kernel (device_caps.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsmhist {

struct DeviceCaps {
  int sm_count = 0;
  int cc_major = 0;
  int64_t shared_optin = 0;   // largest dynamic shared memory one block may opt into
  int64_t shared_per_sm = 0;  // shared memory of one SM, shared by its resident blocks
  bool cluster_launch = false;
  bool cooperative_launch = false;  // a grid whose blocks are all resident at once (grid-wide barriers)
  int64_t l2_bytes = 0;             // the L2 cache
};

cudaError_t device_caps(int device, DeviceCaps* caps);

// Raises a kernel's dynamic shared-memory limit to the device's opt-in maximum (and, for a cluster kernel, allows
// 16-block clusters), once per kernel and device. Must run with `device` current. Launches call it for the kernel
// they launch; the occupancy queries below call it too, since they answer only within the kernel's limits.
cudaError_t configure_kernel(const void* kernel, int device, const DeviceCaps& caps, bool is_cluster_kernel);

// Whether the cluster kernel as loaded was compiled for sm_90+. A "+PTX" build for an older target is JIT-compiled
// on an H100 from PTX in which the cluster body was compiled out: its ptxVersion tells.
bool cluster_code_available(const void* cluster_kernel, int device, const DeviceCaps& caps);

// Resident blocks per SM (at least 1) of a non-cluster kernel with the given block size and shared memory.
cudaError_t blocks_per_sm(const void* kernel, int device, const DeviceCaps& caps, int threads, int64_t shared_bytes,
                          int* blocks);

// How many clusters of `cluster_size` blocks of `threads` threads with `shared_bytes` each can be resident at once
// on the device (0 when such a cluster cannot be launched at all).
cudaError_t max_active_clusters(const void* kernel, int device, const DeviceCaps& caps, int cluster_size, int threads,
                                int64_t shared_bytes, int* clusters);

// A launch configuration of `grid` blocks in clusters of `cluster_size` (the attribute lives in `*attribute`).
cudaLaunchConfig_t cluster_launch_config(int64_t grid, int cluster_size, int threads, int64_t shared_bytes,
                                         cudaStream_t stream, cudaLaunchAttribute* attribute);

}  // namespace dsmhist
