// Every schema of the dsmhist library, in one place. The CPU and CUDA implementations register themselves with
// TORCH_LIBRARY_IMPL in their own files, the autograd kernels in autograd.cpp, the introspection and test hooks in
// hooks.cpp, the checks the fake kernels call in check_hooks.cpp; the Python package registers the fake kernels.
#include <torch/library.h>

namespace dsmhist {

TORCH_LIBRARY(dsmhist, m) {
  m.def(
      "histogram(Tensor input, int bins, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None) -> Tensor");
  // Mutates hist and returns nothing: torch.compile cannot functionalize custom ops whose outputs alias an input.
  // (torch_dsmhist.histogram_add_ returns hist.)
  m.def(
      "histogram_add_(Tensor(a!) hist, Tensor input, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\") -> ()");
  // histogram(out=, accumulate=): into `out`, replacing (histogram's rules) or adding (histogram_add_'s rules).
  m.def(
      "_histogram_out(Tensor(a!) out, Tensor input, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None, bool accumulate=False) -> ()");
  m.def(
      "batched_histogram(Tensor input, int bins, float? min=None, float? max=None, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None) -> Tensor");
  // For torch_dsmhist.distributed (not part of the public contract): a data-derived range merged across ranks. The
  // keys ([2] int64) of floating input's finite min and max; the keys of several inputs merge by an elementwise max
  // once their sign bits are flipped (unsigned order as signed). Then the histogram binned over merged keys.
  m.def("_finite_range_keys(Tensor input) -> Tensor");
  m.def(
      "_histogram_with_range_keys(Tensor input, int bins, Tensor range_keys, Tensor? weight=None, "
      "str out_of_range=\"ignore\", ScalarType? dtype=None, bool batched=False) -> Tensor");
  // Each element's bin (-1: dropped), for the backward of the weighted ops; range_keys as for
  // _histogram_with_range_keys.
  m.def(
      "_bin_indices(Tensor input, int bins, float? min=None, float? max=None, str out_of_range=\"ignore\", "
      "Tensor? range_keys=None) -> Tensor");
  // Histograms over bin edges (torch.histogram's rule: [e_i, e_{i+1}), the last bin closed): of every element of
  // input over one 1-D edges tensor, and of the points of an [N, D] input over one edges tensor per dim.
  m.def(
      "histogram_edges(Tensor input, Tensor edges, Tensor? weight=None, str out_of_range=\"ignore\", "
      "ScalarType? dtype=None) -> Tensor");
  m.def(
      "histogramdd(Tensor input, Tensor[] edges, Tensor? weight=None, str out_of_range=\"ignore\", "
      "ScalarType? dtype=None) -> Tensor");
  // Each point's flat bin of histogramdd (int32, -1: dropped), for the backward of the weighted edges ops.
  m.def("_edge_bin_indices(Tensor input, Tensor[] edges, str out_of_range=\"ignore\") -> Tensor");
  // Each element's bin in its own row's edges (int32 of input's shape, -1: dropped): the backward of histogram_edges
  // with per-row edges ([..., B + 1]).
  m.def("_row_edge_bin_indices(Tensor input, Tensor edges, str out_of_range=\"ignore\") -> Tensor");
  m.def(
      "_check_edges_args(str op, ScalarType input_dtype, SymInt[] input_shape, Device input_device, "
      "ScalarType[] edge_dtypes, int[] edge_ranks, SymInt[] edge_sizes, Device[] edge_devices, "
      "ScalarType? weight_dtype, SymInt[]? weight_shape, Device? weight_device, str out_of_range, "
      "ScalarType? dtype, bool nd) -> str");
  // MoE routing (csrc/moe_args.h): token ids grouped by expert, each expert's share padded to whole blocks, each
  // expert's tokens in increasing flat index. moe_align_block_size -> (sorted_token_ids, expert_ids,
  // num_tokens_post_pad); moe_routing -> (counts, offsets, permutation). All int32.
  m.def(
      "moe_align_block_size(Tensor topk_ids, int block_size, int num_experts, Tensor? expert_map=None, "
      "bool pad_sorted_ids=False) -> (Tensor, Tensor, Tensor)");
  m.def("moe_routing(Tensor topk_ids, int num_experts, int block_size=1) -> (Tensor, Tensor, Tensor)");
  // Their checks and output sizes ([sorted size, expert blocks]), for the fake kernels.
  m.def(
      "_check_moe_args(str op, ScalarType ids_dtype, SymInt[] ids_shape, Device ids_device, int block_size, "
      "int num_experts, ScalarType? map_dtype, SymInt[]? map_shape, Device? map_device, bool pad_sorted_ids) "
      "-> SymInt[]");
  m.def("_check_into_memory(str op, str name, Tensor target, Tensor? input, Tensor? weight) -> ()");
  // The argument checks of every op, for the fake kernels (see check_args).
  m.def(
      "_check_args(str kind, str op, ScalarType input_dtype, SymInt[] input_shape, Device input_device, int bins, "
      "float? min, float? max, ScalarType? weight_dtype, SymInt[]? weight_shape, Device? weight_device, "
      "str out_of_range, ScalarType? dtype, bool batched, ScalarType? target_dtype=None, "
      "SymInt[]? target_shape=None, Device? target_device=None, bool accumulate=False) -> str");
  // Introspection and test hooks (not part of the public contract; the Python package wraps them).
  m.def(
      "_plan(int bins, Device device, ScalarType dtype, ScalarType? weight_dtype=None, int rows=0, int row_length=0, "
      "bool batched=False) -> (str, int, int, int, int, int, int, int, int)");
  m.def("_tiers() -> (str[], bool[], bool[])");
  m.def("_set_tier_override(str tier, int cluster_size=0, int max_cluster_size=0) -> ()");
  m.def("_get_tier_override() -> (str, int, int)");
  m.def("_built_with_cuda() -> bool");
}

}  // namespace dsmhist

// `from . import _C` loads this shared library, which runs the registrations above; the module (eager_entry.cpp)
// holds only the eager entry points.
