// The bodies of the bin-edges ops, once for every device (as op_bodies.h): check -> output -> the backend's one pass
// where it has one for the call (Backend::edge_histogram: CUDA, docs/tiers/edges.md), else two stages: bin the points
// into int32 flat bins, a bounded chunk at a time (Backend::edge_bins) -> count each chunk with the index-mode
// histogram (Backend::histogram, adding into the output after the first chunk), so every tier counts N-D histograms
// unchanged. Memory beyond the output: the edges, one chunk's indices in two stages (Backend::kEdgeChunkPoints
// int32), and a copy of an input whose elements are not one dense block, and of a weight laid out unlike the input
// (points_of).
//
// A backend adds to op_bodies.h's members:
//   // Points the two stages bin per chunk (common/edge_binning.h).
//   static constexpr int64_t kEdgeChunkPoints;
//   // Sorted-edges check where it needs no host sync (the CPU); nothing on CUDA.
//   static void check_edges(const char* op, const std::vector<at::Tensor>& edges, bool nd);
//   // Bins and counts the whole call in one pass into counts.output (zeroing it first) and returns true, or returns
//   // false, touching nothing, where the backend has no such path for the call (then the two stages run).
//   static bool edge_histogram(const char* op, const EdgeBinParams& p, const EdgeCountParams& counts,
//                              const at::Tensor& input);
//   // Writes the flat bin of points [p.first_point, + p.points) to p.out (kDroppedPoint where dropped).
//   static void edge_bins(const EdgeBinParams& p, const at::Tensor& input);
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "call_params.h"
#include "edges_args.h"

namespace dsmhist {

namespace edge_bodies {

inline EdgeFacts facts_of_edges(const std::vector<at::Tensor>& edges) {
  EdgeFacts facts;
  for (const at::Tensor& e : edges) facts.push_back(facts_of(e));
  return facts;
}

// Where the fused path adds: the new output (contiguous) and the weights in points order.
inline EdgeCountParams make_edge_count_params(const EdgesArgs& args, at::Tensor& output,
                                              const std::optional<at::Tensor>& weight1d) {
  EdgeCountParams c;
  c.output = output.mutable_data_ptr();
  c.output_type = args.count.output_type;
  c.bins = args.total_bins;
  c.acc = args.count.acc;
  if (weight1d.has_value()) {
    c.weight = weight1d->const_data_ptr();
    c.weight_type = args.count.weight_type;
    c.weight_stride = weight1d->stride(0);
  }
  return c;
}

// The N-D histogram of input2d ([N, D]) with weight1d ([N]) after the op's checks (`args`).
template <typename Backend>
at::Tensor count_points(const char* op, const EdgesArgs& args, const at::Tensor& input2d,
                        const std::vector<at::Tensor>& edges, const std::optional<at::Tensor>& weight1d) {
  at::Tensor output =
      allocate_named(op, "the output", args.output_shape, input2d.options().dtype(args.count.output_dtype));
  if (args.total_bins == 0) return output;
  at::Tensor edge_buffer;
  EdgeBinParams bin_params = make_edge_bin_params(args, input2d, edges, &edge_buffer);
  const int64_t points = input2d.size(0);
  bin_params.first_point = 0;
  bin_params.points = points;
  if (Backend::edge_histogram(op, bin_params, make_edge_count_params(args, output, weight1d), input2d)) return output;
  const int64_t chunk = std::max<int64_t>(1, std::min(points, Backend::kEdgeChunkPoints));
  at::Tensor flat_bins = allocate_named(op, "the bin indices of a chunk", {chunk}, input2d.options().dtype(at::kInt));
  at::Tensor flat_output = output.view({-1});
  int64_t start = 0;
  do {  // once for an empty input, so the output is zeroed by the counting stage as for any other call
    const int64_t length = std::min(chunk, points - start);
    bin_params.first_point = start;
    bin_params.points = length;
    bin_params.out = flat_bins.mutable_data_ptr<int32_t>();
    if (length > 0) Backend::edge_bins(bin_params, input2d);
    at::Tensor chunk_bins = flat_bins.narrow(0, 0, length);
    std::optional<at::Tensor> chunk_weight;
    if (weight1d.has_value()) chunk_weight = weight1d->narrow(0, start, length);
    HistogramParams p = make_params(args.count, chunk_bins, chunk_weight, args.total_bins, flat_output,
                                    /*batched=*/false, /*accumulate=*/start > 0);
    Backend::histogram(op, args.count, p, chunk_bins);
    start += length;
  } while (start < points);
  return output;
}

// Runs the edge-binning stage over points2d ([P, D]) into out: P flat bins, or with each_dim_alone D rows of P bins
// (each coordinate's own bin, kDroppedPoint where dropped).
template <typename Backend>
void bin_points_into(const EdgesArgs& args, const at::Tensor& points2d, const std::vector<at::Tensor>& edges,
                     int32_t* out, bool each_dim_alone) {
  at::Tensor edge_buffer;
  EdgeBinParams p = make_edge_bin_params(args, points2d, edges, &edge_buffer);
  p.first_point = 0;
  p.points = points2d.size(0);
  p.out = out;
  p.each_dim_alone = each_dim_alone;
  p.out_dim_stride = p.points;
  Backend::edge_bins(p, points2d);
}

// One histogram per row from every element's int32 bin: `bin_into(indices)` fills [rows, row_length] (kDroppedPoint
// where dropped; 4 bytes an element), then one batched count of it into [rows, total_bins] (the index-mode batched
// histogram: one launch on CUDA). Per-row edges, and the batched histogramdd where the backend's one pass declines
// (into `allocated` when given: the output that call allocated).
template <typename Backend, typename BinInto>
at::Tensor count_binned_rows(const char* op, const EdgesArgs& args, const at::Tensor& input, int64_t row_length,
                             const std::optional<at::Tensor>& weight, BinInto&& bin_into,
                             std::optional<at::Tensor> allocated = std::nullopt) {
  at::Tensor output = allocated.has_value() ? *allocated
                                            : allocate_named(op, "the output", args.output_shape,
                                                             input.options().dtype(args.count.output_dtype));
  if (args.total_bins == 0 || args.rows == 0) return output;
  at::Tensor indices = allocate_named(op, "the bin indices", {args.rows, row_length}, input.options().dtype(at::kInt));
  bin_into(indices);
  std::optional<at::Tensor> weight2d;
  if (weight.has_value() && weight->defined()) weight2d = weight->reshape({args.rows, row_length});
  at::Tensor output2d = output.view({args.rows, args.total_bins});
  HistogramParams p = make_params(args.count, indices, weight2d, args.total_bins, output2d, /*batched=*/true,
                                  /*accumulate=*/false);
  Backend::histogram(op, args.count, p, indices);
  return output;
}

// Per-row edges (input [..., N], edges [..., B + 1]): element i of row r binned in edges row r alone, into
// indices[r][i] (int32 [rows, N], contiguous). Rows go through the edge-binning stage kMaxEdgeDims at a time, each row
// a dim of the points [N, group] (each_dim_alone), so a GBDT sketch of 32 features bins in one launch.
template <typename Backend>
void bin_rows(const EdgesArgs& args, const at::Tensor& input, const at::Tensor& edges, at::Tensor& indices) {
  const int64_t rows = args.rows, n = input.size(-1);
  if (args.total_bins == 0) {
    indices.fill_(kDroppedPoint);
    return;
  }
  if (rows == 0 || n == 0) return;
  const at::Tensor input_rows = input.reshape({rows, n}), edge_rows = edges.reshape({rows, -1});
  for (int64_t first = 0; first < rows; first += kMaxEdgeDims) {
    const int64_t group = std::min<int64_t>(kMaxEdgeDims, rows - first);
    EdgesArgs group_args = args;
    group_args.dims = group;
    group_args.bin_shape.assign(static_cast<size_t>(group), 1);  // flat strides are unused when dims bin alone
    std::vector<at::Tensor> group_edges;
    for (int64_t r = first; r < first + group; ++r) group_edges.push_back(edge_rows[r]);
    bin_points_into<Backend>(group_args, input_rows.narrow(0, first, group).t(), group_edges,
                             indices.mutable_data_ptr<int32_t>() + first * n, /*each_dim_alone=*/true);
  }
}

template <typename Backend>
at::Tensor histogram_edges(const at::Tensor& input, const at::Tensor& edges, const std::optional<at::Tensor>& weight,
                           c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  const char* op = "torch_dsmhist.histogram_edges";
  const std::vector<at::Tensor> edge_list{edges};
  const EdgesArgs args =
      check_edges_args(op, facts_of(input), facts_of_edges(edge_list), facts_of(weight), out_of_range, dtype, false);
  Backend::check_device(op, input);
  Backend::check_edges(op, edge_list, false);
  if (args.per_row) {
    return count_binned_rows<Backend>(op, args, input, input.size(-1), weight,
                                      [&](at::Tensor& indices) { bin_rows<Backend>(args, input, edges, indices); });
  }
  const PointsView view = points_of(input);
  std::optional<at::Tensor> weight1d;
  if (weight.has_value() && weight->defined()) weight1d = in_points_order(view, *weight);
  return count_points<Backend>(op, args, view.points, edge_list, weight1d);
}

// Each point's flat bin (kDroppedPoint: dropped) of points2d ([P, D]) into `indices` (int32, P elements).
template <typename Backend>
void bin_all_points(const EdgesArgs& args, const at::Tensor& points2d, const std::vector<at::Tensor>& edges,
                    at::Tensor& indices) {
  if (args.total_bins == 0) {
    indices.fill_(kDroppedPoint);
    return;
  }
  if (points2d.size(0) == 0) return;
  bin_points_into<Backend>(args, points2d, edges, indices.mutable_data_ptr<int32_t>(), /*each_dim_alone=*/false);
}

// Batched histogramdd (input [..., N, D], weight [..., N]) in the backend's one pass into `output` ([rows, bins] in
// row-major order), or false, with nothing written, where the backend has none for the call.
template <typename Backend>
bool count_rows_in_one_pass(const char* op, const EdgesArgs& args, const at::Tensor& input,
                            const std::vector<at::Tensor>& edges, const std::optional<at::Tensor>& weight,
                            at::Tensor& output) {
  const at::Tensor rows3d = input.reshape({args.rows, input.size(-2), args.dims});  // a view where strides allow
  at::Tensor edge_buffer;
  EdgeBinParams p = make_edge_bin_params(args, rows3d[0], edges, &edge_buffer);
  p.first_point = 0;
  p.points = rows3d.size(1);
  p.rows = args.rows;
  p.row_stride = rows3d.stride(0);
  std::optional<at::Tensor> weight2d;
  if (weight.has_value()) weight2d = weight->reshape({args.rows, rows3d.size(1)});
  std::optional<at::Tensor> weight1d;
  if (weight2d.has_value()) weight1d = (*weight2d)[0];
  EdgeCountParams c = make_edge_count_params(args, output, weight1d);  // row 0's weights: the first row's pointer
  if (weight2d.has_value()) c.weight_row_stride = weight2d->stride(0);
  return Backend::edge_histogram(op, p, c, rows3d);
}

template <typename Backend>
at::Tensor histogramdd(const at::Tensor& input, at::TensorList edges, const std::optional<at::Tensor>& weight,
                       c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  const char* op = "torch_dsmhist.histogramdd";
  const std::vector<at::Tensor> edge_list(edges.begin(), edges.end());
  const EdgesArgs args =
      check_edges_args(op, facts_of(input), facts_of_edges(edge_list), facts_of(weight), out_of_range, dtype, true);
  Backend::check_device(op, input);
  Backend::check_edges(op, edge_list, true);
  std::optional<at::Tensor> weight_tensor;
  if (weight.has_value() && weight->defined()) weight_tensor = *weight;
  if (input.dim() > 2) {  // [..., N, D]: the backend's one pass over the rows, else every point's flat bin, then
                          // one batched count
    at::Tensor output =
        allocate_named(op, "the output", args.output_shape, input.options().dtype(args.count.output_dtype));
    if (args.total_bins > 0 && args.rows > 0 && input.size(-2) > 0 &&
        count_rows_in_one_pass<Backend>(op, args, input, edge_list, weight_tensor, output)) {
      return output;
    }
    return count_binned_rows<Backend>(
        op, args, input, input.size(-2), weight_tensor,
        [&](at::Tensor& indices) { bin_all_points<Backend>(args, input.reshape({-1, args.dims}), edge_list, indices); },
        output);
  }
  return count_points<Backend>(op, args, input, edge_list, weight_tensor);
}

// Each point's flat bin (-1: dropped) as int32 of input's shape without its last dim: the backward of the weighted
// edges ops. input is [..., N, D].
template <typename Backend>
at::Tensor edge_bin_indices(const at::Tensor& input, at::TensorList edges, c10::string_view out_of_range) {
  const char* op = "torch_dsmhist._edge_bin_indices";
  const std::vector<at::Tensor> edge_list(edges.begin(), edges.end());
  const EdgesArgs args =
      check_edges_args(op, facts_of(input), facts_of_edges(edge_list), std::nullopt, out_of_range, std::nullopt, true);
  Backend::check_device(op, input);
  at::Tensor indices =
      allocate_named(op, "the bin indices", input.sizes().slice(0, input.dim() - 1), input.options().dtype(at::kInt));
  bin_all_points<Backend>(args, input.reshape({-1, args.dims}), edge_list, indices);  // [N, D]: a view of itself
  return indices;
}

// Each element's bin in its own row's edges (-1: dropped) as int32 of input's shape: the backward of histogram_edges
// with per-row edges. input [..., N], edges [..., B + 1].
template <typename Backend>
at::Tensor row_edge_bin_indices(const at::Tensor& input, const at::Tensor& edges, c10::string_view out_of_range) {
  const char* op = "torch_dsmhist._row_edge_bin_indices";
  const EdgesArgs args =
      check_edges_args(op, facts_of(input), facts_of_edges({edges}), std::nullopt, out_of_range, std::nullopt, false);
  TORCH_CHECK_VALUE(args.per_row, op, ": edges must have shape [..., B + 1] (one edges row per input row), got ",
                    edges.sizes());
  Backend::check_device(op, input);
  at::Tensor indices = allocate_named(op, "the bin indices", input.sizes(), input.options().dtype(at::kInt));
  if (args.rows == 0) return indices;
  at::Tensor rows_view = indices.view({args.rows, input.size(-1)});
  bin_rows<Backend>(args, input, edges, rows_view);
  return indices;
}

}  // namespace edge_bodies

}  // namespace dsmhist
