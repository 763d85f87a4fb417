// The CPU bin-edges stage: each point's flat bin by the rule of common/edge_binning.h, over torch's thread pool.
// The search covers every edge (a binary search: log2(edges) comparisons); the CUDA kernel narrows it with a table.
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
  at::parallel_for(0, p.points, kMinPointsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* point = input + (p.first_point + i) * p.point_stride;
      int64_t flat = 0;
      for (int32_t d = 0; d < p.dims; ++d) {
        const E x = static_cast<E>(to_compute(point[d * p.dim_stride]));
        const int64_t count = p.edge_offset[d + 1] - p.edge_offset[d];
        const int64_t bin = edge_bin(x, edges + p.edge_offset[d], count, 0, count, p.clamp);
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
