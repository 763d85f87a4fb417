#include "edges_args.h"

#include <c10/util/Exception.h>

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace dsmhist {

namespace {

std::string edges_name(bool nd, size_t d) { return nd ? "edges[" + std::to_string(d) + "]" : std::string("edges"); }

}  // namespace

EdgesArgs check_edges_args(const char* op, const TensorFacts& input, const EdgeFacts& edges,
                           const std::optional<TensorFacts>& weight, c10::string_view out_of_range,
                           std::optional<at::ScalarType> dtype, bool nd) {
  EdgesArgs args;
  args.op = op;
  c10::SymInt points = 1;
  size_t batch_rank = 0;  // [..., N, D] (histogramdd) or per-row edges: the leading dims
  const InputType input_type = input_type_of(input.dtype, "input", op);
  const bool floating_input = is_floating(input_type);
  if (nd) {
    const size_t rank = input.shape.size();
    TORCH_CHECK_VALUE(rank >= 2, op, ": input must have at least 2 dims ([N, D]: N points of D coordinates, or ",
                      "[..., N, D]: one histogram per leading index), got shape ", input.shape);
    TORCH_CHECK_VALUE(!edges.empty() && edges.size() <= static_cast<size_t>(kMaxEdgeDims), op,
                      ": edges must hold between 1 and ", kMaxEdgeDims, " tensors (one per dim), got ", edges.size());
    TORCH_CHECK_VALUE(input.shape[rank - 1] == static_cast<int64_t>(edges.size()), op, ": input has ",
                      input.shape[rank - 1], " coordinates per point (shape ", input.shape, ") but edges has ",
                      edges.size(), " tensors");
    batch_rank = rank - 2;
    for (size_t d = 0; d + 1 < rank; ++d) points *= input.shape[d];
  } else {
    TORCH_CHECK_VALUE(edges.size() == 1, op, ": expected one edges tensor");
    const c10::SymIntArrayRef edge_shape = edges[0].shape;
    if (edge_shape.size() > 1) {  // per-row edges: input [..., N] and edges [..., B + 1] with the same leading dims
      args.per_row = true;
      const size_t rank = edge_shape.size();
      TORCH_CHECK_VALUE(
          input.shape.size() == rank && input.shape.slice(0, rank - 1).equals(edge_shape.slice(0, rank - 1)), op,
          ": edges of shape ", edge_shape, " give each row of input its own edges, so input must ",
          "have shape [..., N] with the same leading dims ", edge_shape.slice(0, rank - 1), ", got ", input.shape);
      batch_rank = rank - 1;
    }
    for (const c10::SymInt& size : input.shape) points *= size;
  }
  // The leading dims, one histogram each, lead the output's shape.
  for (size_t d = 0; d < batch_rank; ++d) {
    args.output_shape.push_back(input.shape[d].guard_int(__FILE__, __LINE__));
    args.rows *= args.output_shape.back();
  }
  args.dims = static_cast<int64_t>(edges.size());
  args.edge_dtype = (floating_input && input.dtype != at::kDouble) ? at::kFloat : at::kDouble;

  args.total_bins = 1;
  for (size_t d = 0; d < edges.size(); ++d) {
    const TensorFacts& e = edges[d];
    const std::string name = edges_name(nd, d);
    TORCH_CHECK_VALUE(
        (e.shape.size() == 1 || args.per_row) && e.shape.back() >= 1, op, ": ", name,
        args.per_row ? " must hold at least one edge a row" : " must be a 1-D tensor of at least one edge",
        ", got shape ", e.shape);
    TORCH_CHECK_VALUE(at::isFloatingType(e.dtype), op, ": ", name, " must be floating, got ",
                      torch_dtype_name(e.dtype));
    TORCH_CHECK_VALUE(!floating_input || e.dtype == input.dtype, op, ": ", name, " must have input's dtype ",
                      torch_dtype_name(input.dtype), " (the edges are compared in it), got ",
                      torch_dtype_name(e.dtype));
    TORCH_CHECK_VALUE(e.device == input.device, op, ": ", name, " is on ", e.device, " but input is on ", input.device,
                      "; both must be on the same device");
    const int64_t bins = e.shape.back().guard_int(__FILE__, __LINE__) - 1;
    args.bin_shape.push_back(bins);
    args.output_shape.push_back(bins);
    TORCH_CHECK_VALUE(bins == 0 || args.total_bins <= std::numeric_limits<int32_t>::max() / bins, op,
                      ": the histogram has more than 2^31 - 1 bins (shape ", c10::IntArrayRef(args.bin_shape),
                      "...), which int32 flat bins cannot address");
    args.total_bins *= bins;
  }

  // The counting stage's rules (count dtype, weights, accumulator, int32 overflow) over N int32 flat bins.
  std::optional<TensorFacts> flat_weight;
  std::vector<c10::SymInt> flat_shape{points};
  if (weight.has_value()) {
    const c10::SymIntArrayRef point_shape =
        nd ? c10::SymIntArrayRef(input.shape).slice(0, input.shape.size() - 1) : c10::SymIntArrayRef(input.shape);
    TORCH_CHECK_VALUE(weight->shape.equals(point_shape), op, ": weight must have shape ",
                      nd ? "[..., N] (input's shape without its last dim: one weight per point)" : "input's shape",
                      ", input has shape ", input.shape, ", got ", weight->shape);
    flat_weight = TensorFacts{weight->dtype, flat_shape, weight->device};
  }
  const TensorFacts flat_bins{at::kInt, flat_shape, input.device};
  args.count = check_histogram_args(op, flat_bins, args.total_bins > 0 ? args.total_bins : 1, std::nullopt,
                                    std::nullopt, flat_weight, out_of_range, dtype);
  args.out_of_range = args.count.out_of_range;
  // The flat bins mark dropped points with -1, which a clamp would count in bin 0.
  args.count.out_of_range = OutOfRange::kIgnore;
  return args;
}

void check_edges_sorted(const char* op, const std::vector<at::Tensor>& edges, bool nd) {
  // Read in place (strided, any floating dtype): a check that allocated would fail on an expanded edges tensor of
  // 2^31 elements before the op could name what it cannot allocate.
  for (size_t d = 0; d < edges.size(); ++d) {
    // Per-row edges ([..., B + 1]) row by row; their leading dims are flattened (a copy only where they do not merge).
    const at::Tensor rows = edges[d].dim() > 1 ? edges[d].reshape({-1, edges[d].size(-1)}) : edges[d].unsqueeze(0);
    const bool per_row = edges[d].dim() > 1;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, rows.scalar_type(), "check_edges_sorted", [&] {
      const scalar_t* data = rows.const_data_ptr<scalar_t>();
      const int64_t n = rows.size(1), stride = rows.stride(1);
      for (int64_t r = 0; r < rows.size(0); ++r) {
        const scalar_t* row = data + r * rows.stride(0);
        const std::string where = per_row ? "row " + std::to_string(r) + ", " : std::string();
        for (int64_t i = 0; i < n; ++i) {
          const double value = static_cast<double>(row[i * stride]);
          TORCH_CHECK_VALUE(!std::isnan(value), op, ": ", edges_name(nd, d), " holds NaN (at ", where, "index ", i,
                            ")");
          TORCH_CHECK_VALUE(i == 0 || static_cast<double>(row[(i - 1) * stride]) <= value, op, ": ", edges_name(nd, d),
                            " must be sorted non-decreasing (", where, "index ", i, " is below index ", i - 1, ")");
        }
      }
    });
  }
}

PointsView points_of(const at::Tensor& input) {
  PointsView view;
  if (input.dim() <= 1) {
    view.points = input.reshape({-1, 1});
    return view;
  }
  // The dims by decreasing stride: a tensor whose elements fill one dense block (a transpose, a permute) is then
  // contiguous and flattens as a view. The order of the points does not change a histogram.
  std::vector<int64_t> order(input.dim());
  for (int64_t d = 0; d < input.dim(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return input.stride(a) > input.stride(b); });
  const at::Tensor permuted = input.permute(order);
  if (permuted.is_contiguous()) {
    view.points = permuted.view({-1, 1});
    view.order = order;
  } else {
    view.points = input.reshape({-1, 1});  // not one dense block: a copy (docs/semantics.md states it)
  }
  return view;
}

at::Tensor in_points_order(const PointsView& view, const at::Tensor& t) {
  if (view.order.empty()) return t.reshape({-1});
  return t.permute(view.order).reshape({-1});
}

at::Tensor from_points_order(const PointsView& view, const at::Tensor& flat, c10::IntArrayRef shape) {
  if (view.order.empty()) return flat.reshape(shape);
  std::vector<int64_t> permuted_shape, inverse(view.order.size());
  for (size_t i = 0; i < view.order.size(); ++i) {
    permuted_shape.push_back(shape[view.order[i]]);
    inverse[view.order[i]] = static_cast<int64_t>(i);
  }
  return flat.view(permuted_shape).permute(inverse);
}

EdgeBinParams make_edge_bin_params(const EdgesArgs& args, const at::Tensor& input2d,
                                   const std::vector<at::Tensor>& edges, at::Tensor* edge_buffer) {
  int64_t total_edges = 0;
  for (const at::Tensor& e : edges) total_edges += e.numel();
  *edge_buffer = allocate_named(args.op, "the edges buffer", {total_edges}, input2d.options().dtype(args.edge_dtype));
  int64_t offset = 0;
  for (const at::Tensor& e : edges) {
    edge_buffer->narrow(0, offset, e.numel()).copy_(e);
    offset += e.numel();
  }
  EdgeBinParams p;
  p.input = input2d.const_data_ptr();
  p.input_type = input_type_of(input2d.scalar_type(), "input");
  p.point_stride = input2d.stride(0);
  p.dim_stride = input2d.stride(1);
  p.dims = static_cast<int32_t>(args.dims);
  p.out_of_range = args.out_of_range;
  p.edges = edge_buffer->const_data_ptr();
  p.double_edges = args.edge_dtype == at::kDouble;
  int64_t stride = 1;
  for (int64_t d = args.dims - 1; d >= 0; --d) {
    p.flat_stride[d] = stride;
    stride *= args.bin_shape[d];
  }
  for (int64_t d = 0; d < args.dims; ++d) p.edge_offset[d + 1] = p.edge_offset[d] + edges[d].numel();
  return p;
}

}  // namespace dsmhist
