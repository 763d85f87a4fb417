"""Global histograms of data sharded across processes (GPUs, hosts) through :mod:`torch.distributed`.

Every rank of a process group calls the same function with its own shard of the data; each rank counts its shard
with the local op, then one all-reduce (sum) of the histogram leaves the histogram of all the shards together on
every rank. Counts are exact integers, so the result equals the single-process histogram of the concatenated data.
The transport is whatever ``torch.distributed`` was initialised with: NCCL for CUDA tensors, gloo for CPU tensors.

A floating input with no ``min``/``max`` takes its range from the data of *all* ranks: the ranks' finite minima
and maxima are merged with one small all-reduce on the device before anyone bins, so every rank uses the same
bin edges (the single-process rule, including ``[v - 1, v + 1]`` for a constant input and ``[-1, 1]`` when no rank
has a finite value).

The agreement check (``check=True``, the default). Before any histogram is exchanged, each rank prepares its call
(binding and checking the arguments and counting its shard) inside one guard, then one all-gather of a few integers
per rank carries either the rank's call signature (the function, ``bins``, the binning mode and range,
``out_of_range``, ``accumulate``, the count or sum dtype, the device type, the batch shape, the edges' count and dtype
for the edges ops, the element count) or the
fact that its preparation raised. Every rank then decides the same thing from the same table:

- a rank whose preparation raised (any exception type, including a call Python could not bind, and any
  ``BaseException``: a ``KeyboardInterrupt`` or ``SystemExit`` while the rank prepares its call) re-raises its own
  error, the same object, once the others have been told; every other rank raises ``RuntimeError`` naming the
  failing group rank(s) and their errors;
- otherwise a difference raises ``ValueError`` on every rank, naming the argument and each rank's value.

On those error paths one more exchange (two small all-gathers) carries the errors' or the values' text. When the
group has a CPU backend (gloo, e.g. ``init_process_group("cpu:gloo,cuda:nccl")``) the check runs on the host and
never waits for the GPU; with an NCCL-only group it runs through NCCL and reads the result back (one host
synchronisation), which CUDA-graph capture forbids: pass ``check=False`` there once the setup is known to agree.

What the check cannot cover (see docs/api.md, torch_dsmhist.distributed):

- ``torch.distributed`` not initialised, a ``group`` that is not a process group, or a rank outside ``group``:
  there is no group to tell, so that rank raises at once.
- ``check`` itself must be the same on every rank; ``check=False`` skips the exchange: the local checks still run,
  but a rank whose call is refused raises alone, and the other ranks wait in the all-reduce (gloo: until that
  process exits; NCCL: until the group's timeout, as NCCL does not notice the exit); ranks whose calls differ get a wrong result, a hang, or an abort (gloo aborts every
  process with SIGABRT when the histograms' sizes differ).
- After the check, a rank can still fail to allocate its histogram on the data-derived-range path (its arguments
  were all checked before); it raises alone and the others wait in the all-reduce, as above.

Example, under ``torchrun --nproc-per-node=2 script.py``::

    import torch, torch.distributed as dist
    import torch_dsmhist.distributed as dhist

    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    shard = torch.randint(0, 4096, (1 << 28,), device="cuda")  # this rank's part of the data
    hist = dhist.histogram(shard, bins=4096)                    # the same global histogram on every rank
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _api, _rules
from ._collective import (
    DATA_RANGE,
    NO_BINNING,
    GroupType,
    PendingHistogram,
    Prepared,
    call_signature,
    collective,
)
from ._distributed_edges import histogram_edges, histogramdd
from ._distributed_local import (
    HISTOGRAM_DTYPES,
    binning_mode,
    check_target,
    collective_arguments,
    data_range_step,
    refuse_tangents,
    write_into,
)

__all__ = [
    "histogram",
    "histogram_add_",
    "batched_histogram",
    "histogram_edges",
    "histogramdd",
    "all_reduce_histogram",
    "PendingHistogram",
]


# ---------------------------------------------------------------------------------------------------------------
# The public functions: each `prepare` below runs inside the guard on its rank
# ---------------------------------------------------------------------------------------------------------------


@collective
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
    group: GroupType = None,
    async_op: bool = False,
    check: bool = True,
) -> Prepared:
    """The histogram of every rank's ``input`` together, returned on every rank of ``group``.

    Arguments mean what they mean for :func:`torch_dsmhist.histogram`, applied to the concatenation of the ranks'
    inputs (each rank's ``input`` may have its own shape and size, including empty). Without ``min``/``max``,
    floating input is binned over the finite min and max of all ranks' data. ``weight`` sums are added rank by
    rank in the backend's order (exact for counts; for sums, rounding may differ from a single-process sum). The
    result does not require grad (the all-reduce is not differentiable).

    Args:
        out: optional ``[bins]`` tensor for the result, written only once the global histogram is known;
            ``accumulate=True`` adds the global histogram of this call into it (on every rank) instead, and then,
            as for :func:`torch_dsmhist.histogram`, floating input needs ``min`` and ``max`` (``ValueError``).
        group: the process group (default: the default group); every rank of it must call with the same
            arguments, except the data.
        async_op: return a :class:`PendingHistogram` whose ``wait()`` gives the result, instead of the result.
        check: exchange the ranks' call signatures (or their errors) first (see the module docstring); ``False``
            skips that collective (required under CUDA-graph capture with an NCCL-only group), and then a rank
            whose call is refused raises alone while the others wait in the all-reduce, and ranks whose calls
            differ get a wrong result, a hang, or an abort (gloo aborts with SIGABRT when the sizes differ).

    Raises:
        TypeError: an argument of the wrong Python type (or a call that cannot be bound), on this rank.
        ValueError: a bad argument on this rank, or (on every rank) ranks whose arguments differ.
        RuntimeError: torch.distributed is not initialised, this rank is not in ``group``, or another rank's
            preparation raised (the message names the group rank and its error).

    Example (every rank)::

        hist = torch_dsmhist.distributed.histogram(shard, bins=4096)
    """
    op = "torch_dsmhist.distributed.histogram"
    bins, min, max = _rules.histogram_arguments(op, input, bins, min, max, weight, out_of_range, dtype)
    out = _rules.check_tensor(op, "out", out, optional=True)
    accumulate = _rules.check_flag(op, "accumulate", accumulate)
    async_op = collective_arguments(op, async_op, check, group, "input", input)
    refuse_tangents(op, weight=weight, out=out)
    mode = binning_mode(input, min, max)
    if accumulate and out is None:
        raise ValueError(f"{op}: accumulate=True needs out= (the histogram to add into)")

    if out is None:
        count_dtype = _rules.check_call(
            "histogram", "torch_dsmhist.histogram", input, bins, (min, max), weight, out_of_range, dtype
        )
    else:
        check_target(op, "out", out, input, weight)
        if tuple(out.shape) != (bins,):
            raise ValueError(f"{op}: out must have shape ({bins},), got {tuple(out.shape)}")
        if dtype is not None and out.dtype != dtype:
            raise ValueError(f"{op}: out has dtype {out.dtype} but dtype={dtype} was given")
        # The single-process histogram(out=)'s own checks (dsmhist._histogram_out), accumulate's included: floating
        # input without min/max cannot add into out, since each call's data would give it other bins.
        _rules.check_call(
            "into",
            "torch_dsmhist.histogram",
            input,
            bins,
            (min, max),
            weight,
            out_of_range,
            dtype,
            target=out,
            accumulate=accumulate,
        )
        count_dtype = out.dtype

    binned_step = None
    if mode == DATA_RANGE:
        # Counts take out's dtype when it is a count dtype; sums take the weight's (as the single-process op).
        op_dtype = (
            dtype if weight is not None or out is None or out.dtype not in (torch.int64, torch.int32) else out.dtype
        )
        range_dtype = _rules.check_call(
            "histogram", "torch_dsmhist.histogram", input, bins, (None, None), weight, out_of_range, op_dtype
        )
        if out is not None and out.dtype != range_dtype:
            raise ValueError(
                f"{op}: out has dtype {out.dtype}, but the histogram of this call over the data's "
                f"range is {range_dtype}"
            )
        tensor, binned_step = data_range_step(op, input, bins, weight, out_of_range, op_dtype, batched=False)
    elif out is None:
        with torch.no_grad():  # the all-reduce is not differentiable: no rank's result requires grad
            tensor = torch.ops.dsmhist.histogram(input, bins, min, max, weight, out_of_range, dtype)
    else:
        # Into a fresh tensor of out's dtype: out itself is written only once the sum has arrived.
        with torch.no_grad():
            tensor = _api.histogram_add_(
                torch.zeros(bins, dtype=out.dtype, device=out.device), input, min, max, weight, out_of_range
            )

    codes, shown = call_signature(op, bins, mode, min, max, out_of_range, accumulate, count_dtype, input.device, ())
    return Prepared(
        codes,
        shown,
        input.numel(),
        count_dtype == torch.int32,
        tensor,
        binned_step,
        None if out is None else write_into(out, accumulate),
        async_op,
    )


@collective
def histogram_add_(
    hist: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    *,
    group: GroupType = None,
    async_op: bool = False,
    check: bool = True,
) -> Prepared:
    """Add the histogram of every rank's ``input`` together into ``hist`` on every rank; returns ``hist``.

    A running global histogram over a sharded dataset: start every rank from the same ``hist`` (e.g. zeros) and
    every rank holds the same global running histogram after each call. ``hist`` decides bins and dtype, as for
    :func:`torch_dsmhist.histogram_add_` (floating input needs ``min``/``max``), and, as there, must not share
    memory with ``input`` or ``weight`` (``ValueError``). An int32 ``hist`` is refused when one call's inputs across
    all ranks exceed 2**31 - 1 elements (with ``check=True``; it wraps modulo 2**32 across calls). ``group``,
    ``async_op`` and ``check`` as in :func:`histogram`.

    Each call does one all-reduce of ``bins`` values. Streaming many batches, it is cheaper to accumulate locally
    with :func:`torch_dsmhist.histogram_add_` and sum once at the end with :func:`all_reduce_histogram`.
    """
    op = "torch_dsmhist.distributed.histogram_add_"
    hist = _rules.check_tensor(op, "hist", hist)
    min, max = _rules.call_arguments(op, input, min, max, weight, out_of_range)
    async_op = collective_arguments(op, async_op, check, group, "input", input)
    refuse_tangents(op, weight=weight)
    check_target(op, "hist", hist, input, weight)
    # The local op checks hist's shape, dtype and device against input and weight; into a fresh copy of hist's
    # shape, since hist itself is written only once the sum has arrived.
    with torch.no_grad():
        partial = torch.zeros(hist.shape, dtype=hist.dtype, device=hist.device)
        tensor = _api.histogram_add_(partial, input, min, max, weight, out_of_range)
    codes, shown = call_signature(
        op, hist.numel(), binning_mode(input, min, max), min, max, out_of_range, True, hist.dtype, input.device, ()
    )
    return Prepared(
        codes,
        shown,
        input.numel(),
        hist.dtype == torch.int32,
        tensor,
        None,
        write_into(hist, accumulate=True),
        async_op,
    )


@collective
def batched_histogram(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    *,
    group: GroupType = None,
    async_op: bool = False,
    check: bool = True,
) -> Prepared:
    """One global histogram per row: ``input`` ``[..., N_rank]`` on each rank gives ``[..., bins]`` on every rank.

    Row ``i`` of the result is the histogram of row ``i`` of every rank's input together: the leading dims must be
    the same on every rank, the row length ``N`` may differ. Without ``min``/``max``, floating input takes one range
    from all rows of all ranks. Other arguments as in :func:`torch_dsmhist.batched_histogram` and :func:`histogram`.
    """
    op = "torch_dsmhist.distributed.batched_histogram"
    bins, min, max = _rules.histogram_arguments(op, input, bins, min, max, weight, out_of_range, dtype)
    async_op = collective_arguments(op, async_op, check, group, "input", input)
    refuse_tangents(op, weight=weight)
    if input.dim() == 0:
        raise ValueError(f"{op}: input must have at least 1 dim ([..., N]), got a 0-d tensor")
    mode = binning_mode(input, min, max)
    binned_step = None
    if mode == DATA_RANGE:
        tensor, binned_step = data_range_step(op, input, bins, weight, out_of_range, dtype, batched=True)
    else:
        with torch.no_grad():
            tensor = torch.ops.dsmhist.batched_histogram(input, bins, min, max, weight, out_of_range, dtype)
    count_dtype = _rules.check_call(
        "histogram",
        "torch_dsmhist.batched_histogram",
        input,
        bins,
        (min, max),
        weight,
        out_of_range,
        dtype,
        batched=True,
    )
    codes, shown = call_signature(
        op, bins, mode, min, max, out_of_range, False, count_dtype, input.device, tuple(input.shape[:-1])
    )
    return Prepared(codes, shown, input.shape[-1], count_dtype == torch.int32, tensor, binned_step, None, async_op)


@collective
def all_reduce_histogram(
    hist: torch.Tensor, *, group: GroupType = None, async_op: bool = False, check: bool = True
) -> Prepared:
    """Sum the ranks' local histograms in place: afterwards every rank's ``hist`` is the global one; returns it.

    The end of a streaming pass: each rank adds its batches into a local ``hist`` with
    :func:`torch_dsmhist.histogram_add_` (no communication per batch), then one call of this sums them. ``hist``
    may have any shape (a batched histogram too) but must hold int64, int32, float32 or float64 (the histograms'
    dtypes) and have the same shape and dtype on every rank (checked with ``check=True``); int32 sums wrap modulo
    2**32.
    """
    op = "torch_dsmhist.distributed.all_reduce_histogram"
    hist = _rules.check_tensor(op, "hist", hist)
    async_op = collective_arguments(op, async_op, check, group, "hist", hist)
    refuse_tangents(op, hist=hist)
    if hist.dtype not in HISTOGRAM_DTYPES:
        raise ValueError(f"{op}: hist must hold int64, int32, float32 or float64 values, got {hist.dtype}")
    check_target(op, "hist", hist, None, None)
    codes, shown = call_signature(
        op, hist.numel(), NO_BINNING, None, None, "", False, hist.dtype, hist.device, tuple(hist.shape)
    )
    if hist.is_contiguous():
        return Prepared(codes, shown, 0, False, hist, None, None, async_op)
    return Prepared(codes, shown, 0, False, hist.contiguous(), None, write_into(hist, accumulate=False), async_op)
