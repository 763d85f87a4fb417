"""The bin-edges ops of :mod:`torch_dsmhist.distributed`: :func:`histogram_edges` and :func:`histogramdd` over every
rank's data together, with the same guard, agreement check and all-reduce as the other distributed functions."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from . import _rules
from ._collective import EDGES, GroupType, Prepared, call_signature, collective
from ._distributed_local import collective_arguments, refuse_tangents


@collective
def histogram_edges(
    input: torch.Tensor,
    edges: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    *,
    group: GroupType = None,
    async_op: bool = False,
    check: bool = True,
) -> Prepared:
    """The histogram of every rank's ``input`` together over ``edges``, returned on every rank of ``group``.

    Arguments mean what they mean for :func:`torch_dsmhist.histogram_edges`, applied to the concatenation of the
    ranks' inputs (each rank's ``input`` may have its own shape and size, including empty). ``edges`` must hold the
    same values on every rank: the agreement check compares their count and dtype, not their values (reading them
    would wait for the GPU). ``group``, ``async_op`` and ``check`` as in :func:`torch_dsmhist.distributed.histogram`;
    the result does not require grad.

    Raises:
        TypeError: an argument of the wrong Python type (or a call that cannot be bound), on this rank.
        ValueError: a bad argument on this rank, or (on every rank) ranks whose arguments differ.
        RuntimeError: torch.distributed is not initialised, this rank is not in ``group``, or another rank's
            preparation raised (the message names the group rank and its error).

    Example (every rank)::

        hist = torch_dsmhist.distributed.histogram_edges(shard, torch.linspace(0, 1, 101, device=shard.device))
    """
    return _prepare(False, input, edges, weight, out_of_range, dtype, group, async_op, check)


@collective
def histogramdd(
    input: torch.Tensor,
    edges: Sequence[torch.Tensor],
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    *,
    group: GroupType = None,
    async_op: bool = False,
    check: bool = True,
) -> Prepared:
    """The N-D histogram of every rank's points together, returned on every rank of ``group``.

    Arguments mean what they mean for :func:`torch_dsmhist.histogramdd`: ``input`` ``[N_rank, D]`` (the number of
    points may differ between ranks), or ``[..., N_rank, D]`` for one global histogram per leading index (the
    leading dims the same on every rank). ``edges`` must hold the same values on every rank (compared by count and
    dtype only, as in :func:`histogram_edges`). ``group``, ``async_op`` and ``check`` as in
    :func:`torch_dsmhist.distributed.histogram`; the result does not require grad.

    Raises:
        TypeError: an argument of the wrong Python type (``edges`` not a list or tuple of tensors, ...).
        ValueError: a bad argument on this rank, or (on every rank) ranks whose arguments differ.
        RuntimeError: as :func:`histogram_edges`.
    """
    return _prepare(True, input, edges, weight, out_of_range, dtype, group, async_op, check)


def _prepare(
    nd: bool,
    input: torch.Tensor,
    edges: Union[torch.Tensor, Sequence[torch.Tensor]],
    weight: Optional[torch.Tensor],
    out_of_range: str,
    dtype: Optional[torch.dtype],
    group: GroupType,
    async_op: bool,
    check: bool,
) -> Prepared:
    """Both functions' rank-local call (``nd``: histogramdd, else histogram_edges)."""
    name = "histogramdd" if nd else "histogram_edges"
    op = f"torch_dsmhist.distributed.{name}"
    edge_list = _rules.check_edges_call_arguments(op, input, edges, weight, out_of_range, dtype, nd)
    async_op = collective_arguments(op, async_op, check, group, "input", input)
    refuse_tangents(op, weight=weight)
    count_dtype = _rules.check_edges_call(f"torch_dsmhist.{name}", input, edge_list, weight, out_of_range, dtype, nd)
    with torch.no_grad():  # the all-reduce is not differentiable: no rank's result requires grad
        if nd:  # bins of one histogram (the batch is its own field), and this rank's points
            tensor = torch.ops.dsmhist.histogramdd(input, edge_list, weight, out_of_range, dtype)
            batch: Sequence[int] = tuple(input.shape[:-2])
            bins = math.prod(int(e.numel()) - 1 for e in edge_list)
            elements = input.shape[-2] if input.dim() >= 2 else 0
        else:
            tensor = torch.ops.dsmhist.histogram_edges(input, edge_list[0], weight, out_of_range, dtype)
            batch, bins, elements = (), tensor.numel(), input.numel()
    codes, shown = call_signature(
        op, bins, EDGES, None, None, out_of_range, False, count_dtype, input.device, batch, edge_list
    )
    return Prepared(codes, shown, elements, count_dtype == torch.int32, tensor, None, None, async_op)
