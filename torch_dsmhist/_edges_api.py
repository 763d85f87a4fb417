"""The Python API of the bin-edges ops: :func:`histogram_edges` and :func:`histogramdd`."""

from typing import Optional, Sequence

import torch

from . import _rules

__all__ = ["histogram_edges", "histogramdd"]


def histogram_edges(
    input: torch.Tensor,
    edges: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Histogram of every element of ``input`` over sorted bin ``edges`` (``torch.ops.dsmhist.histogram_edges``).

    Bin ``i`` is ``[edges[i], edges[i+1])``, the last bin closed: torch.histogram's rule. ``edges`` is 1-D, sorted
    non-decreasing, floating, with ``input``'s dtype for floating input (any floating dtype for integer input, compared
    in float64), on ``input``'s device; the output has ``len(edges) - 1`` bins. Per-row edges: ``edges``
    ``[..., B + 1]`` with ``input`` ``[..., N]`` (the same leading dims) gives ``[..., B]``, row ``r`` of ``input``
    over row ``r`` of ``edges`` (each row sorted; e.g. a GBDT sketch: features as rows, each with its own quantile
    edges), binned in one pass per 32 rows and counted in one batched launch. ``out_of_range``: ``"ignore"`` drops
    values outside ``[edges[0], edges[-1]]``, ``"clamp"`` counts them in the first / last bin; NaN is always dropped.
    ``weight`` (input's shape, floating, differentiable) and ``dtype`` follow :func:`torch_dsmhist.histogram`.
    Unsorted edges raise ``ValueError`` on the CPU; on CUDA they are not checked (that would synchronise) and give
    unspecified counts, never a write outside the output. No host sync on CUDA.

    Raises:
        TypeError: an argument of the wrong Python type, named in the message.
        ValueError: a bad value (edges' dtype, shape or device, unsorted edges on the CPU, ...), named in the message.
    """
    _rules.check_edges_call_arguments("torch_dsmhist.histogram_edges", input, edges, weight, out_of_range, dtype, False)
    result: torch.Tensor = torch.ops.dsmhist.histogram_edges(input, edges, weight, out_of_range, dtype)
    return result


def histogramdd(
    input: torch.Tensor,
    edges: Sequence[torch.Tensor],
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """N-D histogram of the points of ``input`` ``[N, D]`` over one sorted edges tensor per dim
    (``torch.ops.dsmhist.histogramdd``); the output has shape ``(len(edges[0]) - 1, ..., len(edges[D-1]) - 1)``.
    Batched: ``input`` ``[..., N, D]`` gives one histogram per leading index, shape ``[..., b0, ..., bD-1]`` (every
    batch over the same edges; on CUDA one pass where the bins fit a block's shared memory, else one binning pass and
    one batched count, 4 extra bytes a point).

    Each coordinate is binned as in :func:`histogram_edges`; a point is dropped when any coordinate is outside its
    dim's edges or NaN (with ``out_of_range="clamp"`` an outside coordinate goes to its dim's first / last bin, NaN
    still drops the point). ``weight`` is ``input``'s shape without its last dim (``[N]``, or ``[..., N]``). At most 32
    dims and 2^31 - 1 bins a histogram.

    Example:
        >>> images = torch.rand(8, 224 * 224, 3)  # 8 RGB images as points
        >>> torch_dsmhist.histogramdd(images, [torch.linspace(0, 1, 17)] * 3).shape
        torch.Size([8, 16, 16, 16])

    Raises:
        TypeError: an argument of the wrong Python type (``edges`` not a list or tuple of tensors, ...).
        ValueError: a bad value (shapes, dtypes, devices, too many bins, ...), named in the message.
    """
    edge_list = _rules.check_edges_call_arguments(
        "torch_dsmhist.histogramdd", input, edges, weight, out_of_range, dtype, True
    )
    result: torch.Tensor = torch.ops.dsmhist.histogramdd(input, edge_list, weight, out_of_range, dtype)
    return result
