// CPU implementation of dsmhist.histogram: parallel over cores, each chunk of the input into a private histogram,
// the private histograms merged in a fixed order. The binning rule is the one the CUDA kernels use (params.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "../histogram_args.h"
#include "../ops.h"

namespace dsmhist {

namespace {

// Chunks smaller than this are not worth a private histogram of their own.
constexpr int64_t kMinElementsPerChunk = int64_t(1) << 16;
// Upper bound on the memory of all private histograms together.
constexpr int64_t kPrivateHistogramBudgetBytes = int64_t(256) << 20;

// Calls visit(value, weight_offset) for elements [begin, end) in row-major order.
template <typename T, typename Visit>
void for_each_element(const HistogramParams& p, int64_t begin, int64_t end, Visit&& visit) {
  const T* input = static_cast<const T*>(p.input);
  if (p.contiguous) {
    for (int64_t i = begin; i < end; ++i) visit(input[i], i);
    return;
  }
  const StridedLayout& layout = p.layout;
  const int ndim = layout.ndim;
  int64_t index[kMaxDims];
  int64_t rest = begin;
  for (int d = ndim - 1; d >= 0; --d) {
    index[d] = rest % layout.sizes[d];
    rest /= layout.sizes[d];
  }
  int64_t in_off, w_off;
  layout.offsets(begin, &in_off, &w_off);
  for (int64_t i = begin; i < end; ++i) {
    visit(input[in_off], w_off);
    for (int d = ndim - 1; d >= 0; --d) {  // odometer step to the next element
      in_off += layout.input_strides[d];
      w_off += layout.weight_strides[d];
      if (++index[d] < layout.sizes[d]) break;
      in_off -= layout.input_strides[d] * layout.sizes[d];
      w_off -= layout.weight_strides[d] * layout.sizes[d];
      index[d] = 0;
    }
  }
}

// The finite min and max of the input, as torch.histc takes its range when none is given.
template <typename T>
void data_range(const HistogramParams& p, double* lo, double* hi) {
  struct MinMax {
    bool any = false;
    double lo = 0.0, hi = 0.0;
  };
  const MinMax total = at::parallel_reduce(
      0, p.numel, kMinElementsPerChunk, MinMax{},
      [&](int64_t begin, int64_t end, MinMax acc) {
        for_each_element<T>(p, begin, end, [&](T value, int64_t) {
          const auto x = to_compute(value);
          if (!is_finite_value(x)) return;
          const double d = static_cast<double>(x);
          acc.lo = acc.any ? std::min(acc.lo, d) : d;
          acc.hi = acc.any ? std::max(acc.hi, d) : d;
          acc.any = true;
        });
        return acc;
      },
      [](MinMax a, MinMax b) {
        if (!a.any) return b;
        if (!b.any) return a;
        return MinMax{true, std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
      });
  finalize_data_range(total.any, total.lo, total.hi, lo, hi);
}

// Acc: int64_t for counts, double for weight sums (accumulated in double, rounded once to the output dtype).
template <typename T, typename Acc, typename Out>
void accumulate(const HistogramParams& p, Out* out) {
  const int64_t n = p.numel, bins = p.bins;
  int64_t chunks = std::min<int64_t>(at::get_num_threads(), (n + kMinElementsPerChunk - 1) / kMinElementsPerChunk);
  chunks = std::min<int64_t>(chunks, kPrivateHistogramBudgetBytes / (bins * int64_t(sizeof(Acc))));
  chunks = std::max<int64_t>(chunks, 1);
  std::vector<Acc> private_bins(static_cast<size_t>(chunks * bins), Acc(0));
  const Binner<T> binner(p);
  at::parallel_for(0, chunks, 1, [&](int64_t first_chunk, int64_t end_chunk) {
    for (int64_t c = first_chunk; c < end_chunk; ++c) {
      Acc* hist = private_bins.data() + c * bins;
      for_each_element<T>(p, n * c / chunks, n * (c + 1) / chunks, [&](T value, int64_t weight_offset) {
        const int64_t bin = binner(value);
        if (bin < 0) return;
        if constexpr (std::is_integral<Acc>::value) {
          hist[bin] += 1;
        } else {
          hist[bin] += load_weight<Acc>(p.weight, p.weight_type, weight_offset);
        }
      });
    }
  });
  at::parallel_for(0, bins, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      Acc sum = 0;
      for (int64_t c = 0; c < chunks; ++c) sum += private_bins[c * bins + b];
      if constexpr (std::is_same<Out, int32_t>::value) {
        out[b] = static_cast<int32_t>(static_cast<uint32_t>(sum));  // wraps modulo 2^32, as the CUDA atomics do
      } else {
        out[b] = static_cast<Out>(sum);
      }
    }
  });
}

template <typename T>
void histogram_typed(HistogramParams& p, const HistogramArgs& args) {
  if (args.data_range) data_range<T>(p, &p.lo, &p.hi);
  switch (p.output_type) {
    case OutputType::kInt32:
      return accumulate<T, int64_t>(p, static_cast<int32_t*>(p.output));
    case OutputType::kInt64:
      return accumulate<T, int64_t>(p, static_cast<int64_t*>(p.output));
    case OutputType::kFloat32:
      return accumulate<T, double>(p, static_cast<float*>(p.output));
    case OutputType::kFloat64:
      return accumulate<T, double>(p, static_cast<double*>(p.output));
  }
}

}  // namespace

at::Tensor histogram_cpu(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                         const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                         std::optional<at::ScalarType> dtype) {
  const HistogramArgs args = check_histogram_args(input, bins, min, max, weight, out_of_range, dtype);
  TORCH_CHECK(input.device().is_cpu(), "dsmhist.histogram (CPU): input must be on the CPU, got ", input.device());
  at::Tensor in = input;
  std::optional<at::Tensor> w = weight;
  at::Tensor output = at::empty({bins}, input.options().dtype(args.output_dtype));
  HistogramParams p = make_params(args, in, w, bins, output);
  visit_input_type(args.input_type, [&](auto tag) { histogram_typed<typename decltype(tag)::type>(p, args); });
  return output;
}

TORCH_LIBRARY_IMPL(dsmhist, CPU, m) { m.impl("histogram", &histogram_cpu); }

}  // namespace dsmhist
