// The module `torch_dsmhist._C`. Loading it runs the library's registrations (registration.cpp and the backends); it
// also holds the eager entry points, which call an op through the dispatcher's typed handle. From Python,
// torch.ops.dsmhist.<op>.default converts every argument to an IValue against the schema and the result back: about
// 1.3 us of a small call's host time (perf log 2026-11-small-calls.md, "The eager entry"). A typed call skips those
// conversions and nothing else: every dispatch key the op has (autograd, the backends, Python modes, the profiler)
// still sees the call. The Python package takes them only where torch.ops would add nothing: plain tensors, no
// torch-function mode, not while torch.compile traces (_rules.eager_entry_applies).
#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>

#include "op_handles.h"

namespace dsmhist {
namespace {

at::Tensor histogram(const at::Tensor& input, int64_t bins, std::optional<double> min, std::optional<double> max,
                     const std::optional<at::Tensor>& weight, const std::string& out_of_range,
                     std::optional<at::ScalarType> dtype) {
  static const auto op = find_op<HistogramSignature>("dsmhist::histogram");
  return op.call(input, bins, min, max, weight, out_of_range, dtype);
}

void histogram_add_(at::Tensor& hist, const at::Tensor& input, std::optional<double> min, std::optional<double> max,
                    const std::optional<at::Tensor>& weight, const std::string& out_of_range) {
  static const auto op = find_op<HistogramAddSignature>("dsmhist::histogram_add_");
  op.call(hist, input, min, max, weight, out_of_range);
}

Tensors3 moe_align_block_size(const at::Tensor& topk_ids, int64_t block_size, int64_t num_experts) {
  static const auto op = find_op<MoeAlignSignature>("dsmhist::moe_align_block_size");
  return op.call(topk_ids, block_size, num_experts, std::nullopt, false);
}

Tensors3 moe_routing(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_size) {
  static const auto op = find_op<MoeRoutingSignature>("dsmhist::moe_routing");
  return op.call(topk_ids, num_experts, block_size);
}

}  // namespace
}  // namespace dsmhist

PYBIND11_MODULE(_C, m) {
  m.def("histogram", &dsmhist::histogram, "dsmhist::histogram, every argument given");
  m.def("histogram_add_", &dsmhist::histogram_add_, "dsmhist::histogram_add_, every argument given");
  m.def("moe_align_block_size", &dsmhist::moe_align_block_size,
        "dsmhist::moe_align_block_size without expert_map, pad_sorted_ids=False");
  m.def("moe_routing", &dsmhist::moe_routing, "dsmhist::moe_routing");
}
