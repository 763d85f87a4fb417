// The device side of the MoE routing kernel (moe_align.cu launches it): its tuning, its shared-memory layout, and
// the body every launch shape runs (Span: one block, a cluster, a cooperative grid). No torch header.
//
// Each id warp owns a contiguous run of the ids, so (block, warp, step, lane) order is flat-index order. Pass 1: each
// id warp counts its run per expert into its own counter row (shared atomics). The counters are scanned over warps,
// then over the launch's blocks (through DSMEM in a cluster, global memory in a grid), and the experts' shares (kept
// ids in whole blocks) over experts: each id warp then knows where each expert's ids of its run begin. Pass 2 reads
// the run again and writes each id's flat index at its expert's next slot plus its rank among the lower lanes naming
// the same expert (__match_any_sync groups them; the group's lowest lane then moves the slot): stable without
// sorting. Last, the padding, the tails, and the per-expert outputs, spread over every warp of the launch.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "../common/moe.h"
#include "tuning.h"

namespace dsmhist {
namespace moe_align_detail {

// Shared memory words: the experts' local ids, this block's totals, the kept totals, the shares' starts (+ the
// total), the block's first slots, one counter row per id warp, and the scan's warp sums (+ its total).
__host__ __device__ inline int64_t shared_words(int id_warps, int experts) {
  return int64_t(id_warps + 5) * experts + 1 + kMoeMaxWarps + 1;
}
// The warps that hold ids (a contiguous run each) and count them in a row of counters: as many as give each
// kMoeStepsPerIdWarp steps of 32 ids. The others share only the per-expert work: a row per warp made 256 experts at
// 8 ids zero and scan 32 rows for one warp's ids.
__host__ __device__ inline int id_warps_for(int warps, int64_t per_block) {
  const int64_t wanted = (per_block + 32 * kMoeStepsPerIdWarp - 1) / (32 * kMoeStepsPerIdWarp);
  return static_cast<int>(wanted < 1 ? 1 : (wanted > warps ? warps : wanted));
}

__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t v, int lane) {
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t other = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += other;
  }
  return v;
}

// Replaces shares[0, E) (each expert's share) by their exclusive prefix sums, shares[E] by the total.
__device__ inline void exclusive_scan_shares(int32_t* shares, int experts, int32_t* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const int per_thread = (experts + blockDim.x - 1) / blockDim.x;
  const int lo = min(experts, tid * per_thread), hi = min(experts, lo + per_thread);
  int32_t sum = 0;
  for (int k = lo; k < hi; ++k) sum += shares[k];
  const int32_t inclusive = warp_inclusive_sum(sum, lane);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();  // every warp's sum is in before warp 0 scans them
  if (warp == 0) {
    const int32_t v = lane < warps ? warp_sums[lane] : 0;
    const int32_t v_inclusive = warp_inclusive_sum(v, lane);
    warp_sums[lane] = v_inclusive - v;
    if (lane == 31) warp_sums[kMoeMaxWarps] = v_inclusive;
  }
  __syncthreads();  // the warps' offsets are in before each thread rewrites its shares
  int32_t running = warp_sums[warp] + inclusive - sum;
  for (int k = lo; k < hi; ++k) {
    const int32_t share = shares[k];
    shares[k] = running;
    running += share;
  }
  if (tid == 0) shares[experts] = warp_sums[kMoeMaxWarps];
  __syncthreads();  // the starts are read by every thread next
}

// The experts of a warp's next kMoeStepsInFlight steps of 32 ids (-1: none), loaded together: one step at a time, each
// step waited a whole memory latency (a 2^20-id call took 294 us on an H200).
template <typename LocalIds>
__device__ __forceinline__ void load_steps(const MoeParams& p, int64_t base, int64_t run_last, int lane,
                                           const LocalIds& local_of, int32_t (&experts_of)[kMoeStepsInFlight]) {
#pragma unroll
  for (int u = 0; u < kMoeStepsInFlight; ++u) {
    const int64_t i = base + u * 32 + lane;
    experts_of[u] = i < run_last ? moe_expert_of(p, i, local_of) : -1;
  }
}

// How the blocks of a launch share their counts: one block alone, a cluster (DSMEM), or a cooperative grid (global
// memory, p.workspace).
enum class Span { kBlock, kCluster, kGrid };

template <Span kSpan>
__device__ void moe_align_body(const MoeParams& p) {
  namespace cg = cooperative_groups;
  extern __shared__ int32_t shared[];
  const int experts = p.num_experts;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  int32_t* local = shared;
  int32_t* block_total = local + experts;
  int32_t* kept = block_total + experts;
  int32_t* start = kept + experts;  // experts + 1
  int32_t* first_slot = start + experts + 1;
  int32_t* rows = first_slot + experts;
  int rank = 0, blocks = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // the cluster API exists only there
  if constexpr (kSpan == Span::kCluster) {
    rank = static_cast<int>(cg::this_cluster().block_rank());
    blocks = static_cast<int>(cg::this_cluster().num_blocks());
  }
#endif
  if constexpr (kSpan == Span::kGrid) {
    rank = static_cast<int>(blockIdx.x);
    blocks = static_cast<int>(gridDim.x);
  }

  // 32-bit arithmetic (n < 2^31, checked by the op): 64-bit division is a long software routine.
  const uint32_t n = static_cast<uint32_t>(p.n);
  const uint32_t per_block = (n + blocks - 1) / blocks;
  const int id_warps = id_warps_for(warps, per_block);
  int32_t* warp_sums = rows + id_warps * experts;  // kMoeMaxWarps + 1
  for (int e = tid; e < experts; e += blockDim.x) {
    local[e] = moe_local_id(p, e);
    if constexpr (kSpan == Span::kGrid) kept[e] = first_slot[e] = 0;  // the grid's sums are shared atomics
  }
  for (int k = tid; k < id_warps * experts; k += blockDim.x) rows[k] = 0;
  __syncthreads();  // every warp reads the local ids and its zeroed row below

  const uint32_t first = min(n, rank * per_block), last = min(n, first + per_block);
  const uint32_t per_warp = ((last - first + id_warps - 1) / id_warps + 31) / 32 * 32;
  const int64_t run_first = min(last, first + warp * per_warp), run_last = min(last, uint32_t(run_first) + per_warp);
  const auto local_of = [local](int32_t e) { return local[e]; };
  int32_t* row = rows + warp * experts;

  int32_t first_steps[kMoeStepsInFlight];  // pass 2 reuses them: most calls' runs are one batch of steps
  for (int64_t base = run_first; base < run_last; base += 32 * kMoeStepsInFlight) {
    int32_t experts_of[kMoeStepsInFlight];
    load_steps(p, base, run_last, lane, local_of, experts_of);
#pragma unroll
    for (int u = 0; u < kMoeStepsInFlight; ++u) {
      const int32_t e = experts_of[u];
      if (base == run_first) first_steps[u] = e;
      // Counting needs no order: a shared atomic per id (native for int32), no lane grouping.
      if (e >= 0) atomicAdd(&row[e], 1);
    }
  }
  __syncthreads();  // every warp's counts are in before they are scanned

  for (int e = tid; e < experts; e += blockDim.x) {
    int32_t total = 0;
    int w = 0;
    for (; w + 4 <= id_warps; w += 4) {  // four loads in flight, not one (the stores may alias them)
      int32_t c[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j] = rows[(w + j) * experts + e];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        rows[(w + j) * experts + e] = total;
        total += c[j];
      }
    }
    for (; w < id_warps; ++w) {
      const int32_t c = rows[w * experts + e];
      rows[w * experts + e] = total;
      total += c;
    }
    block_total[e] = total;
  }
  if constexpr (kSpan == Span::kGrid) {
    int32_t* const counts = p.workspace;  // [blocks][experts]
    for (int e = tid; e < experts; e += blockDim.x) counts[rank * experts + e] = block_total[e];
    cg::this_grid().sync();  // every block's counts are in global memory (the sync fences) before any block reads
    // Each warp a row at a time, a lane per expert (coalesced), into the block's sums by shared atomics. (Summing in
    // registers first, 8 experts a lane with their loads in flight, was 8% slower.)
    for (int g = warp; g < blocks; g += warps) {
      for (int e = lane; e < experts; e += 32) {
        const int32_t c = counts[g * experts + e];
        atomicAdd(&kept[e], c);
        if (g < rank) atomicAdd(&first_slot[e], c);
      }
    }
    __syncthreads();  // the sums are whole before the shares are taken
  } else
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if constexpr (kSpan == Span::kCluster) {
    cg::cluster_group cluster = cg::this_cluster();
    // cluster.sync() fences at GPU scope (MEMBAR.ALL.GPU) and invalidates L1; shared memory needs only the cluster.
    __syncthreads();  // every total of this block is written before thread 0 publishes them
    if (tid == 0) asm volatile("fence.acq_rel.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");  // every block's totals are visible
    for (int e = tid; e < experts; e += blockDim.x) {
      int32_t before = 0, all = 0;
      // Every block's total in flight at once (four at a time was 3% slower). One trip; as a loop, ptxas keeps the
      // 16 addresses without spilling.
      for (int r0 = 0; r0 < blocks; r0 += kMoeMaxClusterBlocks) {
        int32_t v[kMoeMaxClusterBlocks];
#pragma unroll
        for (int j = 0; j < kMoeMaxClusterBlocks; ++j) {
          v[j] = r0 + j < blocks ? cluster.map_shared_rank(block_total, r0 + j)[e] : 0;
        }
#pragma unroll
        for (int j = 0; j < kMoeMaxClusterBlocks; ++j) {
          all += v[j];
          if (r0 + j < rank) before += v[j];
        }
      }
      kept[e] = all;
      first_slot[e] = before;
    }
    // No block may exit (freeing its totals) while another still reads them: arrive now, wait before exiting. Every
    // remote read returned before the arrive (the sums used them), so nothing needs releasing.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  } else
#endif
  {
    for (int e = tid; e < experts; e += blockDim.x) {
      kept[e] = block_total[e];
      first_slot[e] = 0;
    }
  }
  // Shares in whole blocks: a slot is a block times block_size, so nothing after this divides.
  for (int e = tid; e < experts; e += blockDim.x) start[e] = (kept[e] + p.block_size - 1) / p.block_size;
  __syncthreads();  // every share is in before the scan reads them
  exclusive_scan_shares(start, experts, warp_sums);
  // Where this block's ids of each expert start (its share's start plus the earlier blocks' ids); a warp's row holds
  // the earlier warps' ids of the block.
  for (int e = tid; e < experts; e += blockDim.x) first_slot[e] += start[e] * p.block_size;
  __syncthreads();  // every first slot is in before pass 2 reads them

  for (int64_t base = run_first; base < run_last; base += 32 * kMoeStepsInFlight) {
    int32_t experts_of[kMoeStepsInFlight];
    if (base == run_first) {
#pragma unroll
      for (int u = 0; u < kMoeStepsInFlight; ++u) experts_of[u] = first_steps[u];
    } else {
      load_steps(p, base, run_last, lane, local_of, experts_of);
    }
#pragma unroll
    for (int u = 0; u < kMoeStepsInFlight; ++u) {
      if (base + u * 32 >= run_last) break;  // the same for every lane: a step past the run has no ids
      const int32_t e = experts_of[u];
      const unsigned group = __match_any_sync(0xffffffffu, e);
      if (e >= 0) {
        const int64_t i = base + u * 32 + lane;
        p.sorted_ids[first_slot[e] + row[e] + __popc(group & ((1u << lane) - 1u))] = static_cast<int32_t>(i);
      }
      __syncwarp();  // every lane of the group has read row[e] before its leader moves it
      if (e >= 0 && lane == __ffs(group) - 1) row[e] += __popc(group);
      __syncwarp();  // the next step reads the moved row
    }
  }

  const int32_t total_blocks = start[experts];
  const int32_t total = total_blocks * p.block_size;
  const int32_t sentinel = static_cast<int32_t>(p.n);
  const int cluster_warp = rank * warps + warp, cluster_warps = blocks * warps;
  // Loop bounds in registers: the stores go through generic pointers, which the compiler must assume may alias
  // shared memory, so a bound read from it would be read (and divided) again every iteration.
  const int32_t block_size = p.block_size;
  int32_t* const sorted_ids = p.sorted_ids;
  int32_t* const expert_ids = p.expert_ids;
  // The per-expert tails: each lane reads one expert's facts, then the warp writes the padding and the block ids of
  // those of its experts that have blocks, one expert at a time with every lane storing. A warp per expert spent
  // ~90 instructions an expert (two divisions) on one SM.
  const int chunk = min(32, (experts + cluster_warps - 1) / cluster_warps);
  for (int e0 = cluster_warp * chunk; e0 < experts; e0 += cluster_warps * chunk) {
    const int e = e0 + lane;
    int32_t pad_from = 0, block_from = 0, block_to = 0, local_id = 0;
    if (lane < chunk && e < experts) {
      block_from = start[e];
      block_to = start[e + 1];
      pad_from = block_from * block_size + kept[e];
      local_id = local[e];
    }
    unsigned busy = __ballot_sync(0xffffffffu, block_from < block_to);
    while (busy) {
      const int src = __ffs(busy) - 1;
      busy &= busy - 1;
      const int32_t from = __shfl_sync(0xffffffffu, pad_from, src);
      const int32_t b0 = __shfl_sync(0xffffffffu, block_from, src), b1 = __shfl_sync(0xffffffffu, block_to, src);
      for (int32_t slot = from + lane; slot < b1 * block_size; slot += 32) sorted_ids[slot] = sentinel;
      if (expert_ids != nullptr) {
        const int32_t id = __shfl_sync(0xffffffffu, local_id, src);
        for (int32_t b = b0 + lane; b < b1; b += 32) expert_ids[b] = id;
      }
    }
  }
  const int32_t thread = rank * static_cast<int32_t>(blockDim.x) + tid;
  const int32_t threads = blocks * static_cast<int32_t>(blockDim.x);
  const int32_t sorted_size = static_cast<int32_t>(p.sorted_size);  // <= 2^31 - 1 (checked by the op)
  for (int32_t slot = total + thread; slot < sorted_size; slot += threads) sorted_ids[slot] = sentinel;
  if (expert_ids != nullptr) {
    const int32_t expert_blocks = static_cast<int32_t>(p.expert_blocks);
    for (int32_t b = total_blocks + thread; b < expert_blocks; b += threads) expert_ids[b] = -1;
  }
  for (int32_t e = thread; e < experts; e += threads) {
    if (p.counts != nullptr) p.counts[e] = kept[e];
    if (p.offsets != nullptr) p.offsets[e] = start[e] * block_size;
  }
  if (thread == 0) {
    if (p.offsets != nullptr) p.offsets[experts] = total;
    if (p.total != nullptr) p.total[0] = total;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kSpan == Span::kCluster) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // see the arrive above
  }
#endif
}

}  // namespace moe_align_detail
}  // namespace dsmhist
