// The CPU bin-edges stage: each point's flat bin by the rule of common/edge_binning.h, over torch's thread pool.
// Over near-uniform edges each coordinate's bin is looked for first where equal-width edges would put it, checked
// against the edges, the binary search the fallback (edge_bin_guessed); over other edges, the search is narrowed by a
// table over a uniform grid of the edge range to the edges of the value's own cell, as the CUDA kernels narrow it.
// Over edges of equal width (torch's linspace: the drop-ins' int bins) a 1-D run (contiguous or strided), and points
// whose every dim is such, take the equal-width arithmetic first, exact where its fraction clears the edges' slack.
#include "edges_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

namespace dsmhist {

namespace {

constexpr int64_t kMinPointsPerTask = int64_t(1) << 14;
// Cells of a dim's table: two per bin (most cells then hold zero or one edge), at most 2^16 (a 256 KB table).
constexpr int64_t kCellsPerBin = 2;
constexpr int64_t kMaxCells = int64_t(1) << 16;

// One dim's table: a uniform grid of `cells` cells over [e_0, e_last], below[c] the edges in cells under c, so a value
// of cell c has its upper bound in [below[c], below[c + 1]] (edge_cell, common/edge_binning.h, says why that is exact).
template <typename E>
struct CellTable {
  std::vector<int32_t> below;
  std::vector<E> padded;  // the edges, then two NaNs: every comparison with a NaN is false
  E cells_per_unit = E(0);
  int32_t cells = 1;

  void build(const E* edges, int64_t count) {
    cells = static_cast<int32_t>(std::min(kMaxCells, std::max<int64_t>(1, kCellsPerBin * (count - 1))));
    cells_per_unit = static_cast<E>(cells) / (edges[count - 1] - edges[0]);
    below.assign(static_cast<size_t>(cells) + 1, 0);
    // Sorted edges (the op checked) have non-decreasing cells: count each cell's edges, then sum the cells below.
    for (int64_t i = 0; i < count; ++i) ++below[edge_cell(edges[i], edges[0], cells_per_unit, cells) + 1];
    for (int32_t c = 1; c <= cells; ++c) below[c] += below[c - 1];
    padded.assign(edges, edges + count);
    padded.resize(static_cast<size_t>(count) + 2, std::numeric_limits<E>::quiet_NaN());
  }

  // A cell of at most two edges (most of them, at two cells a bin) takes its upper bound from two comparisons, with no
  // branch on how many edges it holds: an edge past the cell is in a higher cell, so above x (edge_cell is monotone),
  // or a NaN pad, and compares false as x's own cell's edges above x do.
  int64_t bin(E x, const E* edges, int64_t count, OutOfRange out_of_range) const {
    const E first = padded[0], last = padded[count - 1];
    if (!(x >= first && x <= last)) return edge_bin(x, edges, count, int64_t{0}, count, out_of_range);
    const int32_t c = edge_cell(x, first, cells_per_unit, cells);
    const int64_t lo = below[c], hi = below[c + 1];
    const int64_t above = hi - lo <= 2 ? lo + int64_t(x >= padded[lo]) + int64_t(x >= padded[lo + 1])
                                       : upper_bound_between<E, int64_t>(edges, lo, hi, x);
    return edge_bin_of_upper_bound<E, int64_t>(above, x, last, count, out_of_range);
  }
};

// How far from an integer the equal-width position t = (x - e_0) * bins_per_unit of x must fall for floor(t) to be
// x's bin, in bins: the most any edge strays from equal width, plus t's rounding. t, in E, is within 1.5 epsilons of
// the exact position relative (the difference, bins_per_unit and the product each round once), so within
// (bins + 1) * 4 epsilons of it where it counts (0 <= t < bins); the equal-width edges are taken in double, whose own
// rounding adds the last term. Where frac(t) is farther than that from 0 and from 1, x lies strictly between edges
// floor(t) and floor(t) + 1. Infinite for edges that do not increase.
template <typename E>
double equal_width_slack(const E* edges, int64_t count) {
  const int64_t bins = count - 1;
  const double first = static_cast<double>(edges[0]), last = static_cast<double>(edges[count - 1]);
  const double width = (last - first) / static_cast<double>(bins);
  if (!(bins >= 1 && width > 0.0)) return std::numeric_limits<double>::infinity();
  const double epsilon = sizeof(E) == 4 ? double(FLT_EPSILON) : DBL_EPSILON;
  double slack = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    slack = std::max(slack, std::fabs(static_cast<double>(edges[i]) - (first + static_cast<double>(i) * width)));
  }
  return slack / width + static_cast<double>(bins + 1) * 4.0 * epsilon +
         8.0 * DBL_EPSILON * (std::fabs(first) + std::fabs(last)) / width;
}

// A dim's facts for the equal-width guess: t = (x - first) * bins_per_unit, and the slack its fraction must clear.
template <typename E>
struct EqualWidthDim {
  E first, bins_per_unit, bins, slack, high;  // high: 1 - slack
};

// Where the arithmetic does not settle a value's bin; its place is then taken by the guessed search.
constexpr int32_t kRetry = std::numeric_limits<int32_t>::min();

// x's bin, floor(t), where t's fraction is clear of the slack (so x lies strictly between edges floor(t) and
// floor(t) + 1), else kRetry: arithmetic only, no load beside x's.
template <typename E>
inline int32_t equal_width_guess(E x, const EqualWidthDim<E>& d) {
  const E t = (x - d.first) * d.bins_per_unit;
  const E inside = t >= E(0) && t < d.bins ? t : E(-1);  // NaN and every t out of range: -1 (no undefined cast)
  const int32_t guess = static_cast<int32_t>(inside);
  const E frac = inside - static_cast<E>(guess);
  return guess >= 0 && frac > d.slack && frac < d.high ? guess : kRetry;
}

// Points [0, n) a block at a time: first every result by arithmetic (`guess(i)`, kRetry where it does not settle),
// then the others by `search(i)`, while the block is in cache.
template <typename Guess, typename Search>
void guess_then_search(int64_t n, int32_t* out, Guess&& guess, Search&& search) {
  constexpr int64_t kBlock = 2048;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t stop = std::min(n, start + kBlock);
    for (int64_t i = start; i < stop; ++i) out[i] = guess(i);
    for (int64_t i = start; i < stop; ++i) {
      if (out[i] == kRetry) out[i] = search(i);
    }
  }
}

// A contiguous run of values' bins over edges of equal width within `slack` (under half a bin), a block at a time:
// first every value's floor(t) where its fraction is clear of the slack, else kRetry, then the others by
// edge_bin_guessed, while the block is in cache. The arithmetic is equal_width_guess's, written out: the same loop
// through guess_then_search and equal_width_guess measured 16-25% slower (2-core EPYC, 2^22 float32 over 1001
// linspace edges, 1 and 2 threads; perf log 2026-11-27).
template <typename T, typename E>
void equal_width_bins(const T* values, int64_t n, const E* edges, int64_t count, const EqualWidthDim<E>& dim,
                      OutOfRange out_of_range, int32_t* out) {
  constexpr int64_t kBlock = 2048;
  // In locals: a store through out may alias dim.
  const E first = dim.first, bins_per_unit = dim.bins_per_unit, bins = dim.bins, slack = dim.slack, high = dim.high;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t stop = std::min(n, start + kBlock);
    for (int64_t i = start; i < stop; ++i) {
      const E t = (static_cast<E>(to_compute(values[i])) - first) * bins_per_unit;
      const E inside = t >= E(0) && t < bins ? t : E(-1);  // NaN and every t out of range: -1 (no undefined cast)
      const int32_t guess = static_cast<int32_t>(inside);
      const E frac = inside - static_cast<E>(guess);
      out[i] = guess >= 0 && frac > slack && frac < high ? guess : kRetry;
    }
    for (int64_t i = start; i < stop; ++i) {
      if (out[i] != kRetry) continue;
      const int64_t bin =
          edge_bin_guessed(static_cast<E>(to_compute(values[i])), edges, count, bins_per_unit, out_of_range);
      out[i] = bin < 0 ? kDroppedPoint : static_cast<int32_t>(bin);
    }
  }
}

template <typename T>
void edge_bins_typed(const EdgeBinParams& p) {
  using E = edge_t<T>;
  const T* input = static_cast<const T*>(p.input);
  const E* edges = static_cast<const E*>(p.edges);
  // Per dim, whether the equal-width guess lands within one bin of every edge's index (torch's linspace edges, and
  // near-uniform ones): then it is within one bin of every value's (the guess is monotone), and the guessed search
  // checks at most three bins. Other edges (random, quantiles of skewed data) take the binary search at once.
  EqualWidthDim<E> equal_width[kMaxEdgeDims];  // bins_per_unit always; the rest where the guess is taken
  bool guess[kMaxEdgeDims];
  bool arithmetic[kMaxEdgeDims];  // the guess settles most of the dim's values by arithmetic alone (slack under half)
  bool arithmetic_first = true;   // every dim's does
  CellTable<E> tables[kMaxEdgeDims];
  for (int32_t d = 0; d < p.dims; ++d) {
    const E* dim_edges = edges + p.edge_offset[d];
    const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
    const E bins_per_unit = count >= 2 ? static_cast<E>(count - 1) / (dim_edges[count - 1] - dim_edges[0]) : E(0);
    guess[d] = count >= 2;
    for (int64_t i = 0; i < count && guess[d]; ++i) {
      const E position = (dim_edges[i] - dim_edges[0]) * bins_per_unit;
      guess[d] = position >= static_cast<E>(i - 1) && position < static_cast<E>(i + 1);
    }
    // One edge (no span) makes one cell holding it: the whole search, as it should be.
    if (!guess[d]) tables[d].build(dim_edges, count);
    // Rounded up to E (a larger slack only sends more values to the search).
    const double dim_slack = guess[d] ? equal_width_slack(dim_edges, count) : 1.0;
    const E slack = std::nextafter(static_cast<E>(dim_slack), std::numeric_limits<E>::infinity());
    equal_width[d] = {dim_edges[0], bins_per_unit, static_cast<E>(count - 1), slack, E(1) - slack};
    arithmetic[d] = guess[d] && slack < E(0.5);
    arithmetic_first = arithmetic_first && arithmetic[d];
  }
  // Per-row edges (each coordinate's own bin, a row of out per dim) and the 1-D ops (one dim: the flat bin is the
  // bin): a loop per dim with its facts in locals, since a store through out may alias p's fields.
  if (p.each_dim_alone || p.dims == 1) {
    at::parallel_for(0, p.points, kMinPointsPerTask, [&](int64_t begin, int64_t end) {
      for (int32_t d = 0; d < p.dims; ++d) {
        const T* values = input + p.first_point * p.point_stride + d * p.dim_stride;
        const E* dim_edges = edges + p.edge_offset[d];
        const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d], stride = p.point_stride;
        const E per_unit = equal_width[d].bins_per_unit;
        const bool guessed = guess[d];
        const OutOfRange out_of_range = p.out_of_range;
        const CellTable<E>& table = tables[d];
        int32_t* out = p.out + d * p.out_dim_stride;
        const auto search = [&](int64_t i) {
          const E x = static_cast<E>(to_compute(values[i * stride]));
          const int64_t bin = guessed ? edge_bin_guessed(x, dim_edges, count, per_unit, out_of_range)
                                      : table.bin(x, dim_edges, count, out_of_range);
          return bin < 0 ? kDroppedPoint : static_cast<int32_t>(bin);
        };
        if (arithmetic[d]) {  // equal-width edges: arithmetic first
          if (stride == 1) {
            equal_width_bins(values + begin, end - begin, dim_edges, count, equal_width[d], out_of_range, out + begin);
          } else {  // a strided run (a column of points, a transposed row)
            guess_then_search(
                end - begin, out + begin,
                [values, stride, begin, dim = equal_width[d]](int64_t i) {
                  return equal_width_guess(static_cast<E>(to_compute(values[(begin + i) * stride])), dim);
                },
                [&](int64_t i) { return search(begin + i); });
          }
          continue;
        }
        for (int64_t i = begin; i < end; ++i) out[i] = search(i);
      }
    });
    return;
  }
  const auto search = [&](int64_t i) {
    const T* point = input + (p.first_point + i) * p.point_stride;
    int64_t flat = 0;
    for (int32_t d = 0; d < p.dims; ++d) {
      const E x = static_cast<E>(to_compute(point[d * p.dim_stride]));
      const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
      const E* dim_edges = edges + p.edge_offset[d];
      const int64_t bin = guess[d] ? edge_bin_guessed(x, dim_edges, count, equal_width[d].bins_per_unit, p.out_of_range)
                                   : tables[d].bin(x, dim_edges, count, p.out_of_range);
      if (bin < 0) return kDroppedPoint;
      flat += bin * p.flat_stride[d];
    }
    return static_cast<int32_t>(flat);
  };
  // Equal-width dims (the drop-ins' int bins): a point's flat bin by arithmetic where every coordinate's fraction
  // is clear of its dim's slack; the facts in locals, since a store through out may alias p's fields.
  std::array<int64_t, kMaxEdgeDims> flat_stride;
  std::copy(p.flat_stride, p.flat_stride + kMaxEdgeDims, flat_stride.begin());
  const auto guess_point = [input, first = p.first_point, point_stride = p.point_stride, dim_stride = p.dim_stride,
                            dims = p.dims, &equal_width, &flat_stride](int64_t i) {
    const T* point = input + (first + i) * point_stride;
    int64_t flat = 0;
    bool settled = true;
    for (int32_t d = 0; d < dims; ++d) {
      const int32_t bin = equal_width_guess(static_cast<E>(to_compute(point[d * dim_stride])), equal_width[d]);
      settled = settled && bin != kRetry;
      flat += int64_t(bin == kRetry ? 0 : bin) * flat_stride[d];
    }
    return settled ? static_cast<int32_t>(flat) : kRetry;
  };
  at::parallel_for(0, p.points, kMinPointsPerTask, [&](int64_t begin, int64_t end) {
    if (arithmetic_first) {
      guess_then_search(
          end - begin, p.out + begin, [&](int64_t i) { return guess_point(begin + i); },
          [&](int64_t i) { return search(begin + i); });
      return;
    }
    for (int64_t i = begin; i < end; ++i) p.out[i] = search(i);
  });
}

}  // namespace

void edge_bins_cpu(const EdgeBinParams& p) {
  visit_input_type(p.input_type, [&](auto tag) { edge_bins_typed<typename decltype(tag)::type>(p); });
}

}  // namespace dsmhist
