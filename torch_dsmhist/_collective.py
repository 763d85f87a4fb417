"""The collective protocol behind :mod:`torch_dsmhist.distributed`: each rank prepares its call inside a guard, the
ranks agree (the ``check=True`` exchange: every rank's call signature or its failure, and on the error paths the
errors' or values' text), merge a data-derived range, then sum the histograms with one all-reduce. What a rank's
call is and which checks it runs are the public functions' business (distributed.py); this module knows only the
prepared call (:class:`Prepared`) it gets back.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import struct
from typing import Any, Callable, List, NamedTuple, NoReturn, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

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


# ---------------------------------------------------------------------------------------------------------------
# What one rank prepares, and the guard around it
# ---------------------------------------------------------------------------------------------------------------

INDEX, GIVEN_RANGE, DATA_RANGE, NO_BINNING, EDGES = 0, 1, 2, 3, 4
_MODE_NAMES = (
    "bin = value (integer input, no min/max)",
    "a given [min, max]",
    "the data's range (floating input, no min/max)",
    "none (a histogram to sum)",
    "bin edges",
)

# The fields every rank must agree on, in message order (after the status and element-count slots).
_FIELD_NAMES = (
    "function",
    "bins",
    "binning mode",
    "min",
    "max",
    "out_of_range",
    "accumulate",
    "count / sum dtype (from dtype, weight's dtype, or hist's / out's dtype)",
    "device type",
    "batch shape (leading dims)",
    "edges (count per dim and dtype; their values are not compared)",
)
_STATUS, _ELEMENTS, _FIRST_FIELD = 0, 1, 2
_MESSAGE_LENGTH = _FIRST_FIELD + len(_FIELD_NAMES)
_TEXT_LIMIT = 4000  # bytes of one rank's error or values text on the error path (a traceback-sized message)


class Prepared(NamedTuple):
    """One rank's call, ready for the collectives: everything that could raise on this rank alone has run."""

    codes: Tuple[int, ...]  # one int64 per _FIELD_NAMES entry: what must be equal on every rank
    shown: Tuple[str, ...]  # the same fields as the messages print them
    elements: int  # elements per histogram on this rank (whether int32 counts fit is decided over the group)
    int32_counts: bool
    tensor: torch.Tensor  # this rank's histogram to sum, or (data-derived range) its range keys
    binned_step: Optional[Callable[[torch.Tensor], torch.Tensor]]  # merged range keys -> this rank's histogram
    finish: Optional[Callable[[torch.Tensor], torch.Tensor]]  # the global histogram -> the result (out=, hist)
    async_op: bool


def collective(prepare: Callable[..., Prepared]) -> Callable[..., Union[torch.Tensor, PendingHistogram]]:
    """The public function over `prepare` (which has the public signature and returns this rank's Prepared).

    The public function takes ``*args, **kwargs`` and binds them to `prepare`'s signature inside the guard, so even
    a call Python cannot bind (a missing argument, a misspelt keyword) on one rank reaches the others. `group` and
    `check` are keyword-only, so they are read from the keywords before binding: they decide who to tell.
    """
    op = f"torch_dsmhist.distributed.{prepare.__name__}"
    signature = inspect.signature(prepare)

    @functools.wraps(prepare)
    def call(*args: Any, **kwargs: Any) -> Union[torch.Tensor, PendingHistogram]:
        group = kwargs.get("group")
        check = kwargs.get("check", True)

        def local() -> Prepared:
            bound = signature.bind(*args, **kwargs)
            return prepare(*bound.args, **bound.kwargs)

        return _run(op, local, group, check)

    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=Union[torch.Tensor, PendingHistogram]
    )
    return call


def _run(op: str, local: Callable[[], Prepared], group: Any, check: Any) -> Union[torch.Tensor, PendingHistogram]:
    """Prepare this rank's call inside the guard, agree with the other ranks, then merge ranges and sum."""
    _require_group(op, group)
    try:
        prepared: Optional[Prepared] = local()
        error: Optional[BaseException] = None
    except BaseException as exc:  # noqa: BLE001 (a KeyboardInterrupt too: the other ranks are waiting for this one)
        prepared, error = None, exc
    if check is False:  # only an explicit False skips the exchange (any other value joins it; prepare refused it)
        if error is not None:
            raise error
    elif error is None:
        _agree(op, prepared, error, group)
    else:
        _agree_then_raise(op, error, group)
    assert prepared is not None

    tensor = prepared.tensor
    if prepared.binned_step is not None:
        keys = tensor.bitwise_xor_(_KEY_SIGN_BIT)
        dist.all_reduce(keys, op=dist.ReduceOp.MAX, group=group)
        with torch.no_grad():
            tensor = prepared.binned_step(keys.bitwise_xor_(_KEY_SIGN_BIT))

    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=prepared.async_op)
    finish = prepared.finish

    def complete() -> torch.Tensor:
        return finish(tensor) if finish is not None else tensor

    return PendingHistogram(work, complete) if prepared.async_op else complete()


def _agree_then_raise(op: str, error: BaseException, group: GroupType) -> NoReturn:
    """Tell the other ranks that this rank's preparation raised `error`, then raise `error` itself.

    If the exchange fails too (a broken group, a second interrupt), `error` is still what leaves this rank: a
    KeyboardInterrupt or SystemExit must stop the process as it would have without the exchange, and the rank's own
    failure says more than the exchange's.
    """
    try:
        _agree(op, None, error, group)
    except BaseException as exchange_error:  # noqa: BLE001
        if exchange_error is error:
            raise
        _note(error, f"(the other ranks of {op} could not be told: {_describe(exchange_error)})")
        raise error from exchange_error
    raise error  # not reached: _agree raises on every rank once one rank's status says it failed


def _require_group(op: str, group: Any) -> None:
    """What must hold before any rank can be told anything (raised at once on this rank: there is no one to tell)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{op}: torch.distributed is not initialized; call init_process_group first "
            "(or use the single-process torch_dsmhist functions)"
        )
    # new_group() gives the ranks outside the group a sentinel instead of a process group.
    if group is dist.GroupMember.NON_GROUP_MEMBER or (
        isinstance(group, dist.ProcessGroup) and dist.get_rank(group) < 0
    ):
        raise RuntimeError(f"{op}: this process (rank {dist.get_rank()}) is not a member of group")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{op}: group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")


def device_types(group: GroupType) -> List[str]:
    """The device types the group's backends handle ("cpu" when it has gloo)."""
    pg = group if group is not None else dist.group.WORLD
    try:
        return [device.type for device in pg._device_types]  # type: ignore[union-attr]  # None raises below
    except AttributeError:  # a torch without the property: infer from the backend's name
        return ["cpu"] if "gloo" in str(dist.get_backend(group)) else ["cuda"]


# ---------------------------------------------------------------------------------------------------------------
# The agreement check
# ---------------------------------------------------------------------------------------------------------------


def _text_code(text: str) -> int:
    """A 64-bit digest: equal texts give equal codes, different ones (shapes, names) differ but for 2^-64 odds."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


_NONE_BITS = 0x7FF8_0000_DEAD_BEEF  # a NaN payload no Python float carries: "not given"


def _float_code(value: Optional[float]) -> int:
    # + 0.0 turns -0.0 into 0.0: the two give the same bins, so they must not count as a disagreement.
    return _NONE_BITS if value is None else struct.unpack("<q", struct.pack("<d", value + 0.0))[0]


def call_signature(
    op: str,
    bins: int,
    mode: int,
    min: Optional[float],
    max: Optional[float],
    out_of_range: str,
    accumulate: bool,
    count_dtype: torch.dtype,
    device: torch.device,
    batch_shape: Sequence[int],
    edges: Sequence[torch.Tensor] = (),
) -> Tuple[Tuple[int, ...], Tuple[str, ...]]:
    """The codes the ranks compare (int64 each, in _FIELD_NAMES order) and the values a message shows.

    ``accumulate`` is whether the global histogram is added into the target (out=, hist) or replaces it: ranks that
    differ would each be left with a different result, which the sum itself would not reveal. ``edges`` (the edges
    ops): compared by count and dtype only, since reading their values would wait for the GPU.
    """
    edges_text = repr(tuple((int(e.numel()), str(e.dtype).replace("torch.", "")) for e in edges))
    codes = (
        _text_code(op),
        bins,
        mode,
        _float_code(min),
        _float_code(max),
        _text_code(out_of_range),
        int(accumulate),
        _text_code(str(count_dtype)),
        _text_code(device.type),
        _text_code(repr(tuple(batch_shape))),
        _text_code(edges_text),
    )
    shown = (
        op,
        str(bins),
        _MODE_NAMES[mode],
        repr(min),
        repr(max),
        repr(out_of_range),
        repr(accumulate),
        str(count_dtype),
        device.type,
        repr(tuple(batch_shape)),
        edges_text,
    )
    return codes, shown


def _check_device(group: GroupType, prepared: Optional[Prepared]) -> torch.device:
    """Where the check's tensors live: the host when the group has a CPU backend, else this rank's GPU.

    Chosen from the group (and, for NCCL, the rank's data when it has any), never from arguments that could have
    failed: a rank whose preparation raised must still reach the same collective as the others.
    """
    if "cpu" in device_types(group):
        return torch.device("cpu")  # the group's CPU backend checks on the host, without waiting for the GPU
    if prepared is not None and prepared.tensor.device.type == "cuda":
        return prepared.tensor.device
    pg = group if group is not None else dist.group.WORLD
    bound = getattr(pg, "bound_device_id", None)
    return bound if bound is not None else torch.device("cuda", torch.cuda.current_device())


def _all_gather_rows(values: torch.Tensor, group: GroupType, device: torch.device) -> List[List[int]]:
    """All-gather one 1-D CPU tensor per rank (the same length everywhere) through `device`; rows on the host."""
    if device.type == "cuda":  # from pinned memory: the copy does not wait for the work queued on the stream
        values = values.pin_memory().to(device, non_blocking=True)
    gathered = [torch.empty_like(values) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, values, group=group)
    return torch.stack(gathered).tolist()


def _agree(op: str, prepared: Optional[Prepared], error: Optional[BaseException], group: GroupType) -> None:
    """Exchange every rank's call signature or failure; raise, on every rank, when one failed or the ranks differ."""
    device = _check_device(group, prepared)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{op}: check=True reads the ranks' arguments back to the host, which CUDA-graph "
            "capture forbids with an NCCL-only group; pass check=False when capturing (after an "
            'eager call with check=True), or give the group a CPU backend ("cpu:gloo,cuda:nccl")'
        )
    mine = None
    if prepared is not None:
        try:
            mine = torch.tensor([0, prepared.elements, *prepared.codes], dtype=torch.int64)
        except BaseException as exc:  # noqa: BLE001 (this rank's failure, an interrupt too: the others must hear)
            error = exc
    if mine is None:
        mine = torch.zeros(_MESSAGE_LENGTH, dtype=torch.int64)  # the fallback message: only "this rank failed"
        mine[_STATUS] = 1
    rows = _all_gather_rows(mine, group, device)

    failed = [rank for rank, row in enumerate(rows) if row[_STATUS]]
    differ = (
        []
        if failed
        else [index for index in range(len(_FIELD_NAMES)) if len({row[_FIRST_FIELD + index] for row in rows}) > 1]
    )
    if failed or differ:
        # Every rank takes this branch (the rows are the same everywhere), so every rank joins this exchange.
        shown = _describe(error) if error is not None else json.dumps(prepared.shown if prepared else None)
        texts = _exchange_texts(shown, group, device)
        if error is not None:
            _note(
                error,
                f"(raised on group rank {dist.get_rank(group)} of {len(rows)} in {op}; the other ranks "
                "raised RuntimeError naming it)",
            )
            raise error
        if failed:
            errors = "; ".join(f"group rank {rank}: {texts[rank]}" for rank in failed)
            raise RuntimeError(f"{op}: the call raised on another rank, so no histogram was exchanged: {errors}")
        index = differ[0]
        values = []
        for rank, text in enumerate(texts[:16]):
            try:
                values.append(f"group rank {rank}: {json.loads(text)[index]}")
            except (ValueError, IndexError, TypeError):  # a text cut at _TEXT_LIMIT
                values.append(f"group rank {rank}: (unreadable)")
        more = f" (and {len(rows) - 16} more ranks)" if len(rows) > 16 else ""
        raise ValueError(
            f"{op}: every rank of the group must pass the same {_FIELD_NAMES[index]}; got {', '.join(values)}{more}"
        )
    assert prepared is not None
    total = sum(row[_ELEMENTS] for row in rows)
    if prepared.int32_counts and total > _INT32_MAX:
        raise ValueError(
            f"{op}: int32 counts cannot hold the count of {total} elements across the group (a bin "
            "could exceed 2^31 - 1); use int64 counts"
        )


def _describe(error: BaseException) -> str:
    """'TypeError: message' (the bare type name when the message is empty, as for a Ctrl-C's KeyboardInterrupt)
    for the other ranks' RuntimeError; never raises: str() of an exception can, and a rank that raised here would
    skip the text exchange the other ranks are already in."""
    try:
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    except BaseException:  # noqa: BLE001
        return f"{type(error).__name__} (its message could not be printed)"


def _note(error: BaseException, note: str) -> None:
    add_note = getattr(error, "add_note", None)  # Python 3.11+
    if add_note is not None:
        add_note(note)


def _exchange_texts(text: str, group: GroupType, device: torch.device) -> List[str]:
    """Every rank's text (cut at _TEXT_LIMIT bytes), on every rank: lengths first, then the padded bytes."""
    data = text.encode("utf-8", "replace")[:_TEXT_LIMIT]
    lengths = [row[0] for row in _all_gather_rows(torch.tensor([len(data)], dtype=torch.int64), group, device)]
    padded = torch.zeros(max(lengths), dtype=torch.uint8)
    if data:
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    rows = _all_gather_rows(padded, group, device) if max(lengths) > 0 else [[] for _ in lengths]
    return [bytes(row[:length]).decode("utf-8", "replace") for row, length in zip(rows, lengths)]
