// Every tuning constant of the CUDA path. Each comment gives the deciding figure (device, date) and the tier page that
// holds the full measurements (docs/tiers/, from docs/perf-log/). The planner (planner.cu), the tier units
// (tier_*.cuh) and the kernels read them from here; change a value only with a new measurement on its tier page.
#pragma once

#include <cstdint>

namespace dsmhist {

// ----- Block sizes -------------------------------------------------------------------------------------------------

// One block an SM (up to 227 KB of bins), so the most threads: 2^28 int32 at 256 bins 0.358 ms, floor 0.345 (H100,
// 2026-11-25; no A/B). docs/tiers/shared.md, docs/tiers/cluster.md
constexpr int kBlockThreads = 1024;
// No per-block state to amortise; smaller blocks spread over the SMs more evenly (no A/B). docs/tiers/global.md
constexpr int kGlobalThreads = 256;
// The kernels without bins (range pass, bin indices for autograd); no A/B. docs/design.md
constexpr int kRangeThreads = 256;

// ----- Global tier -------------------------------------------------------------------------------------------------

// 16 KB a block: one hot bin 196.9 -> 0.49 ms at 262144 bins (2026-11-22); 256-1024 slots 1.2-2x slower on Zipf small
// calls (2026-11-24). H100. docs/tiers/global.md
constexpr int kGlobalCacheSlots = 2048;
// 4 a thread, not 16: 65536 bins, 2^16 values 5.7 against 9.1 us, 2^20 18.5 / 17.7 (H100, 2026-11-23).
// docs/tiers/global.md
constexpr int64_t kGlobalMinElementsPerThread = 4;
// Global below 32 elements a bin from 16384 bins: 65536 bins, 2^16 values 5.7 us against shared/cluster 16.1; at 32 a
// bin (32768 bins, 2^20) global 19.4, shared 19.1 (H100, 2026-11-23). docs/tiers/global.md
constexpr int64_t kFewElementsPerBin = 32;
constexpr int64_t kFewElementsMinBins = 16384;
// Claim on repeat: Zipf float32 sums at 2^26 values (248 a thread) 1.190 -> 0.657 ms, at 2^22 (16 a thread) 62.2 ->
// 118.7 us, 65536 bins (H100, 2026-11-24). docs/tiers/global.md
constexpr int64_t kGlobalSumsClaimOnRepeatMinPerThread = 32;
// One vector in flight for those sums: one hot 0.273 -> 0.225 ms, sorted 0.801 -> 0.553 (2^26, H100, 2026-11-24).
// docs/tiers/global.md
constexpr int kGlobalSumsVectorsInFlight = 1;

// ----- Edges (the one pass of histogram_edges / histogramdd, edge_histogram.cu) -------------------------------------

// Blocks of 1024: the 32-register 1-D count kernel then runs two an SM (2048 threads) where 512-thread blocks, held
// to two an SM by their tables, ran 1024, and fewer blocks flush fewer copies of the bins. H100, 2^26 float32, ms,
// 512 -> 1024: 100 / 1000 / 10000 edges 0.156 / 0.199 / 0.335 -> 0.144 / 0.168 / 0.287, 64x64 0.262 -> 0.255, 16^3
// 0.267 -> 0.248 (perf log 2026-11-26). docs/tiers/edges.md
constexpr int kEdgeFusedThreads = 1024;
// Points a thread bins before adding any (their loads in flight together); no A/B yet. docs/tiers/edges.md
constexpr int kEdgePointsPerStep = 4;
// Cells of the fused path's table an edge (where shared memory allows; else fewer, in proportion), so most cells hold
// at most one or two edges and one load of the cell's entry bins a value. H100, 2^26 float32, ms (perf log
// 2026-11-26): a 1-D table of two-edge entries at 4 an edge, 100 / 1000 edges 0.155 / 0.193 (2 an edge 0.178 / 0.204,
// 8 an edge 0.158 / 0.213); N-D tables of one-edge entries at 16 an edge, 64x64 / 16^3 0.251 / 0.268 (two-edge
// entries at 8: 0.268 / 0.290); a 1-D table of one-edge entries (float64 edges, a two-edge table too large) at 2, as
// before. docs/tiers/edges.md
constexpr int64_t kEdgeCellsPerEdge = 2;
constexpr int64_t kEdgeCellsPerEdgeTwoEdgeEntries = 4;
constexpr int64_t kEdgeCellsPerEdgeManyDims = 16;
// Copies of few bins in a block, up to 8 in 32 KB, so hot bins contend less; no A/B yet. docs/tiers/edges.md
constexpr int kEdgeMaxReplicas = 8;
constexpr int64_t kEdgeReplicaBytes = 32 * 1024;
// Blocks that split the bins of one group (each reads every point of the group); no A/B yet. docs/tiers/edges.md
constexpr int kEdgeMaxOwnerBlocks = 4;
// Global atomics into an output of at most 1 / this of the L2 (25 MiB on an H100, 24 MiB before 2026-11-26); no A/B
// yet. docs/tiers/edges.md
constexpr int64_t kEdgeGlobalOutputL2Divisor = 2;
// A block per 16 points a thread at least: small calls in few blocks, fewer flushes; no A/B yet. docs/tiers/edges.md
constexpr int64_t kEdgeMinPointsPerThread = 16;
// Counts that no one block holds (groups of blocks or global atomics in the one pass) take the two stages from this
// many points: the one pass's lookup writes int32 flat bins, the planned tier counts them. H100, ms, one pass -> two
// stages: 2^26 points 400^2 0.549 -> 0.479, 1024^2 1.048 -> 0.623; 2^24 points 400^2 0.177 -> 0.170, 1024^2 0.311
// -> 0.228; 2^23 points 400^2 0.112 -> 0.130, 1024^2 0.166 -> 0.167 (perf log 2026-11-27). docs/tiers/edges.md
constexpr int64_t kEdgeTwoStageMinPoints = int64_t(1) << 24;

// ----- Cluster tiers -----------------------------------------------------------------------------------------------

// 2 blocks (232448 bins) beat the partition (uniform 0.719 / 1.18 ms); 3 blocks (262144) lose to the exchange on every
// distribution (uniform 1.00 / 0.904) (H100, 2026-11-24). Past the bins these blocks hold (cluster_auto_max_count_bins,
// tier_host.h: 232448 on an H100) counts go to the exchange and the partition. docs/tiers/cluster.md
constexpr int kClusterAutoMaxBlocks = 2;
// Divisor 1 / 4 for small calls at 116224 bins: 2^22 values 70.5 / 50.3 us, 2^23 79.4 / 60.1 (H100, 2026-11-24).
// docs/tiers/cluster.md
constexpr int64_t kPackedItemBinsDivisor = 4;
// Clusters of 1 / 2 / 4 at 65536 bins: 2^22 values 36.5 / 26.3 / 21.8 us, 2^28 422 / 413 / 441 (H100, 2026-11-24).
// docs/tiers/cluster.md
constexpr int kClusterReplicas = 2;
// Sums at 2 blocks: the cluster's worst 2.29x global's, global's 1.34x the cluster's (float32, 65536 bins; H100,
// 2026-11-24). docs/tiers/cluster.md
constexpr int kClusterAutoMaxBlocksForSums = 1;
// The hardware's largest cluster (16 needs the non-portable attribute, sm_90): not a tuning choice.
// docs/tiers/cluster.md
constexpr int kMaxClusterSize = 16;

// ----- Exchange tier -----------------------------------------------------------------------------------------------

// One block an SM; two blocks of 512 threads gained 3% in the probe (1.06 -> 1.03 ms, 131072 bins) and were dropped
// (H100, 2026-11-23). docs/tiers/exchange.md
constexpr int kExchangeThreads = 1024;
// 16 values a thread, not 8: 262144 bins 1.13 -> 0.933 ms in the probe; 24 spill (H100, 2026-11-23).
// docs/tiers/exchange.md
constexpr int kExchangeTileBytes = 64;  // per thread a round: 16 values of up to 4 bytes, 8 of 8 bytes
constexpr int kExchangeMaxValuesPerThread = 16;
// Rounds ahead 0 / 1 / 2 / 4, 524288 bins: one hot 0.669 / 0.577 / 0.579 / 0.630 ms, uniform 1.032 / 0.970 / 0.971 /
// 0.981 (H100, 2026-11-24). docs/tiers/exchange.md
constexpr int kExchangePrefetchRounds = 1;
// Probe, 262144 bins: 8 blocks (32768 bins a block) 0.996 ms, 16 blocks (16384 a block) 0.933 (H100, 2026-11-23).
// docs/tiers/exchange.md
constexpr int kExchangeSmallCluster = 8;
constexpr int64_t kExchangeBlockBins = 16384;
// The window, relative to capacity (tier_exchange.cuh, planner_takes): from past tier cluster's automatic bins (232449
// on an H100), below which its 2 blocks win on every distribution (116225-232448 bins: uniform 0.59-0.73 against
// 0.88-0.90 ms; H100, 2026-11-24), to the most a 16-block cluster holds for 4-byte input (640000 on an H100), past
// which the partition's worst is 1.43x the exchange's (Zipf) against the exchange's 1.18x (one hot).
// docs/tiers/exchange.md
// 262144 bins, 2^23 values: 67.1 us against the partition's 112.8 (uniform); 2^22 within 6% of global (H100,
// 2026-11-24). docs/tiers/exchange.md
constexpr int64_t kExchangeAutoMinElements = int64_t(1) << 23;

// ----- Partition tier ----------------------------------------------------------------------------------------------

// Kernel 1's tile, 512 x 16 elements, 2 blocks an SM at 64 registers (no A/B; kernel 1 0.69 ms of a 1.055 ms call at
// 1M bins, H100, 2026-11-25). docs/tiers/partition.md
constexpr int kPartitionThreads = 512;
constexpr int kPartitionValuesPerThread = 16;
// Kernels 2 and 3: 1024 threads, kernel 3 one block an SM (its 128 KiB chunk); no A/B. docs/tiers/partition.md
constexpr int kPartitionItemThreads = 1024;
constexpr int kPartitionCountThreads = 1024;
// 32768-bin chunks: 8192-bin ones took 1M bins uniform 1.122 -> 1.184 ms, Zipf 1.429 -> 1.510 (H100, 2026-11-24).
// docs/tiers/partition.md
constexpr int64_t kPartitionChunkBytes = 128 * 1024;
// Kernel 1's shared memory and the run table: a capacity (33521664 count bins a row), not a measured optimum.
// docs/tiers/partition.md
constexpr int kPartitionMaxChunks = 1024;
// 8 of 32 lanes sharing lane 0's chunk take one atomic (second version, 2026-11-23; no A/B of the share).
// docs/tiers/partition.md
constexpr int kPartitionLeadShare = 8;
// Workspace 24 / 64 / 256 MiB: 1M bins 3.1 / 1.78 / 1.50 ms, 16M 5.3 / 3.52 / 2.57 (H100, 2026-11-23). The README
// states the bound. docs/tiers/partition.md
constexpr int64_t kPartitionWorkspaceBytes = int64_t(256) << 20;
constexpr int64_t kPartitionItemsReserve = int64_t(1) << 20;
// At least 8 elements a bin an item (was 2) so a chunk's flush costs less than its adds (second version, 2026-11-23;
// no A/B apart). docs/tiers/partition.md
constexpr int64_t kPartitionMinItemElementsPerBin = 8;
constexpr int64_t kPartitionDirectRatio = 8;
// One round of items only: 4M bins Zipf, kernel 3 5.77 ms; two rounds 0.89 (H100, 2026-11-23).
// docs/tiers/partition.md
constexpr int kPartitionItemRoundsTried = 3;
// Runs of at most 16 vectors counted one a thread: 16M bins uniform 2.207 -> 1.928 ms, 4M 1.329 -> 1.273 (H100,
// 2026-11-24). docs/tiers/partition.md
constexpr uint32_t kPartitionOwnRunMaxVectors = 16;
constexpr int kPartitionOwnRunGroup = 4;
// End-to-end rounds, two vectors a lane -> four: 1M normal 1.323 -> 1.194 ms, 4M Zipf 1.608 -> 1.486; eight spill
// (H100, 2026-11-24). docs/tiers/partition.md
constexpr int kPartitionEndToEndCountGroup = 4;
// Four for sums lost: float32 weights 8-17% slower (1M uniform 2.030 -> 2.239 ms; H100, 2026-11-24).
// docs/tiers/partition.md
constexpr int kPartitionEndToEndSumGroup = 2;
// The partition takes counts past tier cluster's automatic bins (cluster_auto_max_count_bins, tier_host.h: 232448 on
// an H100): there its worst is 0.97-1.36x global's (sorted; one hot at 16M), global's 2.9-9.7x the partition's
// (uniform, Zipf) (H100, 2026-11-25). docs/tiers/partition.md
// 262144 bins: 2^22 values 106.3 us against global's 55.7, 2^24 152.1 against 207.8 (uniform; H100, 2026-11-23).
// docs/tiers/partition.md
constexpr int64_t kPartitionAutoMinElements = int64_t(1) << 23;

// ----- Byte tallies (tier "shared", counts of 1-byte inputs) --------------------------------------------------------

// A copy per lane, no bank conflict: uint8 2^30 at 256 bins 0.832 -> 0.355 ms, CUB 0.494 (H100, 2026-11-23).
// docs/tiers/shared.md
constexpr int kByteTallyLanes = 32;
constexpr int64_t kByteTallyWords = int64_t(256) * kByteTallyLanes;
constexpr int64_t kByteTallyBytes = kByteTallyWords * 4;  // 32 KB of shared memory beside the bins
// A flush reads all 8192 tally words, so items tally from twice that; 65536 short rows of 256 uint8 count per bin in
// 0.143 ms (H100, 2026-11-23; no A/B of the threshold). docs/tiers/shared.md
constexpr int64_t kByteTallyMinItemElements = 2 * kByteTallyWords;

// ----- Work per block ----------------------------------------------------------------------------------------------

// Least work a thread before a block's bins are worth zeroing and flushing; no A/B. docs/tiers/shared.md
constexpr int64_t kMinElementsPerThread = 16;
// One block: 13 us a call for 65536 int64 values (device-bound) against 9.9 at 4096; 8 blocks of 8192 stay host-bound
// (H100, 2026-11-22). docs/tiers/shared.md
constexpr int64_t kSmallCallMaxElements = 65536;
constexpr int64_t kSmallCallElementsPerBlock = 8192;
constexpr int64_t kSmallCallMaxBlocks = 8;
// Float sums of a 1-D call: up to 8 copies of the bins a block, warp w adding into copy w mod copies (a shared float
// add is a compare-and-swap loop another warp's add restarts): Zipf float32 weights, 2^27 at 4096 bins, 1 / 2 / 4 / 8
// copies 1.89 / 1.05 / 0.69 / 0.59 ms, uniform 0.508 / 0.506 / 0.506 / 0.507 (H200, 2026-11-26). docs/tiers/shared.md
constexpr int64_t kSharedSumCopies = 8;
// Copies of the bins for the deterministic fixed-point pass (8-byte sums). H100, 2^27 int32 + float32 weights, ms for
// 1 / 4 / 8 copies: 4096 bins uniform 1.07 / 1.09 / 1.26, Zipf 3.07 / 1.35 / 1.33; 256 bins Zipf 4.19 / 1.59 / 1.31.
// The exponent pass gained nothing from copies (docs/tiers/shared.md).
constexpr int64_t kSharedFixedPointCopies = 4;
// A 32-bit shared counter's range: exactness, not a tuning choice. docs/tiers/shared.md
constexpr int64_t kMaxCountsPerFlush = int64_t(UINT32_MAX);

// ----- Traversal ---------------------------------------------------------------------------------------------------

// 16-byte loads, 4 in flight a thread: uint8 2^30 at 256 bins 0.355 ms against the 0.345 floor (H100, 2026-11-23).
// docs/tiers/shared.md
constexpr int kVectorsInFlight = 4;
// Sums with float32 weights load 2 vectors and their weights at once, not 4 (1024 threads have 64 registers; 4 spilled
// 132 bytes a thread, 2 spill 24): 2^27 at 4096 bins 0.508 -> 0.442 ms (H200, 2026-11-26). docs/tiers/shared.md
constexpr int kSharedWeightedVectorsInFlight = 2;
// With / without, float32 by range at 256 bins 0.377 / 0.406 ms; by value int32 0.388 / 0.374 (H100, 2026-11-24).
// docs/tiers/shared.md
constexpr bool kPrefetchWhenBinningByRange = true;

// ----- MoE routing (moe_align_block_size) ----------------------------------------------------------------------------

// The routing kernel (moe_align_body.cuh; docs/perf-log/2026-11-moe.md has the sweeps, H200 then H100). A cluster
// shares the work above 1024 ids a block (8192 ids: 8.4-8.9 us in 8 blocks, 9.4-10.2 in 4; sm_90) or above 4096 output
// slots a block (the padding of 256 experts in blocks of 256 is 256 KB: 14.5 us from one SM, 8.7 from a cluster).
// Clusters up to 16 blocks (non-portable above 8: configure_kernel allows it, max_active_clusters checks it): 16
// took 1.5-1.8x less than 8 from 128K ids up. Past 16384 ids (where the device can launch cooperatively) a grid of up
// to one block an SM, one per 1024 ids, shares its counts through global memory instead: 262144 ids with 256 experts
// took 36.7 us in one cluster, 15.0 so; 32768 ids 10.3-10.8, 9.2 (H100; 2048 or 4096 ids a block, or grids from 32K or
// 64K ids up, were 1-7% slower in geometric mean). Warps: at least 4, and one per 8 experts for the per-expert steps;
// of them, one id warp per 4 steps of 32 ids (2 or 8 steps: 1-3% slower in geometric mean).
constexpr int kMoeMaxWarps = 32;
constexpr int kMoeMinWarps = 4;
constexpr int64_t kMoeIdsPerBlock = 1024;
constexpr int64_t kMoeSlotsPerBlock = 4096;
constexpr int kMoeMaxClusterBlocks = 16;
constexpr int kMoeStepsInFlight = 8;
constexpr int kMoeStepsPerIdWarp = 4;
constexpr int64_t kMoeGridMinIds = 16384;
constexpr int64_t kMoeIdsPerGridBlock = 1024;
constexpr int64_t kMoeGridSumWords = 65536;

}  // namespace dsmhist
