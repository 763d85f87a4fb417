// The device side of the edges one pass (edge_histogram.cu, docs/tiers/edges.md): each dim's facts and cell table,
// their staging, a value's bin in one dim, where a point's count goes in each mode (FusedCounter, FusedShape; kKeys
// writes it out for the two stages' lookup in edge_bins.cu), the strided and the vector loads of a call's points.
// Included by edge_histogram.cu and edge_bins.cu (through edge_fused_layout.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/call.h"
#include "../common/edge_binning.h"
#include "edge_staging.h"
#include "packed_counts.cuh"
#include "tuning.h"

namespace dsmhist {

// Where a fused launch's counts go: every block all bins (kShared), a group's blocks a range each (kOwned), or
// straight into the output (kGlobal); or, in the first of the two stages, no counts: each point's int32 flat bin is
// written to p.out (kKeys), for the planned tier to count.
enum class FusedMode : int32_t { kShared, kOwned, kGlobal, kKeys };

// A packed table entry's count of edges in its cell that means "this many or more" (packed tables, below).
constexpr int32_t kSaturatedCellEdges = 255;

// What binning one dim needs, kept in registers by each thread where the dims are known at compile time.
template <typename E>
struct DimFacts {
  // The dim's cells as indices of the block's table, in E: first_cell = table_begin, top_cell = table_begin + cells -
  // 1, cell_offset = table_begin - first_edge * cells_per_unit.
  E cell_offset, last, cells_per_unit, first_cell, top_cell;
  int32_t cells, edge_begin, edge_count, table_begin, flat_stride;
};

// Where x's cell's entry lies in the block's table (the dim's table_begin plus its cell): edge_cell's grid as one
// fused multiply-add (x * cells_per_unit + cell_offset), clamped by max / min (one instruction each, no branch), so a
// lookup adds nothing to it. Monotone in x (an fma with a positive factor is, and NaN goes to the first cell, where a
// NaN x is dropped before its cell matters), which is all the table needs to be exact: the table is built from the
// edges' cells by this same function.
template <typename E>
__device__ __forceinline__ int32_t fused_cell(E x, const DimFacts<E>& d) {
  return static_cast<int32_t>(min(max(fma(x, d.cells_per_unit, d.cell_offset), d.first_cell), d.top_cell));
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

// Builds one dim's fused table (its cells' entries, from `entries` = the block's table + table_begin), by the whole
// block.
template <typename E, int kEdges>
__device__ void build_cell_entries(const E* edges, const DimFacts<E>& d, CellEntry<E, kEdges>* entries) {
  const auto below = [&](int32_t c) {
    return edges_below_cell<E, int32_t>(edges, d.edge_count, c + d.table_begin,
                                        [&](E edge) { return fused_cell(edge, d); });
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
    detail::red_shared(static_cast<uint32_t>(__cvta_generic_to_shared(slot)), value);
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
template <typename E, int kEdges, OutOfRange kRule>
__device__ __forceinline__ int32_t fused_dim_bin(const DimFacts<E>& d, const E* edges,
                                                 const CellEntry<E, kEdges>* entries, E x) {
  const CellEntry<E, kEdges> entry = entries[fused_cell(x, d)];
  const int32_t lo = static_cast<int32_t>(entry.span & 0xffffffu);
  const int32_t in_cell = static_cast<int32_t>(entry.span >> 24);
  int32_t above = lo;  // the first edge above x (upper bound), over all the dim's edges
#pragma unroll
  for (int k = 0; k < kEdges; ++k) above += int32_t(x >= entry.edge[k]);
  if (in_cell > kEdges && x >= entry.edge[kEdges - 1]) {
    const int32_t hi = in_cell == kSaturatedCellEdges ? d.edge_count : lo + in_cell;
    above = upper_bound_between<E, int32_t>(edges + d.edge_begin, lo + kEdges, hi, x);
  }
  return edge_bin_of_upper_bound<E, int32_t>(above, x, d.last, d.edge_count, kRule);
}

// The fused kernel's per-block state: the staged edges and tables, where its adds go, and what it counts. kPacked:
// counts two to a 32-bit word (PackedBins), which every thread of the block sweeps together between rounds
// (kBlockRounds) so that no half wraps. kRule: the call's out_of_range, fixed for the loop (the kernel branches on it
// once, not once a value).
template <typename E, typename Acc, int kDims, FusedMode kMode, int kEdges, bool kPacked, OutOfRange kRule>
struct FusedCounter {
  static_assert(!kPacked || (std::is_same<Acc, uint32_t>::value && kMode != FusedMode::kGlobal),
                "packed counts are shared-memory counts");
  static constexpr int kX = kDims > 0 ? kDims : 1;
  static constexpr bool kBlockRounds = kPacked;
  // Whether add() needs every lane of the warp (kGlobal's counts aggregate a warp's adds), so that lanes with no point
  // must still call it.
  static constexpr bool kWarpAdds = kMode == FusedMode::kGlobal && std::is_same<Acc, uint32_t>::value;
  static constexpr bool kWritesKeys = kMode == FusedMode::kKeys;
  const EdgeBinParams& p;
  const EdgeCountParams& c;
  const DimFacts<E>* facts;  // shared
  DimFacts<E> kept[kX];      // registers (kDims > 0)
  const E* edges;
  const CellEntry<E, kEdges>* table;
  Acc* own_bins;
  int32_t lo, hi;  // the bins this block counts (kOwned; everything elsewhere)
  int lane;
  int64_t weight_offset = 0;    // batched rows: where the current row's weights start
  detail::PackedBins packed{};  // kPacked: own_bins as packed counts

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
      const int32_t bin = fused_dim_bin<E, kEdges, kRule>(facts_d, edges, table, value);
      if (bin < 0) return kDroppedPoint;
      // Row-major: the last dim's stride is 1, which a compile-time dim count saves a multiply a point on.
      flat += kDims > 0 && d == kDims - 1 ? bin : bin * facts_d.flat_stride;
      if constexpr (kMode == FusedMode::kOwned) {
        if (flat >= hi || flat + facts_d.flat_stride <= lo) return kDroppedPoint;
      }
    }
    return flat;
  }

  // Adds point i (its flat bin; kDroppedPoint adds nothing), or with kWritesKeys stores its flat bin (kDroppedPoint
  // included). Where kWarpAdds, every lane of the warp calls it together.
  __device__ __forceinline__ void add(int32_t flat, int64_t i) const {
    constexpr bool kCounts = std::is_same<Acc, uint32_t>::value;
    if constexpr (kWritesKeys) {
      p.out[i] = flat;
      return;
    }
    if constexpr (kWarpAdds) {
      // One add per distinct bin of the warp: a hot bin costs one atomic a warp, not 32.
      const unsigned int peers = __match_any_sync(0xffffffffu, flat);
      if (flat >= 0 && lane == __ffs(peers) - 1) add_to_output<Acc>(c, flat, __popc(peers));
      return;
    }
    if (flat < 0) return;
    Acc value = Acc(1);  // counts have no weight; sums always have one
    if constexpr (!kCounts) value = load_weight<Acc>(c.weight, c.weight_type, weight_offset + i * c.weight_stride);
    if constexpr (kPacked) {
      packed.add(static_cast<uint32_t>(flat - lo), 1u);
    } else if constexpr (kMode == FusedMode::kGlobal) {
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
// is `warp_first` (relative to begin) takes points warp_first + lane + u * stride, their loads in flight together,
// then calls after_round(). Warp-uniform (kGlobal's warp aggregation needs every lane): lanes past the end add
// kDroppedPoint (a key writer writes nothing for them); block-uniform where Counter::kBlockRounds (after_round may
// hold block barriers).
template <typename T, int kDims, typename Counter, typename AfterRound>
__device__ __forceinline__ void count_strided(const EdgeBinParams& p, const Counter& counter, const T* input,
                                              int64_t begin, int64_t end, int64_t warp_first, int64_t stride,
                                              AfterRound&& after_round) {
  using E = edge_t<T>;
  constexpr int kX = Counter::kX;
  constexpr int kSteps = kEdgePointsPerStep;
  const int lane = counter.lane;
  // The first point of a round of the unit that takes the same rounds: the warp's, or its block's.
  const int64_t round_lead = Counter::kBlockRounds ? int64_t(threadIdx.x) - lane : 0;
  for (int64_t first = begin + warp_first - round_lead; first < end; first += stride * kSteps) {
    const int64_t base = first + round_lead;
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
      if constexpr (Counter::kWritesKeys) {
        if (i < end) counter.add(counter.flat_bin(x[u], input + i * p.point_stride), i);  // no key past the end
      } else {
        counter.add(i < end ? counter.flat_bin(x[u], input + i * p.point_stride) : kDroppedPoint, i);
      }
    }
    after_round();
  }
}

// How a fused launch holds its bins (FusedMode) and where its staged edges start.
struct FusedShape {
  FusedMode mode = FusedMode::kShared;
  int32_t replicas = 1;        // kShared: copies of the bins (warp w adds into copy w % replicas)
  int32_t owners = 1;          // kOwned: blocks of a group, block rank r owning bins [r, r + 1) * bins_per_block
  int32_t bins_per_block = 0;  // bins a block holds (0 in kGlobal)
  bool packed = false;         // counts two to a word (PackedBins), where 32-bit counts would not fit one block
  int64_t staging_offset = 0;  // bytes of shared memory before the staging (the bins, 16-byte aligned)
  int64_t facts_bytes = 0;     // each dim's DimFacts, 16-byte aligned; then the edges
  int64_t edges_bytes = 0;     // every dim's edges, 16-byte aligned; then the packed tables
  bool vector_points = false;  // dense 4-byte points of 1-3 dims at a 16-byte aligned address: vector loads (and, in
                               // kKeys, an output at a 16-byte aligned address: vector stores)
};

// A fused block's staging, in shared memory after its bins: each dim's facts, the edges and the packed tables.
template <typename E, int kEdges>
struct FusedStaging {
  DimFacts<E>* facts;
  E* edges;
  CellEntry<E, kEdges>* table;
};

// Stages the edges, each dim's facts and tables after the bins (f.staging_offset bytes); every thread of the block
// calls it, and on return all are in place.
template <typename E, int kEdges>
__device__ __forceinline__ FusedStaging<E, kEdges> stage_fused(const EdgeBinParams& p, const EdgeTableShape& shape,
                                                               const FusedShape& f, unsigned char* shared) {
  FusedStaging<E, kEdges> s;
  s.facts = reinterpret_cast<DimFacts<E>*>(shared + f.staging_offset);
  s.edges = reinterpret_cast<E*>(shared + f.staging_offset + f.facts_bytes);
  s.table = reinterpret_cast<CellEntry<E, kEdges>*>(shared + f.staging_offset + f.facts_bytes + f.edges_bytes);
  const E* global_edges = static_cast<const E*>(p.edges);
  for (int64_t j = threadIdx.x; j < p.edge_offset[p.dims]; j += blockDim.x) s.edges[j] = global_edges[j];
  if (threadIdx.x < p.dims) {
    const int d = threadIdx.x;
    DimFacts<E> facts_d;
    const E first = global_edges[p.edge_offset[d]];
    facts_d.last = global_edges[p.edge_offset[d + 1] - 1];
    facts_d.cells = shape.cells[d];
    facts_d.cells_per_unit = static_cast<E>(shape.cells[d]) / (facts_d.last - first);
    facts_d.table_begin = shape.table_offset[d];
    facts_d.first_cell = static_cast<E>(facts_d.table_begin);  // exact: tables hold far fewer than 2^24 entries
    facts_d.top_cell = static_cast<E>(facts_d.table_begin + shape.cells[d] - 1);
    facts_d.cell_offset = facts_d.first_cell - first * facts_d.cells_per_unit;
    facts_d.edge_begin = static_cast<int32_t>(p.edge_offset[d]);
    facts_d.edge_count = static_cast<int32_t>(p.edge_offset[d + 1] - p.edge_offset[d]);
    facts_d.flat_stride = static_cast<int32_t>(p.flat_stride[d]);
    s.facts[d] = facts_d;
  }
  __syncthreads();  // the tables are built from the staged edges and facts (and any bins are zeroed before an add)
  for (int d = 0; d < p.dims; ++d) {
    build_cell_entries<E, kEdges>(s.edges + s.facts[d].edge_begin, s.facts[d], s.table + s.facts[d].table_begin);
  }
  __syncthreads();  // no point may be binned before every table is complete
  return s;
}

// Runs fn(std::integral_constant<OutOfRange, rule>{}) for `rule`: a kernel branches on the call's out_of_range once and
// runs a loop compiled for it, not a branch a value.
template <typename Fn>
__device__ __forceinline__ void with_out_of_range_rule(OutOfRange rule, Fn&& fn) {
  if (rule == OutOfRange::kClamp) {
    fn(std::integral_constant<OutOfRange, OutOfRange::kClamp>{});
  } else {
    fn(std::integral_constant<OutOfRange, OutOfRange::kIgnore>{});
  }
}

// The fused kernel's counter for this block in mode kMode: each dim's facts in registers (kDims > 0), the block's
// bins (kOwned: block `rank` of each group counts bins [lo, hi) of the group's points) and its warp's copy of them.
template <FusedMode kMode, typename T, typename Acc, int kDims, int kEdges, bool kPacked, OutOfRange kRule>
__device__ __forceinline__ FusedCounter<edge_t<T>, Acc, kDims, kMode, kEdges, kPacked, kRule> block_counter(
    const EdgeBinParams& p, const EdgeCountParams& c, const FusedShape& f, const DimFacts<edge_t<T>>* facts,
    const edge_t<T>* edges, const CellEntry<edge_t<T>, kEdges>* table, Acc* bins) {
  FusedCounter<edge_t<T>, Acc, kDims, kMode, kEdges, kPacked, kRule> counter{
      p, c, facts, {}, edges, table, nullptr, 0, INT32_MAX, static_cast<int>(threadIdx.x % 32)};
  if constexpr (kDims > 0) {
#pragma unroll
    for (int d = 0; d < kDims; ++d) counter.kept[d] = facts[d];
  }
  if constexpr (kMode == FusedMode::kOwned) {
    counter.lo = static_cast<int32_t>(blockIdx.x % f.owners) * f.bins_per_block;
    counter.hi = counter.lo + f.bins_per_block;
  }
  counter.own_bins = bins + (threadIdx.x / 32 % f.replicas) * f.bins_per_block;
  if constexpr (kPacked) {
    counter.packed =
        detail::PackedBins(counter.own_bins, static_cast<uint32_t>(detail::packed_words(f.bins_per_block)));
  }
  return counter;
}

// Every point of the call through `counter`: dense 4-byte points of 1-3 dims at a 16-byte aligned address
// (f.vector_points) four points a thread at a time, one 16-byte load per dim; the rest through count_strided. Every
// loop is warp-uniform (kGlobal's warp aggregation needs every lane), block-uniform where Counter::kBlockRounds, and
// calls after_round() after each step of kEdgePointsPerStep points a thread.
template <typename T, int kDims, typename Counter, typename AfterRound>
__device__ __forceinline__ void count_points(const EdgeBinParams& p, const FusedShape& f, const Counter& counter,
                                             AfterRound&& after_round) {
  using E = edge_t<T>;
  const int lane = counter.lane;
  const int64_t warp_first = int64_t(blockIdx.x / f.owners) * blockDim.x + threadIdx.x - lane;
  const int64_t grid_threads = int64_t(gridDim.x / f.owners) * blockDim.x;
  const T* input = static_cast<const T*>(p.input);
  int64_t scalar_begin = 0;  // the points before it were read as vectors
  if constexpr (sizeof(T) == 4 && kDims > 0 && kDims <= 3) {
    if (f.vector_points) {
      constexpr int kPoints = 4;
      static_assert(kPoints == kEdgePointsPerStep, "a step is four points a thread either way");
      const int64_t quads = p.points / kPoints;
      const int64_t round_lead = Counter::kBlockRounds ? int64_t(threadIdx.x) - lane : 0;
      for (int64_t first = warp_first - round_lead; first < quads; first += grid_threads) {
        const int64_t q = first + round_lead + lane;
        // One test for the four points: a lane past the end adds nothing, unless add() needs the whole warp.
        if (Counter::kWarpAdds || q < quads) {
          E x[kPoints][kDims];
          if (q < quads) load_point_vectors<T, kDims, kPoints>(input + q * kPoints * kDims, x);
          if constexpr (Counter::kWritesKeys) {
            // The four keys in one 16-byte store (p.out is 16-byte aligned where vector_points is set for kKeys).
            const int4 keys{counter.flat_bin(x[0], input), counter.flat_bin(x[1], input), counter.flat_bin(x[2], input),
                            counter.flat_bin(x[3], input)};
            reinterpret_cast<int4*>(p.out)[q] = keys;
          } else {
#pragma unroll
            for (int k = 0; k < kPoints; ++k) {
              counter.add(q < quads ? counter.flat_bin(x[k], input) : kDroppedPoint, q * kPoints + k);
            }
          }
        }
        after_round();
      }
      scalar_begin = quads * kPoints;
    }
  }
  count_strided<T, kDims>(p, counter, input, scalar_begin, p.points, warp_first, grid_threads, after_round);
}

}  // namespace dsmhist
