"""Global histograms of data sharded across processes (GPUs, hosts) through :mod:`torch.distributed`.

Every rank of a process group calls the same function with its own shard of the data; each rank counts its shard
with the local op, then one all-reduce (sum) of the histogram leaves the histogram of all the shards together on
every rank. Counts are exact integers, so the result equals the single-process histogram of the concatenated data.
The transport is whatever ``torch.distributed`` was initialised with: NCCL for CUDA tensors, gloo for CPU tensors.

A floating input with no ``min``/``max`` takes its range from the data of *all* ranks: the ranks' finite minima
and maxima are merged with one small all-reduce on the device before anyone bins, so every rank uses the same
bin edges (the single-process rule, including ``[v - 1, v + 1]`` for a constant input and ``[-1, 1]`` when no rank
has a finite value).

Before any histogram is exchanged, the ranks check that they made the same call (``check=True``): one all-gather
of a few integers per rank (the op, ``bins``, the binning mode and range, ``out_of_range``, the count or sum dtype,
the batch shape, the element count, and whether the rank's local step failed). A difference raises ``ValueError``
on every rank, naming the argument and the ranks' values, instead of a hang or a silently wrong sum; a rank whose
local histogram raised re-raises its error and the others raise ``RuntimeError`` naming it. When the group has a
CPU backend (gloo, e.g. ``init_process_group("cpu:gloo,cuda:nccl")``) the check runs on the host and never waits
for the GPU; with an NCCL-only group it runs through NCCL and reads the result back (one host synchronisation),
which CUDA-graph capture forbids: pass ``check=False`` there once the setup is known to agree (the local op's own
checks still run; a disagreement is then the caller's bug, and may hang or give a wrong result).

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

import struct
import zlib
from typing import Callable, List, NamedTuple, Optional, Sequence, Union

import torch
import torch.distributed as dist

from . import _api, _fake

__all__ = ["histogram", "histogram_add_", "batched_histogram", "all_reduce_histogram", "PendingHistogram"]

# The range keys order as unsigned 64-bit integers; flipping the sign bit maps that order onto int64's, so an
# elementwise MAX all-reduce (which every backend has for int64) merges the ranks' ranges.
_KEY_SIGN_BIT = -(1 << 63)
_INT32_MAX = (1 << 31) - 1

GroupType = Optional[dist.ProcessGroup]


class PendingHistogram:
    """What an ``async_op=True`` call returns: the all-reduce in flight and the step that completes the result.

    ``wait()`` returns the global histogram. On CUDA (NCCL) it makes the current stream wait for the all-reduce
    without blocking the host, like ``torch.distributed.Work.wait``; on the CPU (gloo) it blocks until the sum has
    arrived. Use the histogram only through ``wait()``'s result.
    """

    def __init__(self, work: dist.Work, complete: Callable[[], torch.Tensor]):
        self._work = work
        self._complete = complete
        self._result: Optional[torch.Tensor] = None

    def wait(self) -> torch.Tensor:
        """Wait for the all-reduce, finish the result (copy into ``out``, add into ``hist``) and return it."""
        if self._result is None:
            self._work.wait()
            self._result = self._complete()
        return self._result

    def is_completed(self) -> bool:
        """Whether the all-reduce has finished (``wait()`` must still be called to get the result)."""
        return self._work.is_completed()


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
) -> Union[torch.Tensor, PendingHistogram]:
    """The histogram of every rank's ``input`` together, returned on every rank of ``group``.

    Arguments mean what they mean for :func:`torch_dsmhist.histogram`, applied to the concatenation of the ranks'
    inputs (each rank's ``input`` may have its own shape and size, including empty). Without ``min``/``max``,
    floating input is binned over the finite min and max of all ranks' data. ``weight`` sums are added rank by
    rank in the backend's order (exact for counts; for sums, rounding may differ from a single-process sum).

    Args:
        out: optional ``[bins]`` tensor for the result, written only once the global histogram is known;
            ``accumulate=True`` adds the global histogram of this call into it (on every rank) instead.
        group: the process group (default: the default group); every rank of it must call with the same
            arguments, except the data.
        async_op: return a :class:`PendingHistogram` whose ``wait()`` gives the result, instead of the result.
        check: check that all ranks made the same call first (see the module docstring); ``False`` skips that
            collective (required under CUDA-graph capture with an NCCL-only group).

    Raises:
        ValueError: a bad argument, or ranks whose arguments differ (raised on every rank).
        RuntimeError: torch.distributed is not initialised, this rank is not in ``group``, or another rank's local
            histogram raised.

    Example (every rank)::

        hist = torch_dsmhist.distributed.histogram(shard, bins=4096)
    """
    op = "torch_dsmhist.distributed.histogram"
    count_dtype = out.dtype if out is not None else _fake._output_dtype(weight, dtype)
    call = _Call(op, bins, _mode(input, min, max), min, max, out_of_range, count_dtype, (), input.numel())

    def local_step() -> torch.Tensor:
        if out is None:
            if accumulate:
                raise ValueError(f"{op}: accumulate=True needs out= (the histogram to add into)")
            if call.mode == _DATA_RANGE:
                return _local_range_keys(op, input, weight)
            return torch.ops.dsmhist.histogram(input, bins, min, max, weight, out_of_range, dtype)
        if tuple(out.shape) != (bins,):
            raise ValueError(f"{op}: out must have shape ({bins},), got {tuple(out.shape)}")
        if dtype is not None and out.dtype != dtype:
            raise ValueError(f"{op}: out has dtype {out.dtype} but dtype={dtype} was given")
        # Into a fresh tensor of out's dtype: out itself is written only once the sum has arrived.
        partial = torch.zeros(bins, dtype=out.dtype, device=input.device)
        return _api.histogram_add_(partial, input, min, max, weight, out_of_range)

    def binned_step(range_keys: torch.Tensor) -> torch.Tensor:
        return torch.ops.dsmhist._histogram_with_range_keys(input, bins, range_keys, weight, out_of_range, dtype,
                                                            False)

    finish = None if out is None else _write_into(out, accumulate)
    return _run(call, input.device, local_step, binned_step, finish, group, async_op, check)


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
) -> Union[torch.Tensor, PendingHistogram]:
    """Add the histogram of every rank's ``input`` together into ``hist`` on every rank; returns ``hist``.

    A running global histogram over a sharded dataset: start every rank from the same ``hist`` (e.g. zeros) and
    every rank holds the same global running histogram after each call. ``hist`` decides bins and dtype, as for
    :func:`torch_dsmhist.histogram_add_` (floating input needs ``min``/``max``). An int32 ``hist`` is refused when
    one call's inputs across all ranks exceed 2**31 - 1 elements (with ``check=True``; it wraps modulo 2**32 across
    calls). ``group``, ``async_op`` and ``check`` as in :func:`histogram`.

    Each call does one all-reduce of ``bins`` values. Streaming many batches, it is cheaper to accumulate locally
    with :func:`torch_dsmhist.histogram_add_` and sum once at the end with :func:`all_reduce_histogram`.
    """
    op = "torch_dsmhist.distributed.histogram_add_"
    call = _Call(op, hist.numel(), _mode(input, min, max), min, max, out_of_range, hist.dtype, (), input.numel())

    def local_step() -> torch.Tensor:
        partial = torch.zeros(hist.shape, dtype=hist.dtype, device=hist.device)
        return _api.histogram_add_(partial, input, min, max, weight, out_of_range)

    return _run(call, input.device, local_step, None, _write_into(hist, accumulate=True), group, async_op, check)


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
) -> Union[torch.Tensor, PendingHistogram]:
    """One global histogram per row: ``input`` ``[..., N_rank]`` on each rank gives ``[..., bins]`` on every rank.

    Row ``i`` of the result is the histogram of row ``i`` of every rank's input together: the leading dims must be
    the same on every rank, the row length ``N`` may differ. Without ``min``/``max``, floating input takes one range
    from all rows of all ranks. Other arguments as in :func:`torch_dsmhist.batched_histogram` and :func:`histogram`.
    """
    op = "torch_dsmhist.distributed.batched_histogram"
    batch_shape = tuple(input.shape[:-1]) if input.dim() > 0 else ()
    row_length = input.shape[-1] if input.dim() > 0 else input.numel()
    count_dtype = _fake._output_dtype(weight, dtype)
    call = _Call(op, bins, _mode(input, min, max), min, max, out_of_range, count_dtype, batch_shape, row_length)

    def local_step() -> torch.Tensor:
        if call.mode == _DATA_RANGE:
            if input.dim() == 0:
                raise ValueError(f"{op}: input must have at least 1 dim ([..., N]), got a 0-d tensor")
            return _local_range_keys(op, input, weight)
        return torch.ops.dsmhist.batched_histogram(input, bins, min, max, weight, out_of_range, dtype)

    def binned_step(range_keys: torch.Tensor) -> torch.Tensor:
        return torch.ops.dsmhist._histogram_with_range_keys(input, bins, range_keys, weight, out_of_range, dtype,
                                                            True)

    return _run(call, input.device, local_step, binned_step, None, group, async_op, check)


def all_reduce_histogram(
    hist: torch.Tensor, *, group: GroupType = None, async_op: bool = False, check: bool = True
) -> Union[torch.Tensor, PendingHistogram]:
    """Sum the ranks' local histograms in place: afterwards every rank's ``hist`` is the global one; returns it.

    The end of a streaming pass: each rank adds its batches into a local ``hist`` with
    :func:`torch_dsmhist.histogram_add_` (no communication per batch), then one call of this sums them. ``hist``
    may have any shape (a batched histogram too) but the same shape and dtype on every rank (checked with
    ``check=True``); int32 sums wrap modulo 2**32.
    """
    op = "torch_dsmhist.distributed.all_reduce_histogram"
    call = _Call(op, hist.numel(), _NO_BINNING, None, None, "", hist.dtype, tuple(hist.shape), 0)
    if hist.is_contiguous():
        return _run(call, hist.device, lambda: hist, None, None, group, async_op, check)
    return _run(call, hist.device, hist.contiguous, None, _write_into(hist, accumulate=False), group, async_op, check)


# ---------------------------------------------------------------------------------------------------------------
# The collective steps shared by every function
# ---------------------------------------------------------------------------------------------------------------

_INDEX, _GIVEN_RANGE, _DATA_RANGE, _NO_BINNING = 0, 1, 2, 3
_MODE_NAMES = ("bin = value (integer input, no min/max)", "a given [min, max]",
               "the data's range (floating input, no min/max)", "none (a histogram to sum)")


class _Call(NamedTuple):
    """What every rank of a group must agree on (and the element count that decides whether int32 counts fit)."""

    op: str
    bins: int
    mode: int  # one of _INDEX, _GIVEN_RANGE, _DATA_RANGE, _NO_BINNING
    min: Optional[float]
    max: Optional[float]
    out_of_range: str
    count_dtype: torch.dtype
    batch_shape: Sequence[int]
    elements_per_histogram: int


def _mode(input: torch.Tensor, min: Optional[float], max: Optional[float]) -> int:
    if min is not None or max is not None:
        return _GIVEN_RANGE
    return _DATA_RANGE if input.is_floating_point() else _INDEX


def _local_range_keys(op: str, input: torch.Tensor, weight: Optional[torch.Tensor]) -> torch.Tensor:
    """This rank's range keys; first the weight checks the binning step would make after the collectives."""
    _fake._check_weight(op, input, weight)
    if weight is not None and not weight.is_floating_point():
        raise ValueError(f"{op}: weight must be floating (float16, bfloat16, float32, float64), got {weight.dtype}")
    return torch.ops.dsmhist._finite_range_keys(input)


def _run(
    call: _Call,
    device: torch.device,
    local_step: Callable[[], torch.Tensor],
    binned_step: Optional[Callable[[torch.Tensor], torch.Tensor]],
    finish: Optional[Callable[[torch.Tensor], torch.Tensor]],
    group: GroupType,
    async_op: bool,
    check: bool,
) -> Union[torch.Tensor, PendingHistogram]:
    """On `device` (the data's): the rank-local step, the agreement check, then (for a data-derived range) the merge
    of the ranks' range keys and the binning over it, then the all-reduce of the histogram and `finish` (writing
    into out / hist).

    Everything rank-local that can raise runs before the check, and a failure is part of what the ranks exchange,
    so an error on one rank is raised on all of them instead of leaving the others waiting in a collective.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{call.op}: torch.distributed is not initialized; call init_process_group first "
                           "(or use the single-process torch_dsmhist functions)")
    if group is not None and dist.get_rank(group) < 0:
        raise RuntimeError(f"{call.op}: this process (rank {dist.get_rank()}) is not a member of group")

    local, error = None, None
    try:
        local = local_step()
    except (ValueError, RuntimeError, TypeError, NotImplementedError) as exc:
        if not check:
            raise
        error = exc
    if check:
        _check_same_call(call, error, group, device)

    if call.mode == _DATA_RANGE and binned_step is not None:
        keys = local.bitwise_xor_(_KEY_SIGN_BIT)
        dist.all_reduce(keys, op=dist.ReduceOp.MAX, group=group)
        local = binned_step(keys.bitwise_xor_(_KEY_SIGN_BIT))

    work = dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group, async_op=async_op)

    def complete() -> torch.Tensor:
        return finish(local) if finish is not None else local

    return PendingHistogram(work, complete) if async_op else complete()


def _write_into(target: torch.Tensor, accumulate: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    def finish(total: torch.Tensor) -> torch.Tensor:
        return target.add_(total) if accumulate else target.copy_(total)

    return finish


def _text_code(text: str) -> int:
    return zlib.crc32(text.encode())


# The fields of the agreement check: name, the int64 a _Call encodes it as, and how a message shows a code.
_NONE_BITS = 0x7FF8_0000_DEAD_BEEF  # a NaN payload no Python float carries: "not given"
_KNOWN_TEXT = {_text_code(t): repr(t) for t in ("ignore", "clamp")}
_DTYPE_CODES = {torch.int64: 1, torch.int32: 2, torch.float32: 3, torch.float64: 4}
_DTYPE_NAMES = {code: str(dtype) for dtype, code in _DTYPE_CODES.items()}


def _float_bits(value: Optional[float]) -> int:
    return _NONE_BITS if value is None else struct.unpack("<q", struct.pack("<d", float(value)))[0]


def _show_float_bits(code: int) -> str:
    return "None" if code == _NONE_BITS else repr(struct.unpack("<d", struct.pack("<q", code))[0])


_FIELDS = (
    ("function", lambda c: _text_code(c.op), lambda code: "another function"),
    ("bins", lambda c: c.bins, str),
    ("binning mode", lambda c: c.mode, lambda code: _MODE_NAMES[code]),
    ("min", lambda c: _float_bits(c.min), _show_float_bits),
    ("max", lambda c: _float_bits(c.max), _show_float_bits),
    ("out_of_range", lambda c: _text_code(c.out_of_range), lambda code: _KNOWN_TEXT.get(code, "another value")),
    ("count / sum dtype (from dtype, weight's dtype, or hist's / out's dtype)",
     lambda c: _DTYPE_CODES.get(c.count_dtype, 99), lambda code: _DTYPE_NAMES.get(code, "another dtype")),
    ("batch shape (leading dims)", lambda c: _text_code(repr(tuple(c.batch_shape))), lambda code: "another shape"),
)
_FAILED, _ELEMENTS = len(_FIELDS), len(_FIELDS) + 1


def _check_same_call(call: _Call, error: Optional[BaseException], group: GroupType, device: torch.device) -> None:
    """All-gather every rank's call signature and raise, on every rank, when the ranks differ or one failed."""
    if device.type != "cpu" and "cpu" in _device_types(group):
        device = torch.device("cpu")  # the group's CPU backend checks on the host, without waiting for the GPU
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"{call.op}: check=True reads the ranks' arguments back to the host, which CUDA-graph "
                           "capture forbids with an NCCL-only group; pass check=False when capturing (after an "
                           "eager call with check=True), or give the group a CPU backend (\"cpu:gloo,cuda:nccl\")")
    mine = [encode(call) for _, encode, _ in _FIELDS] + [int(error is not None), call.elements_per_histogram]
    signature = torch.tensor(mine, dtype=torch.int64)
    if device.type == "cuda":  # from pinned memory: the copy does not wait for the work queued on the stream
        signature = signature.pin_memory().to(device, non_blocking=True)
    gathered = [torch.empty_like(signature) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, signature, group=group)
    ranks = torch.stack(gathered).tolist()

    if error is not None:
        raise error
    failed = [rank for rank, row in enumerate(ranks) if row[_FAILED]]
    if failed:
        raise RuntimeError(f"{call.op}: the local step raised on group rank(s) {failed} (see the error there); no "
                           "histogram was exchanged")
    for index, (name, _, show) in enumerate(_FIELDS):
        if len({row[index] for row in ranks}) > 1:
            values = ", ".join(f"group rank {rank}: {show(row[index])}" for rank, row in enumerate(ranks[:16]))
            more = f" (and {len(ranks) - 16} more ranks)" if len(ranks) > 16 else ""
            raise ValueError(f"{call.op}: every rank of the group must pass the same {name}; got {values}{more}")
    total = sum(row[_ELEMENTS] for row in ranks)
    if call.count_dtype == torch.int32 and total > _INT32_MAX:
        raise ValueError(f"{call.op}: int32 counts cannot hold the count of {total} elements across the group (a bin "
                         "could exceed 2^31 - 1); use int64 counts")


def _device_types(group: GroupType) -> List[str]:
    """The device types the group's backends handle ("cpu" when it has gloo)."""
    pg = group if group is not None else dist.group.WORLD
    try:
        return [device.type for device in pg._device_types]
    except AttributeError:  # a torch without the property: infer from the backend's name
        return ["cpu"] if "gloo" in str(dist.get_backend(group)) else ["cuda"]
