// The CPU passes without bins: the data's finite range (for range binning with no min / max, and the range pass
// of the distributed protocol) and each element's bin (for the weights' gradient).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu_engine.h"
#include "cpu_parallel.h"

namespace dsmhist {
namespace cpu {

namespace {

struct FiniteMinMax {
  bool any = false;
  double lo = 0.0, hi = 0.0;
};

// The finite min and max of the input, as torch.histc takes its range when none is given.
template <typename T>
FiniteMinMax finite_min_max(const InputDescription& p) {
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

FiniteMinMax finite_min_max_of(const InputDescription& p) {
  FiniteMinMax total;
  visit_input_type(p.input_type, [&](auto tag) { total = finite_min_max<typename decltype(tag)::type>(p); });
  return total;
}

}  // namespace

void set_data_range(HistogramParams& p) {
  const FiniteMinMax total = finite_min_max_of(p);
  finalize_data_range(total.any, total.lo, total.hi, &p.lo, &p.hi);
}

void finite_range_keys(const RangeParams& p) {
  const FiniteMinMax total = finite_min_max_of(p.input);
  uint64_t slots[2];
  encode_data_range(total.any, total.lo, total.hi, slots);
  std::memcpy(p.keys, slots, sizeof(slots));
}

void bin_indices(HistogramParams& p, bool find_data_range) {
  if (find_data_range && p.device_range == nullptr) set_data_range(p);
  visit_input_type(p.input_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Binner<T> binner(p);
    int64_t* out = static_cast<int64_t*>(p.output);
    at::parallel_for(0, p.elements(), kMinElementsPerTask, [&](int64_t begin, int64_t end) {
      for_each_element<T>(p, begin, end, [&](T value, int64_t offset, int64_t) { out[offset] = binner(value); });
    });
  });
}

}  // namespace cpu
}  // namespace dsmhist
