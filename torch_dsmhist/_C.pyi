# The extension module's eager entry points (csrc/eager_entry.cpp): each calls the op of its name through the
# dispatcher, as torch.ops.dsmhist.<op>.default does, without converting its arguments to IValues.
from typing import Optional, Tuple

import torch

def histogram(
    input: torch.Tensor,
    bins: int,
    min: Optional[float],
    max: Optional[float],
    weight: Optional[torch.Tensor],
    out_of_range: str,
    dtype: Optional[torch.dtype],
) -> torch.Tensor: ...
def histogram_add_(
    hist: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float],
    max: Optional[float],
    weight: Optional[torch.Tensor],
    out_of_range: str,
) -> None: ...
def moe_align_block_size(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
def moe_routing(
    topk_ids: torch.Tensor, num_experts: int, block_size: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
