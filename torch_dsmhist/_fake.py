"""Fake (meta) kernels: output shape and dtype without touching data, for torch.compile and FakeTensor tracing.

They check what decides the output's shape, dtype and device (raising ValueError, as the C++ checks do); every
other check runs in the real kernels.
"""

from typing import Optional

import torch


def _check_weight(op: str, input: torch.Tensor, weight: Optional[torch.Tensor]) -> None:
    if weight is None:
        return
    torch._check_value(
        weight.device == input.device,
        lambda: f"{op}: weight is on {weight.device} but input is on {input.device}",
    )
    torch._check_value(
        weight.shape == input.shape,
        lambda: f"{op}: weight must have the shape of input {tuple(input.shape)}",
    )


def _output_dtype(weight: Optional[torch.Tensor], dtype: Optional[torch.dtype]) -> torch.dtype:
    if weight is not None:
        return torch.float64 if weight.dtype == torch.float64 else torch.float32
    return dtype if dtype is not None else torch.int64


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
    torch._check_value(bins > 0, lambda: f"dsmhist.histogram: bins must be > 0, got {bins}")
    _check_weight("dsmhist.histogram", input, weight)
    return input.new_empty((bins,), dtype=_output_dtype(weight, dtype))


@torch.library.register_fake("dsmhist::histogram_add_")
def _histogram_add_fake(
    hist: torch.Tensor,
    input: torch.Tensor,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
) -> None:
    torch._check_value(
        hist.dim() == 1, lambda: f"dsmhist.histogram_add_: hist must be 1-D, got shape {tuple(hist.shape)}"
    )
    torch._check_value(
        hist.device == input.device,
        lambda: f"dsmhist.histogram_add_: hist is on {hist.device} but input is on {input.device}",
    )
    _check_weight("dsmhist.histogram_add_", input, weight)


@torch.library.register_fake("dsmhist::batched_histogram")
def _batched_histogram_fake(
    input: torch.Tensor,
    bins: int,
    min: Optional[float] = None,
    max: Optional[float] = None,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    torch._check_value(bins > 0, lambda: f"dsmhist.batched_histogram: bins must be > 0, got {bins}")
    torch._check_value(input.dim() >= 1, lambda: "dsmhist.batched_histogram: input must have at least 1 dim")
    _check_weight("dsmhist.batched_histogram", input, weight)
    return input.new_empty((*input.shape[:-1], bins), dtype=_output_dtype(weight, dtype))


@torch.library.register_fake("dsmhist::_finite_range_keys")
def _finite_range_keys_fake(input: torch.Tensor) -> torch.Tensor:
    torch._check_value(
        input.dtype.is_floating_point,
        lambda: f"dsmhist._finite_range_keys: input must be floating, got {input.dtype}",
    )
    return input.new_empty((2,), dtype=torch.int64)


@torch.library.register_fake("dsmhist::_histogram_with_range_keys")
def _histogram_with_range_keys_fake(
    input: torch.Tensor,
    bins: int,
    range_keys: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    out_of_range: str = "ignore",
    dtype: Optional[torch.dtype] = None,
    batched: bool = False,
) -> torch.Tensor:
    op = "dsmhist._histogram_with_range_keys"
    torch._check_value(bins > 0, lambda: f"{op}: bins must be > 0, got {bins}")
    torch._check_value(not batched or input.dim() >= 1, lambda: f"{op}: batched input must have at least 1 dim")
    _check_weight(op, input, weight)
    shape = (*input.shape[:-1], bins) if batched else (bins,)
    return input.new_empty(shape, dtype=_output_dtype(weight, dtype))
