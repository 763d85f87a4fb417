// The CPU engine's entry for every op that writes histograms: empty inputs, the data's range, long rows of a
// batched call (each counted by all threads, as one histogram), then counts or sums by the output's type.
#include <cstdint>

#include "cpu_engine.h"
#include "cpu_parallel.h"

namespace dsmhist {
namespace cpu {

namespace {

// The params of row `row` alone, as a one-histogram call into that row's output.
HistogramParams row_params(const HistogramParams& p, int64_t row) {
  HistogramParams r = p;
  int64_t row_input = 0, row_weight = 0;
  if (p.layout.ndim > 0) p.layout.offsets(row, &row_input, &row_weight);
  visit_input_type(p.input_type,
                   [&](auto tag) { r.input = static_cast<const typename decltype(tag)::type*>(p.input) + row_input; });
  if (p.weight != nullptr) {
    const int64_t weight_bytes = p.weight_type == WeightType::kFloat64   ? 8
                                 : p.weight_type == WeightType::kFloat32 ? 4
                                                                         : 2;
    r.weight = static_cast<const char*>(p.weight) + row_weight * weight_bytes;
  }
  r.rows = 1;
  r.layout.ndim = 0;
  r.output = static_cast<char*>(p.output) + row * p.output_row_stride * output_bytes(p.output_type);
  r.output_row_stride = 0;
  return r;
}

void accumulate(const HistogramParams& p) {
  if (p.output_type == OutputType::kInt32 || p.output_type == OutputType::kInt64) {
    count_histogram(p);
  } else {
    sum_histogram(p);
  }
}

}  // namespace

void histogram(HistogramParams& p, bool find_data_range) {
  if (p.elements() == 0) {  // nothing to count: zeros, or hist unchanged
    if (!p.accumulate) zero_bins(p.output, p.output_rows() * p.bins, output_bytes(p.output_type));
    return;
  }
  if (find_data_range && p.device_range == nullptr) set_data_range(p);  // given keys: the Binner decodes them
  if (p.output_row_stride != 0 && p.row_length >= kLongRow) {
    // Long rows: each row is one histogram counted by all threads, as histogram() would count it.
    for (int64_t row = 0; row < p.rows; ++row) accumulate(row_params(p, row));
    return;
  }
  accumulate(p);
}

}  // namespace cpu
}  // namespace dsmhist
