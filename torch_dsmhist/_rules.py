"""The call rules the Python functions share: argument types, and the way to the C++ argument checks.

Every *value* rule (dtypes, ``bins``, the range, ``out_of_range``, shapes, devices, the output dtype) lives once, in
C++ (``csrc/histogram_args.cpp``). The real ops run it on their tensors; the fake (meta) kernels and the Python
functions reach the same code through :func:`check_call`, which passes what they know of each tensor (dtype, shape,
device) to ``dsmhist::_check_args``. What only Python can see — that an argument is not a tensor, an ``int`` or a
``str`` at all — is checked here, before the op's schema binding would turn it into a ``RuntimeError``: a wrong type
raises ``TypeError``, a bad value ``ValueError``, each naming the argument.
"""

from __future__ import annotations

import numbers
from typing import Any, List, Literal, Optional, Sequence, Tuple, overload

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import _disable_current_modes

_INT64_MAX = (1 << 63) - 1
_DTYPES_BY_NAME = {str(dtype): dtype for dtype in (torch.int64, torch.int32, torch.float32, torch.float64)}


def _type_name(value: Any) -> str:
    return type(value).__name__


@overload
def check_tensor(fn: str, name: str, value: Any, optional: Literal[False] = False) -> torch.Tensor: ...
@overload
def check_tensor(fn: str, name: str, value: Any, optional: bool) -> Optional[torch.Tensor]: ...
def check_tensor(fn: str, name: str, value: Any, optional: bool = False) -> Optional[torch.Tensor]:
    """``value`` must be a tensor (or None when ``optional``): TypeError otherwise. Returns it."""
    if value is None and optional:
        return None
    if not isinstance(value, torch.Tensor):
        allowed = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise TypeError(f"{fn}: {name} must be {allowed}, got {_type_name(value)}")
    return value


def check_bins(fn: str, bins: Any) -> int:
    """``bins`` as an int: TypeError for a non-integer (a float, None, a bool), ValueError outside [1, 2**63 - 1]."""
    if type(bins) is int and 0 < bins <= _INT64_MAX:  # the common case, without the ABC checks below (~1.5 us)
        return bins
    if isinstance(bins, bool) or not isinstance(bins, (numbers.Integral, torch.SymInt)):
        raise TypeError(f"{fn}: bins must be an int, got {_type_name(bins)}")
    if isinstance(bins, torch.SymInt):
        return bins  # type: ignore[return-value]  # a symbolic int under torch.compile: used as an int
    value = int(bins)
    if not 0 < value <= _INT64_MAX:
        raise ValueError(f"{fn}: bins must be > 0 and at most 2**63 - 1, got {value}")
    return value


def plain_histogram_call(input: Any, bins: Any, min: Any, max: Any, weight: Any, out_of_range: Any, dtype: Any) -> bool:
    """Whether every argument already has the type the op takes (a tensor, an int ``bins``, floats or None, a str,
    a dtype or None): such a call goes straight to the op, whose C++ checks see every value. The type checks one by
    one cost about 3 us, a fifth of a small CUDA call's host time."""
    return (
        type(bins) is int
        and 0 < bins <= _INT64_MAX
        and isinstance(input, torch.Tensor)
        and (min is None or type(min) is float)
        and (max is None or type(max) is float)
        and (weight is None or isinstance(weight, torch.Tensor))
        and type(out_of_range) is str
        and (dtype is None or isinstance(dtype, torch.dtype))
    )


def plain_add_call(hist: Any, input: Any, min: Any, max: Any, weight: Any, out_of_range: Any) -> bool:
    """plain_histogram_call's test for histogram_add_: plain tensors (``hist`` too, and no subclass: see
    eager_entry_applies), floats or None, a str."""
    return (
        type(hist) is torch.Tensor
        and (min is None or type(min) is float)
        and (max is None or type(max) is float)
        and type(out_of_range) is str
        and eager_entry_applies(input, weight)
    )


_is_compiling = torch.compiler.is_compiling
_torch_function_mode_enabled = torch._C._is_torch_function_mode_enabled


def eager_entry_applies(input: Any, weight: Any = None) -> bool:
    """Whether a call whose arguments already have the op's types may take the extension's eager entry
    (``torch_dsmhist._C``, csrc/eager_entry.cpp) instead of ``torch.ops``: the same dispatch, without torch.ops's
    conversion of every argument (about 1.3 us a call). Not while torch.compile traces (dynamo traces the torch.ops
    call; ``is_compiling`` is read first, so dynamo reads nothing else), nor for a tensor subclass or under a
    torch-function mode, whose ``__torch_function__`` only torch.ops runs. ``weight``: the call's second tensor, if
    any."""
    return (
        not _is_compiling()
        and type(input) is torch.Tensor
        and (weight is None or type(weight) is torch.Tensor)
        and not _torch_function_mode_enabled()
    )


def check_bound(fn: str, name: str, value: Any) -> Optional[float]:
    """``min`` / ``max`` as a float or None: TypeError for a non-number, ValueError if it does not fit a float."""
    if value is None or type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.SymFloat, torch.SymInt)):
        raise TypeError(f"{fn}: {name} must be a real number or None, got {_type_name(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{fn}: {name} ({value}) is too large for a float") from None


def check_choice(fn: str, name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a str, got {_type_name(value)}")
    return value


def check_dtype(fn: str, name: str, value: Any) -> Optional[torch.dtype]:
    if value is not None and not isinstance(value, torch.dtype):
        raise TypeError(f"{fn}: {name} must be a torch.dtype or None, got {_type_name(value)} ({value!r})")
    return value


def check_edges_call_arguments(
    fn: str, input: Any, edges: Any, weight: Any, out_of_range: Any, dtype: Any, nd: bool
) -> List[torch.Tensor]:
    """The Python types of an edges op's arguments (histogram_edges: one edges tensor; ``nd``: histogramdd's list or
    tuple of them); returns the edges as a list. Values are the C++ checks' to judge."""
    check_tensor(fn, "input", input)
    if nd:
        if isinstance(edges, torch.Tensor) or not isinstance(edges, (list, tuple)):
            raise TypeError(f"{fn}: edges must be a list or tuple of tensors, got {type(edges).__name__}")
        edge_list = [check_tensor(fn, f"edges[{i}]", e) for i, e in enumerate(edges)]
    else:
        edge_list = [check_tensor(fn, "edges", edges)]
    check_tensor(fn, "weight", weight, optional=True)
    check_choice(fn, "out_of_range", out_of_range)
    check_dtype(fn, "dtype", dtype)
    return edge_list


def check_into_memory(
    fn: str, name: str, target: torch.Tensor, input: Optional[torch.Tensor], weight: Optional[torch.Tensor]
) -> None:
    """What the C++ ops refuse before they write ``target`` (named ``name``): overlapping itself, input or weight."""
    torch.ops.dsmhist._check_into_memory(fn, name, target, input, weight)


def _byte_span(t: torch.Tensor) -> Tuple[Any, Any]:
    """The bytes of its storage that ``t`` can touch, as [first, last] (sizes and strides may be symbolic)."""
    first = last = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            last = last + (size - 1) * stride
        else:
            first = first + (size - 1) * stride
    return first * t.element_size(), (last + 1) * t.element_size() - 1


def _may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may share memory: the same storage and intersecting byte spans (conservative for
    interleaved views, which the real kernels' check tells apart)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    if StorageWeakRef(a.untyped_storage()) != StorageWeakRef(b.untyped_storage()):  # type: ignore[no-untyped-call]
        return False
    a_first, a_last = _byte_span(a)
    b_first, b_last = _byte_span(b)
    return bool(a_first <= b_last and b_first <= a_last)


def check_into_memory_traced(
    fn: str, name: str, target: torch.Tensor, input: torch.Tensor, weight: Optional[torch.Tensor]
) -> None:
    """:func:`check_into_memory` for fake tensors (the fake kernels of the ops that write ``target``).

    Under torch.compile the mutation is functionalized: the real kernel then writes a fresh copy of ``target`` that
    is copied back, so it never sees the aliasing it would refuse in eager mode. Fake tensors keep their real
    storages' aliasing, so the same refusal is made here, while tracing, on every backend.
    """
    for other, other_name in ((input, "input"), (weight, "weight")):
        if other is not None and _may_overlap(target, other):
            raise ValueError(
                f"{fn}: {name} and {other_name} share memory; the histogram cannot be written over "
                f"its own {other_name} (clone one)"
            )


def check_int(fn: str, name: str, value: Any) -> int:
    """``value`` must be an int (or, under torch.compile, a symbolic one): TypeError for a bool, a float, None, ...
    Its value is the C++ checks' to judge."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{fn}: {name} must be an int, got {_type_name(value)}")
    return value  # type: ignore[return-value]  # a SymInt is used as an int


def check_flag(fn: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {_type_name(value)}")
    return value


def call_arguments(
    fn: str, input: Any, min: Any, max: Any, weight: Any, out_of_range: Any, dtype: Any = None
) -> Tuple[Optional[float], Optional[float]]:
    """The type checks every histogram function shares (all but ``bins``); returns (min, max) as floats or None."""
    check_tensor(fn, "input", input)
    min, max = check_bound(fn, "min", min), check_bound(fn, "max", max)
    check_tensor(fn, "weight", weight, optional=True)
    check_choice(fn, "out_of_range", out_of_range)
    check_dtype(fn, "dtype", dtype)
    return min, max


def histogram_arguments(
    fn: str, input: Any, bins: Any, min: Any, max: Any, weight: Any, out_of_range: Any, dtype: Any
) -> Tuple[int, Optional[float], Optional[float]]:
    """The type checks of a call with ``bins`` (histogram, batched_histogram): :func:`check_bins`, then
    :func:`call_arguments`; returns (bins, min, max)."""
    bins = check_bins(fn, bins)
    min, max = call_arguments(fn, input, min, max, weight, out_of_range, dtype)
    return bins, min, max


def _facts(t: Optional[torch.Tensor]) -> Tuple[Optional[torch.dtype], Optional[List[Any]], Optional[torch.device]]:
    if t is None:
        return None, None, None
    return t.dtype, list(t.shape), t.device


def check_call(
    kind: str,
    op: str,
    input: torch.Tensor,
    bins: int,
    bounds: Tuple[Optional[float], Optional[float]] = (None, None),
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    *,
    batched: bool = False,
    target: Optional[torch.Tensor] = None,
    accumulate: bool = False,
) -> torch.dtype:
    """Run the C++ checks of op ``op`` on these arguments' metadata; return the output dtype (one rule, in C++).

    ``bounds`` is the call's ``(min, max)``. ``kind`` selects the op's rules: "histogram" (histogram,
    batched_histogram), "into" (histogram_add_ and histogram(out=); ``target`` is hist / out), "range_keys"
    (``target`` is range_keys), "finite_range", "bin_indices". Raises what the real op raises for bad arguments
    (ValueError naming the argument). It reads only dtypes, shapes and devices, so it works on fake and meta tensors,
    with symbolic sizes under torch.compile.
    """
    weight_dtype, weight_shape, weight_device = _facts(weight)
    target_dtype, target_shape, target_device = _facts(target)
    # A check touches no tensor data: run it as plain C++ even under FakeTensorMode / tracing modes.
    with _disable_current_modes():
        name = torch.ops.dsmhist._check_args(
            kind,
            op,
            input.dtype,
            list(input.shape),
            input.device,
            bins,
            bounds[0],
            bounds[1],
            weight_dtype,
            weight_shape,
            weight_device,
            out_of_range,
            dtype,
            batched,
            target_dtype,
            target_shape,
            target_device,
            accumulate,
        )
    return _DTYPES_BY_NAME[name]


def check_edges_call(
    op: str,
    input: torch.Tensor,
    edges: Sequence[torch.Tensor],
    weight: Optional[torch.Tensor],
    out_of_range: str,
    dtype: Optional[torch.dtype],
    nd: bool,
) -> torch.dtype:
    """:func:`check_call` for the bin-edges ops (``nd``: histogramdd's rules, else histogram_edges's): the C++
    checks of ``dsmhist::_check_edges_args`` on the tensors' metadata; returns the output dtype."""
    weight_dtype, weight_shape, weight_device = _facts(weight)
    with _disable_current_modes():
        name = torch.ops.dsmhist._check_edges_args(
            op,
            input.dtype,
            list(input.shape),
            input.device,
            [e.dtype for e in edges],
            [e.dim() for e in edges],
            [size for e in edges for size in e.shape],
            [e.device for e in edges],
            weight_dtype,
            weight_shape,
            weight_device,
            out_of_range,
            dtype,
            nd,
        )
    return _DTYPES_BY_NAME[name]


def check_moe_call(
    op: str,
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    expert_map: Optional[torch.Tensor],
    pad_sorted_ids: bool,
) -> Tuple[Any, Any]:
    """:func:`check_call` for the MoE routing ops: the C++ checks of ``dsmhist::_check_moe_args`` on the tensors'
    metadata; returns the sizes of the sorted ids and of the expert ids (symbolic under torch.compile)."""
    map_dtype, map_shape, map_device = _facts(expert_map)
    with _disable_current_modes():
        sorted_size, expert_blocks = torch.ops.dsmhist._check_moe_args(
            op,
            topk_ids.dtype,
            list(topk_ids.shape),
            topk_ids.device,
            block_size,
            num_experts,
            map_dtype,
            map_shape,
            map_device,
            pad_sorted_ids,
        )
    return sorted_size, expert_blocks
