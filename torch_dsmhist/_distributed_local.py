"""The rank-local part of :mod:`torch_dsmhist.distributed`'s calls: the checks and steps each rank makes inside the
guard, before the ranks exchange anything (a refusal after the exchange would leave the other ranks waiting)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, cast

import torch
import torch.distributed as dist
from torch.autograd import forward_ad

from . import _rules
from ._collective import DATA_RANGE, GIVEN_RANGE, INDEX, GroupType, device_types

HISTOGRAM_DTYPES = (torch.int64, torch.int32, torch.float32, torch.float64)
# forward_ad.unpack_dual has no annotations, and mypy --strict refuses a call to an untyped function.
_unpack_dual = cast(Callable[[torch.Tensor], Any], forward_ad.unpack_dual)


def binning_mode(input: torch.Tensor, min: Optional[float], max: Optional[float]) -> int:
    if min is not None or max is not None:
        return GIVEN_RANGE
    return DATA_RANGE if input.is_floating_point() else INDEX


def collective_arguments(
    op: str, async_op: object, check: object, group: GroupType, name: str, tensor: torch.Tensor
) -> bool:
    """The keyword arguments every distributed function takes, checked: the flags ``async_op``, then ``check``, then
    that ``group``'s backends can all-reduce ``tensor`` (named ``name``; one they cannot would fail on this rank
    alone, after the check). Returns async_op."""
    checked = _rules.check_flag(op, "async_op", async_op)
    _rules.check_flag(op, "check", check)
    types = device_types(group)
    if tensor.device.type not in types:
        raise ValueError(
            f"{op}: {name} is on {tensor.device}, but the group's backend "
            f"({dist.get_backend(group)}) handles only {', '.join(types)} tensors"
        )
    return checked


def refuse_tangents(op: str, **tensors: Optional[torch.Tensor]) -> None:
    """Forward-mode AD through the all-reduce, refused before any rank communicates (NotImplementedError naming the
    first tensor with a tangent): the sum is not differentiable, and each rank's tangent would stay its own, a silent
    error. ``torch.no_grad()`` does not stop forward mode, so the rank-local ops would carry it."""
    for name, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor) and _unpack_dual(tensor).tangent is not None:
            raise NotImplementedError(
                f"{op}: {name} has a forward-mode AD tangent, and the all-reduce is not differentiable; "
                "use the single-process function on each rank and sum the tangents yourself"
            )


def check_target(
    op: str, name: str, target: torch.Tensor, input: Optional[torch.Tensor], weight: Optional[torch.Tensor]
) -> None:
    """What writing the global histogram into `target` (out=, hist) at the end would refuse, checked up front.

    The single-process op refuses a hist that overlaps itself, input or weight (at::assert_no_overlap); here the
    write comes after the all-reduce, where a refusal on one rank would come too late to tell the others.
    """
    _rules.check_into_memory(op, name, target, input, weight)
    if target.requires_grad and target.is_leaf and torch.is_grad_enabled():
        raise ValueError(f"{op}: {name} is a leaf tensor that requires grad, which cannot be written in place")


def data_range_step(
    op: str,
    input: torch.Tensor,
    bins: int,
    weight: Optional[torch.Tensor],
    out_of_range: str,
    dtype: Optional[torch.dtype],
    batched: bool,
) -> Tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """This rank's range keys, after every check the binning step will make once the ranges are merged, and that
    step (the merged range keys -> this rank's histogram).

    The binning step runs after the collectives, where an error on one rank would leave the others waiting in the
    all-reduce; so its checks (the op's own, on the tensors' dtypes, shapes and devices) run here first.
    """
    with torch.no_grad():
        keys: torch.Tensor = torch.ops.dsmhist._finite_range_keys(input)
        _rules.check_call(
            "range_keys",
            "torch_dsmhist._histogram_with_range_keys",
            input,
            bins,
            (None, None),
            weight,
            out_of_range,
            dtype,
            batched=batched,
            target=keys,
        )

    def binned_step(range_keys: torch.Tensor) -> torch.Tensor:
        binned: torch.Tensor = torch.ops.dsmhist._histogram_with_range_keys(
            input, bins, range_keys, weight, out_of_range, dtype, batched
        )
        return binned

    return keys, binned_step


def write_into(target: torch.Tensor, accumulate: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    def finish(total: torch.Tensor) -> torch.Tensor:
        return target.add_(total) if accumulate else target.copy_(total)

    return finish
