// The CPU bin-edges stage: each point's flat bin by the rule of common/edge_binning.h, over torch's thread pool.
// Over near-uniform edges each coordinate's bin is looked for first where equal-width edges would put it, checked
// against the edges, the binary search the fallback (edge_bin_guessed); over other edges, the binary search. The CUDA
// kernel narrows its search with a table instead.
#include "edges_cpu.h"

#include <ATen/Parallel.h>

namespace dsmhist {

namespace {

constexpr int64_t kMinPointsPerTask = int64_t(1) << 14;

template <typename T>
void edge_bins_typed(const EdgeBinParams& p) {
  using E = edge_t<T>;
  const T* input = static_cast<const T*>(p.input);
  const E* edges = static_cast<const E*>(p.edges);
  // Per dim, whether the equal-width guess lands within one bin of every edge's index (torch's linspace edges, and
  // near-uniform ones): then it is within one bin of every value's (the guess is monotone), and the guessed search
  // checks at most three bins. Other edges (random, quantiles of skewed data) take the binary search at once.
  E bins_per_unit[kMaxEdgeDims];
  bool guess[kMaxEdgeDims];
  for (int32_t d = 0; d < p.dims; ++d) {
    const E* dim_edges = edges + p.edge_offset[d];
    const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
    bins_per_unit[d] = count >= 2 ? static_cast<E>(count - 1) / (dim_edges[count - 1] - dim_edges[0]) : E(0);
    guess[d] = count >= 2;
    for (int64_t i = 0; i < count && guess[d]; ++i) {
      const E position = (dim_edges[i] - dim_edges[0]) * bins_per_unit[d];
      guess[d] = position >= static_cast<E>(i - 1) && position < static_cast<E>(i + 1);
    }
  }
  // Per-row edges (each coordinate's own bin, a row of out per dim) and the 1-D ops (one dim: the flat bin is the
  // bin): a loop per dim with its facts in locals, since a store through out may alias p's fields.
  if (p.each_dim_alone || p.dims == 1) {
    at::parallel_for(0, p.points, kMinPointsPerTask, [&](int64_t begin, int64_t end) {
      for (int32_t d = 0; d < p.dims; ++d) {
        const T* values = input + p.first_point * p.point_stride + d * p.dim_stride;
        const E* dim_edges = edges + p.edge_offset[d];
        const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d], stride = p.point_stride;
        const E per_unit = bins_per_unit[d];
        const bool guessed = guess[d], clamp = p.clamp;
        int32_t* out = p.out + d * p.out_dim_stride;
        for (int64_t i = begin; i < end; ++i) {
          const E x = static_cast<E>(to_compute(values[i * stride]));
          const int64_t bin = guessed ? edge_bin_guessed(x, dim_edges, count, per_unit, clamp)
                                      : edge_bin(x, dim_edges, count, 0, count, clamp);
          out[i] = bin < 0 ? kDroppedPoint : static_cast<int32_t>(bin);
        }
      }
    });
    return;
  }
  at::parallel_for(0, p.points, kMinPointsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* point = input + (p.first_point + i) * p.point_stride;
      int64_t flat = 0;
      for (int32_t d = 0; d < p.dims; ++d) {
        const E x = static_cast<E>(to_compute(point[d * p.dim_stride]));
        const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
        const E* dim_edges = edges + p.edge_offset[d];
        const int64_t bin = guess[d] ? edge_bin_guessed(x, dim_edges, count, bins_per_unit[d], p.clamp)
                                     : edge_bin(x, dim_edges, count, 0, count, p.clamp);
        if (bin < 0) {
          flat = kDroppedPoint;
          break;
        }
        flat += bin * p.flat_stride[d];
      }
      p.out[i] = static_cast<int32_t>(flat);
    }
  });
}

}  // namespace

void edge_bins_cpu(const EdgeBinParams& p) {
  visit_input_type(p.input_type, [&](auto tag) { edge_bins_typed<typename decltype(tag)::type>(p); });
}

}  // namespace dsmhist
