"""Every drop-in by torch's name: :func:`bincount`, :func:`histc`, :func:`histogram`, :func:`histogramdd`.

``torch_dsmhist.histogram`` / ``torch_dsmhist.histogramdd`` are the package's own ops (an int ``bins`` with a range,
edge tensors); the drop-ins for ``torch.histogram`` / ``torch.histogramdd`` live here, with torch's signatures and
return types, and return torch's CPU results on every device except where the README's drop-in table says otherwise.
torch's rules are restated from its source (``aten/src/ATen/native/Histogram.cpp``, ``cpu/HistogramKernel.cpp``,
``cpu/RangeFactoriesKernel.cpp``) and its Python argument parser.
"""

import math as _math
import numbers as _numbers
from typing import List as _List
from typing import Optional as _Optional
from typing import Sequence as _Sequence
from typing import Tuple as _Tuple
from typing import Union as _Union

import torch as _torch

from ._dropins import bincount, histc

__all__ = ["bincount", "histc", "histogram", "histogramdd"]

_EDGE_DTYPES = (_torch.float16, _torch.bfloat16, _torch.float32, _torch.float64)
# How torch's dispatch macros name a dtype in "not implemented for '...'" (c10's ScalarType names).
_TORCH_TYPE_NAMES = {
    _torch.float16: "Half",
    _torch.bfloat16: "BFloat16",
    _torch.uint8: "Byte",
    _torch.int8: "Char",
    _torch.int16: "Short",
    _torch.int32: "Int",
    _torch.int64: "Long",
    _torch.bool: "Bool",
    _torch.uint16: "UInt16",
    _torch.uint32: "UInt32",
    _torch.uint64: "UInt64",
    _torch.complex32: "ComplexHalf",
    _torch.complex64: "ComplexFloat",
    _torch.complex128: "ComplexDouble",
}
_builtin_range = range


def _type_name(dtype: _torch.dtype) -> str:
    """c10's name of ``dtype``; every dtype has one (``torch.float8_e4m3fn`` -> ``float8_e4m3fn``)."""
    return _TORCH_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _not_implemented(kernel: str, dtype: _torch.dtype) -> NotImplementedError:
    return NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(dtype)}'")


def _fmt(value: float) -> str:
    return f"{value:g}"


def _range_arg(fn: str, value: object) -> _Optional[_List[float]]:
    """``range`` as torch's parser reads ``float[]?``: None, or a list / tuple of real numbers (bools, ints, floats,
    numpy scalars); anything else (a tensor, a string, a None element) is a TypeError naming the argument."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{fn}(): argument 'range' must be tuple of floats, not {type(value).__name__}")
    for item in value:
        if isinstance(item, _torch.Tensor) or not isinstance(item, _numbers.Real):
            raise TypeError(
                f"{fn}(): argument 'range' must be tuple of floats, but found element of type {type(item).__name__}"
            )
    return [float(v) for v in value]


def _int_bins(value: object) -> bool:
    """Whether torch's parser reads ``value`` as an ``int``: a Python or numpy integer (not a bool) or a 0-d integer
    tensor."""
    if isinstance(value, _torch.Tensor):
        return value.dim() == 0 and not (
            value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == _torch.bool
        )
    return isinstance(value, _numbers.Integral) and not isinstance(value, bool)


def _bin_count(fn: str, value: object) -> int:
    if not _int_bins(value):
        raise TypeError(
            f"{fn}(): argument 'bins' must be int, tuple of ints or tuple of Tensors, not {type(value).__name__}"
        )
    count: int = int(value)  # type: ignore[call-overload]  # an integer or a 0-d integer tensor
    return count


def _outer_edges(
    points: _torch.Tensor, dims: int, range: _Optional[_List[float]]
) -> _Tuple[_List[float], _List[float]]:
    """torch's outer edges per dim as two lists of Python floats: ``range``, else the data's min and max (computed on
    the input's device and read back: the one host sync of these drop-ins, forced by torch's semantics, which raise
    for a non-finite range), else [0, 1]; a zero-width range widened by 0.5 each way, in float64 as torch does.
    A range is checked before the input's dtype, as torch does."""
    if range is not None:
        if len(range) != 2 * dims:
            raise RuntimeError(
                f"torch.histogramdd: for a {dims}-dimensional histogram range should have {2 * dims} "
                f"elements, but got {len(range)}"
            )
        lo, hi = range[0::2], range[1::2]
    elif points.dtype not in (_torch.float32, _torch.float64):
        raise _not_implemented("histogramdd", points.dtype)
    elif points.numel() > 0:
        # A column at a time: torch's aminmax along dim 0 of [N, D] took 9.4 ms for 2^22 points of one dim on the CPU
        # (one thread, whatever the count), a column 0.55 (bench_edges_cpu.py, perf log 2026-11-27).
        columns = [_torch.stack(_torch.aminmax(points[:, d])) for d in _builtin_range(dims)]
        lo, hi = _torch.stack(columns, 1).double().cpu().tolist()
    else:
        lo, hi = [0.0] * dims, [1.0] * dims
    for d in _builtin_range(dims):
        if not (_math.isfinite(lo[d]) and _math.isfinite(hi[d])):
            raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{_fmt(lo[d])}, {_fmt(hi[d])}] is not finite")
        if not lo[d] <= hi[d]:
            raise RuntimeError(
                f"torch.histogramdd: min should not exceed max, but got min {_fmt(lo[d])} "
                f"max {_fmt(hi[d])} for dimension {d}"
            )
    same = [a == b for a, b in zip(lo, hi)]
    return [a - 0.5 if s else a for a, s in zip(lo, same)], [b + 0.5 if s else b for b, s in zip(hi, same)]


def _edges_for_counts(
    points: _torch.Tensor, counts: _List[int], range: _Optional[_List[float]]
) -> _Tuple[_List[_torch.Tensor], _List[_Optional[_torch.Tensor]]]:
    """torch's edges for int bins on the input's device, and per dim the scaled float64 edges to bin with where
    torch's edges overflow the dtype (else None: see below)."""
    for d, count in enumerate(counts):
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for dimension {d}")
    lo, hi = _outer_edges(points, len(counts), range)
    if points.dtype not in _EDGE_DTYPES:
        raise _not_implemented("histogram_cpu", points.dtype)
    # The outer edges are on the host, so the edges are torch's own CPU linspace, bit for bit on every device.
    host_edges = [_torch.linspace(lo[d], hi[d], count + 1, dtype=points.dtype) for d, count in enumerate(counts)]
    # A range wider than the dtype's largest value (float32 data spanning [-3e38, 3e38]) overflows torch's linspace
    # into inf / NaN edges, over which torch counts nothing. The drop-in returns those edges but bins such a dim in
    # float64 over equal-width edges with every coordinate and edge scaled by 2**-64 (exact: a power of two), where
    # they are finite (README's drop-in table). None is taken where torch's edges are finite.
    overflow = [not bool(_torch.isfinite(e).all()) for e in host_edges]
    # The copy to the device does not wait for it (a pageable source is staged before the call returns).
    to_device = [e.to(points.device, non_blocking=True) for e in host_edges]
    scaled = [
        _torch.linspace(lo[d] * _OVERFLOW_SCALE, hi[d] * _OVERFLOW_SCALE, count + 1, dtype=_torch.float64)
        if overflow[d]
        else None
        for d, count in enumerate(counts)
    ]
    return to_device, scaled


_OVERFLOW_SCALE = 2.0**-64


def _check_edge_tensor(points: _torch.Tensor, edges: _torch.Tensor, d: int) -> None:
    if edges.dtype != points.dtype:
        raise RuntimeError(
            f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
            f"input with dtype {points.dtype} and bins for dimension {d} with dtype {edges.dtype}"
        )
    if edges.dim() != 1:
        raise RuntimeError(
            f"torch.histogramdd: bins tensor should have one dimension, but got {edges.dim()} "
            f"dimensions in the bins tensor for dimension {d}"
        )
    if edges.numel() == 0:
        raise RuntimeError(
            f"torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in "
            f"the bins tensor for dimension {d}"
        )
    if edges.numel() == 1:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got 0 for dimension {d}")


def _histogramdd(
    points: _torch.Tensor,
    bins: _List[_Union[int, _torch.Tensor]],
    range: _Optional[_List[float]],
    weight: _Optional[_torch.Tensor],
    density: bool,
    weight_ok: bool,
) -> _Tuple[_torch.Tensor, _List[_torch.Tensor]]:
    """The shared body: ``points`` [M, D], ``bins`` one int or tensor per dim; ``weight_ok``: whether ``weight``'s
    shape passed the caller's rule (checked after the dtypes, in torch's order)."""
    if all(isinstance(b, int) for b in bins):
        edges, scaled = _edges_for_counts(points, bins, range)  # type: ignore[arg-type]
    else:
        edges = list(bins)  # type: ignore[arg-type]  # every element is a tensor here
        for d, e in enumerate(edges):
            _check_edge_tensor(points, e, d)
        if points.dtype not in _EDGE_DTYPES:
            raise _not_implemented("histogram_cpu", points.dtype)
        edges = [e.clone() for e in edges]
        scaled = [None] * len(edges)
    if weight is not None:
        if weight.dtype != points.dtype:
            raise RuntimeError(
                f"torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
                f"should have the same dtype, but got input({points.dtype}), and "
                f"weight({weight.dtype})"
            )
        if not weight_ok:
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                "input tensor excluding its innermost dimension"
            )
        weight = weight.reshape(-1)
    binning = edges
    if any(s is not None for s in scaled):
        scale = _torch.tensor([1.0 if s is None else _OVERFLOW_SCALE for s in scaled], dtype=_torch.float64)
        points = points.to(_torch.float64) * scale.to(points.device, non_blocking=True)
        weight = None if weight is None else weight.to(_torch.float64)
        binning = [
            e.to(_torch.float64) if s is None else s.to(points.device, non_blocking=True) for e, s in zip(edges, scaled)
        ]
    if len(binning) == 1:  # torch.histogram: the 1-D op (its kernel has the 1-D table; the N-D one is slower there)
        counts = _torch.ops.dsmhist.histogram_edges(points.reshape(-1), binning[0], weight, "ignore", None)
    else:
        counts = _torch.ops.dsmhist.histogramdd(points, binning, weight, "ignore", None)
    hist = counts.to(edges[0].dtype)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = e.numel() - 1
            hist = hist / e.diff().reshape(shape)
    return hist, edges


def _check_common(fn: str, input: object, weight: object, density: object) -> None:
    if not isinstance(input, _torch.Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if weight is not None and not isinstance(weight, _torch.Tensor):
        raise TypeError(f"{fn}(): argument 'weight' must be Tensor, not {type(weight).__name__}")
    if not isinstance(density, bool):
        raise TypeError(f"{fn}(): argument 'density' must be bool, not {type(density).__name__}")


def histogram(
    input: _torch.Tensor,
    bins: _Union[int, _torch.Tensor],
    *,
    range: _Optional[_Sequence[float]] = None,
    weight: _Optional[_torch.Tensor] = None,
    density: bool = False,
) -> "_torch.return_types.histogram":
    """Drop-in for :func:`torch.histogram`: ``(hist, bin_edges)`` as ``torch.return_types.histogram``, with torch's
    values, dtypes and exception classes, on the CPU and on CUDA (where torch has no implementation).

    ``bins`` an int: equal-width edges over ``range`` or the data's min and max, computed as torch's own CPU linspace
    and copied to the input's device without waiting for it, so they are torch's bit for bit. A data-derived range
    reads the min and max back (torch raises for a non-finite range, which needs the host to know it): the only host
    sync. ``bins`` a tensor: its values are the edges (sorted; unsorted edges raise ValueError on the CPU, where
    torch gives its binary search's counts); ``range`` with a tensor ``bins`` is a TypeError, as in torch.
    float16 / bfloat16 need a tensor ``bins`` or a ``range``, as in torch. ``weight`` has as many elements as
    ``input`` (any shape, as torch). Counts are exact, rounded once to the input's dtype.

    Raises:
        TypeError: an argument of the wrong Python type (as torch's parser).
        NotImplementedError: an input dtype torch's CPU histogram does not implement (integer, complex, ...).
        RuntimeError: a bad value (bins <= 0, a range that is not finite or whose min exceeds its max, edges or
            weight of another dtype or shape), as torch.
        ValueError: unsorted edges on the CPU.
    """
    fn = "histogram"
    _check_common(fn, input, weight, density)
    range_list = _range_arg(fn, range)
    if isinstance(bins, _torch.Tensor):
        if range is not None:
            raise TypeError("histogram() received an invalid combination of arguments: range= needs an int bins")
        bins_list: _List[_Union[int, _torch.Tensor]] = [bins]
    else:
        bins_list = [_bin_count(fn, bins)]
    weight_ok = weight is None or weight.numel() == input.numel()  # torch reshapes weight to [input.numel()]
    hist, edges = _histogramdd(input.reshape(-1, 1), bins_list, range_list, weight, density, weight_ok)
    return _torch.return_types.histogram((hist, edges[0]))


def histogramdd(
    input: _torch.Tensor,
    bins: _Union[int, _Sequence[int], _Sequence[_torch.Tensor]],
    *,
    range: _Optional[_Sequence[float]] = None,
    weight: _Optional[_torch.Tensor] = None,
    density: bool = False,
) -> "_torch.return_types.histogramdd":
    """Drop-in for :func:`torch.histogramdd`: ``(hist, bin_edges)`` as ``torch.return_types.histogramdd``, with
    torch's values, dtypes and exception classes, on the CPU and on CUDA. ``input`` [..., D] is D-dimensional
    points; ``bins`` an int (every dim), D ints, or D edge tensors (a ``range`` is then ignored, as torch does).
    ``weight`` has ``input``'s shape without its last dim. Points of 0 dims give a 0-d zero histogram and no edges,
    as torch. Edges, range and syncs as in :func:`histogram`.

    Raises:
        TypeError, NotImplementedError, RuntimeError, ValueError: as :func:`histogram`.
    """
    fn = "histogramdd"
    _check_common(fn, input, weight, density)
    range_list = _range_arg(fn, range)
    if input.dim() < 2:
        raise RuntimeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, but got {input.dim()}")
    dims = input.shape[-1]
    bins_list: _List[_Union[int, _torch.Tensor]]
    if _int_bins(bins):
        bins_list = [_bin_count(fn, bins)] * dims
    elif isinstance(bins, (list, tuple)):
        if all(_int_bins(b) for b in bins):
            bins_list = [_bin_count(fn, b) for b in bins]
        elif all(isinstance(b, _torch.Tensor) for b in bins):
            bins_list = list(bins)
            range_list = None  # torch ignores a range given with edge tensors, whatever it holds
        else:
            raise TypeError(
                f"{fn}(): argument 'bins' must be int, tuple of ints or tuple of Tensors, not a sequence mixing them"
            )
        if len(bins_list) != dims:
            raise RuntimeError(
                f"torch.histogramdd: expected {dims} sequences of bin edges for a {dims}-dimensional "
                f"histogram but got {len(bins_list)}"
            )
    else:
        raise TypeError(
            f"{fn}(): argument 'bins' must be int, tuple of ints or tuple of Tensors, not {type(bins).__name__}"
        )
    weight_ok = weight is None or list(weight.shape or [1]) == list(input.shape[:-1])
    if dims == 0:
        return _zero_dims(input, range_list, weight, density, weight_ok)
    points = input.reshape(-1, dims)
    hist, edges = _histogramdd(points, bins_list, range_list, weight, density, weight_ok)
    return _torch.return_types.histogramdd((hist, tuple(edges)))


def _zero_dims(
    input: _torch.Tensor,
    range: _Optional[_List[float]],
    weight: _Optional[_torch.Tensor],
    density: bool,
    weight_ok: bool,
) -> "_torch.return_types.histogramdd":
    """torch's histogram of points with no coordinates: a 0-d zero (NaN with ``density``) and no edges, after the
    checks that still apply (the range's length, the dtype, the weight)."""
    if range is not None and len(range) != 0:
        raise RuntimeError(
            f"torch.histogramdd: for a 0-dimensional histogram range should have 0 elements, but got {len(range)}"
        )
    if input.dtype not in _EDGE_DTYPES:
        raise _not_implemented("histogram_cpu", input.dtype)
    if weight is not None and (weight.dtype != input.dtype or not weight_ok):
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided, it should have the input's dtype and "
            "the same shape as the input tensor excluding its innermost dimension"
        )
    hist = _torch.zeros((), dtype=input.dtype, device=input.device)
    return _torch.return_types.histogramdd((hist / hist if density else hist, ()))
