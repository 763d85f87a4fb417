// CPU implementation of the dsmhist ops, on torch's intra-op thread pool (at::parallel_for; the file is compiled
// with OpenMP so that torch's OpenMP backend really forks). The binning rule is the one the CUDA kernels use
// (csrc/common/binning.h). Three promises shape the code:
//  - Memory: beyond the output, a call's scratch stays below scratch_budget(): max(4 MiB per thread, 10% of the
//    output). Private histograms are used only where they fit that; past it the threads split the bins instead.
//  - Determinism: weighted sums are bitwise identical whatever the thread count, so the order in which weights are
//    added depends only on (elements, bins), never on at::get_num_threads(). Counts are integers: any order is exact.
//  - Speed: 8- and 16-bit inputs are counted per raw bit pattern (a table of 256 / 65536 counters) and mapped to
//    bins once per call, so they run at memory speed in either binning mode.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "../histogram_args.h"
#include "../op_bodies.h"
#include "edges_cpu.h"

namespace dsmhist {

namespace {

// Below this many elements a task is not worth a thread (or a private histogram) of its own.
constexpr int64_t kMinElementsPerTask = int64_t(1) << 16;
// The per-thread part of the scratch bound (README, "Limits and memory").
constexpr int64_t kScratchPerThread = int64_t(4) << 20;
// Weighted sums split the input into at most this many fixed slots, whose partial sums are added in slot order.
constexpr int64_t kMaxWeightSlots = 64;
// Weighted sums use slots only up to this many bins (two double histograms then fit kScratchPerThread); beyond it
// every bin is summed in element order. Fixed, so the choice never depends on the thread count.
constexpr int64_t kMaxSlotBins = kScratchPerThread / (2 * int64_t(sizeof(double)));
// Rows at least this long are each counted by all threads (the one-histogram path); shorter rows, one per thread.
// Fixed for the same reason as kMaxSlotBins.
constexpr int64_t kLongRow = int64_t(1) << 18;
// 16-bit inputs switch to raw-pattern counting (65536 counters per task) from this many elements.
constexpr int64_t kRawCount16MinElements = int64_t(1) << 20;
// uint32 raw-pattern counters are flushed before they could wrap.
constexpr int64_t kRawFlushElements = int64_t(1) << 31;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t output_total_bytes(const HistogramParams& p) {
  return p.output_rows() * p.bins * output_bytes(p.output_type);
}

// The most scratch one call may hold at once (README, "Limits and memory").
int64_t scratch_budget(const HistogramParams& p) {
  return std::max<int64_t>(kScratchPerThread * at::get_num_threads(), output_total_bytes(p) / 10);
}

// Scratch of `count` elements, uninitialised (each task zeroes its own part, in its own thread). A failed allocation
// raises the documented error naming bins and the bytes, not a bare std::bad_alloc.
template <typename A>
std::unique_ptr<A[]> allocate_scratch(const HistogramParams& p, int64_t count) {
  A* data = new (std::nothrow) A[static_cast<size_t>(std::max<int64_t>(count, 1))];
  TORCH_CHECK(data != nullptr, "dsmhist (CPU): the scratch for bins=", p.bins, " (", count * int64_t(sizeof(A)),
              " bytes, beyond the output's ", output_total_bytes(p), " bytes) could not be allocated");
  return std::unique_ptr<A[]>(data);
}

// Calls run(x, input_stride, weight_offset, weight_stride, count, row) for each row's part of elements [begin, end)
// of the flattened (row, element) index space, in order: x points at the part's first element, weight_offset is
// its weight's offset (in elements).
template <typename T, typename Run>
void for_each_run(const HistogramParams& p, int64_t begin, int64_t end, Run&& run) {
  const T* input = static_cast<const T*>(p.input);
  const int64_t length = p.row_length;
  int64_t row = begin / length, i = begin % length;
  while (begin < end) {
    int64_t row_input = 0, row_weight = 0;
    if (p.layout.ndim > 0) p.layout.offsets(row, &row_input, &row_weight);
    const int64_t count = std::min(length - i, end - begin);
    run(input + row_input + i * p.inner_input_stride, p.inner_input_stride, row_weight + i * p.inner_weight_stride,
        p.inner_weight_stride, count, row);
    begin += count;
    ++row;
    i = 0;
  }
}

// Calls visit(value, weight_offset, row) for elements [begin, end) of the flattened (row, element) index space, in
// order.
template <typename T, typename Visit>
void for_each_element(const HistogramParams& p, int64_t begin, int64_t end, Visit&& visit) {
  for_each_run<T>(p, begin, end, [&](const T* x, int64_t stride, int64_t weight_offset, int64_t weight_stride,
                                     int64_t count, int64_t row) {
    if (stride == 1 && weight_stride == 1) {  // a separate loop the compiler can keep tight: no stride multiplies
      for (int64_t i = 0; i < count; ++i) visit(x[i], weight_offset + i, row);
    } else {
      for (int64_t i = 0; i < count; ++i) visit(x[i * stride], weight_offset + i * weight_stride, row);
    }
  });
}

struct FiniteMinMax {
  bool any = false;
  double lo = 0.0, hi = 0.0;
};

// The finite min and max of the input, as torch.histc takes its range when none is given.
template <typename T>
FiniteMinMax finite_min_max(const HistogramParams& p) {
  return at::parallel_reduce(
      0, p.elements(), kMinElementsPerTask, FiniteMinMax{},
      [&](int64_t begin, int64_t end, FiniteMinMax acc) {
        for_each_element<T>(p, begin, end, [&](T value, int64_t, int64_t) {
          const auto x = to_compute(value);
          if (!is_finite_value(x)) return;
          const double d = static_cast<double>(x);
          acc.lo = acc.any ? std::min(acc.lo, d) : d;
          acc.hi = acc.any ? std::max(acc.hi, d) : d;
          acc.any = true;
        });
        return acc;
      },
      [](FiniteMinMax a, FiniteMinMax b) {
        if (!a.any) return b;
        if (!b.any) return a;
        return FiniteMinMax{true, std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
      });
}

template <typename T>
void data_range(const HistogramParams& p, double* lo, double* hi) {
  const FiniteMinMax total = finite_min_max<T>(p);
  finalize_data_range(total.any, total.lo, total.hi, lo, hi);
}

// ----- raw bit patterns of 8- and 16-bit inputs ------------------------------------------------------------------

template <typename T>
struct RawPattern {
  static constexpr bool kUsable = false;
  static constexpr int64_t kCount = 0;
};
template <>
struct RawPattern<uint8_t> {
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = 256;
  static uint32_t of(uint8_t v) { return v; }
  static uint8_t value(uint32_t r) { return static_cast<uint8_t>(r); }
};
template <>
struct RawPattern<int8_t> {
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = 256;
  static uint32_t of(int8_t v) { return static_cast<uint8_t>(v); }
  static int8_t value(uint32_t r) { return static_cast<int8_t>(static_cast<uint8_t>(r)); }
};
template <>
struct RawPattern<int16_t> {
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = 65536;
  static uint32_t of(int16_t v) { return static_cast<uint16_t>(v); }
  static int16_t value(uint32_t r) { return static_cast<int16_t>(static_cast<uint16_t>(r)); }
};
template <>
struct RawPattern<Float16> {
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = 65536;
  static uint32_t of(Float16 v) { return v.bits; }
  static Float16 value(uint32_t r) { return Float16{static_cast<uint16_t>(r)}; }
};
template <>
struct RawPattern<BFloat16> {
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = 65536;
  static uint32_t of(BFloat16 v) { return v.bits; }
  static BFloat16 value(uint32_t r) { return BFloat16{static_cast<uint16_t>(r)}; }
};

// The Binner's answer for every bit pattern of an 8/16-bit type, computed once per call: the per-element work of
// range binning becomes one load, so range and index binning of these types cost the same.
template <typename T>
struct TableBinner {
  std::vector<int64_t> bin_of;
  explicit TableBinner(const Binner<T>& binner) : bin_of(static_cast<size_t>(RawPattern<T>::kCount)) {
    for (int64_t r = 0; r < RawPattern<T>::kCount; ++r) bin_of[r] = binner(RawPattern<T>::value(static_cast<uint32_t>(r)));
  }
  int64_t operator()(T value) const { return bin_of[RawPattern<T>::of(value)]; }
};

// What a hot loop keeps in local variables: the Binner itself (a few scalars), or a pointer into the table.
template <typename T>
struct TableView {
  const int64_t* bin_of;
  int64_t operator()(T value) const { return bin_of[RawPattern<T>::of(value)]; }
};
template <typename T>
Binner<T> local_copy(const Binner<T>& binner) {
  return binner;
}
template <typename T>
TableView<T> local_copy(const TableBinner<T>& table) {
  return TableView<T>{table.bin_of.data()};
}

// ----- accumulating ----------------------------------------------------------------------------------------------

// Counts in an int32 output wrap modulo 2^32 (as the CUDA atomics and int32 tensor addition do): count in uint32.
template <typename Out>
using CountOf = typename std::conditional<std::is_same<Out, int32_t>::value, uint32_t, Out>::type;

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

void zero_bins(void* data, int64_t count, int64_t element_bytes) {
  at::parallel_for(0, count, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
    std::memset(static_cast<char*>(data) + begin * element_bytes, 0, static_cast<size_t>((end - begin) * element_bytes));
  });
}

// Adds elements [begin, end) whose bin lies in [b0, b1) into hist[bin - b0], in element order: 1 per element for
// counts (and for W == kNone), the weight for sums. kFloat32 / kFloat64 load their type directly; the 16-bit
// weight types share one instance (W == kFloat16) that converts through load_weight's switch. One unsigned compare
// tests both ends of the bin range (a dropped value's -1 wraps above it).
template <typename T, WeightType W, typename Acc, typename BinOf>
void scan(const HistogramParams& p, const BinOf& bin_of, int64_t begin, int64_t end, int64_t b0, int64_t b1,
          Acc* hist) {
  // Bins are computed a block at a time, then added: the binning loop has no stores that could alias its inputs
  // (so it can vectorise), and the adding loop is one load and one add per element.
  constexpr int64_t kBlock = 256;
  uint64_t slot[kBlock];
  for_each_run<T>(p, begin, end, [&](const T* x, int64_t stride, int64_t weight_offset, int64_t weight_stride,
                                     int64_t count, int64_t) {
    const auto binner = local_copy(bin_of);  // local copies: stores into hist cannot alias them
    Acc* const h = hist;
    const int64_t first = b0;
    const uint64_t width = static_cast<uint64_t>(b1 - b0);
    if constexpr (W == WeightType::kNone) {
      if (stride == 1) {
        for (int64_t j = 0; j < count; ++j) {
          const uint64_t k = static_cast<uint64_t>(binner(x[j]) - first);
          if (k < width) h[k] += 1;
        }
        return;
      }
    }
    for (int64_t j0 = 0; j0 < count; j0 += kBlock) {
      const int64_t m = std::min(kBlock, count - j0);
      const T* xs = x + j0 * stride;
      if (stride == 1) {
        for (int64_t j = 0; j < m; ++j) slot[j] = static_cast<uint64_t>(binner(xs[j]) - first);
      } else {
        for (int64_t j = 0; j < m; ++j) slot[j] = static_cast<uint64_t>(binner(xs[j * stride]) - first);
      }
      const int64_t w0 = weight_offset + j0 * weight_stride;
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t k = slot[j];
        if (k >= width) continue;  // dropped (-1 wraps above every width) or another thread's bins
        if constexpr (W == WeightType::kNone) {
          h[k] += 1;
        } else if constexpr (W == WeightType::kFloat32) {
          h[k] += static_cast<const float*>(p.weight)[w0 + j * weight_stride];
        } else if constexpr (W == WeightType::kFloat64) {
          h[k] += static_cast<const double*>(p.weight)[w0 + j * weight_stride];
        } else {
          h[k] += load_weight<double>(p.weight, p.weight_type, w0 + j * weight_stride);
        }
      }
    }
  });
}

// Counts of one histogram: tasks of the input each count into a private histogram (task 0 into the output itself),
// merged afterwards; where those copies would pass the scratch budget, the threads split the bins instead and each
// reads all of the input for its own bins, with no scratch at all.
template <typename T, typename Out, typename BinOf>
void count_one(const HistogramParams& p, const BinOf& bin_of, Out* out) {
  using C = CountOf<Out>;
  C* counts = reinterpret_cast<C*>(out);
  const int64_t n = p.elements(), bins = p.bins, threads = at::get_num_threads();
  int64_t tasks = std::min(threads, ceil_div(n, kMinElementsPerTask));
  tasks = std::min(tasks, std::max<int64_t>(1, n / bins));  // merging costs bins per task: worth it only past that
  const bool wide = ceil_div(n, tasks) > int64_t(std::numeric_limits<uint32_t>::max());
  const int64_t counter_bytes = wide ? 8 : 4;
  if (tasks > 1 && (tasks - 1) * bins * counter_bytes <= scratch_budget(p)) {
    const auto run_tasks = [&](auto tag) {
      using P = typename decltype(tag)::type;
      auto priv = allocate_scratch<P>(p, (tasks - 1) * bins);
      if (!p.accumulate) zero_bins(out, bins, sizeof(Out));
      at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
          const int64_t begin = n * t / tasks, end = n * (t + 1) / tasks;
          if (t == 0) {
            scan<T, WeightType::kNone>(p, bin_of, begin, end, 0, bins, counts);
          } else {
            P* h = priv.get() + (t - 1) * bins;
            std::fill(h, h + bins, P(0));
            scan<T, WeightType::kNone>(p, bin_of, begin, end, 0, bins, h);
          }
        }
      });
      at::parallel_for(0, bins, 4096, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          C sum = counts[b];
          for (int64_t t = 1; t < tasks; ++t) sum += static_cast<C>(priv[(t - 1) * bins + b]);
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

// Counts of one histogram of an 8/16-bit input: each task counts raw bit patterns (4 interleaved tables of 256 for
// 8 bits, so a run of equal bytes does not serialise on one counter; one of 65536 for 16 bits), then the patterns'
// totals go to their bins through the table.
template <typename T, typename Out>
void count_raw_patterns(const HistogramParams& p, const TableBinner<T>& table, Out* out) {
  using C = CountOf<Out>;
  constexpr int64_t kPatterns = RawPattern<T>::kCount;
  constexpr int64_t kWays = kPatterns == 256 ? 4 : 1;
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
        uint32_t way = 0;
        for_each_element<T>(p, begin, std::min(end, begin + kRawFlushElements), [&](T value, int64_t, int64_t) {
          ways[way * kPatterns + RawPattern<T>::of(value)] += 1;
          way = (way + 1) & (kWays - 1);
        });
        for (int64_t w = 0; w < kWays; ++w) {
          for (int64_t r = 0; r < kPatterns; ++r) total[r] += ways[w * kPatterns + r];
        }
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

// The params of row `row` alone, as a one-histogram call into that row's output.
template <typename T>
HistogramParams row_params(const HistogramParams& p, int64_t row) {
  HistogramParams r = p;
  int64_t row_input = 0, row_weight = 0;
  if (p.layout.ndim > 0) p.layout.offsets(row, &row_input, &row_weight);
  r.input = static_cast<const T*>(p.input) + row_input;
  if (p.weight != nullptr) {
    const int64_t weight_bytes =
        p.weight_type == WeightType::kFloat64 ? 8 : p.weight_type == WeightType::kFloat32 ? 4 : 2;
    r.weight = static_cast<const char*>(p.weight) + row_weight * weight_bytes;
  }
  r.rows = 1;
  r.layout.ndim = 0;
  r.output = static_cast<char*>(p.output) + row * p.output_row_stride * output_bytes(p.output_type);
  r.output_row_stride = 0;
  return r;
}

template <typename T, typename Out>
void count(const HistogramParams& p) {
  Out* out = static_cast<Out*>(p.output);
  const Binner<T> binner(p);
  const bool one = p.output_row_stride == 0;
  if constexpr (RawPattern<T>::kUsable && RawPattern<T>::kCount == 256) {
    const TableBinner<T> table(binner);
    one ? count_raw_patterns<T>(p, table, out) : count_short_rows<T>(p, table, out);
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

template <typename T>
void accumulate(const HistogramParams& p) {
  switch (p.output_type) {
    case OutputType::kInt32:
      return count<T, int32_t>(p);
    case OutputType::kInt64:
      return count<T, int64_t>(p);
    default:
      break;
  }
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
}

template <typename T>
void histogram_typed(HistogramParams& p, const HistogramArgs& args) {
  if (p.elements() == 0) {  // nothing to count: zeros, or hist unchanged
    if (!p.accumulate) zero_bins(p.output, p.output_rows() * p.bins, output_bytes(p.output_type));
    return;
  }
  if (args.data_range && p.device_range == nullptr) data_range<T>(p, &p.lo, &p.hi);  // given keys: the Binner decodes them
  if (p.output_row_stride != 0 && p.row_length >= kLongRow) {
    // Long rows: each row is one histogram counted by all threads, as histogram() would count it.
    for (int64_t row = 0; row < p.rows; ++row) accumulate<T>(row_params<T>(p, row));
    return;
  }
  accumulate<T>(p);
}

void run(const HistogramArgs& args, HistogramParams& p) {
  visit_input_type(args.input_type, [&](auto tag) { histogram_typed<typename decltype(tag)::type>(p, args); });
}

// Each element's bin (-1: dropped) into p.output, an int64 tensor of input's shape addressed by weight offsets.
template <typename T>
void bin_indices_typed(HistogramParams& p, const HistogramArgs& args) {
  if (args.data_range && p.device_range == nullptr) data_range<T>(p, &p.lo, &p.hi);
  const Binner<T> binner(p);
  int64_t* out = static_cast<int64_t*>(p.output);
  at::parallel_for(0, p.elements(), kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    for_each_element<T>(p, begin, end, [&](T value, int64_t offset, int64_t) { out[offset] = binner(value); });
  });
}

// The CPU's part of every op (op_bodies.h: the checks, the output and the params come from there).
struct CpuBackend {
  static void check_device(const char* op, const at::Tensor& input) {
    TORCH_CHECK(input.device().is_cpu(), op, " (CPU): input must be on the CPU, got ", input.device());
  }
  static void histogram(const char*, const HistogramArgs& args, HistogramParams& p, const at::Tensor&) {
    run(args, p);
  }
  static void finite_range(const HistogramArgs& args, HistogramParams& p, const at::Tensor&) {
    FiniteMinMax total;
    visit_input_type(args.input_type,
                     [&](auto tag) { total = finite_min_max<typename decltype(tag)::type>(p); });
    uint64_t slots[2];
    encode_data_range(total.any, total.lo, total.hi, slots);
    std::memcpy(p.output, slots, sizeof(slots));
  }
  static void bin_indices(const HistogramArgs& args, HistogramParams& p, const at::Tensor&) {
    visit_input_type(args.input_type, [&](auto tag) { bin_indices_typed<typename decltype(tag)::type>(p, args); });
  }
  static void check_edges(const char* op, const std::vector<at::Tensor>& edges, bool nd) {
    check_edges_sorted(op, edges, nd);
  }
  static void edge_bins(const EdgeBinParams& p, const at::Tensor&) { edge_bins_cpu(p); }
};

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CPU, m) { register_op_bodies<CpuBackend>(m); }

}  // namespace dsmhist
