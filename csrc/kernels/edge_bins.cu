// The CUDA bin-edges stage: each point of an [N, D] chunk to its int32 flat bin (edges_bodies.h then counts the
// chunk with the planned index-mode histogram). Each block stages the edges in shared memory when they fit, with a
// lookup table over a uniform grid of each dim's edge range: table[c] is the number of edges in cells below c, so a
// value in cell c searches only the edges of its own cell (edge_cell, common/edge_binning.h, says why that is exact),
// one or two comparisons whatever the spacing while the edges are spread over the cells, a branch-free binary search
// over the cell's edges when many crowd into one. Edges that do not fit stay in global memory (L1 / L2), the table
// still in shared memory. No host sync, no allocation: safe in CUDA graphs.
#include "kernels.h"

#include <algorithm>
#include <cstdint>

#include "../common/edge_binning.h"
#include "device_caps.h"

namespace dsmhist {

namespace {

constexpr int kEdgeBinThreads = 256;
// Shared memory a block stages (the default limit, so no kernel attribute is needed): edges plus table.
// 47 KB of dynamic shared memory: with the kernel's static arrays it stays under the 48 KB a launch gets without
// raising the kernel's limit (48 KB exactly failed on the H100 with "invalid argument").
constexpr int64_t kEdgeSharedBytes = 47 * 1024;
constexpr int kEdgeBlocksPerSm = 8;

// Where each dim's table lies in shared memory, and whether the edges are staged there too.
struct EdgeTableShape {
  int32_t cells[kMaxEdgeDims] = {};
  int32_t table_offset[kMaxEdgeDims] = {};  // dim d's table: cells[d] + 1 ints from here
  int32_t table_ints = 0;
  bool edges_in_shared = false;
};

DSMHIST_HD int64_t round_up16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

template <typename T>
__global__ void __launch_bounds__(kEdgeBinThreads) edge_bin_kernel(EdgeBinParams p, EdgeTableShape shape) {
  using E = edge_t<T>;
  extern __shared__ __align__(16) unsigned char shared[];
  __shared__ E first_edge[kMaxEdgeDims], cells_per_unit[kMaxEdgeDims];
  const int64_t total_edges = p.edge_offset[p.dims];
  const E* global_edges = static_cast<const E*>(p.edges);
  E* shared_edges = reinterpret_cast<E*>(shared);
  int32_t* table = reinterpret_cast<int32_t*>(
      shared + (shape.edges_in_shared ? round_up16(total_edges * static_cast<int64_t>(sizeof(E))) : 0));
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
  __syncthreads();
  // table[c] = how many edges lie in cells below c: a lower bound over the edges' cells, which sorted edges keep in
  // order. (Unsorted edges give some count in [0, edges]: unspecified bins, still inside the output.)
  for (int d = 0; d < p.dims; ++d) {
    const E* dim_edges = edges + p.edge_offset[d];
    const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
    for (int32_t c = threadIdx.x; c <= shape.cells[d]; c += blockDim.x) {
      int64_t lo = 0, n = count;
      while (n > 0) {
        const int64_t half = n >> 1;
        const bool below = edge_cell(dim_edges[lo + half], first_edge[d], cells_per_unit[d], shape.cells[d]) < c;
        lo = below ? lo + half + 1 : lo;
        n = below ? n - half - 1 : half;
      }
      table[shape.table_offset[d] + c] = static_cast<int32_t>(lo);
    }
  }
  __syncthreads();

  const T* input = static_cast<const T*>(p.input);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.points;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t flat = 0;
    for (int d = 0; d < p.dims; ++d) {
      const E x = static_cast<E>(to_compute(input[(p.first_point + i) * p.point_stride + d * p.dim_stride]));
      const E* dim_edges = edges + p.edge_offset[d];
      const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
      const int32_t cell = edge_cell(x, first_edge[d], cells_per_unit[d], shape.cells[d]);
      const int32_t* dim_table = table + shape.table_offset[d];
      const int64_t bin = edge_bin(x, dim_edges, count, dim_table[cell], dim_table[cell + 1], p.clamp);
      if (bin < 0) {
        flat = kDroppedPoint;
        break;
      }
      flat += bin * p.flat_stride[d];
    }
    p.out[i] = static_cast<int32_t>(flat);
  }
}

// Stages what fits: the edges and a table of about one cell per edge when both fit kEdgeSharedBytes; otherwise the
// edges stay in global memory and the table gets the whole budget.
template <typename E>
EdgeTableShape table_shape(const EdgeBinParams& p) {
  EdgeTableShape shape;
  const int64_t edge_bytes = round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E)));
  int64_t table_ints = 0;
  for (int d = 0; d < p.dims; ++d) table_ints += (p.edge_offset[d + 1] - p.edge_offset[d]) + 1;
  shape.edges_in_shared = edge_bytes + table_ints * 4 <= kEdgeSharedBytes;
  const int64_t cells_per_dim_cap =
      shape.edges_in_shared ? INT32_MAX : std::max<int64_t>(1, kEdgeSharedBytes / 4 / p.dims - 1);
  int32_t offset = 0;
  for (int d = 0; d < p.dims; ++d) {
    const int64_t edges = p.edge_offset[d + 1] - p.edge_offset[d];
    shape.cells[d] = static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(edges, 1), cells_per_dim_cap));
    shape.table_offset[d] = offset;
    offset += shape.cells[d] + 1;
  }
  shape.table_ints = offset;
  return shape;
}

template <typename T>
cudaError_t launch_typed(const EdgeBinParams& p, int device, cudaStream_t stream) {
  using E = edge_t<T>;
  const EdgeTableShape shape = table_shape<E>(p);
  const int64_t shared_bytes =
      (shape.edges_in_shared ? round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E))) : 0) +
      int64_t(shape.table_ints) * 4;
  DeviceCaps caps;
  const cudaError_t status = device_caps(device, &caps);
  if (status != cudaSuccess) return status;
  const int64_t wanted = (p.points + kEdgeBinThreads - 1) / kEdgeBinThreads;
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t(caps.sm_count) * kEdgeBlocksPerSm));
  edge_bin_kernel<T>
      <<<static_cast<unsigned int>(grid), kEdgeBinThreads, static_cast<size_t>(shared_bytes), stream>>>(p, shape);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream) {
  if (p.points == 0) return cudaSuccess;
  return visit_input_type(p.input_type,
                          [&](auto tag) { return launch_typed<typename decltype(tag)::type>(p, device, stream); });
}

}  // namespace dsmhist
