"""Every drop-in by torch's name: :func:`bincount`, :func:`histc`, :func:`histogram`, :func:`histogramdd`.

``torch_dsmhist.histogram`` / ``torch_dsmhist.histogramdd`` are the package's own ops (an int ``bins`` with a range,
edge tensors); the drop-ins for ``torch.histogram`` / ``torch.histogramdd`` live here, with torch's signatures and
return types, and return torch's CPU results on every device except where the README's drop-in table says otherwise.
torch's rules are restated from its source (``aten/src/ATen/native/Histogram.cpp``, ``cpu/HistogramKernel.cpp``,
``cpu/RangeFactoriesKernel.cpp``).
"""

import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch

from ._dropins import bincount, histc

__all__ = ["bincount", "histc", "histogram", "histogramdd"]

_EDGE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_TYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.uint8: "Byte", torch.int8: "Char",
                     torch.int16: "Short", torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool"}


def _linspace_on_device(lo: torch.Tensor, hi: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """``torch.linspace(lo, hi, steps, dtype=dtype)`` as torch's CPU kernel computes it, from 0-d float64 tensors
    ``lo``, ``hi`` on any device, without reading them back: ``step = (hi - lo) / (steps - 1)`` in ``dtype``, the
    first half ``fma(step, i, lo)``, the second ``fma(-step, steps - 1 - i, hi)`` (float32 and float64; equal to
    torch.linspace on the CPU, checked by the tests; on CUDA not always, see the README's drop-in table)."""
    start, end = lo.to(dtype), hi.to(dtype)
    step = (end - start) / max(steps - 1, 1)
    index = torch.arange(steps, dtype=dtype, device=lo.device)
    low = torch.addcmul(start.expand(steps), step.expand(steps), index)
    high = torch.addcmul(end.expand(steps), -step.expand(steps), (steps - 1) - index)
    return torch.where(torch.arange(steps, device=lo.device) < steps // 2, low, high)


def _fmt(value: float) -> str:
    return f"{value:g}"


def _outer_edges(fn: str, points: torch.Tensor, dims: int, range: Optional[Sequence[float]]):
    """torch's outer edges per dim as float64 tensors: ``range`` (on the host), else the data's min and max (on the
    input's device, read back once, only to raise torch's error when one is not finite), else [0, 1]; a zero-width
    range widened by 0.5 each way."""
    device = points.device
    if range is not None:
        values = [float(v) for v in range]
        if len(values) != 2 * dims:
            raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range should have {2 * dims} "
                               f"elements, but got {len(values)}")
        lo = torch.tensor(values[0::2], dtype=torch.float64)
        hi = torch.tensor(values[1::2], dtype=torch.float64)
    elif points.numel() > 0:
        if points.dtype not in (torch.float32, torch.float64):
            raise NotImplementedError(f'"histogramdd" not implemented for \'{_TORCH_TYPE_NAMES[points.dtype]}\'')
        lo, hi = (t.double() for t in torch.aminmax(points, dim=0))
    else:
        lo, hi = torch.zeros(dims, dtype=torch.float64), torch.ones(dims, dtype=torch.float64)
    finite = torch.isfinite(lo) & torch.isfinite(hi)
    ordered = lo <= hi
    # The one host sync of a data-derived range: torch raises for a non-finite range (NaN or inf in the input).
    if not bool(torch.all(finite & ordered)):
        lo_host, hi_host = lo.cpu().tolist(), hi.cpu().tolist()
        for d in builtins_range(dims):
            if not (lo_host[d] == lo_host[d] and abs(lo_host[d]) != float("inf")
                    and hi_host[d] == hi_host[d] and abs(hi_host[d]) != float("inf")):
                raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{_fmt(lo_host[d])}, "
                                   f"{_fmt(hi_host[d])}] is not finite")
            if not lo_host[d] <= hi_host[d]:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_fmt(lo_host[d])} "
                                   f"max {_fmt(hi_host[d])} for dimension {d}")
    same = lo == hi
    lo, hi = torch.where(same, lo - 0.5, lo), torch.where(same, hi + 0.5, hi)
    # A given range stays on the host: its edges do not depend on the data (_edges_for_counts).
    return (lo, hi) if range is not None else (lo.to(device), hi.to(device))


def _edges_for_counts(fn: str, points: torch.Tensor, counts: List[int], range) -> List[torch.Tensor]:
    for d, count in enumerate(counts):
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for dimension {d}")
    lo, hi = _outer_edges(fn, points, len(counts), range)
    edges = []
    for d, count in enumerate(counts):
        if range is not None:
            # Known on the host: torch's own CPU linspace, copied to the device (no wait for the device), so the
            # edges are torch's bit for bit on every device and dtype.
            edges.append(torch.linspace(float(lo[d]), float(hi[d]), count + 1, dtype=points.dtype).to(points.device))
        else:  # float32 / float64 only (torch refuses 16-bit input without a range): on the device, no read-back
            edges.append(_linspace_on_device(lo[d], hi[d], count + 1, points.dtype))
    return edges


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
        edges = _edges_for_counts(fn, points, bins, range)
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

    ``bins`` an int: equal-width edges over ``range`` (torch's own CPU linspace, copied to the input's device) or the
    data's min and max (computed on the input's device; on CUDA they can differ from torch's in the last bits, a
    known defect); a data-derived range reads back one flag (torch raises for a non-finite range, which
    needs the host to know it): the only host sync. ``bins`` a tensor: its values are the edges (sorted; unsorted edges
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
