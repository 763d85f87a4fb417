"""Mixture-of-experts routing: :func:`moe_align_block_size` and :func:`moe_routing` (``csrc/moe_*``)."""

from typing import NamedTuple, Optional, Tuple

import torch

from . import _C, _rules

__all__ = ["MoeRouting", "moe_align_block_size", "moe_routing"]

# The overloads themselves (no overload resolution per call).
_ALIGN = torch.ops.dsmhist.moe_align_block_size.default
_ROUTING = torch.ops.dsmhist.moe_routing.default


class MoeRouting(NamedTuple):
    """What :func:`moe_routing` returns: int32 tensors on ``topk_ids``' device."""

    counts: torch.Tensor
    """``[num_experts]``: how many ids name each expert."""
    offsets: torch.Tensor
    """``[num_experts + 1]``: where each expert's tokens start in ``permutation`` (each expert's share rounded up to
    ``block_size``); ``offsets[-1]`` is the padded total."""
    permutation: torch.Tensor
    """The flat index of every id, grouped by expert in increasing expert order and, within an expert, in increasing
    flat index (a stable sort); slots that hold no index (padding, the tail) hold ``topk_ids.numel()``."""


def moe_align_block_size(
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    expert_map: Optional[torch.Tensor] = None,
    pad_sorted_ids: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the token ids of a top-k routing by expert, each expert's group padded to whole blocks of
    ``block_size`` (the input layout of a block-sparse expert matmul), in one launch on CUDA.

    The semantics of vLLM's ``moe_align_block_size`` (its golden reference ``torch_moe_align_block_size``), with a
    deterministic order: each expert's tokens in increasing flat index, so the expert matmul sums in the same order
    on every run.

    Args:
        topk_ids: int32 or int64, any shape (usually ``[tokens, top_k]``), read in flat (row-major) order. An id
            outside ``[0, num_experts)`` names no expert and is dropped (not refused: refusing would synchronise).
        block_size: the matmul's block of rows, >= 1.
        num_experts: the number of (global) experts, 1 to 8192.
        expert_map: optional int32 or int64 ``[num_experts]`` on ``topk_ids``' device, global -> local expert id
            (expert parallelism): ``expert_ids`` holds the local ids, and the ids of an expert mapped to a negative
            value (-1: another rank's) are dropped, as ids out of range (so are those of an int64 entry past
            2**31 - 1, which no int32 output can hold).
        pad_sorted_ids: round ``sorted_token_ids``' length up to a multiple of ``block_size``.

    Returns:
        ``(sorted_token_ids, expert_ids, num_tokens_post_pad)``, int32, sizes fixed by the arguments (never by the
        data, so the call never synchronises):

        * ``sorted_token_ids`` ``[min(numel * block_size, numel + num_experts * (block_size - 1))]`` (the second
          term rounded up to ``block_size`` first with ``pad_sorted_ids``): expert 0's flat indices, padded to a
          multiple of ``block_size``, then expert 1's, ...; every slot without an index holds ``numel``.
        * ``expert_ids`` ``[ceil(len(sorted_token_ids) / block_size)]``: the (local) expert of each block; -1 for
          the blocks past ``num_tokens_post_pad``.
        * ``num_tokens_post_pad`` ``[1]``: the padded total, the length of the used part of ``sorted_token_ids``.

    Raises:
        TypeError: an argument of the wrong Python type, named in the message.
        ValueError: a bad value (ids' dtype, ``block_size``, ``num_experts``, expert_map's shape, dtype or
            device, outputs beyond int32 indices), named in the message.

    Example:
        >>> ids = torch.tensor([[2, 0], [0, 1]])
        >>> torch_dsmhist.moe_align_block_size(ids, block_size=2, num_experts=3)
        (tensor([1, 2, 3, 4, 0, 4, 4], dtype=torch.int32), tensor([ 0,  1,  2, -1], dtype=torch.int32), tensor([6], dtype=torch.int32))
    """
    if type(block_size) is int and type(num_experts) is int and expert_map is None and pad_sorted_ids is False:
        if isinstance(topk_ids, torch.Tensor):  # the common call: the op's C++ checks see every value
            if _rules.eager_entry_applies(topk_ids):
                return _C.moe_align_block_size(topk_ids, block_size, num_experts)
            plain: Tuple[torch.Tensor, torch.Tensor, torch.Tensor] = _ALIGN(topk_ids, block_size, num_experts)
            return plain
    fn = "torch_dsmhist.moe_align_block_size"
    _rules.check_tensor(fn, "topk_ids", topk_ids)
    block_size = _rules.check_int(fn, "block_size", block_size)
    num_experts = _rules.check_int(fn, "num_experts", num_experts)
    _rules.check_tensor(fn, "expert_map", expert_map, optional=True)
    _rules.check_flag(fn, "pad_sorted_ids", pad_sorted_ids)
    sorted_ids, expert_ids, total = torch.ops.dsmhist.moe_align_block_size(
        topk_ids, block_size, num_experts, expert_map, pad_sorted_ids
    )
    return sorted_ids, expert_ids, total


def moe_routing(topk_ids: torch.Tensor, num_experts: int, block_size: int = 1) -> MoeRouting:
    """Tokens per expert, each expert's start, and the stable permutation that groups the ids by expert, in one launch
    on CUDA (the routing step of torchtitan-style MoE layers).

    ``permutation`` is :func:`moe_align_block_size`'s ``sorted_token_ids`` (``pad_sorted_ids=False``): with the
    default ``block_size=1`` it is the stable argsort of the valid ids (``[numel]``, ids outside
    ``[0, num_experts)`` dropped and their slots at the end holding ``numel``); with a larger block each expert's
    group is padded to whole blocks, as the grouped matmul's alignment needs.

    Args:
        topk_ids: int32 or int64, any shape, read in flat order; ids outside ``[0, num_experts)`` are dropped.
        num_experts: 1 to 8192.
        block_size: >= 1, the alignment of each expert's group.

    Returns:
        :class:`MoeRouting` ``(counts, offsets, permutation)``, int32.

    Raises:
        TypeError: an argument of the wrong Python type, named in the message.
        ValueError: a bad value, named in the message.

    Example:
        >>> torch_dsmhist.moe_routing(torch.tensor([2, 0, 0, 1]), num_experts=3)
        MoeRouting(counts=tensor([2, 1, 1], dtype=torch.int32), offsets=tensor([0, 2, 3, 4], dtype=torch.int32), permutation=tensor([1, 2, 3, 0], dtype=torch.int32))
    """
    if type(num_experts) is int and type(block_size) is int and isinstance(topk_ids, torch.Tensor):
        if _rules.eager_entry_applies(topk_ids):
            return MoeRouting(*_C.moe_routing(topk_ids, num_experts, block_size))
        return MoeRouting(*_ROUTING(topk_ids, num_experts, block_size))
    fn = "torch_dsmhist.moe_routing"
    _rules.check_tensor(fn, "topk_ids", topk_ids)
    num_experts = _rules.check_int(fn, "num_experts", num_experts)
    block_size = _rules.check_int(fn, "block_size", block_size)
    counts, offsets, permutation = torch.ops.dsmhist.moe_routing(topk_ids, num_experts, block_size)
    return MoeRouting(counts, offsets, permutation)
