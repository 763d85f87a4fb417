"""The bin-edges ops of :mod:`torch_dsmhist.distributed`: :func:`histogram_edges` and :func:`histogramdd` over every
rank's data together, with the same guard, agreement check and all-reduce as the other distributed functions."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from . import _rules
from ._collective import EDGES, GroupType, Prepared, call_signature, collective
from ._distributed_local import collective_flags, require_backend


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
    op = "torch_dsmhist.distributed.histogram_edges"
    _rules.check_edges_call_arguments(op, input, edges, weight, out_of_range, dtype, False)
    async_op = collective_flags(op, async_op, check)
    require_backend(op, "input", input, group)
    count_dtype = _rules.check_edges_call(
        "torch_dsmhist.histogram_edges", input, [edges], weight, out_of_range, dtype, nd=False
    )
    with torch.no_grad():  # the all-reduce is not differentiable: no rank's result requires grad
        tensor = torch.ops.dsmhist.histogram_edges(input, edges, weight, out_of_range, dtype)
    codes, shown = call_signature(
        op, tensor.numel(), EDGES, None, None, out_of_range, False, count_dtype, input.device, (), [edges]
    )
    return Prepared(codes, shown, input.numel(), count_dtype == torch.int32, tensor, None, None, async_op)


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
    op = "torch_dsmhist.distributed.histogramdd"
    edge_list = _rules.check_edges_call_arguments(op, input, edges, weight, out_of_range, dtype, True)
    async_op = collective_flags(op, async_op, check)
    require_backend(op, "input", input, group)
    count_dtype = _rules.check_edges_call(
        "torch_dsmhist.histogramdd", input, edge_list, weight, out_of_range, dtype, nd=True
    )
    with torch.no_grad():
        tensor = torch.ops.dsmhist.histogramdd(input, edge_list, weight, out_of_range, dtype)
    batch = tuple(input.shape[:-2])
    bins = math.prod(int(e.numel()) - 1 for e in edge_list)  # of one histogram: the batch is its own field
    codes, shown = call_signature(
        op, bins, EDGES, None, None, out_of_range, False, count_dtype, input.device, batch, edge_list
    )
    points = input.shape[-2] if input.dim() >= 2 else 0
    return Prepared(codes, shown, points, count_dtype == torch.int32, tensor, None, None, async_op)
