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

// A global-tier block takes at least this many elements per thread (one 16-byte vector of int32): a small call gets
// many blocks, each a short chain of cache updates, rather than a few with long chains. Device time per call on the
// H100 80GB HBM3 (CUDA-graph replay of 20 calls, 2026-11-23), 65536 uniform int32 bins, n = 2^12 / 2^14 / 2^16 /
// 2^18 / 2^20 / 2^22: 16 elements a thread 9.1 / 9.1 / 9.1 / 9.7 / 17.7 / 57.2 us; 4 elements 5.5 / 5.6 / 5.7 /
// 7.7 / 18.5 / 58.2 us (torch.histc 2.9 / 3.0 / 3.9 / 6.7 / 18.2 / 63.6). Past 2^22 the grid is full either way.
constexpr int64_t kGlobalMinElementsPerThread = 4;
// The automatic plan takes tier "global" for a histogram of kFewElementsMinBins bins or more with fewer than
// kFewElementsPerBin elements per bin: tiers shared and cluster zero and flush all their bins per block (or cluster)
// whatever the elements, while global atomics cost per element. Device time per call, us (as above; shared or
// cluster, the automatic one, against global), uniform int32:
//   4096 bins:   2^12 3.8 / 5.4, 2^14 5.8 / 5.4, 2^16 6.2 / 5.7     -> below 16384 bins the rule does not apply
//   32768 bins:  2^16 10.1 / 5.7, 2^18 17.6 / 7.8, 2^20 (32 a bin) 19.1 / 19.4, 2^22 24.7 / 62.2
//   58112 bins:  2^18 30.1 / 7.7, 2^20 (18 a bin) 31.6 / 18.5, 2^22 (72 a bin) 35.8 / 60.1
//   65536 bins:  2^16 16.1 / 5.7, 2^20 (16 a bin) 22.5 / 18.5, 2^22 (64 a bin) 29.3 / 58.2
//   131072 bins: 2^20 (8 a bin) 26.0 / 18.5, 2^22 (32 a bin) 41.0 / 55.8
// With one hot bin global is as fast or faster at every one of these points (5.0-13.5 us up to 2^20).
constexpr int64_t kFewElementsPerBin = 32;
constexpr int64_t kFewElementsMinBins = 16384;
// Long weighted float sums in the global tier, kGlobalSumsClaimOnRepeatMinPerThread elements a thread or more, run a
// body whose cache claims a slot on a bin's second add in the block, not its first (HotBinCache), and whose threads
// load kGlobalSumsVectorsInFlight 16-byte vectors at a time. Tier global forced, H100 80GB HBM3, 2026-11-24, float32
// weights, median ms of 7 CUDA events (NOTES.md "Global tier: claim a slot on a bin's second add"):
//   2^26 values (248 a thread), before / claim on repeat (4 vectors in flight) / both, weights in [0, 1):
//     65536 bins:   uniform 1.021 / 1.044 / 0.994, one hot 0.271 / 0.273 / 0.225, zipf 1.190 / 0.710 / 0.657,
//                   sorted 0.758 / 0.801 / 0.553
//     4194304 bins: uniform 0.872 / 0.874 / 0.833, one hot 0.280 / 0.283 / 0.235, zipf 1.897 / 0.859 / 0.875,
//                   sorted 0.386 / 0.391 / 0.306
//   2^24 (62 a thread), before / both, 65536 bins: uniform 0.256 / 0.257, one hot 0.079 / 0.065, zipf 0.295 / 0.261,
//                   sorted 0.181 / 0.144 (4194304 bins: 0.227 / 0.218, 0.088 / 0.076, 0.481 / 0.329, 0.116 / 0.101)
//   2^22 (16 a thread), before / both, us: 65536 bins zipf 62.2 / 118.7, 1048576 bins zipf 77.2 / 123.8 (uniform
//                   and sorted 1-19% faster): a block's few thousand elements do not repay the first adds of its
//                   hot bins, so shorter sums keep the first-add cache (2^18-2^20 zipf: 1.85-2.7x slower with both).
// Counts keep the first-add cache whatever their length: claiming on repeat made sorted counts 1.6-1.8x slower
// (65536 bins, 2^26 values: 0.168 -> 0.271 / 0.307 ms).
constexpr int64_t kGlobalSumsClaimOnRepeatMinPerThread = 32;
constexpr int kGlobalSumsVectorsInFlight = 1;

// ----- Cluster tiers -----------------------------------------------------------------------------------------------

// The most blocks of a cluster the automatic plan uses for counts, in blocks of 16-bit counts (packed_counts.cuh:
// 116224 bins a block on an H100; 232448 for 2 blocks, where the partition tier starts). Every block of a cluster
// reads the whole input, so each block past the first costs ~0.3-0.5 ms per 2^28 int32 values whatever the data.
// Measured by benchmarks/bench_plan.py on an H100 80GB HBM3 (RESULTS.md sections "Plan thresholds" and "Plan
// thresholds, selected bin counts", 2026-11-24, 2^28 int32, median ms; NOTES.md "Tier cluster: 16-bit counts"):
//   1 block (58113-116224 bins):  uniform 0.438-0.494, normal 0.435-0.489, one hot 0.397-0.445, zipf 0.442-0.498,
//                                 sorted 0.391-0.439; the 32-bit counts' 2 blocks took 0.601-0.611 / 0.601-0.610 /
//                                 0.501-0.516 / 0.584-0.593 / 0.484-0.487 (old and new trees timed in turn, one run);
//                                 as 2 replicas of the bins (kClusterReplicas, a later run): 0.413-0.471 /
//                                 0.412-0.468 / 0.378-0.425 / 0.415-0.474 / 0.374-0.421
//   2 blocks (232448 bins):       uniform 0.907, normal 0.902, one hot 0.687, zipf 0.896, sorted 0.688; partition
//                                 1.18 / 1.40 / 0.483 / 1.31 / 0.816  -> cluster (1.42x the partition on one hot;
//                                 the partition 1.55x it on normal)
//   3 blocks (262144 bins):       uniform 1.39, normal 1.38, one hot 1.02, zipf 1.34, sorted 1.02; partition 1.24 /
//                                 1.38 / 0.482 / 1.32 / 0.826  -> partition (the cluster 2.1x on one hot; the
//                                 partition at most 1.0x it)
// The plan takes the tier whose worst case against the other is smaller: the cluster tier up to 2 blocks. Integer
// input binned by value has bodies of its own (a key is a subtraction and a compare; NOTES.md "Tier cluster: a
// by-value body"), which made every figure above faster; bench_plan.py --bins ... 232448 262144 (RESULTS.md "Plan
// thresholds, selected bin counts", 2026-11-24), cluster / partition:
//   2 blocks (232448 bins):       uniform 0.719 / 1.18, normal 0.716 / 1.41, one hot 0.518 / 0.481, zipf 0.705 /
//                                 1.32, sorted 0.516 / 0.816  -> cluster (1.08x the partition on one hot; it 1.97x)
//   3 blocks (262144 bins):       uniform 1.07 / 1.24, normal 1.05 / 1.39, one hot 0.749 / 0.482, zipf 0.996 / 1.32,
//                                 sorted 0.695 / 0.827  -> partition (the cluster 1.55x on one hot; the partition
//                                 1.32x on normal), and the exchange (0.58-0.90) beats both there
// so the limit stays at 2 blocks for every binning. (Tier exchange starts past it: kExchangeAutoMinBins.) With the
// branchless adds (NOTES.md "Tier cluster: branchless adds, one warp vote a vector"; same section, a later run) 3
// blocks at 262144 bins take uniform 1.00, normal 0.992, one hot 0.741, zipf 0.990, sorted 0.882 against the
// exchange's 0.904 / 0.901 / 0.566 / 0.903 / 0.711: still slower on every distribution.
constexpr int kClusterAutoMaxBlocks = 2;
// A work item of tier cluster's 16-bit counts is worth a block from bins_per_block / 2 elements (the cluster tiers'
// rule, 2 x item bins, with item bins = bins_per_block / kPackedItemBinsDivisor), not 2 x bins_per_block: more blocks
// share a small call, each flushing up to twice as many bins. Device time per call on the H100 80GB HBM3 (CUDA-graph
// replay, 2026-11-24, tier cluster forced, int32, us, uniform / one hot), divisor 1 / 2 / 4 / 8:
//   65536 bins (1 block):   2^21 39.0 / 31.4 / 29.1 / 27.4 and 26.2 / 17.6 / 12.7 / 10.9; 2^22 42.3 / 36.7 / 35.7 /
//                           36.2 and 26.6 / 18.0 / 12.9 / 13.0; 2^23 47.9 / 43.9 / 44.9 / 45.0; 2^24 58.8-59.6
//   116224 (1 block):       2^21 67.8 / 48.1 / 45.0 / 36.7; 2^22 70.5 / 56.8 / 50.3 / 44.8; 2^23 79.4 / 62.3 / 60.1 /
//                           60.1 and 49.9 / 31.3 / 21.9 / 21.9; 2^24 91.4 / 80.8 / 80.8 / 80.9
//   174336 (2 blocks):      2^21 53.6 / 44.9 / 36.4 / 32.2; 2^22 61.7 / 51.3 / 46.9 / 46.9; 2^23 69.3 / 64.0 (all)
// From 2^26 values every divisor fills the grid (the same time). 8 gains at 2^21-2^22 what it loses at 2^23.
constexpr int64_t kPackedItemBinsDivisor = 4;
// Tier cluster's counts of bins that one block holds run as clusters of kClusterReplicas blocks that all keep every
// bin, each reading a share of every item; at the flush they sum their copies through DSMEM (flush_replicas,
// packed_counts.cuh), so the global adds are one block's per cluster: half the flush of one-block clusters. Device
// time on the H100 80GB HBM3 (2026-11-24, tier cluster forced to 1 / 2 / 4 blocks, int32, us, CUDA-graph replay to
// 2^24 values, CUDA events past it; NOTES.md "Tier cluster: replicas"):
//   65536 bins uniform:   2^21 30.0 / 22.1 / 19.2; 2^22 36.5 / 26.3 / 21.8; 2^24 59.2 / 47.4 / 46.4;
//                         2^26 135 / 124 / 128; 2^28 422 / 413 / 441
//   65536 bins one hot:   2^22 14.0 / 15.2 / 18.3; 2^24 35.5 / 36.5 / 40.0; 2^28 377 / 378 / 393
//   116224 bins uniform:  2^22 51.7 / 35.7 / 28.2; 2^24 80.8 / 61.6 / 55.2; 2^28 487 / 470 / 495
//   116224 bins one hot:  2^22 23.3 / 18.8 / 22.8; 2^24 42.6 / 43.2 / 47.3; 2^28 425 / 425 / 452
// Clusters of 4 hold 120 blocks on the 132 SMs (clusters of 2: 132), so they lose 5-7% at 2^28, and their 4-way
// merge costs one-hot calls 4-5 us. Bins past one block stay unreplicated: 131072 bins in clusters of 4 (2 ranges x
// 2) took 876 us at 2^28 uniform against 810 in clusters of 2 (32.5 against 39.0 at 2^22).
constexpr int kClusterReplicas = 2;
// Weighted and deterministic sums never take the cluster tier automatically (1 block: tier shared's bins): past one
// block tier global, whose cache of hot bins holds sums too, has the smaller worst case. bench_plan.py --weighted
// (RESULTS.md "Plan thresholds for weighted sums", H100, 2026-11-24, 2^28 int32, integer weights, with the long sums'
// claim-on-repeat body), ms of the cluster tier (smallest size) / global:
//   float32, 65536 bins (2 blocks): uniform 2.28 / 3.07, normal 2.29 / 2.97, one hot 1.71 / 0.876, zipf 4.27 / 1.87,
//                                   sorted 2.36 / 2.12  -> global (cluster's worst 2.29x global; global's 1.34x it)
//   float64, 32768 bins (2 blocks): uniform 2.78 / 3.12, normal 2.78 / 2.89, one hot 2.10 / 1.13, zipf 5.90 / 1.89,
//                                   sorted 2.87 / 2.46  -> global (3.13x against 1.12x)
//   deterministic, 32768 (2 blocks): uniform 6.68 / 6.80, normal 6.66 / 6.70, one hot 5.18 / 3.38, zipf 9.19 / 7.37,
//                                   sorted 5.86 / 6.75  -> global (1.53x against 1.15x)
// Past 2 blocks the cluster tier's worst is 2.55-24x global's, global's at most 0.93x the cluster tier's. Before the
// claim-on-repeat body (2026-11-23) float32 sums at 2 blocks took the cluster tier (zipf 4.31 / 3.59, sorted
// 2.47 / 2.86: 1.75x against 1.30x); deterministic sums were not measured at 2 blocks.
constexpr int kClusterAutoMaxBlocksForSums = 1;
// Largest cluster the hardware may run (16 needs the non-portable attribute, sm_90).
constexpr int kMaxClusterSize = 16;

// ----- Exchange tier -----------------------------------------------------------------------------------------------

// Tier "exchange" (tier_exchange.cuh): the bins are owned interleaved by the blocks of a cluster, and each round every
// block ranks its tile of values by owner, stages their local bins in shared memory, and counts its own group from
// every block's staging through DSMEM. Measured first as a probe outside the op (benchmarks/NOTES.md "DSMEM
// exchange probe", retired since; H100 80GB HBM3, 2^28 int32, median ms, uniform / one hot, per step): 8 values a
// thread with every warp's barrier release 1.27 / 0.905 at 262144 bins (16 blocks); one fence a block 1.13 / 0.806;
// 16 values a thread 0.933 / 0.636. 24 values a thread spill. 8-byte inputs take 8 values a thread: the same 64
// bytes of registers.
constexpr int kExchangeThreads = 1024;
constexpr int kExchangeTileBytes = 64;  // per thread a round: 16 values of up to 4 bytes, 8 of 8 bytes
constexpr int kExchangeMaxValuesPerThread = 16;
// The dense bodies ask L2 for a block's tile kExchangePrefetchRounds rounds before the round that loads it into
// registers (one bulk prefetch a round by one thread; the registers hold one tile ahead, all they can). H100 80GB
// HBM3, 2^28 int32, forced exchange, median ms at 131072 / 262144 / 393216 / 524288 bins, prefetching 0 / 1 / 2 / 4 / 6
// rounds ahead (NOTES.md "Tier exchange, third version"): uniform 0.911 / 0.890 / 0.891 / 0.897 / 0.966 at 131072,
// 1.032 / 0.970 / 0.971 / 0.981 / 1.222 at 524288; one hot 0.572 / 0.517 / 0.520 / 0.588 / 0.674 at 131072, 0.669 /
// 0.577 / 0.579 / 0.630 / 0.884 at 524288. Deeper than two rounds, the tiles in flight (7.5 MB a round over the
// grid) crowd L2.
constexpr int kExchangePrefetchRounds = 1;
// The automatic cluster size: the smaller of kExchangeSmallCluster and kMaxClusterSize blocks that keeps at most
// kExchangeBlockBins bins a block. Probe, 2^28 uniform int32, ms: 262144 bins in 8 blocks (32768 a block) 0.996,
// in 16 (16384 a block) 0.933; 131072 in 8 blocks 0.907. Forced, any cluster size from 1 to 16 runs.
constexpr int kExchangeSmallCluster = 8;
constexpr int64_t kExchangeBlockBins = 16384;
// The planner takes the exchange tier for counts of integer input binned by value from kExchangeAutoMinBins to
// kExchangeAutoMaxBins bins: benchmarks/bench_plan.py --bins 116225 131072 196608 262144 393216 524288 640000 640001
// (RESULTS.md "Plan thresholds, selected bin counts", H100 80GB HBM3, 2026-11-24, 2^28 int32, median ms, exchange /
// the tier the plan would take without it; NOTES.md "Tier exchange, third version"):
//   116225 (8 blocks; cluster 3):  uniform 0.878 / 0.961, normal 0.879 / 0.951, zipf 0.877 / 0.898, one hot 0.522 /
//                                  0.902, sorted 0.619 / 0.804  -> exchange (0.98x the cluster at worst; it 1.73x)
//   131072 (8; cluster 3):         uniform 0.888 / 0.966, zipf 0.881 / 0.900, one hot 0.523 / 0.900  -> exchange
//   196608 (16; cluster 4):        uniform 0.891 / 1.24, zipf 0.896 / 1.21, one hot 0.575 / 1.14  -> exchange
//   262144 (16; partition):        uniform 0.904 / 1.24, normal 0.900 / 1.38, zipf 0.902 / 1.32, one hot 0.567 /
//                                  0.485, sorted 0.712 / 0.833  -> exchange (1.17x the partition on one hot; the
//                                  partition 1.53x it on normal)
//   393216 (16; partition):        uniform 0.922 / 1.16, normal 0.923 / 1.44, zipf 0.922 / 1.38, one hot 0.566 /
//                                  0.486  -> exchange (1.16x on one hot; the partition 1.56x on normal)
//   524288 (16; partition):        uniform 0.968 / 1.13, zipf 0.963 / 1.40, one hot 0.576 / 0.486  -> exchange
//                                  (1.19x on one hot; the partition 1.45x on Zipf)
//   640000 (16; partition):        uniform 0.982 / 1.26, zipf 0.979 / 1.40, one hot 0.579 / 0.490  -> exchange
//                                  (1.18x on one hot; the partition 1.43x on Zipf)
// 640000 is the most a 16-block cluster holds for 4-byte input (40000 bins a block beside the staging): past it the
// partition. As between the other tiers, the plan takes the tier whose worst case against the other is smaller. One
// hot bin is slower than the partition from 232449 bins (0.57-0.58 ms against 0.49).
// Against tier cluster's 16-bit counts (2 blocks up to 232448 bins), first with the binner's general body,
// bench_plan.py --bins 116225 131072 196608 232448 (2026-11-24, earlier), exchange / cluster 2: 116225 uniform
// 0.879 / 0.825, one hot 0.524 / 0.609; 232448 uniform 0.896 / 0.908, one hot 0.578 / 0.687  -> exchange (the
// cluster 1.16-1.19x it on one hot). With the cluster's by-value body (RESULTS.md "Plan thresholds, selected bin
// counts", 2026-11-24, later; NOTES.md "Tier cluster: a by-value body"), exchange / cluster 2:
//   116225: uniform 0.879 / 0.631, normal 0.880 / 0.628, one hot 0.524 / 0.425, zipf 0.878 / 0.617, sorted 0.621 /
//           0.425  -> cluster (the exchange 1.46x it on sorted)
//   131072: uniform 0.889 / 0.630, one hot 0.525 / 0.428, sorted 0.649 / 0.427  -> cluster (1.52x)
//   196608: uniform 0.893 / 0.666, one hot 0.571 / 0.446, sorted 0.703 / 0.449  -> cluster (1.57x)
//   232448: uniform 0.898 / 0.719, one hot 0.579 / 0.518, zipf 0.899 / 0.705, sorted 0.686 / 0.516  -> cluster
//           (1.33x)
// and in a run beside them (NOTES.md), exchange / cluster 2 at 131072 and 232448 bins: strided rows (x[::2] of
// 2^28 + 2) 0.780 / 0.572 and 0.830 / 0.606 uniform, 0.596 / 0.487 and 0.616 / 0.510 one hot; int64 0.604 / 0.503
// and 0.653 / 0.563; clamped 0.880 / 0.689 and 0.912 / 0.774; 2^22-2^24 values 35.9-68.9 us against 50.8-93.3 at
// 131072, a tie at 232448. Slower in the cluster: 8 batched rows of 2^24 with one hot bin, 0.336 / 0.390 and 0.383 /
// 0.474 (uniform rows 0.663 / 0.592 and 0.687 / 0.689). The window starts past the cluster's 2 blocks. With the
// cluster's branchless adds (NOTES.md "Tier cluster: branchless adds, one warp vote a vector"; same section, a later
// run), exchange / cluster 2 from 116225 to 232448 bins: uniform 0.878-0.898 / 0.588-0.726, one hot 0.521-0.565 /
// 0.411-0.505, sorted 0.618-0.702 / 0.412-0.511; 8 batched rows of one hot bin at 131072 bins now 0.377 in the
// cluster (NOTES.md).
constexpr int64_t kExchangeAutoMinBins = 232449;  // past 2 blocks of 16-bit counts (232448 bins): tier cluster's
constexpr int64_t kExchangeAutoMaxBins = 640000;  // 16 blocks of 40000: its capacity for 4-byte input
// ... and only for a histogram of at least kExchangeAutoMinElements elements: zeroing and flushing every cluster's
// bins costs ~40 us a call. bench_plan.py --small (RESULTS.md "Plan thresholds, small calls", H100 80GB HBM3,
// 2026-11-24), us of device time per call (CUDA-graph replay), int32, exchange / the tier the plan took before it:
//   131072 bins (cluster 3):  uniform 2^22 50.1 / 38.7, 2^23 68.7 / 52.4, 2^24 96.6 / 86.3; one hot 2^22 18.1 /
//                             21.8, 2^23 28.9 / 34.2, 2^24 47.3 / 59.4
//   262144 bins (global below 2^23, then partition): uniform 2^22 51.3 / 54.3, 2^23 67.1 / 112.8, 2^24 97.5 /
//                             140.7; one hot 2^22 19.1 / 18.8, 2^23 30.2 / 25.9, 2^24 50.7 / 45.0
// At 2^24 the exchange's worst case is the smaller at both bin counts; at 2^22 the cluster's at 131072 bins (within
// 6% either way at 262144). 2^23 is a near tie at 131072 bins (this run: the exchange 1.31x the cluster on uniform,
// the cluster 1.18x it on one hot; an earlier run 1.26x and 1.31x) and the exchange's at 262144 (the partition 1.68x
// it on uniform): the threshold is 2^23.
constexpr int64_t kExchangeAutoMinElements = int64_t(1) << 23;

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
// Every slice flushes each work item's chunk of bins into the output (one item per block of kernel 3 on even data),
// so fewer, longer slices flush less. Measured on the H100 80GB HBM3 (benchmarks/bench_partition.py, 2026-11-23, 2^28 int32
// uniform, ms): 24 MiB 1M bins 3.1, 16M bins 5.3; 64 MiB 1.78, 3.52; 256 MiB 1.50, 2.57 (3 slices for 2^28 values).
constexpr int64_t kPartitionWorkspaceBytes = int64_t(256) << 20;
constexpr int64_t kPartitionItemsReserve = int64_t(1) << 20;
// A work item holds at least this many elements per bin of its chunk, so flushing the chunk costs less than the
// adds; an item with fewer elements than chunk bins / kPartitionDirectRatio adds straight into the output instead.
constexpr int64_t kPartitionMinItemElementsPerBin = 8;
constexpr int64_t kPartitionDirectRatio = 8;
// Kernel 2 tries this many rounds of items (items per block of kernel 3) past the fewest the chunks allow (one item
// per chunk) and keeps the cheapest: one round when the chunks are even, more when one chunk holds most of the slice
// (Zipf) or the chunks outnumber the blocks. Measured on the H100 80GB HBM3 (2^28 int32, forced partition, ms of
// kernel 3 over the call's 3 slices; benchmarks/NOTES.md "fourth version"): items of a fixed length, two per block
// (the third version) at 1M bins uniform 0.68; equal items cut for one round 0.46 (two rounds 0.49); but one round
// only at 4M bins Zipf 5.77 (129 chunks for 132 blocks: the hot chunk got 4 items), two rounds 0.89.
constexpr int kPartitionItemRoundsTried = 3;
// Kernel 3 reads a batch of 1024 tiles' runs of its chunk. When none is longer than kPartitionOwnRunMaxVectors
// 16-byte vectors (8 entries each), every thread counts its own run, kPartitionOwnRunGroup vectors loaded at once;
// else the batch's runs are laid end to end across the block (a scan, then a search per vector), which keeps threads
// even when runs differ (sorted data, a hot chunk). Counts only: weighted sums lost 10% this way. An item whose
// chunk has no run that long in the slice (kernel 2 finds the longest) is counted one run a thread throughout, with
// no barrier per batch.
// Measured on the H100 80GB HBM3 (benchmarks/NOTES.md, "kernel 3 counts short runs one a thread", 2026-11-24, 2^28
// int32, forced partition, ms, before -> after, each timed twice in turn): 16M bins uniform 2.207 -> 1.928, normal
// 2.363 -> 1.914, Zipf 2.339 -> 2.063; 4M uniform 1.329 -> 1.273, normal 1.557 -> 1.472; 1M uniform 1.132 -> 1.128
// (its runs of ~32 vectors stay end to end), Zipf 1.508 -> 1.445, sorted 0.910 -> 0.845; one hot unchanged. With
// no barrier for items of short runs only (NOTES.md, "kernel 3's branch-free counts"): 16M uniform 1.929 -> 1.657,
// 4M uniform 1.276 -> 1.186, 1M Zipf 1.384 -> 1.269 (its cold chunks).
constexpr uint32_t kPartitionOwnRunMaxVectors = 16;
constexpr int kPartitionOwnRunGroup = 4;
// A batch counted end to end gives each warp this many vectors a lane per round, lane l taking the round's l-th,
// (l + 32)-th, ... of the warp's: each load is 512 contiguous bytes but at a run's ends. ncu, 1M bins Zipf: the
// search was ~20% of kernel 3's stall samples at two consecutive vectors a thread. Measured on the H100 80GB HBM3
// (NOTES.md, "kernel 3's end-to-end rounds", 2026-11-24, 2^28 int32, forced partition, ms, two vectors -> four,
// each timed twice in turn): 262144 bins uniform 1.236 -> 1.126, Zipf 1.318 -> 1.222; 1M uniform 1.125 -> 1.084,
// normal 1.323 -> 1.194, Zipf 1.427 -> 1.372; 4M normal 1.464 -> 1.374, Zipf 1.608 -> 1.486; 16M Zipf 2.067 ->
// 1.979; sorted, one hot and 16M uniform unchanged. Eight a round spill (ptxas: 100 bytes, counts).
constexpr int kPartitionEndToEndCountGroup = 4;
constexpr int kPartitionEndToEndSumGroup = 2;
// The planner takes the partition tier for counts past kPartitionAutoMinBins bins: where the automatic cluster tier
// ends on the H100 (kClusterAutoMaxBlocks blocks of 116224 16-bit counts). Measured by benchmarks/bench_plan.py on
// the H100 80GB HBM3 (RESULTS.md "Plan thresholds", the tier as of 6546723, run on d3c14cb 2026-11-25; 2^28 int32,
// median ms, partition / global):
//   262144:   uniform 1.10 / 3.30, normal 1.23 / 3.26, zipf 1.18 / 3.62, one hot 0.49 / 0.50, sorted 0.74 / 0.68
//   1048576:  uniform 1.05 / 3.29, normal 1.15 / 3.26, zipf 1.27 / 3.86, one hot 0.49 / 0.51, sorted 0.84 / 0.92
//   4194304:  uniform 1.18 / 4.51, normal 1.26 / 3.41, zipf 1.38 / 5.59, one hot 0.51 / 0.52, sorted 0.90 / 0.81
//   16777216: uniform 1.65 / 16.0, normal 1.74 / 11.6, zipf 1.82 / 8.46, one hot 0.72 / 0.55, sorted 1.17 / 0.91
// As for the cluster tier, the plan takes the tier whose worst case against the other is smaller: the partition's
// (0.97-1.36x global past 232448 bins: sorted, and one hot bin at 16M) against global's (2.9-9.7x the partition:
// uniform or Zipf).
// Against the cluster tier: beside kClusterAutoMaxBlocks.
// Without the cluster tiers (a GPU before sm_90, or a binary without sm_90 code: tier_partition.cuh, auto_min_bins) the
// partition takes counts from past tier shared. An 8.0+PTX build on the H100 80GB HBM3 (2026-11-24, 2^28 int32,
// median ms, partition / global; NOTES.md "The partition without the cluster tiers"):
//   58113:   uniform 1.58 / 3.59, normal 1.60 / 3.86, zipf 1.28 / 2.71, one hot 0.50 / 0.53, sorted 0.82 / 0.87
//   65536:   uniform 1.55 / 3.50, normal 1.55 / 4.16, zipf 1.31 / 3.00, one hot 0.51 / 0.53, sorted 0.87 / 0.72
//   131072:  uniform 1.33 / 3.31, normal 1.55 / 3.50, zipf 1.33 / 3.43, one hot 0.51 / 0.54, sorted 0.82 / 0.81
//   232448:  uniform 1.20 / 3.36, normal 1.43 / 3.36, zipf 1.38 / 3.60, one hot 0.54 / 0.56, sorted 0.87 / 0.72
// The partition's worst case against global is sorted data (up to 1.24x, at 174336 bins), global's against it 2.1-2.8x
// (uniform, normal, Zipf).
// Weighted sums stay on "global" (bench_plan.py --weighted, RESULTS.md "Plan thresholds for weighted sums", H100,
// 2026-11-24, 2^28 int32, integer weights, median ms global / partition, with runs of one bin merged and the hot-bin
// cache holding sums, claimed on a bin's second add in long sums):
//   float32, 1048576: uniform 2.63 / 3.70, normal 2.63 / 3.80, one hot 0.88 / 3.54, zipf 2.03 / 6.73, sorted 1.54 / 3.99
//   float64, 1048576: uniform 2.80 / 6.14, normal 2.79 / 6.90, one hot 1.13 / 6.01, zipf 2.02 / 12.2, sorted 1.80 / 6.63
//   float32, 16777216: uniform 9.73 / 5.77, normal 5.29 / 5.34, one hot 0.91 / 3.79, zipf 3.34 / 6.90, sorted 1.20 / 4.60
// Global is faster on all 5 distributions from 4096 to 4194304 bins (float32, float64, deterministic), on 4 of 5 at
// 16777216 (float32: the partition wins uniform, global 1.69x it, where the partition is 4.18x global on one hot bin).
constexpr int64_t kPartitionAutoMinBins = 232448;
// ... and only for a histogram of at least kPartitionAutoMinElements elements: the tier's slices and chunk flushes
// cost 60-110 us whatever the data below 2^22 elements. Device time per call, us (CUDA-graph replay, as for
// kFewElementsPerBin), partition / global, uniform int32:
//   262144 bins:  2^20 79.0 / 18.8, 2^22 106.3 / 55.7, 2^24 152.1 / 207.8
//   1048576 bins: 2^20 67.8 / 20.6, 2^22 81.2 / 57.3, 2^24 165.2 / 209.4
//   4194304 bins: 2^20 76.7 / 37.6, 2^22 87.8 / 98.9 (partition 1.13x faster), 2^24 140.3 / 313.6
// With one hot bin the two are within 10% from 2^20 elements up (global the faster below).
constexpr int64_t kPartitionAutoMinElements = int64_t(1) << 23;

// ----- Byte tallies (tier "shared", counts of 1-byte inputs) --------------------------------------------------------

// A 1-byte input takes only 256 values, so a block counts values, not bins: 256 tallies in kByteTallyLanes copies,
// tally[value * kByteTallyLanes + lane], so each lane of a warp adds in its own bank whatever the data (no bank
// conflict, no same-address conflict within a warp). Each flush sums the copies and bins the 256 values once. An
// element costs a byte extract, an address and one shared-memory atomic: no binning arithmetic, no bounds check.
// The generic path was instruction-bound at 0.825-0.88 ms for 2^30 uint8 values at 256 bins on the H100 (NOTES.md
// section 6), 39-42% of the read bandwidth.
constexpr int kByteTallyLanes = 32;
constexpr int64_t kByteTallyWords = int64_t(256) * kByteTallyLanes;
constexpr int64_t kByteTallyBytes = kByteTallyWords * 4;  // 32 KB of shared memory beside the bins
// A flush reads all kByteTallyWords words, so a work item tallies only when it holds at least twice as many elements
// (the 1-D ops past the small-call path, long batched rows); shorter items (short batched rows) count per bin.
constexpr int64_t kByteTallyMinItemElements = 2 * kByteTallyWords;

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
// Traversals that bin each value by range as they read it ask L2 for their next batch of vectors while binning this
// one (one prefetch.global.L2 a vector): the range arithmetic takes long enough that the next loads would wait on HBM.
// Binning by value, the extra L2 requests cost more than they save. H100 80GB HBM3, 2026-11-24, 2^28 uniform values
// (uint8: 2^30), median ms with / without (benchmarks/NOTES.md, "Range binning without a division"): by range,
// float32 256 bins 0.377 / 0.406, 4096 0.380 / 0.416, 65536 0.780 / 0.789; float16 256 0.368 / 0.372; float32 with
// the data's range, 256 bins 0.779 / 0.799; int32 256 bins over [0, 1000) 0.435 / 0.464. By value: int32 256 bins
// 0.388 / 0.374, 4096 0.396 / 0.375; int64 256 0.763 / 0.720; uint8 256 0.402 / 0.384.
constexpr bool kPrefetchWhenBinningByRange = true;

}  // namespace dsmhist
