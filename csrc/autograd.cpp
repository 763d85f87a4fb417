// The Autograd kernels of every op, in C++ so that a call with nothing to differentiate costs one branch (a Python
// autograd kernel cost ~7 us per call on the CPU, more than the op itself on a small GPU call).
//
// Weights are differentiable: a histogram is linear in them, so grad_weight[i] = grad_out[bin(input[i])], 0 for a
// dropped value. Backward bins the saved input with dsmhist::_bin_indices, the forward's own Binner and range (the
// data's, found again from the same input, or the given range keys), so the two cannot disagree about a bin. The
// input is never differentiable: a count is piecewise constant in the values, so it gets no gradient.
//
// Forward mode (torch.autograd.forward_ad, torch.func.jvp / jacfwd) follows from the same linearity: the output's
// tangent is the same call with the weights' tangent in their place. torch.func's reverse transforms (grad, vjp,
// jacrev) refuse a C++ torch::autograd::Function, so they raise here; torch.autograd.grad and backward() work.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/accumulate.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "edges_args.h"
#include "histogram_args.h"
#include "op_handles.h"

namespace dsmhist {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool weight_needs_grad(const std::optional<at::Tensor>& weight) {
  return at::GradMode::is_enabled() && weight.has_value() && weight->defined() && weight->requires_grad();
}

// The weights' forward-mode tangent (forward AD's level 0, the one torch's own kernels use), or an undefined tensor
// where there is none or it is known to be zero.
at::Tensor weight_tangent(const std::optional<at::Tensor>& weight) {
  if (!weight.has_value() || !weight->defined()) return {};
  const at::Tensor& tangent = weight->_fw_grad(/*level=*/0);
  return tangent.defined() && !tangent._is_zerotensor() ? tangent : at::Tensor();
}

// A weighted op's Autograd kernel: `differentiable()` (its torch::autograd::Function) where the weights need a
// gradient, else call(weight) below autograd; then the output's forward-mode tangent, call(the weights' tangent),
// dispatched from the top again so that a tangent of a tangent gets its own. Without the tangent the output would
// carry none: a silent zero for jvp.
template <typename Differentiable, typename Call>
at::Tensor weighted_call(const std::optional<at::Tensor>& weight, Differentiable&& differentiable, Call&& call) {
  at::Tensor output;
  if (weight_needs_grad(weight)) {
    output = differentiable();
  } else {
    const at::AutoDispatchBelowADInplaceOrView below;
    output = call(weight);
  }
  const at::Tensor tangent = weight_tangent(weight);
  if (tangent.defined()) output._set_fw_grad(call(tangent), /*level=*/0, /*is_inplace_op=*/false);
  return output;
}

// grad_out at each element's bin (bins along grad's last dim), 0 where the element was dropped (-1). Works in place
// on `indices` (int64, or int32 for a 1-D grad), so backward holds, beyond the gradient it returns, the bins and a
// mask: 9 bytes per element with int64 bins, 5 with int32 (4 more for 16-bit weights, gathered in float32 first).
at::Tensor gather_weight_grad(at::Tensor indices, const at::Tensor& grad, at::ScalarType weight_dtype) {
  const at::Tensor dropped = indices.lt(0);
  indices.clamp_min_(0);
  at::Tensor picked =
      grad.dim() == 1 ? grad.index_select(0, indices.reshape({-1})).view(indices.sizes()) : grad.gather(-1, indices);
  indices.reset();
  picked.masked_fill_(dropped, 0);
  return picked.to(weight_dtype);
}

// histogram_edges (one edges tensor: 1-D, or per-row [..., B + 1]) and histogramdd (input [..., N, D]) differentiated
// in weight: the backward bins the saved points again with dsmhist::_edge_bin_indices (or _row_edge_bin_indices),
// the forward's own rule and edges.
struct WeightedEdgesHistogram : public torch::autograd::Function<WeightedEdgesHistogram> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, std::vector<at::Tensor> edges,
                            const at::Tensor& weight, const std::string& out_of_range,
                            std::optional<at::ScalarType> dtype, bool nd) {
    at::Tensor output;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      if (nd) {
        static const auto op = find_op<EdgesSignature>("dsmhist::histogramdd");
        output = op.call(input, edges, weight, out_of_range, dtype);
      } else {
        static const auto op = find_op<HistogramEdgesSignature>("dsmhist::histogram_edges");
        output = op.call(input, edges[0], weight, out_of_range, dtype);
      }
    }
    // The edges are saved as variables, so changing one in place after the forward makes backward raise (as for
    // the input) instead of binning over the new edges.
    variable_list saved{input};
    saved.insert(saved.end(), edges.begin(), edges.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["out_of_range"] = out_of_range;
    ctx->saved_data["nd"] = nd;
    ctx->saved_data["weight_dtype"] = weight.scalar_type();
    ctx->saved_data["weight_shape"] = weight.sizes().vec();
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bin_indices = find_op<EdgeBinIndicesSignature>("dsmhist::_edge_bin_indices");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor input = saved[0];
    const std::vector<at::Tensor> edges(saved.begin() + 1, saved.end());
    const std::vector<int64_t> weight_shape = ctx->saved_data["weight_shape"].toIntVector();
    const at::ScalarType weight_dtype = ctx->saved_data["weight_dtype"].toScalarType();
    at::Tensor grad_weight;
    if (grads[0].numel() == 0) {  // a histogram of no bins: no point lands anywhere
      grad_weight = at::zeros(weight_shape, grads[0].options().dtype(weight_dtype));
    } else {
      // The forward's points (histogram_edges: the input flattened in its memory order, without a copy where
      // it can be), so the int32 bins are the only per-element tensor besides the mask and the gradient.
      const bool nd = ctx->saved_data["nd"].toBool();
      const std::string out_of_range = ctx->saved_data["out_of_range"].toStringRef();
      // One histogram per row: histogramdd of [..., N, D], or histogram_edges with edges [..., B + 1]. Row r's
      // elements gather from row r of the [rows, bins] gradient.
      const bool batched_nd = nd && input.dim() > 2, per_row = !nd && edges[0].dim() > 1;
      if (batched_nd || per_row) {
        static const auto row_bin_indices = find_op<RowEdgeBinIndicesSignature>("dsmhist::_row_edge_bin_indices");
        at::Tensor indices = per_row ? row_bin_indices.call(input, edges[0], out_of_range)
                                     : bin_indices.call(input, edges, out_of_range);
        const int64_t rows = c10::multiply_integers(input.sizes().slice(0, input.dim() - (per_row ? 1 : 2)));
        at::Tensor picked =
            gather_weight_grad(indices.reshape({rows, -1}).to(at::kLong), grads[0].reshape({rows, -1}), weight_dtype);
        grad_weight = picked.reshape(weight_shape);
      } else {
        const PointsView view = nd ? PointsView{input, {}} : points_of(input);
        at::Tensor indices = bin_indices.call(view.points, edges, out_of_range);
        at::Tensor flat = gather_weight_grad(std::move(indices), grads[0].reshape({-1}), weight_dtype);
        grad_weight = nd ? flat.reshape(weight_shape) : from_points_order(view, flat, weight_shape);
      }
    }
    return {at::Tensor(), at::Tensor(), grad_weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// What the backward of a weighted equal-width call keeps beside its saved tensors: the bins, the out-of-range rule
// and the weights' dtype.
void save_binning(AutogradContext* ctx, int64_t bins, const std::string& out_of_range, const at::Tensor& weight) {
  ctx->saved_data["bins"] = bins;
  ctx->saved_data["out_of_range"] = out_of_range;
  ctx->saved_data["weight_dtype"] = weight.scalar_type();
}

// grad_weight of a weighted equal-width call: the saved input binned again by dsmhist::_bin_indices with the
// forward's range (min / max, or the range keys), grad_out gathered at each element's bin.
at::Tensor equal_width_weight_grad(AutogradContext* ctx, const at::Tensor& input, std::optional<double> min,
                                   std::optional<double> max, const std::optional<at::Tensor>& range_keys,
                                   const at::Tensor& grad) {
  static const auto bin_indices = find_op<BinIndicesSignature>("dsmhist::_bin_indices");
  const std::string out_of_range = ctx->saved_data["out_of_range"].toStringRef();
  at::Tensor indices = bin_indices.call(input, ctx->saved_data["bins"].toInt(), min, max, out_of_range, range_keys);
  return gather_weight_grad(std::move(indices), grad, ctx->saved_data["weight_dtype"].toScalarType());
}

// histogram (Batched = false) and batched_histogram (true): the same arguments, the bins along the output's last dim.
template <bool Batched>
struct WeightedHistogram : public torch::autograd::Function<WeightedHistogram<Batched>> {
  static const char* name() { return Batched ? "dsmhist::batched_histogram" : "dsmhist::histogram"; }

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t bins, std::optional<double> min,
                            std::optional<double> max, const at::Tensor& weight, const std::string& out_of_range,
                            std::optional<at::ScalarType> dtype) {
    static const auto op = find_op<HistogramSignature>(name());
    at::Tensor output;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      output = op.call(input, bins, min, max, weight, out_of_range, dtype);
    }
    ctx->save_for_backward({input});
    save_binning(ctx, bins, out_of_range, weight);
    ctx->saved_data["min"] = min;
    ctx->saved_data["max"] = max;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_weight =
        equal_width_weight_grad(ctx, ctx->get_saved_variables()[0], ctx->saved_data["min"].toOptional<double>(),
                                ctx->saved_data["max"].toOptional<double>(), std::nullopt, grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), grad_weight, at::Tensor(), at::Tensor()};
  }
};

struct WeightedHistogramWithRangeKeys : public torch::autograd::Function<WeightedHistogramWithRangeKeys> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t bins, const at::Tensor& range_keys,
                            const at::Tensor& weight, const std::string& out_of_range,
                            std::optional<at::ScalarType> dtype, bool batched) {
    static const auto op = find_op<RangeKeysSignature>("dsmhist::_histogram_with_range_keys");
    at::Tensor output;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      output = op.call(input, bins, range_keys, weight, out_of_range, dtype, batched);
    }
    ctx->save_for_backward({input, range_keys});
    save_binning(ctx, bins, out_of_range, weight);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor grad_weight = equal_width_weight_grad(ctx, saved[0], std::nullopt, std::nullopt, saved[1], grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor(), grad_weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

template <bool Batched>
at::Tensor histogram_autograd(const at::Tensor& input, int64_t bins, std::optional<double> min,
                              std::optional<double> max, const std::optional<at::Tensor>& weight,
                              c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  static const auto op = find_op<HistogramSignature>(WeightedHistogram<Batched>::name());
  return weighted_call(
      weight,
      [&] {
        return WeightedHistogram<Batched>::apply(input, bins, min, max, *weight, std::string(out_of_range), dtype);
      },
      [&](const std::optional<at::Tensor>& w) { return op.call(input, bins, min, max, w, out_of_range, dtype); });
}

at::Tensor histogram_with_range_keys_autograd(const at::Tensor& input, int64_t bins, const at::Tensor& range_keys,
                                              const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                                              std::optional<at::ScalarType> dtype, bool batched) {
  static const auto op = find_op<RangeKeysSignature>("dsmhist::_histogram_with_range_keys");
  return weighted_call(
      weight,
      [&] {
        return WeightedHistogramWithRangeKeys::apply(input, bins, range_keys, *weight, std::string(out_of_range), dtype,
                                                     batched);
      },
      [&](const std::optional<at::Tensor>& w) {
        return op.call(input, bins, range_keys, w, out_of_range, dtype, batched);
      });
}

at::Tensor histogram_edges_autograd(const at::Tensor& input, const at::Tensor& edges,
                                    const std::optional<at::Tensor>& weight, c10::string_view out_of_range,
                                    std::optional<at::ScalarType> dtype) {
  static const auto op = find_op<HistogramEdgesSignature>("dsmhist::histogram_edges");
  return weighted_call(
      weight,
      [&] {
        return WeightedEdgesHistogram::apply(input, std::vector<at::Tensor>{edges}, *weight, std::string(out_of_range),
                                             dtype, false);
      },
      [&](const std::optional<at::Tensor>& w) { return op.call(input, edges, w, out_of_range, dtype); });
}

at::Tensor histogramdd_autograd(const at::Tensor& input, at::TensorList edges, const std::optional<at::Tensor>& weight,
                                c10::string_view out_of_range, std::optional<at::ScalarType> dtype) {
  static const auto op = find_op<EdgesSignature>("dsmhist::histogramdd");
  return weighted_call(
      weight,
      [&] {
        return WeightedEdgesHistogram::apply(input, std::vector<at::Tensor>(edges.begin(), edges.end()), *weight,
                                             std::string(out_of_range), dtype, true);
      },
      [&](const std::optional<at::Tensor>& w) { return op.call(input, edges, w, out_of_range, dtype); });
}

// In-place ops and autograd, as torch's own in-place ops behave: a call that would change a tensor autograd needs
// is refused before anything is written, and a completed call bumps the version counter of what it wrote, so a
// tensor saved for backward and changed since makes backward raise instead of computing a wrong gradient.
void refuse_autograd(const char* op, const char* target_name, const at::Tensor& target,
                     const std::optional<at::Tensor>& weight, bool out_form) {
  // Forward mode, refused as torch's out= functions refuse it: the written tensor's tangent would otherwise stay as it
  // was, a silent error wherever the weights (or an overwritten out) carry one.
  const bool weight_tangent_defined = weight_tangent(weight).defined();
  if (out_form) {
    TORCH_CHECK_NOT_IMPLEMENTED(!weight_tangent_defined && !target._fw_grad(/*level=*/0).defined(), op,
                                "(): functions with out=... arguments don't support forward-mode AD, but weight or "
                                "out has a tangent (use histogram(...) without out=: its result carries the tangent)");
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(!weight_tangent_defined, op,
                                ": weight has a forward-mode AD tangent, and histogram_add_ does not support "
                                "forward-mode AD; add the result of histogram(...), which carries the tangent");
  }
  if (!at::GradMode::is_enabled()) return;
  const bool weight_grad = weight_needs_grad(weight);
  if (out_form) {
    TORCH_CHECK(!target.requires_grad() && !weight_grad, op,
                "(): functions with out=... arguments don't support automatic differentiation, but one of the "
                "arguments requires grad (use histogram(...) without out= to differentiate through weight)");
    return;
  }
  TORCH_CHECK(!(target.requires_grad() && target.is_leaf()), op, ": ", target_name,
              " is a leaf tensor that requires grad; an in-place op cannot write into it (use torch.no_grad() to "
              "update it, as an optimizer does)");
  TORCH_CHECK(!target.requires_grad(), op, ": ", target_name,
              " requires grad, and histogram_add_ does not differentiate through the tensor it adds into; add "
              "histogram(...)'s (differentiable) result instead");
  TORCH_CHECK(!weight_grad, op,
              ": weight requires grad, and histogram_add_ is not differentiable; use "
              "histogram(...) (differentiable in weight) and add its result");
}

void histogram_add_autograd(at::Tensor& hist, const at::Tensor& input, std::optional<double> min,
                            std::optional<double> max, const std::optional<at::Tensor>& weight,
                            c10::string_view out_of_range) {
  refuse_autograd("torch_dsmhist.histogram_add_", "hist", hist, weight, /*out_form=*/false);
  static const auto op = find_op<HistogramAddSignature>("dsmhist::histogram_add_");
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    op.call(hist, input, min, max, weight, out_of_range);
  }
  hist.unsafeGetTensorImpl()->bump_version();
}

void histogram_out_autograd(at::Tensor& out, const at::Tensor& input, std::optional<double> min,
                            std::optional<double> max, const std::optional<at::Tensor>& weight,
                            c10::string_view out_of_range, std::optional<at::ScalarType> dtype, bool accumulate) {
  refuse_autograd("torch_dsmhist.histogram", "out", out, weight, /*out_form=*/true);
  static const auto op = find_op<HistogramOutSignature>("dsmhist::_histogram_out");
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    op.call(out, input, min, max, weight, out_of_range, dtype, accumulate);
  }
  out.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, Autograd, m) {
  m.impl("histogram", &histogram_autograd<false>);
  m.impl("batched_histogram", &histogram_autograd<true>);
  m.impl("_histogram_with_range_keys", &histogram_with_range_keys_autograd);
  m.impl("histogram_add_", &histogram_add_autograd);
  m.impl("_histogram_out", &histogram_out_autograd);
  m.impl("histogram_edges", &histogram_edges_autograd);
  m.impl("histogramdd", &histogramdd_autograd);
}

}  // namespace dsmhist
