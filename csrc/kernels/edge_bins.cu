// The two stages of the CUDA bin-edges ops, for what the one pass (edge_histogram.cu, docs/tiers/edges.md) declines:
// launch_edge_bins writes each point's int32 flat bin for a chunk, which edges_bodies.h counts with the planned
// index-mode histogram. It writes them through the one pass's cell lookup where that serves the call
// (launch_edge_keys: 1024 x 1024 bins over 2^26 points, 1.93 -> 0.62 ms on an H100), else with its own kernel, whose
// blocks stage the edges in shared memory when they fit, with a lookup table over a uniform grid of each dim's edge
// range: table[c] is the number of edges in cells below c, so a value in cell c searches only the edges of its own cell
// (edge_cell, common/edge_binning.h, says why that is exact), one or two comparisons whatever the spacing while the
// edges are spread over the cells, a branch-free binary search over the cell's edges when many crowd into one. Edges
// that do not fit stay in global memory (L1 / L2), the table still in shared memory. No host sync, no allocation:
// safe in CUDA graphs.
#include "kernels.h"

#include <algorithm>
#include <cstdint>

#include "../common/edge_binning.h"
#include "device_caps.h"
#include "edge_fused_layout.cuh"
#include "edge_staging.h"

namespace dsmhist {

namespace {

constexpr int kEdgeBinThreads = 256;
// Shared memory a block of the two-stage kernel stages (under the 48 KB a launch gets without raising the kernel's
// limit, so no kernel attribute is needed): the dims' facts, the edges, the table.
constexpr int64_t kEdgeSharedBytes = 47 * 1024;
constexpr int kEdgeBlocksPerSm = 8;

// Each dim's first edge and grid scale, at the start of the staging (dynamic shared memory, as everything a block
// stages: a kernel with static shared memory could not be given the device's whole opt-in limit).
constexpr int64_t kDimFactsBytes = 2 * kMaxEdgeDims * int64_t(sizeof(double));

// ----- Staging the edges -------------------------------------------------------------------------------------------

// One dim's cell table for the two stages, built by the whole block: cells + 1 entries, entry c the edges below cell c,
// so a value of cell c searches [table[c], table[c + 1]).
template <typename E>
__device__ void build_cell_table(const E* edges, int64_t count, E first, E cells_per_unit, int32_t cells,
                                 int32_t* table) {
  for (int32_t c = threadIdx.x; c <= cells; c += blockDim.x) {
    table[c] = static_cast<int32_t>(edges_below_cell<E, int64_t>(
        edges, count, c, [&](E edge) { return edge_cell(edge, first, cells_per_unit, cells); }));
  }
}

// A block's staged edges: the edges (shared or global), each dim's table, first edge and grid scale.
template <typename E>
struct StagedEdges {
  const E* edges;
  const int32_t* table;
  const E* first_edge;
  const E* cells_per_unit;
};

// Copies the edges (where shape says so) and builds each dim's table at `staging` (staging_bytes of it); every
// thread of the block calls it, and on return the staged edges are complete.
template <typename E>
__device__ StagedEdges<E> stage_edges(const EdgeBinParams& p, const EdgeTableShape& shape, unsigned char* staging) {
  E* first_edge = reinterpret_cast<E*>(staging);
  E* cells_per_unit = first_edge + kMaxEdgeDims;
  staging += kDimFactsBytes;
  const int64_t total_edges = p.edge_offset[p.dims];
  const E* global_edges = static_cast<const E*>(p.edges);
  E* shared_edges = reinterpret_cast<E*>(staging);
  int32_t* table = reinterpret_cast<int32_t*>(
      staging + (shape.edges_in_shared ? round_up16(total_edges * static_cast<int64_t>(sizeof(E))) : 0));
  if (shape.edges_in_shared) {
    for (int64_t j = threadIdx.x; j < total_edges; j += blockDim.x) shared_edges[j] = global_edges[j];
  }
  const E* edges = shape.edges_in_shared ? shared_edges : global_edges;
  if (threadIdx.x < p.dims) {
    const int d = threadIdx.x;
    const E first = global_edges[p.edge_offset[d]];
    const E last = global_edges[p.edge_offset[d + 1] - 1];
    first_edge[d] = first;
    cells_per_unit[d] = static_cast<E>(shape.cells[d]) / (last - first);
  }
  __syncthreads();  // the table is built from the staged edges and each dim's grid
  for (int d = 0; d < p.dims; ++d) {
    build_cell_table<E>(edges + p.edge_offset[d], p.edge_offset[d + 1] - p.edge_offset[d], first_edge[d],
                        cells_per_unit[d], shape.cells[d], table + shape.table_offset[d]);
  }
  __syncthreads();  // no point may be binned before the whole table is in place
  return StagedEdges<E>{edges, table, first_edge, cells_per_unit};
}

// ----- The two-stage path: int32 flat bins of a chunk ---------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kEdgeBinThreads) edge_bin_kernel(EdgeBinParams p, EdgeTableShape shape) {
  using E = edge_t<T>;
  extern __shared__ __align__(16) unsigned char shared[];
  const StagedEdges<E> s = stage_edges<E>(p, shape, shared);
  const T* input = static_cast<const T*>(p.input);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.points;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t flat = 0;
    for (int d = 0; d < p.dims; ++d) {
      const E x = static_cast<E>(to_compute(input[(p.first_point + i) * p.point_stride + d * p.dim_stride]));
      const E* dim_edges = s.edges + p.edge_offset[d];
      const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
      const int32_t cell = edge_cell(x, s.first_edge[d], s.cells_per_unit[d], shape.cells[d]);
      const int32_t* dim_table = s.table + shape.table_offset[d];
      const int64_t bin =
          edge_bin<E, int64_t>(x, dim_edges, count, dim_table[cell], dim_table[cell + 1], p.out_of_range);
      if (p.each_dim_alone) {
        p.out[d * p.out_dim_stride + i] = bin < 0 ? kDroppedPoint : static_cast<int32_t>(bin);
        continue;
      }
      if (bin < 0) {
        flat = kDroppedPoint;
        break;
      }
      flat += bin * p.flat_stride[d];
    }
    if (!p.each_dim_alone) p.out[i] = static_cast<int32_t>(flat);
  }
}

// The staging within `budget` bytes: the dims' facts, the edges where they fit beside a table of a cell per four
// edges, and the table (a cell an edge where it fits).
template <typename E>
EdgeTableShape table_shape(const EdgeBinParams& p, int64_t budget) {
  budget -= kDimFactsBytes;
  const int64_t edge_bytes = round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E)));
  int64_t wanted = 0, least = 0;
  table_slots_of(p, 1, &wanted, &least);
  const bool edges_in_shared = edge_bytes + least * 4 <= budget;
  return cells_within(p, (budget - (edges_in_shared ? edge_bytes : 0)) / 4, edges_in_shared, 1);
}

template <typename E>
int64_t staging_bytes(const EdgeBinParams& p, const EdgeTableShape& shape) {
  return kDimFactsBytes +
         (shape.edges_in_shared ? round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E))) : 0) +
         int64_t(shape.table_ints) * 4;
}

template <typename T>
cudaError_t launch_bins_typed(const EdgeBinParams& p, int device, cudaStream_t stream) {
  using E = edge_t<T>;
  const EdgeTableShape shape = table_shape<E>(p, kEdgeSharedBytes);
  DeviceCaps caps;
  const cudaError_t status = device_caps(device, &caps);
  if (status != cudaSuccess) return status;
  const int64_t wanted = (p.points + kEdgeBinThreads - 1) / kEdgeBinThreads;
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t(caps.sm_count) * kEdgeBlocksPerSm));
  edge_bin_kernel<T>
      <<<static_cast<unsigned int>(grid), kEdgeBinThreads, static_cast<size_t>(staging_bytes<E>(p, shape)), stream>>>(
          p, shape);
  return cudaGetLastError();
}

// ----- The two-stage path through the one pass's lookup ---------------------------------------------------------

// The first of the two stages through the one pass's lookup: stage the edges as edge_histogram_kernel does (no bins),
// then write every point's int32 flat bin (kDroppedPoint where dropped) to p.out, for the planned tier to count.
// One-edge entries only: the two stages serve N-D counts past shared memory, forced tiers and deterministic sums.
template <typename T, int kDims>
__global__ void __launch_bounds__(kEdgeFusedThreads)
    edge_keys_kernel(const EdgeBinParams p, const EdgeTableShape shape, const FusedShape f) {
  using E = edge_t<T>;
  extern __shared__ __align__(16) unsigned char shared[];
  const FusedStaging<E, 1> staged = stage_fused<E, 1>(p, shape, f, shared);
  const EdgeCountParams no_counts{};
  const auto write_keys = [&](auto rule) {
    constexpr OutOfRange kRule = decltype(rule)::value;
    const auto writer = block_counter<FusedMode::kKeys, T, uint32_t, kDims, 1, false, kRule>(
        p, no_counts, f, staged.facts, staged.edges, staged.table, nullptr);
    count_points<T, kDims>(p, f, writer, [] {});
  };
  with_out_of_range_rule(p.out_of_range, write_keys);
}

template <typename T>
const void* keys_kernel(int dims) {
  switch (dims) {
    case 1:
      return reinterpret_cast<const void*>(&edge_keys_kernel<T, 1>);
    case 2:
      return reinterpret_cast<const void*>(&edge_keys_kernel<T, 2>);
    case 3:
      return reinterpret_cast<const void*>(&edge_keys_kernel<T, 3>);
    default:
      return reinterpret_cast<const void*>(&edge_keys_kernel<T, 0>);
  }
}

// The first of the two stages through the one pass's lookup (edge_keys_kernel), or plan->fused = false where it
// declines (per-row edges, edges that do not fit in shared memory, offsets past int32).
template <typename T>
cudaError_t plan_keys_typed(const EdgeBinParams& p, int device, EdgeHistogramPlan* plan, FusedShape* f,
                            EdgeTableShape* table) {
  *plan = EdgeHistogramPlan{};
  int64_t bins = 1;
  for (int d = 0; d < p.dims; ++d) bins *= p.edge_offset[d + 1] - p.edge_offset[d] - 1;
  if (p.each_dim_alone || p.rows != 1 || p.edge_offset[p.dims] > INT32_MAX / 2 || bins > INT32_MAX / 2) {
    return cudaSuccess;
  }
  DeviceCaps caps;
  const cudaError_t err = device_caps(device, &caps);
  if (err != cudaSuccess) return err;
  f->mode = FusedMode::kKeys;
  plan->mode = "keys";
  return lay_out_fused<T>(p, device, caps, keys_kernel<T>(p.dims), /*two_edge_kernel=*/nullptr, /*bins_region=*/0, f,
                          table, plan);
}

// The two stages' first through the lookup: the chunk's flat bins written and *launched set, or *launched false,
// touching nothing, where the lookup does not serve the call (plan_keys_typed).
cudaError_t launch_edge_keys(const EdgeBinParams& p, int device, cudaStream_t stream, bool* launched) {
  *launched = false;
  // The chunk's points from its first: the kernel indexes its input and p.out from 0.
  EdgeBinParams chunk = p;
  chunk.first_point = 0;
  FusedShape f;
  EdgeTableShape table;
  EdgeHistogramPlan plan;
  cudaError_t err = visit_input_type(p.input_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    chunk.input = static_cast<const T*>(p.input) + p.first_point * p.point_stride;
    return plan_keys_typed<T>(chunk, device, &plan, &f, &table);
  });
  if (err != cudaSuccess || !plan.fused) return err;
  *launched = true;
  if (chunk.points == 0) return cudaSuccess;
  void* args[] = {&chunk, &table, &f};
  err = cudaLaunchKernel(plan.kernel, dim3(static_cast<unsigned int>(plan.grid)), dim3(plan.threads), args,
                         static_cast<size_t>(plan.shared_bytes), stream);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace

cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream, bool* by_lookup) {
  *by_lookup = false;
  if (p.points == 0) return cudaSuccess;
  const cudaError_t err = launch_edge_keys(p, device, stream, by_lookup);
  if (err != cudaSuccess || *by_lookup) return err;
  return visit_input_type(p.input_type,
                          [&](auto tag) { return launch_bins_typed<typename decltype(tag)::type>(p, device, stream); });
}

}  // namespace dsmhist
