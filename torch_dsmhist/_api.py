"""The Python API over torch.ops.dsmhist."""

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple, Union

import torch

from . import _C, _rules

__all__ = [
    "histogram",
    "histogram_add_",
    "batched_histogram",
    "plan",
    "Plan",
    "force_tier",
    "built_with_cuda",
]


# The op's overload itself: calling it skips the overload resolution of torch.ops.dsmhist.histogram (~0.6 us).
_HISTOGRAM = torch.ops.dsmhist.histogram.default


@dataclass(frozen=True)
class TierInfo:
    """A row of the extension's tier table (csrc/common/tiers.h): a tier's name, whether the planner may pick it,
    and whether it runs as a thread block cluster (so its cluster size may be forced)."""

    name: str
    planner_may_pick: bool
    cluster: bool


def tier_table() -> Tuple[TierInfo, ...]:
    """Every CUDA tier the extension has, in the planner's order of preference (tests and benchmarks iterate this
    instead of listing tiers). ``force_tier`` also takes ``"auto"``, the planner's choice."""
    names, picks, clusters = torch.ops.dsmhist._tiers()
    return tuple(TierInfo(n, bool(p), bool(c)) for n, p, c in zip(names, picks, clusters))


def histogram(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    *,
    out: Optional[torch.Tensor] = None,
    accumulate: bool = False,
) -> torch.Tensor:
    """Count the values of ``input`` into ``bins`` bins; returns a 1-D tensor ``[bins]`` on ``input``'s device.

    Args:
        input: any shape (flattened) and layout; dtype uint8, int8, int16, int32, int64, float16, bfloat16,
            float32 or float64; CPU or CUDA.
        bins: number of bins, > 0.
        min, max: give both or neither. With both, ``bins`` equal-width bins over ``[min, max]`` (a value equal to
            ``max`` counts in the last bin, as in ``torch.histc``). With neither: integer input bins by value
            (bin = value, as ``torch.bincount(input, minlength=bins)``); floating input takes the range from the
            data's finite min and max, found on the device (as ``torch.histc(min=0, max=0)``; a constant input
            ``v`` gives ``[v - 1, v + 1]``, an empty one ``[-1, 1]``).
        weight: optional floating tensor of ``input``'s shape: each value adds its weight instead of 1. The output
            is float32 for float16/bfloat16/float32 weights and float64 for float64 weights.
        out_of_range: ``"ignore"`` drops values outside the bins (torch.histc, numpy); ``"clamp"`` counts them in
            the first / last bin. NaN is always dropped.
        dtype: count dtype without weights: ``torch.int64`` (default) or ``torch.int32`` (refused with
            ``ValueError`` when one histogram has more than 2**31 - 1 elements, as a bin could overflow).
        out: optional 1-D tensor ``[bins]`` to write the histogram into (and return). Its dtype is the count or sum
            dtype: int64/int32 without weights (or float32/float64, see :func:`histogram_add_`), float32/float64
            with them.
        accumulate: with ``out``, add to its values instead of replacing them (see :func:`histogram_add_`).

    Bins are computed as ``(x - min) * bins / (max - min)`` truncated, in float32 for 8/16-bit integer and
    16/32-bit float input and in float64 for int32, int64 and float64 input: the arithmetic of ``torch.histc``
    (except where ``(max - min) * bins`` would overflow: then every operand is first scaled by 2**-64, exactly).

    On CUDA the call runs on the current stream, never synchronises with the host and allocates only the output
    (plus 16 bytes when the range comes from the data), so it can be captured in CUDA graphs and compiled with
    ``torch.compile(fullgraph=True)``. Integer counts are exact and deterministic. Weighted sums on CUDA use
    floating-point atomics (the rounding varies run to run) unless ``torch.use_deterministic_algorithms(True)`` is
    on: then they take the deterministic fixed-point path (bitwise identical run to run; see docs/semantics.md, "Determinism").

    Raises:
        TypeError: an argument of the wrong Python type (a list as ``input``, ``bins=4.5``, ``dtype="int32"``).
        ValueError: a bad value; the message names the argument and the allowed values.
        torch.OutOfMemoryError: an output too large for the device's memory (the message names bins and bytes).

    Example:
        >>> torch_dsmhist.histogram(torch.tensor([0, 1, 1, 3]), bins=4)
        tensor([1, 2, 0, 1])
    """
    if (
        out is None
        and accumulate is False
        and _rules.plain_histogram_call(input, bins, min, max, weight, out_of_range, dtype)
    ):
        if _rules.eager_entry_applies(input, weight):
            return _C.histogram(input, bins, min, max, weight, out_of_range, dtype)
        plain: torch.Tensor = _HISTOGRAM(input, bins, min, max, weight, out_of_range, dtype)
        return plain
    fn = "torch_dsmhist.histogram"
    bins, min, max = _rules.histogram_arguments(fn, input, bins, min, max, weight, out_of_range, dtype)
    _rules.check_tensor(fn, "out", out, optional=True)
    _rules.check_flag(fn, "accumulate", accumulate)
    if out is None:
        if accumulate:
            raise ValueError(f"{fn}: accumulate=True needs out= (the histogram to add into)")
        result: torch.Tensor = torch.ops.dsmhist.histogram(input, bins, min, max, weight, out_of_range, dtype)
        return result
    if tuple(out.shape) != (bins,):
        raise ValueError(f"{fn}: out must have shape ({bins},), got {tuple(out.shape)}")
    # One op checks everything (out's dtype and device, overlap with input or weight) before it writes out.
    torch.ops.dsmhist._histogram_out(out, input, min, max, weight, out_of_range, dtype, accumulate)
    return out


def histogram_add_(
    hist: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
) -> torch.Tensor:
    """Add the histogram of ``input`` into ``hist`` in place and return ``hist``: a running histogram.

    ``hist`` is a 1-D tensor ``[bins]`` on ``input``'s device and decides the bin count and the dtype the counts
    accumulate in: int64 or int32 without ``weight`` (an int32 ``hist`` wraps modulo 2**32 across calls, as int32
    tensor addition does; a single call of more than 2**31 - 1 elements into it is refused), float32 or float64
    with it (every floating weight dtype may add into either). Counts may also accumulate in a float32 / float64
    ``hist`` (a model's float buffer of tokens per expert): each call's counts are made as int64 and added once, exactly
    while every bin stays below 2**24 / 2**53 (a single call of more elements than that is refused). Nothing is zeroed
    and, on CUDA, nothing synchronises with the host, so a loop over a dataset's batches runs asynchronously and can be
    captured in a CUDA graph.

    The other arguments mean what they mean for :func:`histogram`, with one restriction: floating input needs
    ``min`` and ``max``, since a range taken from each batch's data would give different bins in every call.

    Raises:
        TypeError: an argument of the wrong Python type, named in the message.
        ValueError: a bad value (hist's shape, dtype or device, a missing range, ...), named in the message.

    Example:
        >>> hist = torch.zeros(4, dtype=torch.int64)
        >>> for batch in (torch.tensor([0, 1]), torch.tensor([1, 3])):
        ...     torch_dsmhist.histogram_add_(hist, batch)
        >>> hist
        tensor([1, 2, 0, 1])

    The registered op ``torch.ops.dsmhist.histogram_add_`` returns nothing (torch.compile cannot functionalize custom
    ops whose output aliases an input); this function returns ``hist``.
    """
    if _rules.plain_add_call(hist, input, min, max, weight, out_of_range):  # the op's C++ checks see every value
        _C.histogram_add_(hist, input, min, max, weight, out_of_range)
        return hist
    fn = "torch_dsmhist.histogram_add_"
    _rules.check_tensor(fn, "hist", hist)
    min, max = _rules.call_arguments(fn, input, min, max, weight, out_of_range)
    torch.ops.dsmhist.histogram_add_(hist, input, min, max, weight, out_of_range)
    return hist


def batched_histogram(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """One histogram per row: ``input`` ``[..., N]`` gives ``[..., bins]``, row ``i`` the histogram of ``input[i]``.

    Binning, weights, ``out_of_range`` and ``dtype`` mean what they mean for :func:`histogram`. Without ``min`` /
    ``max``, floating input takes one range from the finite min and max of the whole input (found on the device), so
    every row shares the same bin edges. ``weight`` has ``input``'s shape. Any strides are read in place.

    On CUDA it runs as one launch: many short rows are counted by many small blocks at once (each row by one block,
    written without atomics), a few long rows are split across the GPU (the cluster tier per row for bin counts past
    one block's shared memory). Same stream, synchronisation and determinism rules as :func:`histogram`.

    Raises:
        TypeError: an argument of the wrong Python type, named in the message.
        ValueError: a bad value (including a 0-d input), named in the message.

    Example:
        >>> torch_dsmhist.batched_histogram(torch.tensor([[0, 1, 1], [2, 2, 2]]), bins=3)
        tensor([[1, 2, 0],
                [0, 0, 3]])
    """
    fn = "torch_dsmhist.batched_histogram"
    bins, min, max = _rules.histogram_arguments(fn, input, bins, min, max, weight, out_of_range, dtype)
    result: torch.Tensor = torch.ops.dsmhist.batched_histogram(input, bins, min, max, weight, out_of_range, dtype)
    return result


@dataclass(frozen=True)
class Plan:
    """The strategy :func:`histogram` uses for a bin count on a device.

    Attributes:
        tier: ``"shared"`` (block-private shared memory), ``"cluster"`` (bins split across the shared memory of a
            thread block cluster's blocks, each counting its own bin range), ``"partition"`` (values grouped by
            chunk of bins, each chunk counted in one block's shared memory), ``"global"`` (global-memory atomics),
            ``"cluster_dsmem"`` (only when forced: the CUDA guide's remote adds through distributed shared memory),
            ``"exchange"`` (counts only: each value passed to the block of a cluster owning its bin through
            distributed shared memory; planned for integer input binned by value at 232449-640000 bins on an H100) or
            ``"cpu"``.
        cluster_size: blocks per cluster (1 outside the cluster tiers; 0 on the CPU). In tier ``"cluster"`` with
            counts, ``cluster_size // ceil(bins / bins_per_block)`` blocks keep each range of bins (replicas that
            each read a share of the input and sum their counts through distributed shared memory).
        shared_bytes_per_block: dynamic shared memory each block uses.
        threads_per_block: CUDA threads per block.
        bins_per_block: bins each block keeps in shared memory.
        device: the device planned for.
        grid_blocks: blocks in the grid of the call :func:`plan` was given (``n``, or ``rows`` and ``row_length``);
            ``None`` when it was given none, or on the CPU.

    Given a call, ``tier`` is that call's (the planner takes ``"global"`` for 16384 bins or more with fewer than 32
    elements a bin, and ``"exchange"`` and ``"partition"`` only from 2^23 elements a histogram), and ``cluster_size``,
    ``shared_bytes_per_block``, ``threads_per_block`` and ``grid_blocks`` are what its launch uses (all 0 for an
    empty call: nothing is launched). Without one, they are what a large 1-D call (more than 65536 elements) gets.
    Tier ``"shared"`` reshapes three kinds of call: a small 1-D call runs as one cluster of up to 8 blocks that sums
    their bins through distributed shared memory, a batched call with short rows gets smaller blocks, and 1-byte
    input counted in work items too short for its 32 KB of byte-value tallies goes without them.
    """

    tier: str
    cluster_size: int
    shared_bytes_per_block: int
    threads_per_block: int
    bins_per_block: int
    device: torch.device
    grid_blocks: Optional[int] = None


def plan(
    bins: int,
    device: Union[torch.device, str, int, None] = None,
    dtype: torch.dtype = torch.int32,
    weight_dtype: Optional[torch.dtype] = None,
    *,
    n: Optional[int] = None,
    rows: Optional[int] = None,
    row_length: Optional[int] = None,
) -> Plan:
    """Report the strategy :func:`histogram` would use for ``bins`` bins of ``dtype`` input on ``device``.

    ``device`` defaults to the current CUDA device when one is available, else the CPU. A tier forced with
    :func:`force_tier` is reflected (and an impossible forced tier raises ``ValueError`` here as in the op).

    Give a call to get its launch shape (see :class:`Plan`): ``n``, the elements of a :func:`histogram` /
    :func:`histogram_add_` call, or ``rows`` and ``row_length``, the shape of a :func:`batched_histogram` call
    (``[rows, row_length]`` values, one histogram per row). Without one, the shape reported is a large 1-D call's.

    Raises:
        TypeError: ``bins``, ``n``, ``rows`` or ``row_length`` not an int, or ``dtype`` not a torch.dtype.
        ValueError: a bad value, or a forced tier that cannot hold the bins.
    """
    fn = "torch_dsmhist.plan"
    bins = _rules.check_bins(fn, bins)
    _rules.check_dtype(fn, "dtype", dtype)
    _rules.check_dtype(fn, "weight_dtype", weight_dtype)
    call_rows, call_length, batched = _plan_call(fn, n, rows, row_length)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    (tier, cluster, shared, threads, per_block, launch_threads, launch_cluster, launch_grid, launch_shared) = (
        torch.ops.dsmhist._plan(bins, device, dtype, weight_dtype, call_rows, call_length, batched)
    )
    given = device.type == "cuda" and (n is not None or rows is not None)
    return Plan(
        tier=tier,
        cluster_size=launch_cluster if given else cluster,
        shared_bytes_per_block=launch_shared if given else shared,
        threads_per_block=launch_threads if given else threads,
        bins_per_block=per_block,
        device=device,
        grid_blocks=launch_grid if given else None,
    )


def _plan_call(fn: str, n: Optional[int], rows: Optional[int], row_length: Optional[int]) -> Tuple[int, int, bool]:
    """(rows, row_length, batched) of the call plan() was given; rows 0 when none was."""
    for name, value in (("n", n), ("rows", rows), ("row_length", row_length)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{fn}: {name} must be an int or None, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{fn}: {name} must be >= 0, got {value}")
    if n is not None and (rows is not None or row_length is not None):
        raise ValueError(f"{fn}: give n (a 1-D call) or rows and row_length (a batched call), not both")
    if (rows is None) != (row_length is None):
        raise ValueError(f"{fn}: rows and row_length go together (the shape of a batched call)")
    if n is not None:
        return (1, n, False) if n > 0 else (0, 0, False)
    if rows is not None and row_length is not None:
        return (rows, row_length, True) if rows * row_length > 0 else (0, 0, True)
    return 0, 0, False


@contextlib.contextmanager
def force_tier(
    tier: str, cluster_size: Optional[int] = None, *, max_cluster_size: Optional[int] = None
) -> Iterator[None]:
    """Force the CUDA strategy tier within a ``with`` block, in this thread (tests and benchmarks).

    ``tier`` is ``"auto"``, ``"shared"``, ``"exchange"`` (counts only), ``"partition"``, ``"cluster"``,
    ``"global"`` or ``"cluster_dsmem"`` (the CUDA guide's design, which the planner never picks); ``cluster_size``
    (1..16, cluster tiers only) fixes the cluster size. ``max_cluster_size`` (1..16) plans as on a device whose
    largest launchable cluster is that size (to test devices that cannot run 16-block clusters). A forced tier that
    cannot hold the bins raises ``ValueError`` at the call. CPU calls ignore it.

    Raises:
        TypeError: ``tier`` is not a str, or a cluster size is not an int or None.
        ValueError: an unknown tier, a cluster size outside 1..16, or ``cluster_size`` for a tier without clusters.
    """
    fn = "torch_dsmhist.force_tier"
    _rules.check_choice(fn, "tier", tier)
    for name, value in (("cluster_size", cluster_size), ("max_cluster_size", max_cluster_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{fn}: {name} must be an int or None, got {type(value).__name__}")
    previous = torch.ops.dsmhist._get_tier_override()
    torch.ops.dsmhist._set_tier_override(tier, cluster_size or 0, max_cluster_size or 0)
    try:
        yield
    finally:
        torch.ops.dsmhist._set_tier_override(*previous)


def built_with_cuda() -> bool:
    """Whether this build of the extension contains the CUDA kernels."""
    return bool(torch.ops.dsmhist._built_with_cuda())
