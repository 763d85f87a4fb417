// The summing paths of the CPU engine (floating outputs: weights, or 1 per element). Sums are bitwise identical
// whatever the thread count: the order in which a bin's terms are added depends only on (elements, bins): fixed
// slots of the input merged in slot order with few bins, each bin summed in element order with many.
#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>

#include "cpu_engine.h"
#include "cpu_scan.h"

namespace dsmhist {
namespace cpu {

namespace {

// Sums (of weights, or of 1 per element for a floating output without weights) are kept in double and stored
// rounded once, into a float32 or float64 output; the output type is read at run time, since only the last store
// depends on it (fewer template instances: the build time is part of the quick start).
void write_sum(const HistogramParams& p, void* out, int64_t bin, double sum) {
  if (p.output_type == OutputType::kFloat64) {
    double* o = static_cast<double*>(out) + bin;
    *o = (p.accumulate ? *o : 0.0) + sum;
  } else {
    float* o = static_cast<float*>(out) + bin;
    *o = static_cast<float>((p.accumulate ? static_cast<double>(*o) : 0.0) + sum);
  }
}

// The output holds the double sums themselves: they can be added there directly, with no scratch.
bool sums_in_output(const HistogramParams& p) { return p.output_type == OutputType::kFloat64 && !p.accumulate; }

// Sums of the bins [b0, b1) of the histogram at `out`, each bin summed in element order over [begin, end), in
// blocks of bins whose double sums fit one thread's share of the scratch (or straight in a float64 output).
template <typename T, WeightType W, typename BinOf>
void sum_bins_in_order(const HistogramParams& p, const BinOf& bin_of, int64_t begin, int64_t end, int64_t b0,
                       int64_t b1, void* out, double* scratch, int64_t scratch_bins) {
  if (sums_in_output(p)) {
    double* sums = static_cast<double*>(out);
    std::fill(sums + b0, sums + b1, 0.0);
    scan<T, W>(p, bin_of, begin, end, b0, b1, sums + b0);
    return;
  }
  for (int64_t lo = b0; lo < b1; lo += scratch_bins) {
    const int64_t hi = std::min(b1, lo + scratch_bins);
    std::fill(scratch, scratch + (hi - lo), 0.0);
    scan<T, W>(p, bin_of, begin, end, lo, hi, scratch);
    for (int64_t b = lo; b < hi; ++b) write_sum(p, out, b, scratch[b - lo]);
  }
}

// Sums of one histogram. The order of additions depends only on (n, bins): with few bins, the input is cut into
// `slots` fixed slots summed separately and added in slot order (any thread may compute any slot, and waves of
// slots fit the scratch budget); with many bins, the threads split the bins and sum each one in element order.
template <typename T, WeightType W, typename BinOf>
void sum_one(const HistogramParams& p, const BinOf& bin_of) {
  const int64_t n = p.elements(), bins = p.bins, threads = at::get_num_threads();
  const int64_t slots = std::min(kMaxWeightSlots, ceil_div(n, std::max(kMinElementsPerTask, 4 * bins)));
  const bool direct = sums_in_output(p);
  if (slots < 2 || bins > kMaxSlotBins) {
    const int64_t ranges = std::min(threads, ceil_div(bins, 4096));
    const int64_t scratch_bins = std::min(ceil_div(bins, ranges), kScratchPerThread / int64_t(sizeof(double)));
    std::unique_ptr<double[]> scratch;
    if (!direct) scratch = allocate_scratch<double>(p, ranges * scratch_bins);
    at::parallel_for(0, ranges, 1, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        sum_bins_in_order<T, W>(p, bin_of, 0, n, bins * r / ranges, bins * (r + 1) / ranges, p.output,
                                direct ? nullptr : scratch.get() + r * scratch_bins, scratch_bins);
      }
    });
    return;
  }
  const int64_t budget_copies = scratch_budget(p) / (bins * int64_t(sizeof(double))) - (direct ? 0 : 1);
  // As many slots per wave as the budget holds, not just one per thread: every wave ends in a barrier, and a thread
  // that the OS preempts stalls all the others at each one (seen: 2 threads 5x slower than 1 on a busy machine).
  const int64_t wave = std::max<int64_t>(1, std::min(slots, budget_copies));
  auto partial = allocate_scratch<double>(p, (wave + (direct ? 0 : 1)) * bins);
  double* total = direct ? static_cast<double*>(p.output) : partial.get() + wave * bins;
  for (int64_t first = 0; first < slots; first += wave) {
    const int64_t count = std::min(wave, slots - first);
    at::parallel_for(0, count, 1, [&](int64_t a, int64_t b) {
      for (int64_t j = a; j < b; ++j) {
        double* h = partial.get() + j * bins;
        std::fill(h, h + bins, 0.0);
        const int64_t s = first + j;
        scan<T, W>(p, bin_of, n * s / slots, n * (s + 1) / slots, 0, bins, h);
      }
    });
    at::parallel_for(0, bins, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        double sum = first == 0 ? partial[b] : total[b] + partial[b];  // left to right: slot order
        for (int64_t j = 1; j < count; ++j) sum += partial[j * bins + b];
        total[b] = sum;
      }
    });
  }
  if (!direct) {
    at::parallel_for(0, bins, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) write_sum(p, p.output, b, total[b]);
    });
  }
}

// The same for sums: each row's bins summed in element order.
template <typename T, WeightType W, typename BinOf>
void sum_short_rows(const HistogramParams& p, const BinOf& bin_of) {
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(p.row_length, 1));
  const int64_t tasks = std::min<int64_t>(at::get_num_threads(), ceil_div(p.rows, grain));
  const bool direct = sums_in_output(p);
  const int64_t scratch_bins = std::min(p.bins, kScratchPerThread / int64_t(sizeof(double)));
  std::unique_ptr<double[]> scratch;
  if (!direct) scratch = allocate_scratch<double>(p, tasks * scratch_bins);
  const int64_t row_bytes = p.output_row_stride * output_bytes(p.output_type);
  at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      for (int64_t row = p.rows * t / tasks; row < p.rows * (t + 1) / tasks; ++row) {
        sum_bins_in_order<T, W>(p, bin_of, row * p.row_length, (row + 1) * p.row_length, 0, p.bins,
                                static_cast<char*>(p.output) + row * row_bytes,
                                direct ? nullptr : scratch.get() + t * scratch_bins, scratch_bins);
      }
    }
  });
}

template <typename T, WeightType W>
void sum(const HistogramParams& p) {
  const Binner<T> binner(p);
  const bool one = p.output_row_stride == 0;
  // 16-bit weighted input bins per element: its table would be a second instance of every sum path (build time).
  if constexpr (RawPattern<T>::kUsable && RawPattern<T>::kCount == 256) {
    const TableBinner<T> table(binner);
    one ? sum_one<T, W>(p, table) : sum_short_rows<T, W>(p, table);
  } else {
    one ? sum_one<T, W>(p, binner) : sum_short_rows<T, W>(p, binner);
  }
}

}  // namespace

void sum_histogram(const HistogramParams& p) {
  visit_input_type(p.input_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (p.weight == nullptr ? WeightType::kNone : p.weight_type) {
      case WeightType::kNone:
        return sum<T, WeightType::kNone>(p);
      case WeightType::kFloat32:
        return sum<T, WeightType::kFloat32>(p);
      case WeightType::kFloat64:
        return sum<T, WeightType::kFloat64>(p);
      default:
        return sum<T, WeightType::kFloat16>(p);  // float16 and bfloat16 weights
    }
  });
}

}  // namespace cpu
}  // namespace dsmhist
