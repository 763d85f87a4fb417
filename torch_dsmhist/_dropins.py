"""Drop-ins for ``torch.bincount`` and ``torch.histc`` on top of ``torch.ops.dsmhist.histogram``.

Each returns torch's CPU result (values, dtype, exception class) on every device, except where the README's drop-in
table says otherwise. The rules torch applies are restated here from its source (``aten/src/ATen/native/
Histogram.cpp``, ``cpu/HistogramKernel.cpp``, ``SummaryOps.cpp``) and from its Python argument parser.
"""

import math
import numbers
import struct
import warnings
from typing import Optional, Tuple

import torch

from ._api import histogram as _histogram  # its plain calls take the eager entry

# torch's own histc, bound here so that the drop-ins keep working when a user monkeypatches ``torch.histc =
# torch_dsmhist.histc`` (a call through ``torch.histc`` would then recurse into the drop-in).
_torch_histc = torch._C._VariableFunctions.histc

__all__ = ["bincount", "histc"]

_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# How torch names the dtype when a bound does not fit it ("value cannot be converted to type ... without overflow").
_C10_TYPE_NAMES = {torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float"}
_INT64_MAX = 2**63 - 1
_FLOAT32 = struct.Struct("f")
_FLOAT32_MAX = torch.finfo(torch.float32).max


# ---------------------------------------------------------------------------------------------------------------
# Arguments: torch's Python parser raises TypeError for a wrong Python type, naming the argument.
# ---------------------------------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


def _tensor_arg(value: object, fn: str, name: str, position: Optional[int], optional: bool = False) -> None:
    """Raise TypeError unless ``value`` is a tensor (or None where the argument is optional)."""
    if isinstance(value, torch.Tensor) or (optional and value is None):
        return
    where = f" (position {position})" if position is not None else ""
    raise TypeError(f"{fn}(): argument '{name}'{where} must be Tensor, not {_type_name(value)}")


def _int_arg(value: object, fn: str, name: str) -> int:
    """An ``int`` argument as torch's parser reads it: a Python or numpy integer or a one-element integer tensor,
    never a bool or a float (TypeError); past int64, ValueError as torch's ``Overflow when unpacking long long``."""
    if type(value) is int and -(2**63) <= value <= _INT64_MAX:  # the common call, without the ABC checks below
        return value
    is_int_tensor = (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
        and value.dtype != torch.bool
    )
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or is_int_tensor):
        raise TypeError(f"{fn}(): argument '{name}' must be int, not {_type_name(value)}")
    result: int = int(value)  # type: ignore[call-overload]  # an Integral or a one-element integer tensor
    if not -(2**63) <= result <= _INT64_MAX:
        raise ValueError(f"{fn}(): argument '{name}': Overflow when unpacking long long")
    return result


def _number_arg(value: object, fn: str, name: str) -> float:
    """A ``Number`` argument (histc's ``min``/``max``) as a double, the way torch converts the Scalar: bools,
    integers, floats, numpy scalars and 0-d tensors that do not require grad; complex only without an imaginary
    part. torch refuses other types with TypeError and integers beyond 64 bits with OverflowError."""
    if type(value) is float:  # the common call, without the ABC checks below
        return value
    if type(value) is int and -(2**63) <= value < 2**64:
        return float(value)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.requires_grad:
            raise TypeError(f"{fn}(): argument '{name}' must be Number, not Tensor")
        value = value.item()
    if not isinstance(value, numbers.Number):
        raise TypeError(f"{fn}(): argument '{name}' must be Number, not {_type_name(value)}")
    if isinstance(value, numbers.Integral) and not -(2**63) <= int(value) < 2**64:
        raise OverflowError("int too big to convert")
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        if complex(value).imag != 0:
            raise RuntimeError("value cannot be converted to type double without overflow")
        value = complex(value).real
    return float(value)  # type: ignore[arg-type]  # a Real here (numbers.Real has __float__)


def _check_output_size(length: int, dtype: torch.dtype) -> None:
    """torch refuses an output whose size in bytes overflows int64 with this RuntimeError (the op says ValueError)."""
    if length * dtype.itemsize > _INT64_MAX:
        raise RuntimeError(f"Storage size calculation overflowed with sizes=[{length}]")


# ---------------------------------------------------------------------------------------------------------------
# bincount
# ---------------------------------------------------------------------------------------------------------------


def bincount(input: torch.Tensor, weights: Optional[torch.Tensor] = None, minlength: int = 0) -> torch.Tensor:
    """Drop-in for :func:`torch.bincount`: the same shape, dtype, exception classes and counts.

    ``input`` is 1-D with non-negative integer values (uint8, int8, int16, int32, int64). The output has
    ``max(input.max() + 1, minlength)`` bins: int64 counts without ``weights``; with them float32 sums for float32
    weights and float64 sums for every other weight dtype (converted first, as torch does). An empty ``input`` gives
    int64 zeros of length ``minlength`` without looking at ``weights``, as torch does.

    Weighted sums: with float64 (or converted) weights, torch and the op both sum in float64, in different orders,
    so a bin can differ in its last bit where a sum is inexact. With float32 weights torch keeps a float32 running
    sum, while the op on the CPU sums in float64 and rounds each bin once to float32: the drop-in then equals
    ``torch.bincount(input, weights.double(), minlength).float()`` whenever those float64 sums are exact, and may
    differ from torch's float32 sum in the last bits (it is never less accurate). See the README's drop-in table.

    Like torch, it reads the input's min and max back to the host to size the output (one synchronisation); use
    :func:`torch_dsmhist.histogram` with a fixed ``bins`` to avoid that, e.g. inside CUDA graphs.

    Raises:
        TypeError: ``input`` or ``weights`` is not a tensor, or ``minlength`` is not an int (as torch).
        NotImplementedError: ``input`` is not of an integer dtype above (as torch).
        RuntimeError: ``minlength < 0``, ``input`` not 1-D or with a negative value, ``weights`` not 1-D of
            ``input``'s length (as torch).
    """
    _tensor_arg(input, "bincount", "input", 1)
    _tensor_arg(weights, "bincount", "weights", None, optional=True)
    minlength = _int_arg(minlength, "bincount", "minlength")
    if input.dtype not in _INTEGER_DTYPES:
        raise NotImplementedError(f'"bincount_{input.device.type}" not implemented for {input.dtype}')
    if minlength < 0:
        raise RuntimeError(f"minlength should be >= 0, got {minlength}")
    if input.dim() == 1 and input.numel() == 0:
        # torch returns here, before it looks at the weights: int64 zeros whatever their dtype or length.
        return torch.zeros(minlength, dtype=torch.int64, device=input.device)
    if input.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    smallest, largest = torch.stack(torch.aminmax(input)).tolist()
    if smallest < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if weights is not None and weights.dtype != torch.float32:
        # torch sums float32 weights in float32 and converts every other weight dtype to float64 (complex ones
        # with the same "discards the imaginary part" warning, as this is the same conversion).
        weights = weights.to(torch.float64)
    bins = builtins_max(largest + 1, minlength)
    _check_output_size(bins, torch.int64 if weights is None else weights.dtype)
    return _histogram(input, bins, weight=weights)


# ---------------------------------------------------------------------------------------------------------------
# histc
# ---------------------------------------------------------------------------------------------------------------


def _round_to(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to nearest in ``dtype`` (an overflow gives inf, as C++'s static_cast does)."""
    if dtype == torch.float64:
        return value
    # struct rounds to nearest, as the cast, without a tensor a call (dynamo cannot trace it: the tensors then).
    if dtype == torch.float32 and abs(value) <= _FLOAT32_MAX and not torch.compiler.is_compiling():
        rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
        return rounded
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


def _widen_constant_range(v: float, dtype: torch.dtype) -> Tuple[float, float]:
    """torch's CPU histc range for ``min == max == v`` (Histogram.cpp, ``bins_edges_correction``), in double.

    For float32 and float64 it is ``[min(next value below v in dtype, v - 1), max(next value above, v + 1)]``, so it
    never collapses: at ``|v| >= 2**24`` (float32) / ``2**53`` (float64), where ``v +- 1`` rounds back to ``v``,
    the neighbours one ulp away are the edges. Other dtypes get ``[v - 1, v + 1]`` in double, which collapses for
    ``|v| >= 2**53`` and then fails torch's ``min < max`` check.
    """
    if dtype in (torch.float32, torch.float64):
        finfo = torch.finfo(dtype)
        t = torch.tensor(_round_to(v, dtype), dtype=dtype)
        below = torch.nextafter(t, torch.tensor(finfo.min, dtype=dtype)).item()
        above = torch.nextafter(t, torch.tensor(finfo.max, dtype=dtype)).item()
        # Python's min/max return the first argument unless the second compares smaller/larger: std::min/max's rule.
        return builtins_min(below, v - 1.0), builtins_max(above, v + 1.0)
    return v - 1.0, v + 1.0


def _histc_edges(dtype: torch.dtype, lo: float, hi: float) -> Tuple[float, float]:
    """torch's checks on the outer edges, in its order, and the edges as torch stores them: in ``dtype``.

    torch builds the edges with ``linspace`` in the input's dtype; a bound beyond the dtype's finite range is
    refused there (``Scalar::to<T>`` checks for overflow), other bounds are rounded to nearest.
    """
    if lo != lo or hi != hi or abs(lo) == float("inf") or abs(hi) == float("inf"):
        raise RuntimeError(f"torch.histc: range of [{_fmt(lo)}, {_fmt(hi)}] is not finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if dtype != torch.float64:
        limit = torch.finfo(dtype).max
        if builtins_max(abs(lo), abs(hi)) > limit:
            raise RuntimeError(f"value cannot be converted to type {_C10_TYPE_NAMES[dtype]} without overflow")
    return _round_to(lo, dtype), _round_to(hi, dtype)


def _fmt(value: float) -> str:
    """A bound as torch prints it in its error messages (C++ ostream, 6 significant digits: ``3`` for 3.0, ``inf``,
    and ``-nan`` for a NaN with its sign bit set, as x86's default NaN from aminmax is)."""
    if value != value:
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return f"{value:g}"


def _torch_cpu_bin(value: float, dtype: torch.dtype, bins: int, min: float, max: float) -> int:
    """The bin torch's CPU histc gives one element ``value`` (of ``dtype``) for this call's ``min`` and ``max``; -1
    when it drops it. Called only where every counted element of the input is this one value (see :func:`histc`):
    each element is then binned by the same arithmetic on the same operands, so one element's bin is every
    element's bin, and the count is the number of such elements."""
    one = _torch_histc(torch.tensor([value], dtype=dtype), bins, min, max)
    hit = torch.nonzero(one)
    return int(hit[0, 0]) if hit.numel() else -1


def histc(
    input: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0, *, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Drop-in for :func:`torch.histc` on floating input: torch's CPU result, its dtype and its exception classes, on
    every device, except where the README's drop-in table says otherwise.

    The range is torch's: ``[min, max]``, or the data's min and max when ``min == max`` (one synchronisation to read
    them), widened as torch widens a constant range (``[v - 1, v + 1]``, or one ulp of float32 / float64 where that
    is wider). The bin edges are that range rounded to the input's dtype, as torch stores them.

    Binning: float32 and float64 input is binned with torch's arithmetic, bit for bit, except where
    ``(max - min) * bins`` overflows the dtype (torch computes inf / inf there; the op scales exactly and bins right).
    float16 and bfloat16 input is binned in float32 (as torch's CUDA histc and numpy do; torch's CPU histc computes in
    16 bits, so a value within a 16-bit rounding of an edge can land one bin apart). Where every counted value is one
    value ``v`` (a constant input, or edges that round to one value), the bin is torch's CPU bin for ``v``, found
    by running torch's CPU histc on that one element (exact: see :func:`_torch_cpu_bin`). Counts are exact and rounded
    once to the input's dtype (torch keeps 16-bit running counts, which stop growing at 2048 for float16 and 256
    for bfloat16 per thread).

    ``out``: as torch, a tensor of the input's dtype and device that receives the result (resized to ``[bins]``,
    with torch's warning when it had other elements) and is returned. It is written only after every check passed.

    Raises:
        TypeError: ``input`` or ``out`` is not a tensor, ``bins`` not an int, ``min`` / ``max`` not numbers (as torch).
        NotImplementedError: ``input`` is not float16, bfloat16, float32 or float64 (as torch on the CPU).
        RuntimeError: ``bins <= 0``, a range that is not finite, ``max < min``, a bound the input's dtype cannot
            hold, or ``out`` of another dtype or device (as torch).
    """
    _tensor_arg(input, "histc", "input", 1)
    _tensor_arg(out, "histc", "out", None, optional=True)
    result = _histc(input, bins, min, max)
    if out is None:
        return result
    if out.dtype != result.dtype or out.device != result.device:
        raise RuntimeError(
            f"torch.histc: out must have the input's dtype and device ({result.dtype} on "
            f"{result.device}), got {out.dtype} on {out.device}"
        )
    if tuple(out.shape) != tuple(result.shape):
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                f"which does not match the required output shape {list(result.shape)}.",
                UserWarning,
                stacklevel=2,
            )
        out.resize_(result.shape)
    return out.copy_(result)


def _histc(input: torch.Tensor, bins: object, min: object, max: object) -> torch.Tensor:
    """:func:`histc`'s result in a new tensor."""
    bins = _int_arg(bins, "histc", "bins")
    user_lo = lo = _number_arg(min, "histc", "min")
    user_hi = hi = _number_arg(max, "histc", "max")
    if input.dtype not in _FLOAT_DTYPES:
        raise NotImplementedError(
            f"torch_dsmhist.histc: {input.dtype} input is not supported (torch.histc on the CPU supports float16, "
            "bfloat16, float32 and float64 only); use torch_dsmhist.histogram for integer input"
        )
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    _check_output_size(bins, input.dtype)
    constant = False
    if lo == hi and input.numel() > 0:
        lo, hi = torch.stack(torch.aminmax(input)).double().tolist()
        constant = lo == hi
    data_value = lo  # the constant, when the input is one (before the widening below)
    if lo == hi:
        lo, hi = _widen_constant_range(lo, input.dtype)
    edge_lo, edge_hi = _histc_edges(input.dtype, lo, hi)
    if not constant and edge_lo < edge_hi:
        return _histogram(input, bins, edge_lo, edge_hi).to(input.dtype)
    # Every counted value is one value: the constant, or the single edge (values elsewhere are outside [L, L]).
    value = data_value if constant else edge_lo
    out = torch.zeros(bins, dtype=input.dtype, device=input.device)
    target = _torch_cpu_bin(value, input.dtype, bins, user_lo, user_hi)
    if target >= 0:
        count = torch.tensor(input.numel()) if constant else (input == edge_lo).sum()
        # int64 -> dtype: the same single rounding as the op's counts above.
        out[target] = count.to(device=input.device, dtype=input.dtype)
    return out


builtins_max = max
builtins_min = min
