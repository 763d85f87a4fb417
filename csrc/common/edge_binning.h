// The bin-edges rule (torch.histogram's) shared by the CPU path and the CUDA kernel: a value's bin among sorted
// edges, and the N-D point's flat bin. dsmhist::histogram_edges and dsmhist::histogramdd bin points here into int32
// flat indices, then count those with the index-mode histogram, so every tier counts N-D histograms unchanged.
// No torch and no CUDA header.
#pragma once

#include <cstdint>
#include <type_traits>

#include "binning.h"
#include "call.h"
#include "dtypes.h"
#include "host_device.h"

namespace dsmhist {

// The most dimensions an N-D histogram may have (the per-dim facts travel by value, as a kernel argument).
constexpr int kMaxEdgeDims = 32;
// Points the two stages bin per chunk: the int32 index buffer a call holds is at most this long. The CPU: 2^23
// (32 MiB). CUDA: 2^26 (256 MiB), so the counting tier's cost a call (tier partition's: 1024 x 1024 bins over 2^26
// keys in chunks of 2^23 / 2^24 / 2^25 / one of 2^26: 0.673 / 0.451 / 0.333 / 0.297 ms, H100, 2026-11-27) comes once
// for 2^26 points. Each backend names its own (edges_bodies.h).
constexpr int64_t kEdgeChunkPoints = int64_t(1) << 23;
constexpr int64_t kEdgeCudaChunkPoints = int64_t(1) << 26;
// A flat index that marks a dropped point.
constexpr int32_t kDroppedPoint = -1;

// The precision edges are compared in: the input's own (float for float16 / bfloat16 / float32, whose edges have the
// input's dtype, so the comparisons are torch's), double for float64 and for integer input (exact up to 2^53).
template <typename T>
using edge_t = std::conditional_t<std::is_integral<T>::value, double, compute_t<T>>;

// One chunk of an N-D call: points [first_point, first_point + points) of an [N, D] input, binned into out[0, points).
struct EdgeBinParams {
  const void* input = nullptr;
  InputType input_type = InputType::kFloat32;
  int64_t first_point = 0;
  int64_t points = 0;
  int64_t point_stride = 0, dim_stride = 0;  // in elements
  int32_t dims = 0;
  OutOfRange out_of_range = OutOfRange::kIgnore;  // for a coordinate outside its edges
  const void* edges = nullptr;  // every dim's edges, concatenated, as edge_t of the input type (contiguous)
  bool double_edges = false;    // edges are double (else float): must agree with edge_t
  int64_t edge_offset[kMaxEdgeDims + 1] = {};  // dim d's edges are edges[edge_offset[d], edge_offset[d + 1])
  int64_t flat_stride[kMaxEdgeDims] = {};      // row-major strides of the output: flat = sum(bin_d * flat_stride[d])
  int32_t* out = nullptr;                      // one flat bin per point, kDroppedPoint where dropped
  // Per-row edges (histogram_edges with edges [..., B + 1]): each coordinate is binned alone, its own bin (or
  // kDroppedPoint) written to out[d * out_dim_stride + i]; flat_stride is unused.
  bool each_dim_alone = false;
  int64_t out_dim_stride = 0;
  // Batched N-D histograms in the fused path (input [rows, points, dims]): row r's points start at input element
  // r * row_stride and count into row r of the output ([rows, bins]). 1 row elsewhere.
  int64_t rows = 1;
  int64_t row_stride = 0;
};

// Where the fused edges path (bin and count in one pass) adds each point: the output (zeroed by the launch), its
// weights (none: each point counts 1). The accumulator follows the count dtype rule of histogram_args (acc).
struct EdgeCountParams {
  void* output = nullptr;
  OutputType output_type = OutputType::kInt64;
  int64_t bins = 0;  // every bin of the output (the product of the dims' bins)
  AccKind acc = AccKind::kCount;
  const void* weight = nullptr;
  WeightType weight_type = WeightType::kNone;
  int64_t weight_stride = 0;      // point i's weight is weight[i * weight_stride] (in elements)
  int64_t weight_row_stride = 0;  // batched rows: row r's weights start at weight[r * weight_row_stride]
};

// The first index in [lo, hi) whose edge is greater than x (hi when none is), by a binary search whose steps are
// selects, not branches. Over unsorted edges it still returns an index in [lo, hi]. `I`: the index type (the CUDA
// kernels search in int32, every edge count there being below 2^31).
template <typename E, typename I>
DSMHIST_HD I upper_bound_between(const E* edges, I lo, I hi, E x) {
  I count = hi - lo;
  while (count > 0) {
    const I half = count >> 1;
    const bool right = edges[lo + half] <= x;
    lo = right ? lo + half + 1 : lo;
    count = right ? count - half - 1 : half;
  }
  return lo;
}

// The index arguments of edge_bin take count's type (a literal 0 beside an int64_t count is not a second type).
template <typename T>
struct NotDeduced {
  using type = T;
};

// x's bin from its upper bound `above` among all `count` edges (the first edge greater than x; 0 for x below the
// first edge or NaN, count for x at or past the last): bin above - 1, the last edge closing the last bin. Past the
// edges (or NaN): -1, or with kClamp the first / last bin (NaN is always -1). Always in [-1, count - 2], whatever
// `above` in [0, count] (unsorted edges give some bin inside the output). The fused CUDA kernel applies it to an
// upper bound of its own.
template <typename E, typename I>
DSMHIST_HD I edge_bin_of_upper_bound(I above, E x, E last, I count, OutOfRange out_of_range) {
  const I bin = above - 1, top = count - 2;
  if (out_of_range == OutOfRange::kClamp) return x != x ? I(-1) : (bin < 0 ? I(0) : (bin > top ? top : bin));
  // x == last has every edge at or below it (above == count with sorted edges): one bin down, the closed last bin.
  // One unsigned compare keeps [0, top] and drops the rest (-2 only from unsorted edges), with no branch: the fused
  // CUDA kernel pays for each instruction here once a value.
  using U = typename std::make_unsigned<I>::type;
  const I kept = bin - I(x == last);
  return static_cast<U>(kept) <= static_cast<U>(top) ? kept : I(-1);
}

// x's bin among `count` edges (count - 1 bins; count >= 2): bin i is [e_i, e_{i+1}), the last bin closed. Outside
// [e_0, e_last] (or NaN): -1, or clamped the first / last bin (NaN is always -1). The answer is searched for in
// [search_lo, search_hi), which must hold upper_bound(x) (0 and count: the whole range). Always in [-1, count - 2].
template <typename E, typename I>
DSMHIST_HD I edge_bin(E x, const E* edges, I count, typename NotDeduced<I>::type search_lo,
                      typename NotDeduced<I>::type search_hi, OutOfRange out_of_range) {
  const E first = edges[0], last = edges[count - 1];
  const I above = x >= first ? (x <= last ? upper_bound_between<E, I>(edges, search_lo, search_hi, x) : count) : I(0);
  return edge_bin_of_upper_bound<E, I>(above, x, last, count, out_of_range);
}

// The cell of a uniform grid of `cells` cells over [first, last] that x falls in: the CUDA lookup table's cell, and the
// CPU's guessed bin. Only its monotonicity matters (x <= y gives cell(x) <= cell(y), NaN and overflow included: every
// step is a monotone IEEE operation and there is no add after the multiply to fuse): then every edge in a cell below
// x's is below x and every edge in a cell above is above it, so the search needs only the edges of x's own cell.
template <typename E>
DSMHIST_HD int32_t edge_cell(E x, E first, E cells_per_unit, int32_t cells) {
  const E position = (x - first) * cells_per_unit;
  return position >= E(0) ? (position < static_cast<E>(cells) ? static_cast<int32_t>(position) : cells - 1) : 0;
}

// x's bin as edge_bin gives it, looked for first where equal-width edges would put it: bin
// floor((x - e_0) * bins_per_unit), then its neighbours, checked against the edges themselves (bin b holds x exactly
// when e_b <= x < e_{b+1}, and at most one b does), and only if none holds x, the binary search. The answer is
// edge_bin's whatever the edges (the guess only decides where to look), and near-uniform edges (torch's linspace,
// quantiles of smooth data) need two comparisons instead of log2(count). bins_per_unit = (count - 1) / (e_last - e_0)
// in E (0 or non-finite for degenerate edges: the guess is then clamped, and the check still decides).
template <typename E>
DSMHIST_HD int64_t edge_bin_guessed(E x, const E* edges, int64_t count, E bins_per_unit, OutOfRange out_of_range) {
  const E first = edges[0], last = edges[count - 1];
  if (!(x >= first && x <= last)) return edge_bin(x, edges, count, 0, count, out_of_range);
  const int64_t top = count - 2;  // the last bin
  // The bins as cells of a uniform grid over [e_0, e_last]: the cell is the guess (count - 1 < 2^31 bins).
  const int64_t guess = edge_cell(x, first, bins_per_unit, static_cast<int32_t>(count - 1));
  for (int64_t step = 0; step < 3; ++step) {
    const int64_t b = step == 0 ? guess : (step == 1 ? guess - 1 : guess + 1);
    if (b >= 0 && b <= top && edges[b] <= x && x < edges[b + 1]) return b;
  }
  return edge_bin(x, edges, count, 0, count, out_of_range);
}

}  // namespace dsmhist
