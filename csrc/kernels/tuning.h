// Every tuning constant of the CUDA path, with the measurements behind it. The planner (planner.cu), the tier units
// (tier_*.cuh) and the kernels read them from here; change a value only with a new measurement beside it.
#pragma once

#include <cstdint>

namespace dsmhist {

// ----- Block sizes -------------------------------------------------------------------------------------------------

// Threads per block of the shared-memory and cluster tiers: with up to 227 KB of bins a block has the SM to
// itself, so it brings the most threads a block may have, to keep loads in flight.
constexpr int kBlockThreads = 1024;
// The global tier keeps no per-block state; smaller blocks spread over the SMs more evenly.
constexpr int kGlobalThreads = 256;
// Block size of the kernels without bins: the range pass and the per-element bin indices.
constexpr int kRangeThreads = 256;

// ----- Global tier -------------------------------------------------------------------------------------------------

// Slots of the global tier's per-block cache of bins (counts): 16 KB of tags and counts per block, so 8 blocks still
// fit an SM's shared memory. A power of two (slot = bin mod slots).
constexpr int kGlobalCacheSlots = 2048;

// ----- Cluster tiers -----------------------------------------------------------------------------------------------

// The most blocks of a cluster the automatic plan uses; past them it takes global atomics. Every block of a cluster
// reads the whole input, so the cluster tier costs ~0.3 ms per block on 2^28 int32 values whatever the data, while the
// global tier (run merging and a hot-bin cache) costs 3.3 ms on uniform data but 0.49 ms with one hot bin and
// 0.7 ms sorted. Measured by benchmarks/bench_plan.py on an H100 80GB HBM3 (RESULTS.md section "Plan thresholds",
// commit 80de822, 2026-11-22), ms of cluster / global on its worst distribution (one hot bin) and on uniform data:
//   2 blocks (65536 bins):          one hot 0.49 / 0.49, uniform 0.59 / 3.47  -> cluster (global 5.9x slower)
//   3 blocks (131072):              one hot 0.89 / 0.49, uniform 0.96 / 3.28  -> cluster (1.8x worst vs 3.4x)
//   4 blocks (forced, 131072):      one hot 1.13 / 0.49, uniform 1.23 / 3.28  -> cluster (2.3x worst vs 2.7x)
//   5 blocks (262144):              one hot 1.53 / 0.49, uniform 1.66 / 3.28  -> global  (3.1x worst vs 2.0x)
// The plan takes the tier whose worst case against the other is smaller: the cluster tier up to 4 blocks.
constexpr int kClusterAutoMaxBlocks = 4;
// Largest cluster the hardware may run (16 needs the non-portable attribute, sm_90).
constexpr int kMaxClusterSize = 16;

// ----- Partition tier ----------------------------------------------------------------------------------------------

// Tier "partition" (tier_partition.cuh): kernel 1 bins kPartitionThreads x kPartitionValuesPerThread elements per tile
// and groups them by chunk; kernel 3 counts a chunk of kPartitionChunkBytes of bins per block, 1024 threads each
// (one block per SM: the chunk takes more than half an SM's shared memory).
constexpr int kPartitionThreads = 512;
constexpr int kPartitionValuesPerThread = 16;
constexpr int kPartitionItemThreads = 1024;
constexpr int kPartitionCountThreads = 1024;
constexpr int64_t kPartitionChunkBytes = 128 * 1024;
// Chunks one slice may add into: bounds kernel 1's shared memory (two 32-bit words per chunk) and the run table.
constexpr int kPartitionMaxChunks = 1024;
// Kernel 1 gives lane 0's chunk one shared-memory atomic for all its lanes when at least this many of the warp's 32
// lanes share it (fewer: one atomic per lane, whose same-address conflicts are then few).
constexpr int kPartitionLeadShare = 8;
// Device workspace of one call (entries, weights, runs, items); the slice is as long as fits. The README states it.
constexpr int64_t kPartitionWorkspaceBytes = int64_t(64) << 20;
constexpr int64_t kPartitionItemsReserve = int64_t(1) << 20;
// A work item holds at least this many elements per bin of its chunk, so flushing the chunk costs less than the
// adds; an item with fewer elements than chunk bins / kPartitionDirectRatio adds straight into the output instead.
constexpr int64_t kPartitionMinItemElementsPerBin = 8;
constexpr int64_t kPartitionDirectRatio = 8;
// The planner takes the partition tier for counts past kPartitionAutoMinBins bins. Measured on the H100 80GB HBM3
// (benchmarks/bench_partition.py, second version of the tier, 2026-11-23; 2^28 int32, median ms, partition / global):
//   262144:   uniform 1.91 / 3.28, normal 2.08 / 3.23, zipf 2.07 / 3.48, one hot 1.05 / 0.49, sorted 1.49 / 0.73
//   1048576:  uniform 1.88 / 3.30, normal 2.57 / 3.26, zipf 2.67 / 4.11, one hot 1.06 / 0.49, sorted 1.56 / 0.83
//   4194304:  uniform 2.11 / 4.48, normal 2.75 / 3.40, zipf 2.86 / 5.62, one hot 1.09 / 0.50, sorted 1.78 / 0.80
//   16777216: uniform 3.50 / 15.96, normal 3.80 / 11.59, zipf 3.94 / 8.39, one hot 1.24 / 0.53, sorted 1.88 / 0.92
// As for the cluster tier, the plan takes the tier whose worst case against the other is smaller: up to 4M bins the
// partition's (one hot / sorted, 2.1-2.2x global) exceeds global's (uniform, 1.5-2.1x the partition), at 16M bins
// global's (4.6x) exceeds the partition's (2.3x). Weighted sums were not timed, so the plan keeps them on "global".
constexpr int64_t kPartitionAutoMinBins = int64_t(4) << 20;
// Kernel 1 takes 0.96 ms of the 1.88 at 1M uniform bins, kernel 3 0.79, kernel 2 0.08 (torch profiler): kernel 1 is
// bound by its instructions (Nsight Compute: 2.4 IPC, 56% issue slots busy at 1.07 TB/s), see benchmarks/NOTES.md.

// ----- Work per block ----------------------------------------------------------------------------------------------

// A block (or cluster) should see at least this many elements per thread before its bins are worth zeroing and
// flushing; small inputs get fewer blocks instead.
constexpr int64_t kMinElementsPerThread = 16;
// Small 1-D calls in the shared tier (MoE token counts): up to kSmallCallMaxElements elements run as one launch that
// stores the output itself, with no zeroing launch: one block per kSmallCallElementsPerBlock elements, as one
// cluster of up to kSmallCallMaxBlocks (portable) blocks whose bins are summed through DSMEM. On the H100 one block
// took 13 µs per call for 65536 int64 values (device-bound) against 9.9 µs at 4096 (host-bound); 8 blocks of 8192
// each stay host-bound.
constexpr int64_t kSmallCallMaxElements = 65536;
constexpr int64_t kSmallCallElementsPerBlock = 8192;
constexpr int64_t kSmallCallMaxBlocks = 8;
// Most elements a block (or cluster) may count between two flushes of its 32-bit shared-memory counters.
constexpr int64_t kMaxCountsPerFlush = int64_t(UINT32_MAX);

// ----- Traversal ---------------------------------------------------------------------------------------------------

// How many 16-byte vectors a thread loads before it bins any of them, so several loads are in flight.
constexpr int kVectorsInFlight = 4;

}  // namespace dsmhist
