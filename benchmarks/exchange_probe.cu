// A probe for issue 15's lead "DSMEM exchange" (benchmarks/bench_exchange.py runs it): counts of int32 values in
// [0, bins) by a cluster whose blocks own the bins between them and pass each value to its owner through
// distributed shared memory, so the input is read once and no partitioned copy goes through global memory.
//
// Not the op: counts only, dense 1-D int32, 16-byte-aligned input, no weights or batched rows. It measures whether
// the exchange is fast enough to build a tier on. Plain C ABI, loaded with ctypes, no torch header:
//
//   nvcc -O3 -shared -Xcompiler -fPIC -gencode=arch=compute_90,code=sm_90 -o exchange_probe.so exchange_probe.cu
//
// Per round, every block of a cluster takes one tile of kTile values:
//   1. ranks each value within its owner's group (one shared atomic on its warp's counter for that owner);
//   2. scans the counters into group starts, places the values' local bins (16 bits) into a staging buffer grouped
//      by owner;
//   3. cluster barrier; each block reads its group from every block's staging (16-byte loads through DSMEM) and
//      counts it into its own bins with shared atomics.
// Staging and the group table are double-buffered, so one cluster barrier a round suffices. Bins are owned
// interleaved (bin b belongs to block b mod C), so a run of hot low bins (Zipf) or a bell (normal) spreads over the
// cluster's blocks instead of landing on one.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 16;
constexpr int kRowStride = kMaxCluster + 1;  // counters of one warp; +1 so a column read hits 32 banks
constexpr int kNoOwner = kMaxCluster;        // the spare column of a warp's counters: values not counted
constexpr uint32_t kNoKey = 0xffffffffu;
constexpr int kKeyBits = 20;                 // bins < 2^20 (16 blocks of 65536): a key and its rank in 32 bits
constexpr uint32_t kKeyMask = (1u << kKeyBits) - 1;

// A variant: values per thread per round (a multiple of 4: 16-byte loads), and whether one thread of the block
// makes the round's staging visible to the cluster (a fence after a block barrier) instead of every warp (the
// barrier's release, which waits for each warp's loads in flight).
template <int kPerThread_, bool kOneFence_>
struct Shape {
  static constexpr int kPerThread = kPerThread_;
  static constexpr bool kOneFence = kOneFence_;
  static constexpr int kTile = kThreads * kPerThread;  // values a block takes per round
  static constexpr int kStagingEntries = kTile + 8;    // one round's entries, and a spare slot for values not counted
  static constexpr int kStagingOffset = 0;                                          // uint16 [2][kStagingEntries]
  static constexpr int kCountersOffset = kStagingOffset + 2 * kStagingEntries * 2;  // uint32 [2][kWarps][kRowStride]
  static constexpr int kWarpBaseOffset = kCountersOffset + 2 * kWarps * kRowStride * 4;  // uint32 [kWarps][kRowStride]
  static constexpr int kGroupsOffset = kWarpBaseOffset + kWarps * kRowStride * 4;  // uint32 [2][start | length][16]
  static constexpr int kBinsOffset = kGroupsOffset + 2 * 2 * kMaxCluster * 4;
  static_assert(kBinsOffset % 16 == 0, "the bins start 16-byte aligned");
  static_assert(kWarps * kRowStride <= kThreads, "one thread zeroes each counter");
  static_assert(32 * kPerThread < (1 << (32 - kKeyBits)) - 1, "a rank fits beside its key");
  static size_t shared_bytes(int block_bins) { return size_t(kBinsOffset) + size_t(block_bins) * 4; }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // the device code needs clusters: sm_90 only

// Loads tile `t`'s values of this thread (-1 past the end: not counted): kPerThread / 4 vectors a block-width apart.
template <class S>
__device__ __forceinline__ void load_tile(const int* __restrict__ values, long long n, long long tiles, long long t,
                                          int (&v)[S::kPerThread]) {
  constexpr int kVectors = S::kPerThread / 4;
  if (t >= tiles) {
#pragma unroll
    for (int k = 0; k < S::kPerThread; ++k) v[k] = -1;
    return;
  }
  const long long base = t * S::kTile;
  if (base + S::kTile <= n) {
#pragma unroll
    for (int part = 0; part < kVectors; ++part) {
      const int4 q = __ldcs(reinterpret_cast<const int4*>(values + base + part * (kThreads * 4)) + threadIdx.x);
      v[part * 4 + 0] = q.x;
      v[part * 4 + 1] = q.y;
      v[part * 4 + 2] = q.z;
      v[part * 4 + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < S::kPerThread; ++k) {
      const long long i = base + (k / 4) * (kThreads * 4) + threadIdx.x * 4 + (k % 4);
      v[k] = i < n ? values[i] : -1;
    }
  }
}

__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_fence() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// A warp's current run of one bin (kNoKey: none): its count is added to the owner's bins when the run ends.
struct WarpRun {
  uint32_t key = kNoKey;
  uint32_t count = 0;
};

template <int kCluster>
__device__ __forceinline__ void flush_run(const WarpRun& run, uint32_t* counts, cg::cluster_group& cluster) {
  if (run.key != kNoKey && threadIdx.x % 32 == 0) {
    atomicAdd(cluster.map_shared_rank(counts, static_cast<int>(run.key % kCluster)) + run.key / kCluster, run.count);
  }
}

// Each value's key and its rank on its warp's counter for its owner, packed (key | rank << kKeyBits; kNoKey: not
// counted). A warp step whose 32 values are one bin extends the warp's run instead (one hot bin and sorted runs skip
// the exchange, and a run adds once).
template <class S, int kCluster>
__device__ __forceinline__ void rank_values(const int (&v)[S::kPerThread], int bins, uint32_t* counters,
                                            uint32_t* counts, cg::cluster_group& cluster,
                                            uint32_t (&ranked)[S::kPerThread], WarpRun& run) {
#pragma unroll
  for (int k = 0; k < S::kPerThread; ++k) {
    const uint32_t key = static_cast<unsigned>(v[k]) < static_cast<unsigned>(bins) ? v[k] : kNoKey;
    const uint32_t lead = __shfl_sync(0xffffffffu, key, 0);
    if (__all_sync(0xffffffffu, key == lead) && key != kNoKey) {  // warp-uniform
      if (key != run.key) {
        flush_run<kCluster>(run, counts, cluster);
        run.key = key;
        run.count = 0;
      }
      run.count += 32;
      ranked[k] = kNoKey;
      continue;
    }
    // No branch: a value not counted takes its rank on the spare counter.
    const uint32_t rank = atomicAdd(&counters[key != kNoKey ? key % kCluster : kNoOwner], 1u);
    ranked[k] = key != kNoKey ? key | (rank << kKeyBits) : kNoKey;
  }
}

#endif

template <class S, int kCluster>
__global__ void __launch_bounds__(kThreads, 1)
    exchange_kernel(const int* __restrict__ values, long long n, int bins, unsigned long long* __restrict__ out,
                    int block_bins, long long tiles, int rounds) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kWarpsPerSource = kWarps / kCluster;
  cg::cluster_group cluster = cg::this_cluster();
  const int me = static_cast<int>(cluster.block_rank());
  const int cluster_index = blockIdx.x / kCluster;
  const int clusters = gridDim.x / kCluster;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* staging = reinterpret_cast<uint16_t*>(smem + S::kStagingOffset);
  uint32_t* rank_counters = reinterpret_cast<uint32_t*>(smem + S::kCountersOffset);
  uint32_t* warp_base = reinterpret_cast<uint32_t*>(smem + S::kWarpBaseOffset);
  uint32_t* groups = reinterpret_cast<uint32_t*>(smem + S::kGroupsOffset);
  uint32_t* counts = reinterpret_cast<uint32_t*>(smem + S::kBinsOffset);

  for (int i = threadIdx.x; i < block_bins; i += kThreads) counts[i] = 0;
  for (int i = threadIdx.x; i < 2 * kWarps * kRowStride; i += kThreads) rank_counters[i] = 0;

  auto tile_of = [&](int round) { return ((long long)round * clusters + cluster_index) * kCluster + me; };
  int v[S::kPerThread];
  load_tile<S>(values, n, tiles, tile_of(0), v);
  cluster.sync();  // every block's counts are zeroed and its shared memory live before any block reaches it

  const int source = warp / kWarpsPerSource;
  const int source_warp = warp % kWarpsPerSource;
  const uint16_t* remote_staging = cluster.map_shared_rank(staging, source);
  const uint32_t* remote_groups = cluster.map_shared_rank(groups, source);

  uint32_t ranked[S::kPerThread];
  WarpRun run;
  rank_values<S, kCluster>(v, bins, rank_counters + warp * kRowStride, counts, cluster, ranked, run);
  load_tile<S>(values, n, tiles, tile_of(1), v);
  __syncthreads();  // round 0's ranks are taken: its counters are final

  for (int round = 0; round < rounds; ++round) {
    const int buffer = round & 1;
    uint32_t* counters = rank_counters + buffer * kWarps * kRowStride;
    if (warp < kCluster) {  // warp d scans owner d's counters over the warps (a lane a warp)
      const int d = warp;
      const uint32_t mine = counters[lane * kRowStride + d];
      uint32_t inclusive = mine;
#pragma unroll
      for (int step = 1; step < 32; step *= 2) {
        const uint32_t below = __shfl_up_sync(0xffffffffu, inclusive, step);
        if (lane >= step) inclusive += below;
      }
      uint32_t below_groups = 0;  // this row's values of owners < d: summed over the rows, group d's start
#pragma unroll
      for (int e = 0; e < kCluster; ++e) below_groups += e < d ? counters[lane * kRowStride + e] : 0;
      const uint32_t start = __reduce_add_sync(0xffffffffu, below_groups);
      warp_base[lane * kRowStride + d] = start + inclusive - mine;
      if (lane == 31) {
        groups[buffer * 2 * kMaxCluster + d] = start;
        groups[buffer * 2 * kMaxCluster + kMaxCluster + d] = inclusive;
      }
    }
    __syncthreads();  // bases written, every counter of this round read: place, and zero them for round + 2

    if (threadIdx.x < kWarps * kRowStride) counters[threadIdx.x] = 0;
    uint16_t* my_staging = staging + buffer * S::kStagingEntries;
#pragma unroll
    for (int k = 0; k < S::kPerThread; ++k) {  // no branch: a value not counted goes to the spare slot
      const uint32_t key = ranked[k] & kKeyMask;
      const uint32_t slot = warp_base[warp * kRowStride + key % kCluster] + (ranked[k] >> kKeyBits);
      my_staging[ranked[k] != kNoKey ? slot : S::kTile] = static_cast<uint16_t>(key / kCluster);
    }
    if (S::kOneFence) {
      __syncthreads();  // every thread's entries are placed before thread 0 publishes them
      if (threadIdx.x == 0) cluster_fence();
      cluster_arrive_relaxed();  // with thread 0's fence: this block's staging of the round is published
    } else {
      cluster_arrive_release();  // this block's staging of the round is complete (release)
    }

    // While the cluster gathers: rank the next round into the other counters.
    if (round + 1 < rounds) {
      rank_values<S, kCluster>(v, bins, rank_counters + (buffer ^ 1) * kWarps * kRowStride + warp * kRowStride,
                               counts, cluster, ranked, run);
      load_tile<S>(values, n, tiles, tile_of(round + 2), v);
    }
    cluster_wait();  // every block's staging of the round is visible (acquire)

    // Count my group from `source`'s staging: vectors of 8 entries, the group's two ends masked.
    const uint32_t start = remote_groups[buffer * 2 * kMaxCluster + me];
    const uint32_t end = start + remote_groups[buffer * 2 * kMaxCluster + kMaxCluster + me];
    const uint4* vectors = reinterpret_cast<const uint4*>(remote_staging + buffer * S::kStagingEntries);
    for (uint32_t first = (start / 8) + source_warp * 32; first * 8 < end; first += kWarpsPerSource * 32) {
      const uint32_t vi = first + lane;
      if (vi * 8 >= end) continue;
      const uint4 q = vectors[vi];
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
      if (vi * 8 >= start && vi * 8 + 8 <= end) {  // all eight entries are the group's
        if (q.x == q.y && q.x == q.z && q.x == q.w && (q.x & 0xffffu) == (q.x >> 16)) {
          atomicAdd(&counts[q.x & 0xffffu], 8u);  // a vector of one bin adds once
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) atomicAdd(&counts[(words[j / 2] >> (16 * (j % 2))) & 0xffffu], 1u);
        }
      } else {  // the group's first or last vector
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t e = vi * 8 + j;
          if (e >= start && e < end) atomicAdd(&counts[(words[j / 2] >> (16 * (j % 2))) & 0xffffu], 1u);
        }
      }
    }
    __syncthreads();  // the next round's ranks are all taken
  }
  flush_run<kCluster>(run, counts, cluster);
  cluster.sync();  // every run is added, and no block leaves while another still reads its staging

  for (int i = threadIdx.x; i < block_bins; i += kThreads) {
    const uint32_t c = counts[i];
    const long long bin = (long long)i * kCluster + me;
    if (c != 0 && bin < bins) atomicAdd(&out[bin], static_cast<unsigned long long>(c));
  }
#endif
}

template <class S, int kCluster>
int launch(const void* values, long long n, int bins, void* out, void* stream, int* clusters_out) {
  const int block_bins = ((bins + kCluster - 1) / kCluster + 7) / 8 * 8;
  if (block_bins > 65536 || bins > int(kKeyMask)) return static_cast<int>(cudaErrorInvalidValue);
  const size_t smem = S::shared_bytes(block_bins);
  auto kernel = exchange_kernel<S, kCluster>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err == cudaSuccess) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return static_cast<int>(err);
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  config.blockDim = dim3(kThreads);
  config.gridDim = dim3(kCluster);
  config.dynamicSmemBytes = smem;
  config.stream = static_cast<cudaStream_t>(stream);
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (clusters < 1) return static_cast<int>(cudaErrorInvalidConfiguration);
  *clusters_out = clusters;
  const long long tiles = (n + S::kTile - 1) / S::kTile;
  const long long per_round = (long long)clusters * kCluster;
  const int rounds = static_cast<int>((tiles + per_round - 1) / per_round);
  config.gridDim = dim3(clusters * kCluster);
  err = cudaLaunchKernelEx(&config, kernel, static_cast<const int*>(values), n, bins,
                           static_cast<unsigned long long*>(out), block_bins, tiles, rounds);
  return static_cast<int>(err);
}

template <class S>
int launch_sized(const void* values, long long n, int bins, void* out, int cluster_blocks, void* stream,
                 int* clusters_out) {
  switch (cluster_blocks) {
    case 4: return launch<S, 4>(values, n, bins, out, stream, clusters_out);
    case 8: return launch<S, 8>(values, n, bins, out, stream, clusters_out);
    case 16: return launch<S, 16>(values, n, bins, out, stream, clusters_out);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

extern "C" {

// Adds the counts of `values` (n int32, 16-byte aligned) in [0, bins) into out (bins int64, zeroed by the caller).
// variant 0: 8 values a thread a round, every warp's barrier arrival releases; 1: 8 values, one fence a block;
// 2: 16 values, one fence a block. Returns a cudaError_t as an int; *clusters_out: the clusters launched (as many
// as fit at once).
int exchange_histogram_int32(const void* values, long long n, int bins, void* out, int cluster_blocks, int variant,
                             void* stream, int* clusters_out) {
  switch (variant) {
    case 0: return launch_sized<Shape<8, false>>(values, n, bins, out, cluster_blocks, stream, clusters_out);
    case 1: return launch_sized<Shape<8, true>>(values, n, bins, out, cluster_blocks, stream, clusters_out);
    case 2: return launch_sized<Shape<16, true>>(values, n, bins, out, cluster_blocks, stream, clusters_out);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // extern "C"
