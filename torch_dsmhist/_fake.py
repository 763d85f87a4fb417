"""Fake (meta) kernels: output shape and dtype without touching data, for torch.compile and FakeTensor tracing.

Each runs the real op's argument checks (the C++ rules, through :func:`torch_dsmhist._rules.check_call`), so a call
the real op would refuse is refused while tracing too, with the same error. The ops that write into a tensor also
refuse, while tracing, a target that shares memory with the input or the weights (fake tensors keep their storages'
aliasing): compiled, the write is functionalized and the real kernel would never see the overlap.

The kernels take their arguments by the op's registered schema (csrc/registration.cpp), bound into a mapping by
name, so no op's signature is written a second time here.
"""

from typing import Any, Callable, Dict, Optional, Tuple

import torch

from ._rules import check_call, check_edges_call, check_into_memory_traced, check_moe_call

Arguments = Dict[str, Any]


def _bind(op: str, args: tuple, kwargs: Dict[str, Any]) -> Arguments:  # type: ignore[type-arg]
    """The call's arguments by name, defaults filled in from the op's schema."""
    schema = getattr(torch.ops.dsmhist, op).default._schema
    bound: Arguments = {}
    for position, argument in enumerate(schema.arguments):
        if position < len(args):
            bound[argument.name] = args[position]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        else:
            bound[argument.name] = argument.default_value
    return bound


def _input(a: Arguments) -> torch.Tensor:
    input: torch.Tensor = a["input"]
    return input


def _histogram_check(a: Arguments, op: str, batched: bool = False) -> torch.dtype:
    return check_call(
        "histogram", op, a["input"], a["bins"], (a["min"], a["max"]), a["weight"], a["out_of_range"], a["dtype"],
        batched=batched,
    )  # fmt: skip


def _histogram(a: Arguments) -> torch.Tensor:
    return _input(a).new_empty((a["bins"],), dtype=_histogram_check(a, "torch_dsmhist.histogram"))


def _batched_histogram(a: Arguments) -> torch.Tensor:
    dtype = _histogram_check(a, "torch_dsmhist.batched_histogram", batched=True)
    return _input(a).new_empty((*a["input"].shape[:-1], a["bins"]), dtype=dtype)


def _into(target: str, op: str, accumulate: Optional[bool]) -> Callable[[Arguments], None]:
    """histogram_add_ (into hist, always adding) and histogram(out=) (into out, adding when asked)."""

    def fake(a: Arguments) -> None:
        adds = a["accumulate"] if accumulate is None else accumulate
        check_call(
            "into", op, a["input"], 0, (a["min"], a["max"]), a["weight"], a["out_of_range"], a.get("dtype"),
            target=a[target], accumulate=adds,
        )  # fmt: skip
        check_into_memory_traced(op, target, a[target], a["input"], a["weight"])

    return fake


def _finite_range_keys(a: Arguments) -> torch.Tensor:
    check_call("finite_range", "torch_dsmhist._finite_range_keys", a["input"], 1)
    return _input(a).new_empty((2,), dtype=torch.int64)


def _histogram_with_range_keys(a: Arguments) -> torch.Tensor:
    dtype = check_call(
        "range_keys", "torch_dsmhist._histogram_with_range_keys", a["input"], a["bins"], (None, None), a["weight"],
        a["out_of_range"], a["dtype"], batched=a["batched"], target=a["range_keys"],
    )  # fmt: skip
    shape = (*a["input"].shape[:-1], a["bins"]) if a["batched"] else (a["bins"],)
    return _input(a).new_empty(shape, dtype=dtype)


def _bin_indices(a: Arguments) -> torch.Tensor:
    check_call(
        "bin_indices", "torch_dsmhist._bin_indices", a["input"], a["bins"], (a["min"], a["max"]), None,
        a["out_of_range"], target=a["range_keys"],
    )  # fmt: skip
    return torch.empty_like(_input(a), dtype=torch.int64, memory_format=torch.contiguous_format)


def _histogram_edges(a: Arguments) -> torch.Tensor:
    dtype = check_edges_call(
        "torch_dsmhist.histogram_edges", a["input"], [a["edges"]], a["weight"], a["out_of_range"], a["dtype"], nd=False
    )
    edges = a["edges"]
    rows = tuple(a["input"].shape[:-1]) if edges.dim() > 1 else ()  # per-row edges: a histogram a row
    return _input(a).new_empty(rows + (edges.shape[-1] - 1,), dtype=dtype)


def _row_edge_bin_indices(a: Arguments) -> torch.Tensor:
    check_edges_call(
        "torch_dsmhist._row_edge_bin_indices", a["input"], [a["edges"]], None, a["out_of_range"], None, nd=False
    )
    if a["edges"].dim() < 2:
        raise ValueError(
            "torch_dsmhist._row_edge_bin_indices: edges must have shape [..., B + 1] (one edges row per input row), "
            f"got {list(a['edges'].shape)}"
        )
    return _input(a).new_empty(tuple(a["input"].shape), dtype=torch.int32)


def _histogramdd(a: Arguments) -> torch.Tensor:
    dtype = check_edges_call(
        "torch_dsmhist.histogramdd", a["input"], a["edges"], a["weight"], a["out_of_range"], a["dtype"], nd=True
    )
    batch = tuple(a["input"].shape[:-2])
    return _input(a).new_empty(batch + tuple(e.shape[0] - 1 for e in a["edges"]), dtype=dtype)


def _edge_bin_indices(a: Arguments) -> torch.Tensor:
    check_edges_call("torch_dsmhist._edge_bin_indices", a["input"], a["edges"], None, a["out_of_range"], None, nd=True)
    return _input(a).new_empty(tuple(a["input"].shape[:-1]), dtype=torch.int32)


def _moe_align_block_size(a: Arguments) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = a["topk_ids"]
    sorted_size, blocks = check_moe_call(
        "torch_dsmhist.moe_align_block_size", ids, a["block_size"], a["num_experts"], a["expert_map"],
        a["pad_sorted_ids"],
    )  # fmt: skip
    int32 = torch.int32
    return (
        ids.new_empty((sorted_size,), dtype=int32),
        ids.new_empty((blocks,), dtype=int32),
        ids.new_empty((1,), dtype=int32),
    )


def _moe_routing(a: Arguments) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, experts = a["topk_ids"], a["num_experts"]
    sorted_size, _ = check_moe_call("torch_dsmhist.moe_routing", ids, a["block_size"], experts, None, False)
    int32 = torch.int32
    return (
        ids.new_empty((experts,), dtype=int32),
        ids.new_empty((experts + 1,), dtype=int32),
        ids.new_empty((sorted_size,), dtype=int32),
    )


_KERNELS: Dict[str, Callable[[Arguments], Any]] = {
    "histogram": _histogram,
    "histogram_add_": _into("hist", "torch_dsmhist.histogram_add_", accumulate=True),
    "_histogram_out": _into("out", "torch_dsmhist.histogram", accumulate=None),
    "batched_histogram": _batched_histogram,
    "_finite_range_keys": _finite_range_keys,
    "_histogram_with_range_keys": _histogram_with_range_keys,
    "_bin_indices": _bin_indices,
    "histogram_edges": _histogram_edges,
    "histogramdd": _histogramdd,
    "_edge_bin_indices": _edge_bin_indices,
    "_row_edge_bin_indices": _row_edge_bin_indices,
    "moe_align_block_size": _moe_align_block_size,
    "moe_routing": _moe_routing,
}


def _registered(op: str, kernel: Callable[[Arguments], Any]) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        return kernel(_bind(op, args, kwargs))

    fake.__name__ = f"_{op}_fake"
    return fake


# Registered by call, not as decorators: torch.library.register_fake is untyped.
for _op, _kernel in _KERNELS.items():
    torch.library.register_fake(f"dsmhist::{_op}", _registered(_op, _kernel))
