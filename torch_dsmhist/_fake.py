"""Fake (meta) kernels: output shape and dtype without touching data, for torch.compile and FakeTensor tracing."""

from typing import Optional

import torch


@torch.library.register_fake("dsmhist::histogram")
def _histogram_fake(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    torch._check(bins > 0, lambda: f"dsmhist.histogram: bins must be > 0, got {bins}")
    if weight is not None:
        torch._check(
            weight.device == input.device,
            lambda: f"dsmhist.histogram: weight is on {weight.device} but input is on {input.device}",
        )
        torch._check(
            weight.shape == input.shape,
            lambda: f"dsmhist.histogram: weight must have the shape of input {tuple(input.shape)}",
        )
        out_dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    else:
        out_dtype = dtype if dtype is not None else torch.int64
    return input.new_empty((bins,), dtype=out_dtype)
