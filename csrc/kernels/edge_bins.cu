// The two stages of the CUDA bin-edges ops, for what the one pass (edge_histogram.cu, docs/tiers/edges.md) declines:
// launch_edge_bins writes each point's int32 flat bin for a chunk, which edges_bodies.h counts with the planned
// index-mode histogram. Each block stages the edges in shared memory when they fit, with a lookup table over a uniform
// grid of each dim's edge range: table[c] is the number of edges in cells below c, so a value in cell c searches only
// the edges of its own cell (edge_cell, common/edge_binning.h, says why that is exact), one or two comparisons
// whatever the spacing while the edges are spread over the cells, a branch-free binary search over the cell's edges
// when many crowd into one. Edges that do not fit stay in global memory (L1 / L2), the table still in shared memory.
// No host sync, no allocation: safe in CUDA graphs.
#include "kernels.h"

#include <algorithm>
#include <cstdint>

#include "../common/edge_binning.h"
#include "device_caps.h"
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

}  // namespace

cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream) {
  if (p.points == 0) return cudaSuccess;
  return visit_input_type(p.input_type,
                          [&](auto tag) { return launch_bins_typed<typename decltype(tag)::type>(p, device, stream); });
}

}  // namespace dsmhist
