// The counting paths of the CPU engine (integer outputs): private histograms per task merged once, the threads
// splitting the bins (with a 32-bit window for 64-bit counts) where private copies would pass the scratch budget,
// raw bit-pattern counting of 8- and 16-bit inputs, and one row per thread for short rows. Counts are integers, so
// any order of additions is exact and deterministic.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "cpu_engine.h"
#include "cpu_scan.h"

namespace dsmhist {
namespace cpu {

namespace {

// Counts in an int32 output wrap modulo 2^32 (as the CUDA atomics and int32 tensor addition do): count in uint32.
template <typename Out>
using CountOf = typename std::conditional<std::is_same<Out, int32_t>::value, uint32_t, Out>::type;

// Counts of one histogram: tasks of the input each count into a private histogram (task 0 into the output itself,
// unless the output's counts are 64-bit: then every task counts in 32 bits), merged afterwards; where those copies
// would pass the scratch budget, the threads split the bins instead and each reads all of the input for its own bins,
// with no scratch at all.
template <typename T, typename Out, typename BinOf>
void count_one(const HistogramParams& p, const BinOf& bin_of, Out* out) {
  using C = CountOf<Out>;
  C* counts = reinterpret_cast<C*>(out);
  const int64_t n = p.elements(), bins = p.bins, threads = at::get_num_threads();
  int64_t tasks = std::min(threads, ceil_div(n, kMinElementsPerTask));
  tasks = std::min(tasks, std::max<int64_t>(1, n / bins));  // merging costs bins per task: worth it only past that
  const bool wide = ceil_div(n, tasks) > int64_t(std::numeric_limits<uint32_t>::max());
  const int64_t counter_bytes = wide ? 8 : 4;
  // 32-bit counters for task 0 too where the output's are 64-bit: its random adds then touch half the memory, as the
  // other tasks' do, and it no longer lags them (2-core CI machine, 2 threads, 2^24 int32 values, best of 9 in 3
  // alternations: 1M bins 16.2-19.8 -> 12.7-13.1 ms, 4096 bins 7.5-10.2 -> 6.0-6.5).
  const bool all_private = sizeof(C) == 8 && !wide;
  const int64_t first_private = all_private ? 0 : 1;  // the tasks before it count into the output
  const int64_t private_tasks = tasks - first_private;
  if (tasks > 1 && private_tasks * bins * counter_bytes <= scratch_budget(p)) {
    const auto run_tasks = [&](auto tag) {
      using P = typename decltype(tag)::type;
      auto priv = allocate_scratch<P>(p, private_tasks * bins);
      const auto private_of = [&](int64_t t) { return priv.get() + (t - first_private) * bins; };
      if (!all_private && !p.accumulate) zero_bins(out, bins, sizeof(Out));
      at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
          const int64_t begin = n * t / tasks, end = n * (t + 1) / tasks;
          if (t < first_private) {
            scan<T, WeightType::kNone>(p, bin_of, begin, end, 0, bins, counts);
          } else {
            P* h = private_of(t);
            std::fill(h, h + bins, P(0));
            scan<T, WeightType::kNone>(p, bin_of, begin, end, 0, bins, h);
          }
        }
      });
      const bool keep_output = !all_private || p.accumulate;
      at::parallel_for(0, bins, 4096, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          C sum = keep_output ? counts[b] : C(0);
          for (int64_t t = first_private; t < tasks; ++t) sum += static_cast<C>(private_of(t)[b]);
          counts[b] = sum;
        }
      });
    };
    if (wide) {
      run_tasks(TypeTag<uint64_t>{});
    } else {
      run_tasks(TypeTag<uint32_t>{});
    }
    return;
  }
  // Bin ranges of at least 4096 bins (a thread's own range should span whole cache lines and pages).
  const int64_t ranges = std::min(threads, ceil_div(bins, 4096));
  // 64-bit counts are counted in a window of 32-bit counters that fits one thread's scratch share, then widened into
  // the output once: half the cache footprint of the random adds. Measured on the 2-core CI machine, one thread,
  // 2^24 int32 values (ms, noisy host): 1M bins 229 -> 33-64 (torch.bincount 86-254). Several windows per range
  // (one more read of the input each) lost: 4M bins in 4 windows 256 -> 474 ms. So one window at most.
  constexpr int64_t kMaxNarrowWindows = 1;
  const int64_t window = kScratchPerThread / int64_t(sizeof(uint32_t));
  const int64_t per_range = ceil_div(bins, ranges);
  const bool narrow = sizeof(C) == 8 && n <= int64_t(std::numeric_limits<uint32_t>::max()) &&
                      ceil_div(per_range, window) <= kMaxNarrowWindows;
  const int64_t local_bins = std::min(per_range, window);
  std::unique_ptr<uint32_t[]> narrow_counts;
  if (narrow) narrow_counts = allocate_scratch<uint32_t>(p, ranges * local_bins);
  at::parallel_for(0, ranges, 1, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t b0 = bins * r / ranges, b1 = bins * (r + 1) / ranges;
      if (narrow) {
        uint32_t* local = narrow_counts.get() + r * local_bins;
        for (int64_t w0 = b0; w0 < b1; w0 += local_bins) {
          const int64_t w1 = std::min(b1, w0 + local_bins);
          std::fill(local, local + (w1 - w0), 0u);
          scan<T, WeightType::kNone>(p, bin_of, 0, n, w0, w1, local);
          for (int64_t b = w0; b < w1; ++b) counts[b] = (p.accumulate ? counts[b] : C(0)) + C(local[b - w0]);
        }
        continue;
      }
      if (!p.accumulate) std::memset(counts + b0, 0, static_cast<size_t>((b1 - b0) * sizeof(C)));
      scan<T, WeightType::kNone>(p, bin_of, 0, n, b0, b1, counts + b0);
    }
  });
}

// Adds each element of a strided run to its raw pattern's counter in kWays interleaved tables of
// RawPattern<T>::kCount: element k of each group of kWays to table k, so a run of equal values is kWays independent
// chains of adds instead of one.
template <typename T, int64_t kWays>
inline void tally_raw_patterns(const T* x, int64_t stride, int64_t count, uint32_t* ways) {
  constexpr int64_t kPatterns = RawPattern<T>::kCount;
  int64_t i = 0;
  for (; i + kWays <= count; i += kWays) {
    for (int64_t k = 0; k < kWays; ++k) ways[k * kPatterns + RawPattern<T>::of(x[(i + k) * stride])] += 1;
  }
  for (; i < count; ++i) ways[RawPattern<T>::of(x[i * stride])] += 1;
}

// Pattern r's count over the kWays tables.
template <int64_t kWays, int64_t kPatterns>
inline uint64_t pattern_total(const uint32_t* ways, int64_t r) {
  uint64_t sum = 0;
  for (int64_t k = 0; k < kWays; ++k) sum += ways[k * kPatterns + r];
  return sum;
}

// 4 tables of 256 for 8 bits (a run of equal bytes does not serialise on one counter); one of 65536 for 16 bits.
template <typename T>
constexpr int64_t kRawWays = RawPattern<T>::kCount == 256 ? 4 : 1;

// Counts of one histogram of an 8/16-bit input: each task tallies raw bit patterns into uint32 tables, flushed into
// 64-bit totals every kRawFlushElements, then the patterns' totals go to their bins through the table.
template <typename T, typename Out>
void count_raw_patterns(const HistogramParams& p, const TableBinner<T>& table, Out* out) {
  using C = CountOf<Out>;
  constexpr int64_t kPatterns = RawPattern<T>::kCount, kWays = kRawWays<T>;
  const int64_t n = p.elements();
  const int64_t tasks = std::min<int64_t>(at::get_num_threads(), ceil_div(n, kMinElementsPerTask));
  auto totals = allocate_scratch<uint64_t>(p, tasks * kPatterns);
  auto local = allocate_scratch<uint32_t>(p, tasks * kWays * kPatterns);
  at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      uint64_t* total = totals.get() + t * kPatterns;
      uint32_t* ways = local.get() + t * kWays * kPatterns;
      std::fill(total, total + kPatterns, uint64_t(0));
      const int64_t end = n * (t + 1) / tasks;
      for (int64_t begin = n * t / tasks; begin < end; begin += kRawFlushElements) {
        std::fill(ways, ways + kWays * kPatterns, 0u);
        for_each_run<T>(p, begin, std::min(end, begin + kRawFlushElements),
                        [&](const T* x, int64_t stride, int64_t, int64_t, int64_t count, int64_t) {
                          tally_raw_patterns<T, kWays>(x, stride, count, ways);
                        });
        for (int64_t r = 0; r < kPatterns; ++r) total[r] += pattern_total<kWays, kPatterns>(ways, r);
      }
    }
  });
  C* counts = reinterpret_cast<C*>(out);
  if (!p.accumulate) zero_bins(out, p.bins, sizeof(Out));
  for (int64_t r = 0; r < kPatterns; ++r) {
    const int64_t bin = table.bin_of[r];
    if (bin < 0) continue;
    uint64_t sum = 0;
    for (int64_t t = 0; t < tasks; ++t) sum += totals[t * kPatterns + r];
    counts[bin] += static_cast<C>(sum);
  }
}

// One row per thread, in element order, for rows shorter than kLongRow: counts straight into the output rows.
template <typename T, typename Out, typename BinOf>
void count_short_rows(const HistogramParams& p, const BinOf& bin_of, Out* out) {
  using C = CountOf<Out>;
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(p.row_length, 1));
  at::parallel_for(0, p.rows, grain, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      C* counts = reinterpret_cast<C*>(out + row * p.output_row_stride);
      if (!p.accumulate) std::memset(counts, 0, static_cast<size_t>(p.bins * sizeof(C)));
      scan<T, WeightType::kNone>(p, bin_of, row * p.row_length, (row + 1) * p.row_length, 0, p.bins, counts);
    }
  });
}

// One row per thread for 1-byte rows shorter than kLongRow: each row's raw byte patterns tallied as
// count_raw_patterns does (uint32 tables suffice: a row is below 2^32 elements), then their totals to the row's bins
// through the table. Against count_short_rows's table lookup and add into the int64 row per byte: see
// docs/perf-log/2026-11-cpu.md (2026-11-26).
template <typename T, typename Out>
void count_short_rows_raw(const HistogramParams& p, const TableBinner<T>& table, Out* out) {
  using C = CountOf<Out>;
  constexpr int64_t kPatterns = RawPattern<T>::kCount, kWays = kRawWays<T>;
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(p.row_length, 1));
  at::parallel_for(0, p.rows, grain, [&](int64_t first, int64_t last) {
    uint32_t ways[kWays * kPatterns];
    for (int64_t row = first; row < last; ++row) {
      std::fill(ways, ways + kWays * kPatterns, 0u);
      for_each_run<T>(p, row * p.row_length, (row + 1) * p.row_length,
                      [&](const T* x, int64_t stride, int64_t, int64_t, int64_t count, int64_t) {
                        tally_raw_patterns<T, kWays>(x, stride, count, ways);
                      });
      C* counts = reinterpret_cast<C*>(out + row * p.output_row_stride);
      if (!p.accumulate) std::memset(counts, 0, static_cast<size_t>(p.bins * sizeof(C)));
      for (int64_t r = 0; r < kPatterns; ++r) {
        const int64_t bin = table.bin_of[r];
        if (bin >= 0) counts[bin] += static_cast<C>(pattern_total<kWays, kPatterns>(ways, r));
      }
    }
  });
}

template <typename T, typename Out>
void count(const HistogramParams& p) {
  Out* out = static_cast<Out*>(p.output);
  const Binner<T> binner(p);
  const bool one = p.output_row_stride == 0;
  if constexpr (RawPattern<T>::kUsable && RawPattern<T>::kCount == 256) {
    const TableBinner<T> table(binner);
    one ? count_raw_patterns<T>(p, table, out) : count_short_rows_raw<T>(p, table, out);
  } else if constexpr (RawPattern<T>::kUsable) {
    if (p.elements() >= kRawCount16MinElements) {
      const TableBinner<T> table(binner);
      one ? count_raw_patterns<T>(p, table, out) : count_short_rows<T>(p, table, out);
    } else {
      one ? count_one<T>(p, binner, out) : count_short_rows<T>(p, binner, out);
    }
  } else {
    one ? count_one<T>(p, binner, out) : count_short_rows<T>(p, binner, out);
  }
}

}  // namespace

void count_histogram(const HistogramParams& p) {
  visit_input_type(p.input_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.output_type == OutputType::kInt32) {
      count<T, int32_t>(p);
    } else {
      count<T, int64_t>(p);
    }
  });
}

}  // namespace cpu
}  // namespace dsmhist
