// The CUDA bin-edges unit: histogram_edges and histogramdd (edges_bodies.h) run here in one of two ways.
//  * Fused (plan_edge_histogram / launch_edge_histogram): one pass bins each point and adds it, with no index written
//    to memory. The bins live in shared memory when they fit: every block keeps all of them (kShared, in a few copies
//    when they are few, so hot bins contend less), or each block of a group of 2-kEdgeMaxOwnerBlocks owns a range of
//    them and counts only the points that land there (kOwned: every block of a group reads the group's points; the
//    second read comes from L2). Past that the points add straight into the output with global atomics, counts
//    aggregated per warp (kGlobal), while the output fits comfortably in L2.
//  * Two stages, for what the fused path declines (deterministic sums, a forced tier, an output past L2):
//    launch_edge_bins writes each point's int32 flat bin for a chunk, which the planned index-mode histogram counts.
// Both stage the edges alike: each block copies them into shared memory when they fit, beside a lookup table over a
// uniform grid of each dim's edge range: table[c] is the number of edges in cells below c, so a value in cell c
// searches only the edges of its own cell (edge_cell, common/edge_binning.h, says why that is exact): one or two
// comparisons whatever the spacing while the edges spread over the cells, a short binary search where many crowd into
// one. Edges that do not fit stay in global memory (L1 / L2), the table still in shared memory. No host sync, no
// allocation: safe in CUDA graphs.
#include "kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/edge_binning.h"
#include "device_caps.h"
#include "tuning.h"

namespace dsmhist {

namespace {

constexpr int kEdgeBinThreads = 256;
// Shared memory a block of the two-stage kernel stages (under the 48 KB a launch gets without raising the kernel's
// limit, so no kernel attribute is needed): the dims' facts, the edges, the table.
constexpr int64_t kEdgeSharedBytes = 47 * 1024;
constexpr int kEdgeBlocksPerSm = 8;
// Shared memory a fused block leaves for the runtime's reserve (1 KB a block on sm_80 / sm_90).
constexpr int64_t kFusedReservedBytes = 2 * 1024;
// The least a fused block keeps for the dims' facts and the edges' table (and the edges where they fit) beside its
// bins.
constexpr int64_t kFusedMinStagingBytes = 8 * 1024;

enum class FusedMode : int32_t { kShared, kOwned, kGlobal };

// Where each dim's table lies in shared memory, and whether the edges are staged there too.
struct EdgeTableShape {
  int32_t cells[kMaxEdgeDims] = {};
  int32_t table_offset[kMaxEdgeDims] = {};  // dim d's table: cells[d] + 1 ints from here
  int32_t table_ints = 0;
  bool edges_in_shared = false;
};

// How a fused launch holds its bins (FusedMode) and where its staged edges start.
struct FusedShape {
  FusedMode mode = FusedMode::kShared;
  int32_t replicas = 1;        // kShared: copies of the bins (warp w adds into copy w % replicas)
  int32_t owners = 1;          // kOwned: blocks of a group, block rank r owning bins [r, r + 1) * bins_per_block
  int32_t bins_per_block = 0;  // bins a block holds (0 in kGlobal)
  int64_t staging_offset = 0;  // bytes of shared memory before the staging (the bins, 16-byte aligned)
  int64_t facts_bytes = 0;     // each dim's DimFacts, 16-byte aligned; then the edges
  int64_t edges_bytes = 0;     // every dim's edges, 16-byte aligned; then the packed tables
  bool vector_points = false;  // dense 4-byte points of 1 or 2 dims at a 16-byte aligned address: vector loads
};

DSMHIST_HD int64_t round_up16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// A packed table entry's count of edges in its cell that means "this many or more" (packed tables, below).
constexpr int32_t kSaturatedCellEdges = 255;

// Each dim's first edge and grid scale, at the start of the staging (dynamic shared memory, as everything a block
// stages: a kernel with static shared memory could not be given the device's whole opt-in limit).
constexpr int64_t kDimFactsBytes = 2 * kMaxEdgeDims * int64_t(sizeof(double));

// ----- Staging the edges (both paths) -----------------------------------------------------------------------------

// How many of a dim's `count` sorted edges lie in cells below c: a lower bound over the edges' cells, which sorted
// edges keep in order. (Unsorted edges give some count in [0, count]: unspecified bins, still inside the output.)
template <typename E>
__device__ int32_t edges_below_cell(const E* edges, int64_t count, E first, E cells_per_unit, int32_t cells,
                                    int32_t c) {
  int64_t lo = 0, n = count;
  while (n > 0) {
    const int64_t half = n >> 1;
    const bool below = edge_cell(edges[lo + half], first, cells_per_unit, cells) < c;
    lo = below ? lo + half + 1 : lo;
    n = below ? n - half - 1 : half;
  }
  return static_cast<int32_t>(lo);
}

// One dim's cell table for the two stages, built by the whole block: cells + 1 entries, entry c the edges below cell c,
// so a value of cell c searches [table[c], table[c + 1]).
template <typename E>
__device__ void build_cell_table(const E* edges, int64_t count, E first, E cells_per_unit, int32_t cells,
                                 int32_t* table) {
  for (int32_t c = threadIdx.x; c <= cells; c += blockDim.x) {
    table[c] = edges_below_cell(edges, count, first, cells_per_unit, cells, c);
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

// x's bin in dim d (-1: dropped), searched in int32 (the fused path plans only edges whose offsets fit).
template <typename E>
__device__ __forceinline__ int32_t dim_bin(const EdgeBinParams& p, const EdgeTableShape& shape, const StagedEdges<E>& s,
                                           int d, E x) {
  const int32_t begin = static_cast<int32_t>(p.edge_offset[d]);
  const int32_t count = static_cast<int32_t>(p.edge_offset[d + 1]) - begin;
  const int32_t cell = edge_cell(x, s.first_edge[d], s.cells_per_unit[d], shape.cells[d]);
  const int32_t* dim_table = s.table + shape.table_offset[d];
  return edge_bin<E, int32_t>(x, s.edges + begin, count, dim_table[cell], dim_table[cell + 1], p.clamp);
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
      const int64_t bin = edge_bin<E, int64_t>(x, dim_edges, count, dim_table[cell], dim_table[cell + 1], p.clamp);
      if (bin < 0) {
        flat = kDroppedPoint;
        break;
      }
      flat += bin * p.flat_stride[d];
    }
    p.out[i] = static_cast<int32_t>(flat);
  }
}

// Table slots (one a cell, plus one a dim) for `cells_per_edge` cells an edge in every dim (`wanted`), and the least
// a staging accepts: a cell per four edges.
inline void table_slots_of(const EdgeBinParams& p, int64_t cells_per_edge, int64_t* wanted, int64_t* least) {
  *wanted = *least = 0;
  for (int d = 0; d < p.dims; ++d) {
    const int64_t edges = p.edge_offset[d + 1] - p.edge_offset[d];
    *wanted += std::max<int64_t>(edges * cells_per_edge, 1) + 1;
    *least += std::max<int64_t>(edges / 4, 1) + 1;
  }
}

// Each dim's cells within `slots` table slots: cells_per_edge cells an edge where they fit, fewer (in proportion)
// where they do not. table_offset and table_ints count slots.
inline EdgeTableShape cells_within(const EdgeBinParams& p, int64_t slots, bool edges_in_shared,
                                   int64_t cells_per_edge) {
  EdgeTableShape shape;
  shape.edges_in_shared = edges_in_shared;
  int64_t wanted = 0, least = 0;
  table_slots_of(p, cells_per_edge, &wanted, &least);
  slots = std::max<int64_t>(slots, 2 * p.dims);
  int32_t offset = 0;
  for (int d = 0; d < p.dims; ++d) {
    const int64_t cells_wanted = std::max<int64_t>((p.edge_offset[d + 1] - p.edge_offset[d]) * cells_per_edge, 1);
    const int64_t cells =
        wanted <= slots ? cells_wanted : std::max<int64_t>(1, (cells_wanted + 1) * slots / wanted - 1);
    shape.cells[d] = static_cast<int32_t>(cells);
    shape.table_offset[d] = offset;
    offset += shape.cells[d] + 1;
  }
  shape.table_ints = offset;
  return shape;
}

// The two stages' staging within `budget` bytes: the dims' facts, the edges where they fit beside a table of a cell
// per four edges, and the table.
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

// ----- The fused path -----------------------------------------------------------------------------------------------

// What binning one dim needs, kept in registers by each thread where the dims are known at compile time.
template <typename E>
struct DimFacts {
  E first, last, cells_per_unit, top_cell;  // top_cell: cells - 1, as E
  int32_t cells, edge_begin, edge_count, table_begin, flat_stride;
};

// The fused path's cell of x: edge_cell's grid, clamped by min / max (one instruction each, no branch). Monotone in x
// (NaN goes to cell 0, and a NaN x is dropped before its cell matters), which is all the table needs to be exact.
template <typename E>
__device__ __forceinline__ int32_t fused_cell(E x, const DimFacts<E>& d) {
  return static_cast<int32_t>(min(max((x - d.first) * d.cells_per_unit, E(0)), d.top_cell));
}

// One cell of a dim's fused table: which edges lie in it (span: the index of its first edge, low 24 bits; how many,
// high 8 bits, kSaturatedCellEdges meaning that many or more, searched up to the dim's last edge) and the first of
// them, so one shared-memory load answers a cell of at most one edge.
template <typename E>
struct alignas(2 * sizeof(E)) CellEntry {
  uint32_t span;
  E first_edge;
};

// Builds one dim's fused table (cells entries), by the whole block.
template <typename E>
__device__ void build_cell_entries(const E* edges, const DimFacts<E>& d, CellEntry<E>* entries) {
  // How many edges lie in cells below c (sorted edges keep their cells in order; unsorted ones give some count in
  // [0, edge_count]: unspecified bins, still inside the output).
  const auto below = [&](int32_t c) {
    int32_t lo = 0, n = d.edge_count;
    while (n > 0) {
      const int32_t half = n >> 1;
      const bool is_below = fused_cell(edges[lo + half], d) < c;
      lo = is_below ? lo + half + 1 : lo;
      n = is_below ? n - half - 1 : half;
    }
    return lo;
  };
  for (int32_t c = threadIdx.x; c < d.cells; c += blockDim.x) {
    const int32_t first = below(c);
    const int32_t in_cell = min((c + 1 < d.cells ? below(c + 1) : d.edge_count) - first, kSaturatedCellEdges);
    CellEntry<E> entry;
    entry.span = static_cast<uint32_t>(first) | (static_cast<uint32_t>(in_cell) << 24);
    entry.first_edge = edges[min(first, d.edge_count - 1)];
    entries[c] = entry;
  }
}

// Adds `value` into a block's shared bin (red: no thread waits for the old value).
template <typename Acc>
__device__ __forceinline__ void add_shared(Acc* slot, Acc value) {
  if constexpr (std::is_same<Acc, uint32_t>::value) {
    asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(slot))), "r"(value)
                 : "memory");
  } else {
    atomicAdd(slot, value);
  }
}

// Adds `value` to output bin `bin` (atomically: many blocks add into one output).
template <typename Acc>
__device__ __forceinline__ void add_to_output(const EdgeCountParams& c, int64_t bin, Acc value) {
  if constexpr (std::is_same<Acc, uint32_t>::value) {
    if (c.output_type == OutputType::kInt64) {
      atomicAdd(static_cast<unsigned long long*>(c.output) + bin, static_cast<unsigned long long>(value));
    } else {
      atomicAdd(static_cast<unsigned int*>(c.output) + bin, value);
    }
  } else {
    atomicAdd(static_cast<Acc*>(c.output) + bin, value);
  }
}

// x's bin in one dim (-1: dropped): edge_bin's answer (common/edge_binning.h) from the dim's facts, its shared edges
// and its cell table. A cell of at most one edge needs the one load of its entry; in a fuller cell, a value at or past
// its first edge searches the rest of the cell.
template <typename E>
__device__ __forceinline__ int32_t fused_dim_bin(const DimFacts<E>& d, const E* edges, const CellEntry<E>* entries,
                                                 bool clamp, E x) {
  const CellEntry<E> entry = entries[d.table_begin + fused_cell(x, d)];
  const int32_t lo = static_cast<int32_t>(entry.span & 0xffffffu);
  const int32_t in_cell = static_cast<int32_t>(entry.span >> 24);
  const bool past_first = in_cell > 0 && entry.first_edge <= x;
  int32_t above = lo + int32_t(past_first);  // the first edge above x (upper bound)
  if (past_first && in_cell > 1) {
    const int32_t hi = in_cell == kSaturatedCellEdges ? d.edge_count : lo + in_cell;
    above = upper_bound_between<E, int32_t>(edges + d.edge_begin, lo + 1, hi, x);
  }
  const bool inside = x >= d.first && x <= d.last;
  return inside ? edge_bin_inside<int32_t>(above, d.edge_count)
                : edge_bin_outside<E, int32_t>(x, d.first, d.edge_count, clamp);
}

// The fused kernel's per-block state: the staged edges and tables, where its adds go, and what it counts.
template <typename E, typename Acc, int kDims, FusedMode kMode>
struct FusedCounter {
  static constexpr int kX = kDims > 0 ? kDims : 1;
  const EdgeBinParams& p;
  const EdgeCountParams& c;
  const DimFacts<E>* facts;  // shared
  DimFacts<E> kept[kX];      // registers (kDims > 0)
  const E* edges;
  const CellEntry<E>* table;
  Acc* own_bins;
  int32_t lo, hi;  // the bins this block counts (kOwned; everything elsewhere)
  int lane;

  // The flat bin of a point whose coordinates are x (kDims > 0) or at `point` (kDims == 0); kDroppedPoint where it
  // is dropped or not this block's (kOwned: a dim that leaves every flat bin the point can still reach outside
  // [lo, hi) ends it early).
  template <typename T>
  __device__ __forceinline__ int32_t flat_bin(const E* x, const T* point) const {
    const int dims = kDims > 0 ? kDims : p.dims;
    int32_t flat = 0;
#pragma unroll
    for (int d = 0; d < dims; ++d) {
      const DimFacts<E>& facts_d = kDims > 0 ? kept[d] : facts[d];
      const E value = kDims > 0 ? x[d] : static_cast<E>(to_compute(point[d * p.dim_stride]));
      const int32_t bin = fused_dim_bin<E>(facts_d, edges, table, p.clamp, value);
      if (bin < 0) return kDroppedPoint;
      flat += bin * facts_d.flat_stride;
      if constexpr (kMode == FusedMode::kOwned) {
        if (flat >= hi || flat + facts_d.flat_stride <= lo) return kDroppedPoint;
      }
    }
    return flat;
  }

  // Adds point i (its flat bin; kDroppedPoint adds nothing). Every lane of the warp calls it together.
  __device__ __forceinline__ void add(int32_t flat, int64_t i) const {
    constexpr bool kCounts = std::is_same<Acc, uint32_t>::value;
    if constexpr (kMode == FusedMode::kGlobal && kCounts) {
      // One add per distinct bin of the warp: a hot bin costs one atomic a warp, not 32.
      const unsigned int peers = __match_any_sync(0xffffffffu, flat);
      if (flat >= 0 && lane == __ffs(peers) - 1) add_to_output<Acc>(c, flat, __popc(peers));
      return;
    }
    if (flat < 0) return;
    Acc value = Acc(1);  // counts have no weight; sums always have one
    if constexpr (!kCounts) value = load_weight<Acc>(c.weight, c.weight_type, i * c.weight_stride);
    if constexpr (kMode == FusedMode::kGlobal) {
      add_to_output<Acc>(c, flat, value);
    } else {
      add_shared<Acc>(own_bins + (flat - lo), value);
    }
  }
};

// Loads kPoints consecutive points of kDims 4-byte coordinates from a 16-byte aligned address, one vector per dim.
template <typename T, int kDims, int kPoints>
__device__ __forceinline__ void load_point_vectors(const T* first, edge_t<T> (*x)[kDims]) {
  static_assert(sizeof(T) == 4 && kPoints == 4, "vectors of four 4-byte values");
#pragma unroll
  for (int v = 0; v < kDims; ++v) {
    const uint4 bits = *reinterpret_cast<const uint4*>(first + 4 * v);
    const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int element = 4 * v + k;
      T value;
      memcpy(&value, &words[k], 4);
      x[element / kDims][element % kDims] = static_cast<edge_t<T>>(to_compute(value));
    }
  }
}

// Every point of the call through `counter`: dense 4-byte points of 1 or 2 dims at a 16-byte aligned address
// (f.vector_points) four points a thread at a time, one 16-byte load per dim; the rest kEdgePointsPerStep points a
// thread, strided, their loads in flight together. Every loop is warp-uniform (kGlobal's warp aggregation needs
// every lane).
template <typename T, typename Counter, int kDims>
__device__ __forceinline__ void count_points(const EdgeBinParams& p, const FusedShape& f, const Counter& counter) {
  using E = edge_t<T>;
  constexpr int kX = Counter::kX;
  const int lane = counter.lane;
  const int64_t warp_first = int64_t(blockIdx.x / f.owners) * blockDim.x + threadIdx.x - lane;
  const int64_t grid_threads = int64_t(gridDim.x / f.owners) * blockDim.x;
  const T* input = static_cast<const T*>(p.input);
  int64_t scalar_begin = 0;  // the points before it were read as vectors
  if constexpr (sizeof(T) == 4 && kDims > 0 && kDims <= 2) {
    if (f.vector_points) {
      constexpr int kPoints = 4;
      const int64_t quads = p.points / kPoints;
      for (int64_t q0 = warp_first; q0 < quads; q0 += grid_threads) {
        const int64_t q = q0 + lane;
        E x[kPoints][kDims];
        if (q < quads) load_point_vectors<T, kDims, kPoints>(input + q * kPoints * kDims, x);
#pragma unroll
        for (int k = 0; k < kPoints; ++k) {
          counter.add(q < quads ? counter.flat_bin(x[k], input) : kDroppedPoint, q * kPoints + k);
        }
      }
      scalar_begin = quads * kPoints;
    }
  }
  constexpr int kSteps = kEdgePointsPerStep;
  for (int64_t base = scalar_begin + warp_first; base < p.points; base += grid_threads * kSteps) {
    E x[kSteps][kX];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t i = base + lane + u * grid_threads;
      if constexpr (kDims > 0) {
        if (i < p.points) {
#pragma unroll
          for (int d = 0; d < kDims; ++d) {
            x[u][d] = static_cast<E>(to_compute(input[i * p.point_stride + d * p.dim_stride]));
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t i = base + lane + u * grid_threads;
      counter.add(i < p.points ? counter.flat_bin(x[u], input + i * p.point_stride) : kDroppedPoint, i);
    }
  }
}

// One block's share of a call in mode kMode: count its points, then (bins in shared memory) flush its bins.
template <FusedMode kMode, typename T, typename Acc, int kDims>
__device__ __forceinline__ void count_and_flush(const EdgeBinParams& p, const EdgeCountParams& c, const FusedShape& f,
                                                const DimFacts<edge_t<T>>* facts, const edge_t<T>* edges,
                                                const CellEntry<edge_t<T>>* table, Acc* bins) {
  using Counter = FusedCounter<edge_t<T>, Acc, kDims, kMode>;
  Counter counter{p, c, facts, {}, edges, table, nullptr, 0, INT32_MAX, static_cast<int>(threadIdx.x % 32)};
  if constexpr (kDims > 0) {
#pragma unroll
    for (int d = 0; d < kDims; ++d) counter.kept[d] = facts[d];
  }
  if constexpr (kMode == FusedMode::kOwned) {  // block `rank` of each group counts bins [lo, hi) of the group's points
    counter.lo = static_cast<int32_t>(blockIdx.x % f.owners) * f.bins_per_block;
    counter.hi = counter.lo + f.bins_per_block;
  }
  counter.own_bins = bins + (threadIdx.x / 32 % f.replicas) * f.bins_per_block;
  count_points<T, Counter, kDims>(p, f, counter);
  if constexpr (kMode != FusedMode::kGlobal) {
    __syncthreads();  // every add into the block's bins must land before they are flushed
    for (int32_t j = threadIdx.x; j < f.bins_per_block; j += blockDim.x) {
      const int64_t bin = int64_t(counter.lo) + j;
      if (bin >= c.bins) break;
      Acc sum = Acc(0);
      for (int32_t r = 0; r < f.replicas; ++r) sum += bins[r * f.bins_per_block + j];
      if (sum != Acc(0)) add_to_output<Acc>(c, bin, sum);
    }
  }
}

// One pass: stage the edges, then bin and count every point (FusedMode says where the counts go). Shared memory:
// the bins, then each dim's facts, the edges and the packed tables.
template <typename T, typename Acc, int kDims>
__global__ void __launch_bounds__(kEdgeFusedMaxThreads)
    edge_histogram_kernel(const EdgeBinParams p, const EdgeCountParams c, const EdgeTableShape shape,
                          const FusedShape f) {
  using E = edge_t<T>;
  extern __shared__ __align__(16) unsigned char shared[];
  Acc* bins = reinterpret_cast<Acc*>(shared);
  DimFacts<E>* facts = reinterpret_cast<DimFacts<E>*>(shared + f.staging_offset);
  E* edges = reinterpret_cast<E*>(shared + f.staging_offset + f.facts_bytes);
  CellEntry<E>* table = reinterpret_cast<CellEntry<E>*>(shared + f.staging_offset + f.facts_bytes + f.edges_bytes);
  const int32_t slots = f.replicas * f.bins_per_block;
  for (int32_t j = threadIdx.x; j < slots; j += blockDim.x) bins[j] = Acc(0);
  const E* global_edges = static_cast<const E*>(p.edges);
  for (int64_t j = threadIdx.x; j < p.edge_offset[p.dims]; j += blockDim.x) edges[j] = global_edges[j];
  if (threadIdx.x < p.dims) {
    const int d = threadIdx.x;
    DimFacts<E> facts_d;
    facts_d.first = global_edges[p.edge_offset[d]];
    facts_d.last = global_edges[p.edge_offset[d + 1] - 1];
    facts_d.cells = shape.cells[d];
    facts_d.cells_per_unit = static_cast<E>(shape.cells[d]) / (facts_d.last - facts_d.first);
    facts_d.top_cell = static_cast<E>(shape.cells[d] - 1);
    facts_d.edge_begin = static_cast<int32_t>(p.edge_offset[d]);
    facts_d.edge_count = static_cast<int32_t>(p.edge_offset[d + 1] - p.edge_offset[d]);
    facts_d.table_begin = shape.table_offset[d];
    facts_d.flat_stride = static_cast<int32_t>(p.flat_stride[d]);
    facts[d] = facts_d;
  }
  __syncthreads();  // the tables are built from the staged edges and facts (and the bins are zeroed before any add)
  for (int d = 0; d < p.dims; ++d) {
    build_cell_entries<E>(edges + facts[d].edge_begin, facts[d], table + facts[d].table_begin);
  }
  __syncthreads();  // no point may be binned before every table is complete
  switch (f.mode) {
    case FusedMode::kShared:
      count_and_flush<FusedMode::kShared, T, Acc, kDims>(p, c, f, facts, edges, table, bins);
      break;
    case FusedMode::kOwned:
      count_and_flush<FusedMode::kOwned, T, Acc, kDims>(p, c, f, facts, edges, table, bins);
      break;
    default:
      count_and_flush<FusedMode::kGlobal, T, Acc, kDims>(p, c, f, facts, edges, table, bins);
      break;
  }
}

template <typename T, typename Acc>
const void* fused_kernel(int dims) {
  switch (dims) {
    case 1:
      return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 1>);
    case 2:
      return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 2>);
    default:
      return reinterpret_cast<const void*>(&edge_histogram_kernel<T, Acc, 0>);
  }
}

template <typename T>
const void* fused_kernel(AccKind acc, int dims) {
  switch (acc) {
    case AccKind::kCount:
      return fused_kernel<T, uint32_t>(dims);
    case AccKind::kFloat:
      return fused_kernel<T, float>(dims);
    case AccKind::kDouble:  // rare: float64 weights take the generic-dims kernel only
      return reinterpret_cast<const void*>(&edge_histogram_kernel<T, double, 0>);
    default:
      return nullptr;  // deterministic sums: two stages
  }
}

int64_t acc_bytes_of(AccKind acc) { return acc == AccKind::kDouble ? 8 : 4; }

// The fused launch of a call, or plan->fused = false where it declines.
template <typename T>
cudaError_t plan_typed(const EdgeBinParams& p, const EdgeCountParams& c, int device, EdgeHistogramPlan* plan,
                       FusedShape* f, EdgeTableShape* table) {
  using E = edge_t<T>;
  *plan = EdgeHistogramPlan{};
  const void* kernel = fused_kernel<T>(c.acc, p.dims);
  // int32 offsets in the search, 32-bit shared counts: edges and points past those bounds take two stages.
  if (kernel == nullptr || p.edge_offset[p.dims] > INT32_MAX / 2 || c.bins > INT32_MAX / 2) return cudaSuccess;
  DeviceCaps caps;
  cudaError_t err = device_caps(device, &caps);
  if (err != cudaSuccess) return err;
  err = configure_kernel(kernel, device, caps, /*is_cluster_kernel=*/false);
  if (err != cudaSuccess) return err;
  const int64_t acc_bytes = acc_bytes_of(c.acc);
  const int64_t usable = caps.shared_optin - kFusedReservedBytes;
  const int64_t bins_bytes = c.bins * acc_bytes;
  if (bins_bytes + kFusedMinStagingBytes <= usable) {
    f->mode = FusedMode::kShared;
    f->replicas = static_cast<int32_t>(std::max<int64_t>(
        1, std::min<int64_t>(kEdgeMaxReplicas, kEdgeReplicaBytes / std::max<int64_t>(bins_bytes, 1))));
    while (f->replicas & (f->replicas - 1)) --f->replicas;  // a power of two: warps spread evenly over the copies
    f->owners = 1;
    f->bins_per_block = static_cast<int32_t>(c.bins);
  } else {
    f->owners = 0;
    for (int owners = 2; owners <= kEdgeMaxOwnerBlocks; ++owners) {
      if ((c.bins + owners - 1) / owners * acc_bytes + kFusedMinStagingBytes <= usable) {
        f->owners = owners;
        break;
      }
    }
    if (f->owners > 0) {
      f->mode = FusedMode::kOwned;
      f->replicas = 1;
      f->bins_per_block = static_cast<int32_t>((c.bins + f->owners - 1) / f->owners);
    } else if (c.bins * output_bytes(c.output_type) <= kEdgeGlobalMaxOutputBytes) {
      f->mode = FusedMode::kGlobal;
      f->owners = 1;
      f->replicas = 1;
      f->bins_per_block = 0;
    } else {
      return cudaSuccess;  // an output past L2: two stages, whose counting tiers are built for it
    }
  }
  const int64_t bins_region = round_up16(int64_t(f->replicas) * f->bins_per_block * acc_bytes);
  f->staging_offset = bins_region;
  f->vector_points = sizeof(T) == 4 && (p.dims == 1 || p.dims == 2) && p.point_stride == p.dims &&
                     (p.dims == 1 || p.dim_stride == 1) && reinterpret_cast<uintptr_t>(p.input) % 16 == 0;
  f->facts_bytes = round_up16(p.dims * static_cast<int64_t>(sizeof(DimFacts<E>)));
  f->edges_bytes = round_up16(p.edge_offset[p.dims] * static_cast<int64_t>(sizeof(E)));
  // Staging takes what keeps two blocks on an SM where that leaves it room, else what one block may have; the edges
  // must fit in it beside a table of a cell per four edges, or the call takes two stages.
  const int64_t two_blocks = caps.shared_per_sm / 2 - kFusedReservedBytes - bins_region;
  const int64_t budget = std::min(usable - bins_region, std::max(two_blocks, kFusedMinStagingBytes));
  constexpr int64_t kEntryBytes = sizeof(CellEntry<E>);
  int64_t wanted_slots = 0, least_slots = 0;
  table_slots_of(p, kEdgeCellsPerEdge, &wanted_slots, &least_slots);
  const int64_t table_budget = budget - f->facts_bytes - f->edges_bytes;
  if (table_budget < least_slots * kEntryBytes) return cudaSuccess;
  *table = cells_within(p, table_budget / kEntryBytes, /*edges_in_shared=*/true, kEdgeCellsPerEdge);
  const int64_t shared_bytes = bins_region + f->facts_bytes + f->edges_bytes + int64_t(table->table_ints) * kEntryBytes;
  int threads = kEdgeFusedThreads;
  int per_sm = 1;
  err = blocks_per_sm(kernel, device, caps, threads, shared_bytes, &per_sm);
  if (err != cudaSuccess) return err;
  if (per_sm * threads < kEdgeFusedMaxThreads) {  // one block an SM: the most threads it may have
    threads = kEdgeFusedMaxThreads;
    err = blocks_per_sm(kernel, device, caps, threads, shared_bytes, &per_sm);
    if (err != cudaSuccess) return err;
  }
  const int64_t resident_groups = std::max<int64_t>(1, int64_t(per_sm) * caps.sm_count / f->owners);
  const int64_t wanted_groups =
      (p.points + int64_t(threads) * kEdgeMinPointsPerThread - 1) / (int64_t(threads) * kEdgeMinPointsPerThread);
  const int64_t groups = std::max<int64_t>(1, std::min(resident_groups, wanted_groups));
  // A block's 32-bit counts: at most points / groups adds from its own group, rounded up to its threads' steps.
  if (f->mode != FusedMode::kGlobal && (p.points / groups + int64_t(threads) * kEdgePointsPerStep) >= UINT32_MAX) {
    return cudaSuccess;
  }
  plan->fused = true;
  plan->mode = f->mode == FusedMode::kShared ? "shared" : (f->mode == FusedMode::kOwned ? "owned" : "global");
  plan->grid = groups * f->owners;
  plan->threads = threads;
  plan->shared_bytes = shared_bytes;
  plan->replicas = f->replicas;
  plan->owners = f->owners;
  plan->edges_in_shared = table->edges_in_shared;
  plan->kernel = kernel;
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_edge_bins(const EdgeBinParams& p, int device, cudaStream_t stream) {
  if (p.points == 0) return cudaSuccess;
  return visit_input_type(p.input_type,
                          [&](auto tag) { return launch_bins_typed<typename decltype(tag)::type>(p, device, stream); });
}

cudaError_t plan_edge_histogram(const EdgeBinParams& p, const EdgeCountParams& c, int device, EdgeHistogramPlan* plan) {
  FusedShape f;
  EdgeTableShape table;
  return visit_input_type(
      p.input_type, [&](auto tag) { return plan_typed<typename decltype(tag)::type>(p, c, device, plan, &f, &table); });
}

cudaError_t launch_edge_histogram(const EdgeBinParams& p, const EdgeCountParams& c, int device, cudaStream_t stream) {
  EdgeHistogramPlan plan;
  FusedShape f;
  EdgeTableShape table;
  cudaError_t err = visit_input_type(p.input_type, [&](auto tag) {
    return plan_typed<typename decltype(tag)::type>(p, c, device, &plan, &f, &table);
  });
  if (err != cudaSuccess) return err;
  if (!plan.fused) return cudaErrorNotSupported;  // the caller plans first and takes two stages where declined
  err = cudaMemsetAsync(c.output, 0, static_cast<size_t>(c.bins * output_bytes(c.output_type)), stream);
  if (err != cudaSuccess || p.points == 0) return err;
  void* args[] = {const_cast<EdgeBinParams*>(&p), const_cast<EdgeCountParams*>(&c), &table, &f};
  err = cudaLaunchKernel(plan.kernel, dim3(static_cast<unsigned int>(plan.grid)), dim3(plan.threads), args,
                         static_cast<size_t>(plan.shared_bytes), stream);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace dsmhist
