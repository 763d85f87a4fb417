// The device side of the edges one pass (edge_histogram.cu, docs/tiers/edges.md): each dim's facts and cell table,
// a value's bin in one dim, where a point's count goes in each mode (FusedCounter), the strided and the vector loads.
// Included by edge_histogram.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/call.h"
#include "../common/edge_binning.h"
#include "edge_staging.h"
#include "tuning.h"

namespace dsmhist {

// Where a fused launch's counts go: every block all bins (kShared), a group's blocks a range each (kOwned), or
// straight into the output (kGlobal).
enum class FusedMode : int32_t { kShared, kOwned, kGlobal };

// A packed table entry's count of edges in its cell that means "this many or more" (packed tables, below).
constexpr int32_t kSaturatedCellEdges = 255;

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
// high 8 bits, kSaturatedCellEdges meaning that many or more, searched up to the dim's last edge) and the kEdges
// edges from its first on (NaN past the dim's last edge), so one shared-memory load answers a cell of at most kEdges
// edges. An edge of a later cell is above every x of this one (the cell is monotone in x), so comparing x with the
// entry's edges counts exactly the edges at or below x, whichever cell they lie in. kEdges 2 (16 bytes an entry, one
// vector load) where the table fits, 1 (8 bytes) where it must be smaller.
template <typename E, int kEdges>
struct alignas(kEdges == 1 ? 2 * sizeof(E) : 16) CellEntry {
  static_assert(kEdges == 1 || (kEdges == 2 && sizeof(E) == 4), "two edges an entry for float edges only");
  uint32_t span;
  E edge[kEdges];
};

// Builds one dim's fused table (cells entries), by the whole block.
template <typename E, int kEdges>
__device__ void build_cell_entries(const E* edges, const DimFacts<E>& d, CellEntry<E, kEdges>* entries) {
  const auto below = [&](int32_t c) {
    return edges_below_cell<E, int32_t>(edges, d.edge_count, c, [&](E edge) { return fused_cell(edge, d); });
  };
  for (int32_t c = threadIdx.x; c < d.cells; c += blockDim.x) {
    const int32_t first = below(c);
    const int32_t in_cell = min((c + 1 < d.cells ? below(c + 1) : d.edge_count) - first, kSaturatedCellEdges);
    CellEntry<E, kEdges> entry;
    entry.span = static_cast<uint32_t>(first) | (static_cast<uint32_t>(in_cell) << 24);
#pragma unroll
    for (int k = 0; k < kEdges; ++k) entry.edge[k] = first + k < d.edge_count ? edges[first + k] : E(NAN);
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
// and its cell table. A cell of at most kEdges edges needs the one load of its entry; in a fuller cell, a value at or
// past the entry's last edge searches the rest of the cell.
template <typename E, int kEdges>
__device__ __forceinline__ int32_t fused_dim_bin(const DimFacts<E>& d, const E* edges,
                                                 const CellEntry<E, kEdges>* entries, OutOfRange out_of_range, E x) {
  const CellEntry<E, kEdges> entry = entries[d.table_begin + fused_cell(x, d)];
  const int32_t lo = static_cast<int32_t>(entry.span & 0xffffffu);
  const int32_t in_cell = static_cast<int32_t>(entry.span >> 24);
  int32_t above = lo;  // the first edge above x (upper bound), over all the dim's edges
#pragma unroll
  for (int k = 0; k < kEdges; ++k) above += int32_t(x >= entry.edge[k]);
  if (in_cell > kEdges && x >= entry.edge[kEdges - 1]) {
    const int32_t hi = in_cell == kSaturatedCellEdges ? d.edge_count : lo + in_cell;
    above = upper_bound_between<E, int32_t>(edges + d.edge_begin, lo + kEdges, hi, x);
  }
  return edge_bin_of_upper_bound<E, int32_t>(above, x, d.last, d.edge_count, out_of_range);
}

// The fused kernel's per-block state: the staged edges and tables, where its adds go, and what it counts.
template <typename E, typename Acc, int kDims, FusedMode kMode, int kEdges>
struct FusedCounter {
  static constexpr int kX = kDims > 0 ? kDims : 1;
  const EdgeBinParams& p;
  const EdgeCountParams& c;
  const DimFacts<E>* facts;  // shared
  DimFacts<E> kept[kX];      // registers (kDims > 0)
  const E* edges;
  const CellEntry<E, kEdges>* table;
  Acc* own_bins;
  int32_t lo, hi;  // the bins this block counts (kOwned; everything elsewhere)
  int lane;
  int64_t weight_offset = 0;  // batched rows: where the current row's weights start

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
      const int32_t bin = fused_dim_bin<E, kEdges>(facts_d, edges, table, p.out_of_range, value);
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
    if constexpr (!kCounts) value = load_weight<Acc>(c.weight, c.weight_type, weight_offset + i * c.weight_stride);
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

// Points [begin, end) of `input` through `counter`, kEdgePointsPerStep a thread, strided: the warp whose first thread
// is `warp_first` (relative to begin) takes points warp_first + lane + u * stride, their loads in flight together.
// Warp-uniform (kGlobal's warp aggregation needs every lane): lanes past the end add kDroppedPoint.
template <typename T, int kDims, typename Counter>
__device__ __forceinline__ void count_strided(const EdgeBinParams& p, const Counter& counter, const T* input,
                                              int64_t begin, int64_t end, int64_t warp_first, int64_t stride) {
  using E = edge_t<T>;
  constexpr int kX = Counter::kX;
  constexpr int kSteps = kEdgePointsPerStep;
  const int lane = counter.lane;
  for (int64_t base = begin + warp_first; base < end; base += stride * kSteps) {
    E x[kSteps][kX];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t i = base + lane + u * stride;
      if constexpr (kDims > 0) {
        if (i < end) {
#pragma unroll
          for (int d = 0; d < kDims; ++d) {
            x[u][d] = static_cast<E>(to_compute(input[i * p.point_stride + d * p.dim_stride]));
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t i = base + lane + u * stride;
      counter.add(i < end ? counter.flat_bin(x[u], input + i * p.point_stride) : kDroppedPoint, i);
    }
  }
}

}  // namespace dsmhist
