// Argument checking and parameter building for the bin-edges ops (dsmhist::histogram_edges, dsmhist::histogramdd,
// dsmhist::_edge_bin_indices). The count dtype, the weights and the accumulator follow histogram()'s rules: the
// checks end in check_histogram_args, over the int32 flat bins that the counting stage reads.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

#include "common/edge_binning.h"
#include "histogram_args.h"

namespace dsmhist {

// The validated meaning of an edges call.
struct EdgesArgs {
  const char* op = "";                            // the op's name, for messages
  HistogramArgs count;                            // the counting stage: int32 flat bins in index mode, never clamped
  OutOfRange out_of_range = OutOfRange::kIgnore;  // the binning stage's
  int64_t dims = 0;                               // D
  int64_t total_bins = 0;                         // product of every dim's bins (may be 0)
  // histogramdd of [..., N, D], or histogram_edges with per-row edges (edges [..., B + 1], input [..., N]): the
  // product of the leading dims, one histogram each (1 without them).
  bool per_row = false;
  int64_t rows = 1;
  std::vector<int64_t> bin_shape;          // every dim's bins
  std::vector<int64_t> output_shape;       // the leading dims, then bin_shape
  at::ScalarType edge_dtype = at::kFloat;  // the precision of the comparisons (edge_t of the input type)
};

// What the checks know of edges: one TensorFacts per edge tensor.
using EdgeFacts = std::vector<TensorFacts>;

// Checks an N-D call: input [..., N, D] with D == edges.size() in [1, kMaxEdgeDims]; each edges[d] 1-D with at least
// one edge, floating, of input's dtype for floating input, on input's device; weight [..., N]; the product of the bins
// below 2^31 (int32 flat bins). `nd` says which op's shapes the
// messages describe: histogramdd's (true) or histogram_edges's (false: input any shape, flattened, one edge tensor).
EdgesArgs check_edges_args(const char* op, const TensorFacts& input, const EdgeFacts& edges,
                           const std::optional<TensorFacts>& weight, c10::string_view out_of_range,
                           std::optional<at::ScalarType> dtype, bool nd);

// Edges sorted non-decreasing, none NaN: checked on the CPU only (a check on CUDA would synchronise; unsorted edges
// there give unspecified bins, never a write outside the output).
void check_edges_sorted(const char* op, const std::vector<at::Tensor>& edges, bool nd);

// histogram_edges's input (any shape) as [N, 1] points: a view where its elements fill one dense block in some
// order of its dims (`order`, empty for the logical order), else a copy. A weight or a gradient of input's shape
// goes to and from that order with the two functions below.
struct PointsView {
  at::Tensor points;
  std::vector<int64_t> order;
};
PointsView points_of(const at::Tensor& input);
// `t` (input's shape) flattened in the points' order: a view where t has input's layout, else a copy.
at::Tensor in_points_order(const PointsView& view, const at::Tensor& t);
// `flat` (one value per point, in the points' order) as a tensor of `shape` (input's), in its logical order.
at::Tensor from_points_order(const PointsView& view, const at::Tensor& flat, c10::IntArrayRef shape);

// Every dim's edges as one contiguous tensor of args.edge_dtype on their device, and the params that point at it
// (input, strides, offsets, flat strides; first_point, points and out are the caller's, per chunk).
EdgeBinParams make_edge_bin_params(const EdgesArgs& args, const at::Tensor& input2d,
                                   const std::vector<at::Tensor>& edges, at::Tensor* edge_buffer);

}  // namespace dsmhist
