"""Every drop-in by torch's name: :func:`bincount`, :func:`histc`, :func:`histogram`, :func:`histogramdd`.

``torch_dsmhist.histogram`` / ``torch_dsmhist.histogramdd`` are the package's own ops (an int ``bins`` with a range,
edge tensors); the drop-ins for ``torch.histogram`` / ``torch.histogramdd`` live here, with torch's signatures and
return types, and return torch's CPU results on every device except where the README's drop-in table says otherwise.
torch's rules are restated from its source (``aten/src/ATen/native/Histogram.cpp``, ``cpu/HistogramKernel.cpp``,
``cpu/RangeFactoriesKernel.cpp``).
"""

import math
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch

from ._dropins import bincount, histc

__all__ = ["bincount", "histc", "histogram", "histogramdd"]

_EDGE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_TYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.uint8: "Byte", torch.int8: "Char",
                     torch.int16: "Short", torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool"}


def _fmt(value: float) -> str:
    return f"{value:g}"


def _outer_edges(points: torch.Tensor, dims: int, range: Optional[Sequence[float]]):
    """torch's outer edges per dim as two lists of Python floats: ``range``, else the data's min and max (computed on
    the input's device and read back: the one host sync of these drop-ins, forced by torch's semantics, which raise
    for a non-finite range), else [0, 1]; a zero-width range widened by 0.5 each way, in float64 as torch does."""
    if range is not None:
        values = [float(v) for v in range]
        if len(values) != 2 * dims:
            raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range should have {2 * dims} "
                               f"elements, but got {len(values)}")
        lo, hi = values[0::2], values[1::2]
    elif points.numel() > 0:
        if points.dtype not in (torch.float32, torch.float64):
            raise NotImplementedError(f'"histogramdd" not implemented for \'{_TORCH_TYPE_NAMES[points.dtype]}\'')
        lo, hi = torch.stack(torch.aminmax(points, dim=0)).double().cpu().tolist()
    else:
        lo, hi = [0.0] * dims, [1.0] * dims
    for d in builtins_range(dims):
        if not (math.isfinite(lo[d]) and math.isfinite(hi[d])):
            raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{_fmt(lo[d])}, {_fmt(hi[d])}] is not finite")
        if not lo[d] <= hi[d]:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_fmt(lo[d])} "
                               f"max {_fmt(hi[d])} for dimension {d}")
    same = [a == b for a, b in zip(lo, hi)]
    return [a - 0.5 if s else a for a, s in zip(lo, same)], [b + 0.5 if s else b for b, s in zip(hi, same)]


def _edges_for_counts(points: torch.Tensor, counts: List[int], range) -> List[torch.Tensor]:
    for d, count in enumerate(counts):
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for dimension {d}")
    lo, hi = _outer_edges(points, len(counts), range)
    # The outer edges are on the host, so the edges are torch's own CPU linspace, bit for bit on every device; the
    # copy to the device does not wait for it (a pageable source is staged before the call returns).
    return [torch.linspace(lo[d], hi[d], count + 1, dtype=points.dtype).to(points.device, non_blocking=True)
            for d, count in enumerate(counts)]


def _check_edge_tensor(points: torch.Tensor, edges: torch.Tensor, d: int) -> None:
    if edges.dtype != points.dtype:
        raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                           f"input with dtype {points.dtype} and bins for dimension {d} with dtype {edges.dtype}")
    if edges.dim() != 1:
        raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {edges.dim()} "
                           f"dimensions in the bins tensor for dimension {d}")
    if edges.numel() == 0:
        raise RuntimeError(f"torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in "
                           f"the bins tensor for dimension {d}")


def _histogramdd(fn: str, points: torch.Tensor, bins: list, range, weight: Optional[torch.Tensor],
                 density: bool, weight_shape) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """The shared body: ``points`` [M, D], ``bins`` one int or tensor per dim."""
    if points.dtype not in _EDGE_DTYPES:
        name = "histogramdd" if all(isinstance(b, int) for b in bins) and range is None else "histogram_cpu"
        raise NotImplementedError(f'"{name}" not implemented for \'{_TORCH_TYPE_NAMES[points.dtype]}\'')
    if all(isinstance(b, int) for b in bins):
        edges = _edges_for_counts(points, bins, range)
    else:
        edges = list(bins)
        for d, e in enumerate(edges):
            _check_edge_tensor(points, e, d)
        edges = [e.clone() for e in edges]
    if weight is not None:
        if weight.dtype != points.dtype:
            raise RuntimeError(f"torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
                               f"should have the same dtype, but got input({points.dtype}), and "
                               f"weight({weight.dtype})")
        if list(weight.shape or [1]) != list(weight_shape):
            raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                               "input tensor excluding its innermost dimension")
        weight = weight.reshape(-1)
    hist = torch.ops.dsmhist.histogramdd(points, edges, weight, "ignore", None).to(points.dtype)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = e.numel() - 1
            hist = hist / e.diff().reshape(shape)
    return hist, edges


def _check_common(fn: str, input: object, weight: object, density: object) -> None:
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if weight is not None and not isinstance(weight, torch.Tensor):
        raise TypeError(f"{fn}(): argument 'weight' must be Tensor, not {type(weight).__name__}")
    if not isinstance(density, bool):
        raise TypeError(f"{fn}(): argument 'density' must be bool, not {type(density).__name__}")


def _bin_count(fn: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}(): argument 'bins' must be int or Tensor, not {type(value).__name__}")
    return int(value)


def histogram(input: torch.Tensor, bins: Union[int, torch.Tensor], *, range: Optional[Sequence[float]] = None,
              weight: Optional[torch.Tensor] = None, density: bool = False):
    """Drop-in for :func:`torch.histogram`: ``(hist, bin_edges)`` as ``torch.return_types.histogram``, with torch's
    values, dtypes and exception classes, on the CPU and on CUDA (where torch has no implementation).

    ``bins`` an int: equal-width edges over ``range`` or the data's min and max, computed as torch's own CPU linspace
    and copied to the input's device without waiting for it, so they are torch's bit for bit. A data-derived range
    reads the min and max back (torch raises for a non-finite range, which needs the host to know it): the only host
    sync. ``bins`` a tensor: its values are the edges (sorted; unsorted edges
    raise ValueError on the CPU, where torch gives its binary search's counts). float16 / bfloat16 need a tensor
    ``bins`` or a ``range``, as in torch. Counts are exact, rounded once to the input's dtype.
    """
    _check_common("histogram", input, weight, density)
    if isinstance(bins, torch.Tensor):
        if range is not None:
            raise TypeError("histogram() received an invalid combination of arguments: range= needs an int bins")
        bins_list = [bins]
    else:
        bins_list = [_bin_count("histogram", bins)]
    hist, edges = _histogramdd("histogram", input.reshape(-1, 1), bins_list, range, weight, density, input.shape)
    return torch.return_types.histogram((hist, edges[0]))


def histogramdd(input: torch.Tensor, bins: Union[int, Sequence[int], Sequence[torch.Tensor]], *,
                range: Optional[Sequence[float]] = None, weight: Optional[torch.Tensor] = None,
                density: bool = False):
    """Drop-in for :func:`torch.histogramdd`: ``(hist, bin_edges)`` as ``torch.return_types.histogramdd``, with
    torch's values, dtypes and exception classes, on the CPU and on CUDA. ``input`` [..., D] is D-dimensional
    points; ``bins`` an int (every dim), D ints, or D edge tensors. Edges, range and syncs as in :func:`histogram`.
    """
    _check_common("histogramdd", input, weight, density)
    if input.dim() < 2:
        raise RuntimeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, but got "
                           f"{input.dim()}")
    dims = input.shape[-1]
    if isinstance(bins, torch.Tensor) or isinstance(bins, numbers.Integral):
        bins_list = [_bin_count("histogramdd", bins)] * dims
    else:
        bins_list = list(bins)
        if all(isinstance(b, torch.Tensor) for b in bins_list):
            if range is not None:
                raise TypeError("histogramdd() received an invalid combination of arguments: range= needs int bins")
        else:
            bins_list = [_bin_count("histogramdd", b) for b in bins_list]
        if len(bins_list) != dims:
            raise RuntimeError(f"torch.histogramdd: expected {dims} sequences of bin edges for a {dims}-dimensional "
                               f"histogram but got {len(bins_list)}")
    points = input.reshape(-1, dims)
    hist, edges = _histogramdd("histogramdd", points, bins_list, range, weight, density, input.shape[:-1])
    return torch.return_types.histogramdd((hist, tuple(edges)))


builtins_range = range
