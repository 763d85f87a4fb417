// The ops' bodies, written once for every device: check the arguments -> allocate the output -> build the params ->
// hand them to the device's backend. cpu/histogram_cpu.cpp and cuda/histogram_cuda.cpp each define a backend, a
// struct of static functions (the shape of `ExampleBackend` below), and register these bodies for their dispatch key
// with register_op_bodies<Backend>(m). Everything a call checks runs here before anything is written.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#include "edges_bodies.h"
#include "call_params.h"
#include "histogram_args.h"

namespace dsmhist {

// What a backend provides (documentation only; each backend is its own struct with these static members):
//
//   // Throws (RuntimeError, naming op) unless input is on this backend's device.
//   static void check_device(const char* op, const at::Tensor& input);
//   // Counts p's elements into p.output. A data-derived range is at p.device_range when the caller gave keys;
//   // otherwise (p.device_range null) the backend finds it, as the forward call's own range.
//   static void histogram(const char* op, const HistogramArgs& args, HistogramParams& p, const at::Tensor& input);
//   // Writes the keys of p.input's finite min and max (encode_data_range) to p.keys, two int64 on input's device.
//   static void finite_range(const HistogramArgs& args, const RangeParams& p, const at::Tensor& input);
//   // Writes each element's bin (-1: dropped) to p.output (make_bin_index_params); the range as for histogram.
//   static void bin_indices(const HistogramArgs& args, HistogramParams& p, const at::Tensor& input);
//   // The bin-edges ops' members: check_edges and edge_bins (edges_bodies.h).

namespace bodies {

inline const unsigned long long* keys_pointer(const at::Tensor& keys) {
  return static_cast<const unsigned long long*>(keys.const_data_ptr());
}

// The histogram of a call whose arguments `args` has checked, into a new output of args.output_dtype.
template <typename Backend>
at::Tensor new_histogram(const char* op, const HistogramArgs& args, const at::Tensor& input, int64_t bins,
                         const std::optional<at::Tensor>& weight, bool batched) {
  Backend::check_device(op, input);
  at::Tensor output = allocate_output(op, args, input, bins, batched);
  at::Tensor in = input;  // make_params may replace these by contiguous copies, which must outlive the call
  std::optional<at::Tensor> w = weight;
  HistogramParams p = make_params(args, in, w, bins, output, batched, /*accumulate=*/false);
  Backend::histogram(op, args, p, in);
  return output;
}

template <typename Backend>
at::Tensor histogram(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                     const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                     std::optional<at::ScalarType> dtype) {
  const char* op = "torch_dsmhist.histogram";
  const HistogramArgs args =
      check_histogram_args(op, facts_of(input), bins, min, max, facts_of(weight), out_of_range, dtype);
  return new_histogram<Backend>(op, args, input, bins, weight, /*batched=*/false);
}

// histogram_add_ (accumulate) and histogram(out=) (replace): every check, the memory ones too, runs before `target`
// is touched, so a call that raises leaves it as it was.
template <typename Backend>
void histogram_into(const char* op, at::Tensor& target, const at::Tensor& input, std::optional<double> min,
                    std::optional<double> max, const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                    std::optional<at::ScalarType> dtype, bool accumulate) {
  const HistogramArgs args = check_histogram_into_args(op, facts_of(target), facts_of(input), min, max,
                                                       facts_of(weight), out_of_range, dtype, accumulate);
  check_into_memory(op, into_target_name(op), target, input, weight);
  Backend::check_device(op, input);
  if (args.counts_into_float) {  // int64 counts (args.output_dtype), then one exact add (or copy) into the target
    const at::Tensor counts = new_histogram<Backend>(op, args, input, target.size(0), weight, /*batched=*/false);
    if (accumulate) {
      target.add_(counts);
    } else {
      target.copy_(counts);
    }
    return;
  }
  add_into_contiguous(target, [&](at::Tensor& dense) {
    at::Tensor in = input;
    std::optional<at::Tensor> w = weight;
    HistogramParams p = make_params(args, in, w, dense.numel(), dense, /*batched=*/false, accumulate);
    Backend::histogram(op, args, p, in);
  });
}

template <typename Backend>
void histogram_add_(at::Tensor& hist, const at::Tensor& input, std::optional<double> min, std::optional<double> max,
                    const std::optional<at::Tensor>& weight, c10::string_view out_of_range) {
  histogram_into<Backend>("torch_dsmhist.histogram_add_", hist, input, min, max, weight, out_of_range, std::nullopt,
                          /*accumulate=*/true);
}

template <typename Backend>
void histogram_out(at::Tensor& out, const at::Tensor& input, std::optional<double> min, std::optional<double> max,
                   const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                   std::optional<at::ScalarType> dtype, bool accumulate) {
  histogram_into<Backend>("torch_dsmhist.histogram", out, input, min, max, weight, out_of_range, dtype, accumulate);
}

template <typename Backend>
at::Tensor batched_histogram(const at::Tensor& input, int64_t bins, std::optional<double> min,
                             std::optional<double> max, const std::optional<at::Tensor>& weight,
                             c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  const char* op = "torch_dsmhist.batched_histogram";
  const HistogramArgs args = check_histogram_args(op, facts_of(input), bins, min, max, facts_of(weight), out_of_range,
                                                  dtype, /*batched=*/true);
  return new_histogram<Backend>(op, args, input, bins, weight, /*batched=*/true);
}

template <typename Backend>
at::Tensor finite_range_keys(const at::Tensor& input) {
  const char* op = "torch_dsmhist._finite_range_keys";
  const HistogramArgs args = check_finite_range_args(op, facts_of(input));
  Backend::check_device(op, input);
  at::Tensor keys = at::empty({2}, input.options().dtype(at::kLong));
  at::Tensor in = input;
  const RangeParams p = make_range_params(args, in, keys);
  Backend::finite_range(args, p, in);
  return keys;
}

template <typename Backend>
at::Tensor histogram_with_range_keys(const at::Tensor& input, int64_t bins, const at::Tensor& range_keys,
                                     const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                                     std::optional<at::ScalarType> dtype, bool batched) {
  const char* op = "torch_dsmhist._histogram_with_range_keys";
  const HistogramArgs args = check_histogram_with_range_keys_args(op, facts_of(input), bins, facts_of(range_keys),
                                                                  facts_of(weight), out_of_range, dtype, batched);
  Backend::check_device(op, input);
  const at::Tensor keys = range_keys.contiguous();
  at::Tensor output = allocate_output(op, args, input, bins, batched);
  at::Tensor in = input;
  std::optional<at::Tensor> w = weight;
  HistogramParams p = make_params(args, in, w, bins, output, batched, /*accumulate=*/false);
  p.device_range = keys_pointer(keys);
  Backend::histogram(op, args, p, in);
  return output;
}

template <typename Backend>
at::Tensor bin_indices(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                       c10::string_view out_of_range, const std::optional<at::Tensor>& range_keys) {
  const char* op = "torch_dsmhist._bin_indices";
  const HistogramArgs args =
      check_bin_indices_args(op, facts_of(input), bins, min, max, out_of_range, facts_of(range_keys));
  Backend::check_device(op, input);
  at::Tensor indices = at::empty(input.sizes(), input.options().dtype(at::kLong));
  if (indices.numel() == 0) return indices;
  const at::Tensor keys = range_keys.has_value() && range_keys->defined() ? range_keys->contiguous() : at::Tensor();
  at::Tensor in = input;
  HistogramParams p = make_bin_index_params(args, in, indices, bins);
  if (keys.defined()) p.device_range = keys_pointer(keys);
  Backend::bin_indices(args, p, in);
  return indices;
}

}  // namespace bodies

// Registers every op's body for the dispatch key of the TORCH_LIBRARY_IMPL block `m` belongs to.
template <typename Backend>
void register_op_bodies(torch::Library& m) {
  m.impl("histogram", &bodies::histogram<Backend>);
  m.impl("histogram_add_", &bodies::histogram_add_<Backend>);
  m.impl("_histogram_out", &bodies::histogram_out<Backend>);
  m.impl("batched_histogram", &bodies::batched_histogram<Backend>);
  m.impl("_finite_range_keys", &bodies::finite_range_keys<Backend>);
  m.impl("_histogram_with_range_keys", &bodies::histogram_with_range_keys<Backend>);
  m.impl("_bin_indices", &bodies::bin_indices<Backend>);
  m.impl("histogram_edges", &edge_bodies::histogram_edges<Backend>);
  m.impl("histogramdd", &edge_bodies::histogramdd<Backend>);
  m.impl("_edge_bin_indices", &edge_bodies::edge_bin_indices<Backend>);
  m.impl("_row_edge_bin_indices", &edge_bodies::row_edge_bin_indices<Backend>);
}

}  // namespace dsmhist
