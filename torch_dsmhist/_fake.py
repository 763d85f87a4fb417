"""Fake (meta) kernels: output shape and dtype without touching data, for torch.compile and FakeTensor tracing.

Each runs the real op's argument checks (the C++ rules, through :func:`torch_dsmhist._rules.check_call`), so a call
the real op would refuse is refused while tracing too, with the same error. The ops that write into a tensor also
refuse, while tracing, a target that shares memory with the input or the weights (fake tensors keep their storages'
aliasing): compiled, the write is functionalized and the real kernel would never see the overlap.
"""

from typing import List, Optional

import torch

from ._rules import check_call, check_edges_call, check_into_memory_traced


def _histogram_fake(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    out_dtype = check_call("histogram", "torch_dsmhist.histogram", input, bins, min, max, weight, out_of_range, dtype)
    return input.new_empty((bins,), dtype=out_dtype)


def _histogram_add_fake(
    hist: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
) -> None:
    check_call(
        "into", "torch_dsmhist.histogram_add_", input, 0, min, max, weight, out_of_range, target=hist, accumulate=True
    )
    check_into_memory_traced("torch_dsmhist.histogram_add_", "hist", hist, input, weight)


def _histogram_out_fake(
    out: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    accumulate: bool = False,
) -> None:
    check_call(
        "into",
        "torch_dsmhist.histogram",
        input,
        0,
        min,
        max,
        weight,
        out_of_range,
        dtype,
        target=out,
        accumulate=accumulate,
    )
    check_into_memory_traced("torch_dsmhist.histogram", "out", out, input, weight)


def _batched_histogram_fake(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    out_dtype = check_call(
        "histogram", "torch_dsmhist.batched_histogram", input, bins, min, max, weight, out_of_range, dtype, batched=True
    )
    return input.new_empty((*input.shape[:-1], bins), dtype=out_dtype)


def _finite_range_keys_fake(input: torch.Tensor) -> torch.Tensor:
    check_call("finite_range", "torch_dsmhist._finite_range_keys", input, 1)
    return input.new_empty((2,), dtype=torch.int64)


def _histogram_with_range_keys_fake(
    input: torch.Tensor,
    bins: int,
    range_keys: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    batched: bool = False,
) -> torch.Tensor:
    out_dtype = check_call(
        "range_keys",
        "torch_dsmhist._histogram_with_range_keys",
        input,
        bins,
        None,
        None,
        weight,
        out_of_range,
        dtype,
        batched,
        target=range_keys,
    )
    shape = (*input.shape[:-1], bins) if batched else (bins,)
    return input.new_empty(shape, dtype=out_dtype)


def _bin_indices_fake(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    out_of_range: str = "ignore",
    range_keys: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    check_call(
        "bin_indices", "torch_dsmhist._bin_indices", input, bins, min, max, None, out_of_range, target=range_keys
    )
    return torch.empty_like(input, dtype=torch.int64, memory_format=torch.contiguous_format)


def _histogram_edges_fake(
    input: torch.Tensor,
    edges: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    out_dtype = check_edges_call("torch_dsmhist.histogram_edges", input, [edges], weight, out_of_range, dtype, nd=False)
    return input.new_empty((edges.shape[0] - 1,), dtype=out_dtype)


def _histogramdd_fake(
    input: torch.Tensor,
    edges: List[torch.Tensor],
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    out_dtype = check_edges_call("torch_dsmhist.histogramdd", input, edges, weight, out_of_range, dtype, nd=True)
    return input.new_empty(tuple(e.shape[0] - 1 for e in edges), dtype=out_dtype)


def _edge_bin_indices_fake(
    input: torch.Tensor, edges: List[torch.Tensor], out_of_range: str = "ignore"
) -> torch.Tensor:
    check_edges_call("torch_dsmhist._edge_bin_indices", input, edges, None, out_of_range, None, nd=True)
    return input.new_empty((input.shape[0],), dtype=torch.int32)


# Registered by call, not as decorators: torch.library.register_fake is untyped, and as a decorator it would make
# each function untyped for `mypy --strict`.
for _op, _kernel in (
    ("dsmhist::histogram", _histogram_fake),
    ("dsmhist::histogram_add_", _histogram_add_fake),
    ("dsmhist::_histogram_out", _histogram_out_fake),
    ("dsmhist::batched_histogram", _batched_histogram_fake),
    ("dsmhist::_finite_range_keys", _finite_range_keys_fake),
    ("dsmhist::_histogram_with_range_keys", _histogram_with_range_keys_fake),
    ("dsmhist::_bin_indices", _bin_indices_fake),
    ("dsmhist::histogram_edges", _histogram_edges_fake),
    ("dsmhist::histogramdd", _histogramdd_fake),
    ("dsmhist::_edge_bin_indices", _edge_bin_indices_fake),
):
    torch.library.register_fake(_op, _kernel)
