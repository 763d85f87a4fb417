// The CPU engine's common ground: its limits (scratch, task sizes), scratch allocation, and the walk over the
// (row, element) index space of a call. Included by every cpu_*.cpp; ATen appears only as the thread pool.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "../common/binning.h"
#include "../common/call.h"

namespace dsmhist {
namespace cpu {

// Below this many elements a task is not worth a thread (or a private histogram) of its own.
constexpr int64_t kMinElementsPerTask = int64_t(1) << 16;
// The per-thread part of the scratch bound (docs/semantics.md, "Memory").
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

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t output_total_bytes(const HistogramParams& p) {
  return p.output_rows() * p.bins * output_bytes(p.output_type);
}

// The most scratch one call may hold at once (docs/semantics.md, "Memory").
inline int64_t scratch_budget(const HistogramParams& p) {
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
void for_each_run(const InputDescription& p, int64_t begin, int64_t end, Run&& run) {
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
void for_each_element(const InputDescription& p, int64_t begin, int64_t end, Visit&& visit) {
  for_each_run<T>(
      p, begin, end,
      [&](const T* x, int64_t stride, int64_t weight_offset, int64_t weight_stride, int64_t count, int64_t row) {
        if (stride == 1 && weight_stride == 1) {  // a separate loop the compiler can keep tight: no stride multiplies
          for (int64_t i = 0; i < count; ++i) visit(x[i], weight_offset + i, row);
        } else {
          for (int64_t i = 0; i < count; ++i) visit(x[i * stride], weight_offset + i * weight_stride, row);
        }
      });
}

inline void zero_bins(void* data, int64_t count, int64_t element_bytes) {
  at::parallel_for(0, count, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
    std::memset(static_cast<char*>(data) + begin * element_bytes, 0,
                static_cast<size_t>((end - begin) * element_bytes));
  });
}

}  // namespace cpu
}  // namespace dsmhist
