// The host side of a fused edges launch that both of its kernels share (edge_histogram.cu: the one pass; edge_bins.cu:
// the two stages' lookup): how a block's shared memory is laid out after its bins (the staging of edge_fused.cuh) and
// the grid. Included by those two files only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../common/edge_binning.h"
#include "device_caps.h"
#include "edge_fused.cuh"
#include "edge_staging.h"
#include "kernels.h"
#include "tier_host.h"
#include "tuning.h"

namespace dsmhist {

// Shared memory a fused block leaves for the runtime's reserve (1 KB a block on sm_80 / sm_90).
constexpr int64_t kFusedReservedBytes = 2 * 1024;
// The least a fused block keeps for the dims' facts and the edges' table (and the edges where they fit) beside its
// bins.
constexpr int64_t kFusedMinStagingBytes = 8 * 1024;

// Edges whose table entries may hold two (16 bytes, one vector load): float. lay_out_fused takes them for a 1-D call
// whose whole table fits, where the caller has a two-edge kernel.
template <typename T>
constexpr bool kTwoEdgeEntries = sizeof(edge_t<T>) == 4;

// Lays out a fused launch whose bins take bins_region bytes of each block (f's mode, bins and owners chosen): the
// staging after the bins, the table (entries of two edges for two_edge_kernel where its whole table fits, else of
// one for `kernel`), the shared memory and the grid, into plan. plan->fused stays false where the edges do not fit
// beside a table of a cell per four edges.
template <typename T>
cudaError_t lay_out_fused(const EdgeBinParams& p, int device, const DeviceCaps& caps, const void* kernel,
                          const void* two_edge_kernel, int64_t bins_region, FusedShape* f, EdgeTableShape* table,
                          EdgeHistogramPlan* plan) {
  using E = edge_t<T>;
  f->staging_offset = bins_region;
  f->vector_points = sizeof(T) == 4 && p.rows == 1 && p.dims <= 3 && p.point_stride == p.dims &&
                     (p.dims == 1 || p.dim_stride == 1) && reinterpret_cast<uintptr_t>(p.input) % 16 == 0 &&
                     (f->mode != FusedMode::kKeys || reinterpret_cast<uintptr_t>(p.out) % 16 == 0);
  f->facts_bytes = round_up16(p.dims * static_cast<int64_t>(sizeof(DimFacts<E>)));
  f->edges_bytes = round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E)));
  const int64_t usable = caps.shared_optin - kFusedReservedBytes;
  // Staging takes what keeps two blocks on an SM where that leaves it room, else what one block may have; the edges
  // must fit in it beside a table of a cell per four edges, or the call takes two stages.
  const int64_t two_blocks = caps.shared_per_sm / 2 - kFusedReservedBytes - bins_region;
  const int64_t budget =
      two_blocks >= kFusedMinStagingBytes ? std::min(usable - bins_region, two_blocks) : usable - bins_region;
  // The table's entries and cells an edge (tuning.h): in 1-D, entries of two edges where such a table fits whole;
  // else one edge an entry, fewer cells in proportion where the table does not fit.
  const int64_t table_budget = budget - f->facts_bytes - f->edges_bytes;
  // Slots a two-edge table wants, and the least any table needs (a cell per four edges, whatever the entries).
  int64_t two_edge_slots = 0, least_slots = 0;
  table_slots_of(p, kEdgeCellsPerEdgeTwoEdgeEntries, &two_edge_slots, &least_slots);
  int edges_per_entry = 1;
  int64_t entry_bytes = sizeof(CellEntry<E, 1>);
  int64_t cells_per_edge = p.dims == 1 ? kEdgeCellsPerEdge : kEdgeCellsPerEdgeManyDims;
  if constexpr (kTwoEdgeEntries<T>) {
    if (two_edge_kernel != nullptr && two_edge_slots * int64_t(sizeof(CellEntry<E, 2>)) <= table_budget) {
      edges_per_entry = 2;
      entry_bytes = sizeof(CellEntry<E, 2>);
      cells_per_edge = kEdgeCellsPerEdgeTwoEdgeEntries;
      kernel = two_edge_kernel;
    }
  }
  if (table_budget < least_slots * entry_bytes) return cudaSuccess;
  cudaError_t err = configure_kernel(kernel, device, caps, /*is_cluster_kernel=*/false);
  if (err != cudaSuccess) return err;
  *table = cells_within(p, table_budget / entry_bytes, /*edges_in_shared=*/true, cells_per_edge);
  const int64_t shared_bytes = bins_region + f->facts_bytes + f->edges_bytes + int64_t(table->table_ints) * entry_bytes;
  const int threads = kEdgeFusedThreads;
  int per_sm = 1;
  err = blocks_per_sm(kernel, device, caps, threads, shared_bytes, &per_sm);
  if (err != cudaSuccess) return err;
  const int64_t resident_groups = std::max<int64_t>(1, int64_t(per_sm) * caps.sm_count / f->owners);
  const int64_t all_points = p.rows * p.points;
  const int64_t wanted_groups =
      (all_points + int64_t(threads) * kEdgeMinPointsPerThread - 1) / (int64_t(threads) * kEdgeMinPointsPerThread);
  const int64_t groups = std::max<int64_t>(1, std::min(resident_groups, wanted_groups));
  plan->fused = true;
  plan->grid = groups * f->owners;
  plan->threads = threads;
  plan->shared_bytes = shared_bytes;
  plan->replicas = f->replicas;
  plan->owners = f->owners;
  plan->edges_per_entry = edges_per_entry;
  plan->packed = f->packed;
  plan->kernel = kernel;
  return cudaSuccess;
}

}  // namespace dsmhist
