"""Batching rules (``torch.vmap``, ``torch.func.jacfwd``): a vmapped call runs as one batched launch where the op
has a batched form, instead of PyTorch's fallback (one call per slice, with a warning; none at all for
``histogramdd``, whose list of edges the fallback cannot slice).

* ``histogram`` -> ``batched_histogram`` (each slice flattened into one row);
* ``batched_histogram`` and ``histogramdd`` -> the same op, the vmapped dim as a leading batch dim;
* ``histogram_edges`` -> per-row edges (``edges [..., B + 1]``), the edges repeated where only the input is vmapped.

Where the batched form would change what a slice means, the rule runs the op once per slice instead: a
floating input without ``min``/``max`` (each slice's own data range; the batched ops take one range over all rows)
and vmapped ``histogramdd`` edges. The rules apply only under vmap (its dispatch key): other calls never see them.
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ._fake import _bind

_OPS = torch.ops.dsmhist


def _dims_by_name(op: str, in_dims: Sequence[Any]) -> Dict[str, Any]:
    """Each positional argument's vmapped dim (None: not vmapped), by the op's schema names."""
    schema = getattr(_OPS, op).default._schema
    return {argument.name: dim for argument, dim in zip(schema.arguments, in_dims)}


def _leading(tensor: torch.Tensor, dim: Optional[int], size: int) -> torch.Tensor:
    """`tensor` with its vmapped dim first, or repeated `size` times along a new first dim where it is not vmapped."""
    return tensor.movedim(dim, 0) if dim is not None else tensor.expand(size, *tensor.shape)


def _lead_input_and_weight(arguments: Dict[str, Any], dims: Dict[str, Any], size: int, flatten: bool) -> None:
    """`input` and `weight` (if any) with the vmapped dim first, and with `flatten` each slice as one row
    ([size, slice elements], an empty batch too)."""
    for name in ("input", "weight"):
        tensor = arguments[name]
        if tensor is not None:
            tensor = _leading(tensor, dims.get(name), size)
            arguments[name] = tensor.reshape(size, math.prod(tensor.shape[1:])) if flatten else tensor


def _slice_shape(tensor: torch.Tensor, dim: Optional[int]) -> Tuple[int, ...]:
    shape = tuple(tensor.shape)
    return shape if dim is None else shape[:dim] + shape[dim + 1 :]


def _weight_fits(arguments: Dict[str, Any], dims: Dict[str, Any]) -> bool:
    """Whether a slice's weight has the slice's input shape (flattened into rows, a mismatch would pass unseen)."""
    weight = arguments["weight"]
    return weight is None or _slice_shape(weight, dims.get("weight")) == _slice_shape(
        arguments["input"], dims.get("input")
    )


def _per_slice(op: str, size: int, arguments: Dict[str, Any], dims: Dict[str, Any]) -> Tuple[torch.Tensor, int]:
    """The op once per slice, stacked along dim 0 (PyTorch's fallback, for the calls no batched form keeps)."""

    def slice_of(value: torch.Tensor, dim: Optional[int], index: int) -> torch.Tensor:
        if dim is None:
            return value
        # An empty batch has no slice to take: zeros of a slice's shape give the result's shape and dtype.
        return value.select(dim, index) if size else value.new_zeros(_slice_shape(value, dim))

    def take(name: str, value: Any, index: int) -> Any:
        dim = dims.get(name)
        if isinstance(value, (list, tuple)) and dim is not None:  # a Tensor[] argument: one dim (or None) an element
            return [slice_of(v, d, index) for v, d in zip(value, dim)]
        return value if dim is None else slice_of(value, dim, index)

    call = getattr(_OPS, op).default
    results = [call(**{name: take(name, value, i) for name, value in arguments.items()}) for i in range(max(size, 1))]
    return (torch.stack(results) if size else results[0].new_empty((0, *results[0].shape))), 0


def _batched(op: str, vmapped: str, arguments: Dict[str, Any]) -> Tuple[torch.Tensor, int]:
    """The batched call, its error (if any) noting what ran: the message names `op` and the batched shapes."""
    try:
        return getattr(_OPS, op).default(**arguments), 0
    except (TypeError, ValueError, RuntimeError) as error:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"(under torch.vmap, {vmapped} ran as {op} with the vmapped dim first)")
        raise


def _batch_first(
    op: str, size: int, arguments: Dict[str, Any], dims: Dict[str, Any], min_dims: int
) -> Tuple[torch.Tensor, int]:
    """An op with a batched form of its own (``[..., N]`` / ``[..., N, D]``: `min_dims` dims at least): the vmapped
    dim becomes its first. A slice with fewer dims runs alone, so it gets the op's own error (batched, its rows would
    be read as the slice's: a silent wrong answer)."""
    if len(_slice_shape(arguments["input"], dims.get("input"))) < min_dims:
        return _per_slice(op, size, arguments, dims)
    _lead_input_and_weight(arguments, dims, size, flatten=False)
    return _batched(op, op, arguments)


def _data_range(arguments: Dict[str, Any]) -> bool:
    return arguments["input"].is_floating_point() and arguments["min"] is None and arguments["max"] is None


def _histogram(info: Any, in_dims: Sequence[Any], *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, int]:
    arguments, dims = _bind("histogram", args, kwargs), _dims_by_name("histogram", in_dims)
    if _data_range(arguments) or not _weight_fits(arguments, dims):
        return _per_slice("histogram", info.batch_size, arguments, dims)
    _lead_input_and_weight(arguments, dims, info.batch_size, flatten=True)
    return _batched("batched_histogram", "histogram", arguments)


def _batched_histogram(info: Any, in_dims: Sequence[Any], *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, int]:
    arguments, dims = _bind("batched_histogram", args, kwargs), _dims_by_name("batched_histogram", in_dims)
    if _data_range(arguments) or not _weight_fits(arguments, dims):
        return _per_slice("batched_histogram", info.batch_size, arguments, dims)
    return _batch_first("batched_histogram", info.batch_size, arguments, dims, min_dims=1)


def _histogram_edges(info: Any, in_dims: Sequence[Any], *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, int]:
    arguments, dims = _bind("histogram_edges", args, kwargs), _dims_by_name("histogram_edges", in_dims)
    size = info.batch_size
    edges, edge_dim = arguments["edges"], dims.get("edges")
    edge_slice = _slice_shape(edges, edge_dim)
    per_row = len(edge_slice) >= 2 and _slice_shape(arguments["input"], dims.get("input"))[:-1] == edge_slice[:-1]
    if not _weight_fits(arguments, dims) or not (len(edge_slice) == 1 or per_row):
        # The shapes one slice alone takes (or refuses) differently from a batch: a slice of 0-d edges, per-row edges
        # whose leading dims are not the input's, a weight of another shape.
        return _per_slice("histogram_edges", size, arguments, dims)
    # 1-D edges: one histogram a slice over the whole (flattened) slice, as rows of per-row edges; per-row edges
    # within each slice: the slice's rows keep their shape.
    _lead_input_and_weight(arguments, dims, size, flatten=not per_row)
    arguments["edges"] = _leading(edges, edge_dim, size).contiguous()
    return _batched("histogram_edges", "histogram_edges", arguments)


def _histogramdd(info: Any, in_dims: Sequence[Any], *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, int]:
    arguments, dims = _bind("histogramdd", args, kwargs), _dims_by_name("histogramdd", in_dims)
    edge_dims: List[Optional[int]] = list(dims.get("edges") or [])
    if any(dim is not None for dim in edge_dims):
        return _per_slice("histogramdd", info.batch_size, arguments, dims)
    return _batch_first("histogramdd", info.batch_size, arguments, dims, min_dims=2)


for _name, _rule in (
    ("histogram", _histogram),
    ("batched_histogram", _batched_histogram),
    ("histogram_edges", _histogram_edges),
    ("histogramdd", _histogramdd),
):
    torch.library.register_vmap(f"dsmhist::{_name}", _rule)
