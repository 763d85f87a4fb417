"""The distributed scenarios, run by every rank of a torchrun launch (tests/test_distributed.py starts it).

    python -m torch.distributed.run --standalone --nproc-per-node=2 tests/distributed_scenarios.py \\
        --backend gloo --device cpu --out DIR [--seed N]

Every rank draws every rank's shard from the same seeded generator, so each can compare its distributed result
with the single-process op on the concatenated data and with the independent reference in helpers.py. Each rank
writes DIR/rank<R>.json: scenario name -> "ok", "skip: why" or the failure's traceback, rewritten after every
scenario so a hang still leaves the finished ones behind.
"""

import argparse
import datetime
import json
import os
import sys
import time
import traceback
import zlib
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Type

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's torch_dsmhist, before any installed one

import torch_dsmhist  # noqa: E402
import torch_dsmhist.distributed as dh  # noqa: E402

from helpers import (  # noqa: E402
    DISTRIBUTIONS,
    host_sync_raises,
    make_index_values,
    make_range_values,
    reference_histogram,
    sprinkle_specials,
)


class Skip(Exception):
    pass


class Context:
    def __init__(self, rank: int, world: int, device: torch.device, seed: int):
        self.rank, self.world, self.device, self.seed = rank, world, device, seed
        self.name = ""
        # The error scenarios call through a group with a short timeout: a rank left waiting fails in seconds.
        self.quick: Optional[dist.ProcessGroup] = None

    def gen(self, salt: str = "") -> torch.Generator:
        """The same generator on every rank (seeded by run seed, scenario and salt)."""
        g = torch.Generator()
        g.manual_seed(self.seed ^ zlib.crc32(f"{self.name}/{salt}".encode()))
        return g

    def shards(self, salt: str, make: Callable[[int, torch.Generator], torch.Tensor]) -> List[torch.Tensor]:
        """Every rank's shard, `make(rank, gen)` on the CPU then moved to this rank's device."""
        g = self.gen(salt)
        return [make(r, g).to(self.device) for r in range(self.world)]


SCENARIOS: Dict[str, Callable[[Context], None]] = {}
CUDA_ONLY = set()
# Scenarios that end the process group (an abort, a rank that exits): each runs alone in its own launch (--only),
# and the process exits right after writing its result.
ALONE: Dict[str, Callable[[Context], None]] = {}


def scenario(cuda_only: bool = False, alone: bool = False):
    def register(fn):
        (ALONE if alone else SCENARIOS)[fn.__name__] = fn
        if cuda_only:
            CUDA_ONLY.add(fn.__name__)
        return fn

    return register


def expect_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    got, want = got.cpu(), want.cpu()
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(
            f"{what}: differs at {bad}: got {got.flatten()[bad].tolist()}, expected {want.flatten()[bad].tolist()}"
        )


def expect_raises(kind, fragment: str, call: Callable[[], object], what: str) -> None:
    try:
        call()
    except kind as exc:
        assert fragment in str(exc), f"{what}: message {str(exc)!r} lacks {fragment!r}"
        return
    raise AssertionError(f"{what}: expected {kind.__name__} mentioning {fragment!r}")


def flat_cat(shards: List[torch.Tensor]) -> torch.Tensor:
    return torch.cat([s.reshape(-1) for s in shards])


def odd_size(g: torch.Generator, high: int = 6000) -> int:
    return 1 + 2 * int(torch.randint(0, high // 2, (1,), generator=g))


def strided(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """x as a non-contiguous view at an odd storage offset (the same values)."""
    base = torch.zeros(3 * x.numel() + 5, dtype=x.dtype)
    view = base[5::3][: x.numel()]
    view.copy_(x.reshape(-1))
    return view


# ---------------------------------------------------------------------------------------------------------------


@scenario()
def index_mode_uneven_shards(ctx: Context) -> None:
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64):
        for distribution in DISTRIBUTIONS:
            bins = 200 if dtype == torch.uint8 else 1000
            shards = ctx.shards(
                f"{dtype}{distribution}",
                lambda r, g: strided(make_index_values(odd_size(g), bins, dtype, distribution, g), g),
            )
            got = dh.histogram(shards[ctx.rank], bins)
            whole = flat_cat(shards)
            what = f"{dtype} {distribution}"
            expect_equal(got, torch_dsmhist.histogram(whole, bins), what)
            expect_equal(got, reference_histogram(whole, bins), what + " vs reference")
            if distribution == "uniform":
                clamped = dh.histogram(shards[ctx.rank], bins, out_of_range="clamp")
                expect_equal(clamped, reference_histogram(whole, bins, out_of_range="clamp"), what + " clamp")


@scenario()
def one_rank_empty(ctx: Context) -> None:
    ints = ctx.shards("int", lambda r, g: torch.randint(0, 50, (0 if r == 0 else 777,), generator=g))
    expect_equal(dh.histogram(ints[ctx.rank], 50), reference_histogram(flat_cat(ints), 50), "index")
    floats = ctx.shards("float", lambda r, g: torch.randn(0 if r == 0 else 555, generator=g) * 9 + 4)
    expect_equal(dh.histogram(floats[ctx.rank], 33), reference_histogram(flat_cat(floats), 33), "data range")
    nothing = ctx.shards("none", lambda r, g: torch.empty(0))
    expect_equal(dh.histogram(nothing[ctx.rank], 8), torch.zeros(8, dtype=torch.int64), "every rank empty")


@scenario()
def given_range(ctx: Context) -> None:
    for dtype in (torch.float16, torch.float32, torch.float64, torch.int16, torch.int64):
        for distribution in DISTRIBUTIONS:
            lo, hi = -3.5, 40.25
            shards = ctx.shards(
                f"{dtype}{distribution}", lambda r, g: make_range_values(odd_size(g), lo, hi, dtype, distribution, g)
            )
            whole = flat_cat(shards)
            for out_of_range in ("ignore", "clamp"):
                got = dh.histogram(shards[ctx.rank], 97, lo, hi, out_of_range=out_of_range)
                what = f"{dtype} {distribution} {out_of_range}"
                expect_equal(got, torch_dsmhist.histogram(whole, 97, lo, hi, out_of_range=out_of_range), what)
                expect_equal(got, reference_histogram(whole, 97, lo, hi, out_of_range=out_of_range), what + " ref")


@scenario()
def data_range_merged_across_ranks(ctx: Context) -> None:
    # Each rank's data covers a different interval: binning by a local range would give other bin edges.
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for bins in (7, 1000):
            shards = ctx.shards(
                f"{dtype}{bins}",
                lambda r, g: sprinkle_specials(
                    (torch.randn(odd_size(g), generator=g, dtype=torch.float64) * (r + 1) * 10 + 100 * r).to(dtype), g
                ),
            )
            whole = flat_cat(shards)
            got = dh.histogram(shards[ctx.rank], bins)
            expect_equal(got, torch_dsmhist.histogram(whole, bins), f"{dtype} bins={bins}")
            expect_equal(got, reference_histogram(whole, bins), f"{dtype} bins={bins} vs reference")


@scenario()
def data_range_constant_values(ctx: Context) -> None:
    same = ctx.shards("same", lambda r, g: torch.full((11 + r,), 3.0))
    expect_equal(dh.histogram(same[ctx.rank], 4), reference_histogram(flat_cat(same), 4), "one value: [v-1, v+1]")
    differ = ctx.shards("differ", lambda r, g: torch.full((5,), 3.0 + 2 * r))
    expect_equal(dh.histogram(differ[ctx.rank], 4), reference_histogram(flat_cat(differ), 4), "a value per rank")
    specials = ctx.shards("specials", lambda r, g: torch.tensor([float("nan"), float("inf")] if r else [float("-inf")]))
    expect_equal(dh.histogram(specials[ctx.rank], 4), torch.zeros(4, dtype=torch.int64), "no finite value anywhere")


@scenario()
def weighted_sums(ctx: Context) -> None:
    # Integer-valued weights: every partial sum is exact, so the cross-rank sum must equal the reference exactly.
    for weight_dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        data = ctx.shards(f"x{weight_dtype}", lambda r, g: torch.randn(odd_size(g), generator=g) * (1 + r))
        weights = ctx.shards(
            f"w{weight_dtype}", lambda r, g: torch.randint(-4, 5, (data[r].numel(),), generator=g).to(weight_dtype)
        )
        x, w = data[ctx.rank], weights[ctx.rank]
        whole, whole_w = flat_cat(data), flat_cat(weights)
        for lo, hi in ((None, None), (-2.0, 2.0)):
            got = dh.histogram(x, 64, lo, hi, weight=w)
            expect_equal(got, reference_histogram(whole, 64, lo, hi, weight=whole_w), f"{weight_dtype} range={lo}")


@scenario()
def int32_counts(ctx: Context) -> None:
    shards = ctx.shards("x", lambda r, g: torch.randint(0, 300, (odd_size(g),), generator=g, dtype=torch.int32))
    got = dh.histogram(shards[ctx.rank], 300, dtype=torch.int32)
    expect_equal(got, reference_histogram(flat_cat(shards), 300, dtype=torch.int32), "int32 counts")


@scenario()
def int32_counts_refused_past_int32_max_across_ranks(ctx: Context) -> None:
    # Each rank alone fits int32 (2^30 elements, a stride-0 view); together they do not.
    x = torch.zeros(1, dtype=torch.uint8, device=ctx.device).expand(1 << 30)
    expect_raises(ValueError, "int32 counts cannot hold", lambda: dh.histogram(x, 4, dtype=torch.int32), "histogram")
    hist = torch.zeros(4, dtype=torch.int32, device=ctx.device)
    expect_raises(ValueError, "int32 counts cannot hold", lambda: dh.histogram_add_(hist, x), "histogram_add_")
    expect_equal(hist, torch.zeros(4, dtype=torch.int32), "hist untouched after the refusal")


@scenario()
def histogram_add_running(ctx: Context) -> None:
    cases = [
        (torch.int64, None, None),
        (torch.int32, None, None),
        (torch.float64, torch.float32, (-1.0, 1.0)),
        (torch.float32, torch.float16, (-1.0, 1.0)),
    ]
    for hist_dtype, weight_dtype, bounds in cases:
        bins = 129
        start = torch.randint(0, 1000, (bins,), generator=ctx.gen(f"start{hist_dtype}")).to(hist_dtype)
        backing = torch.zeros(2 * bins, dtype=hist_dtype, device=ctx.device)
        hist = backing[::2]  # non-contiguous
        hist.copy_(start)
        expected = start.clone()
        for step in range(3):
            lo, hi = bounds if bounds else (None, None)
            if bounds:
                data = ctx.shards(f"{hist_dtype}{step}", lambda r, g: torch.rand(odd_size(g), generator=g) * 2.4 - 1.2)
                weights = ctx.shards(
                    f"w{hist_dtype}{step}",
                    lambda r, g: torch.randint(-3, 4, (data[r].numel(),), generator=g).to(weight_dtype),
                )
                w, whole_w = weights[ctx.rank], flat_cat(weights)
            else:
                data = ctx.shards(
                    f"{hist_dtype}{step}", lambda r, g: torch.randint(-2, bins + 2, (odd_size(g),), generator=g)
                )
                w, whole_w = None, None
            returned = dh.histogram_add_(hist, data[ctx.rank], lo, hi, weight=w)
            assert returned is hist, "histogram_add_ returns hist"
            step_hist = reference_histogram(flat_cat(data), bins, lo, hi, weight=whole_w)
            expected = expected + step_hist.to(hist_dtype)
            expect_equal(hist, expected, f"{hist_dtype} after step {step}")


@scenario()
def out_replace_and_accumulate(ctx: Context) -> None:
    bins = 61
    shards = ctx.shards("x", lambda r, g: torch.randint(0, bins, (odd_size(g),), generator=g))
    want = reference_histogram(flat_cat(shards), bins)
    out = torch.full((3 * bins,), 7, dtype=torch.int64, device=ctx.device)[::3]
    assert dh.histogram(shards[ctx.rank], bins, out=out) is out
    expect_equal(out, want, "out= replaced")
    dh.histogram(shards[ctx.rank], bins, out=out, accumulate=True)
    expect_equal(out, 2 * want, "out= accumulated")


@scenario()
def batched_rows(ctx: Context) -> None:
    bins = 40
    # [3, 4, N_rank]: N differs per rank; a permuted (non-contiguous) view of [N, 3, 4].
    ints = ctx.shards("int", lambda r, g: torch.randint(-1, bins + 1, (odd_size(g, 600), 3, 4), generator=g))
    ints = [s.permute(1, 2, 0) for s in ints]
    floats = ctx.shards(
        "float", lambda r, g: sprinkle_specials(torch.randn(3, 4, odd_size(g, 600), generator=g) * (r + 1) + r, g)
    )
    for name, shards in (("index", ints), ("data range", floats)):
        got = dh.batched_histogram(shards[ctx.rank], bins)
        whole = torch.cat(shards, dim=-1)
        expect_equal(got, torch_dsmhist.batched_histogram(whole, bins), name)
        if name == "index":  # per-row reference (the data-range rows share one range, checked just above)
            want = torch.stack([reference_histogram(row, bins) for row in whole.reshape(12, -1)]).reshape(3, 4, bins)
            expect_equal(got, want, name + " vs reference")


@scenario()
def edges_ops_over_uneven_shards(ctx: Context) -> None:
    """histogram_edges and histogramdd (plain, weighted, batched) over shards of different sizes equal the
    single-process op over the concatenated data; ranks whose edges differ in count raise on every rank."""
    g = ctx.gen("edges")
    edges = torch.sort(torch.randn(97, generator=g, dtype=torch.float64)).values.float().to(ctx.device)
    grid = [torch.linspace(-2, 2, 9, device=ctx.device), torch.linspace(-1, 3, 6, device=ctx.device)]
    values = ctx.shards("values", lambda r, g: sprinkle_specials(torch.randn(odd_size(g), generator=g) * 1.5, g))
    points = ctx.shards("points", lambda r, g: torch.randn(odd_size(g, 3000), 2, generator=g, dtype=torch.float32))
    weights = ctx.shards("weights", lambda r, g: torch.randint(-3, 4, (points[r].shape[0],), generator=g).double())
    batched = ctx.shards("batched", lambda r, g: torch.rand(3, odd_size(g, 800), 2, generator=g) * 4 - 2)
    for rule in ("ignore", "clamp"):
        got = dh.histogram_edges(values[ctx.rank], edges, out_of_range=rule)
        expect_equal(got, torch_dsmhist.histogram_edges(flat_cat(values), edges, out_of_range=rule), f"edges {rule}")
        got = dh.histogramdd(points[ctx.rank], grid, weights[ctx.rank], rule)
        want = torch_dsmhist.histogramdd(torch.cat(points), grid, torch.cat(weights), rule)
        expect_equal(got, want, f"histogramdd weighted {rule}")  # integer weights: exact in any order
    got = dh.histogramdd(batched[ctx.rank], grid, dtype=torch.int32)
    expect_equal(got, torch_dsmhist.histogramdd(torch.cat(batched, dim=1), grid, dtype=torch.int32), "batched")
    first = ctx.rank == 0
    fewer = edges if first else edges[:-1]
    expect_raises(ValueError, "the same bins", lambda: dh.histogram_edges(values[ctx.rank], fewer), "edge count")
    ids = torch.randint(-3, 4, (50,), generator=ctx.gen("ids")).to(ctx.device)
    int_edges = torch.linspace(-3, 3, 7, dtype=torch.float32 if first else torch.float64, device=ctx.device)
    expect_raises(ValueError, "the same edges", lambda: dh.histogram_edges(ids, int_edges), "edge dtype")
    expect_raises(
        ValueError,
        "the same function",
        lambda: dh.histogram_edges(values[ctx.rank], edges) if first else dh.histogramdd(points[ctx.rank], grid),
        "function",
    )
    expect_raises(
        ValueError,
        "the same batch shape",
        lambda: dh.histogramdd(batched[ctx.rank] if first else batched[ctx.rank][:2], grid),
        "batch shape",
    )


@scenario()
def all_reduce_of_local_running_histograms(ctx: Context) -> None:
    bins = 300
    batches = [ctx.shards(f"b{i}", lambda r, g: torch.randint(0, bins, (odd_size(g),), generator=g)) for i in range(4)]
    local = torch.zeros(bins, dtype=torch.int64, device=ctx.device)
    for batch in batches:
        torch_dsmhist.histogram_add_(local, batch[ctx.rank])
    want = reference_histogram(torch.cat([flat_cat(b) for b in batches]), bins)
    assert dh.all_reduce_histogram(local) is local
    expect_equal(local, want, "contiguous")
    strided_hist = torch.zeros(2, bins, dtype=torch.int64, device=ctx.device)[:, ::2]  # [2, 150], non-contiguous
    strided_hist.copy_(torch.arange(300, device=ctx.device).reshape(2, 150) * (ctx.rank + 1))
    dh.all_reduce_histogram(strided_hist)
    expect_equal(strided_hist, torch.arange(300).reshape(2, 150) * sum(range(1, ctx.world + 1)), "strided [2, 150]")


@scenario()
def async_handles(ctx: Context) -> None:
    bins = 50
    ints = ctx.shards("int", lambda r, g: torch.randint(0, bins, (odd_size(g),), generator=g))
    floats = ctx.shards("float", lambda r, g: torch.randn(odd_size(g), generator=g) + r)
    want_ints = reference_histogram(flat_cat(ints), bins)
    pending = dh.histogram(ints[ctx.rank], bins, async_op=True)
    assert isinstance(pending, dh.PendingHistogram)
    expect_equal(pending.wait(), want_ints, "histogram")
    assert pending.wait() is pending.wait(), "wait() twice gives the same tensor"
    expect_equal(
        dh.histogram(floats[ctx.rank], bins, async_op=True).wait(),
        reference_histogram(flat_cat(floats), bins),
        "histogram, data range",
    )
    hist = torch.ones(bins, dtype=torch.int64, device=ctx.device)
    assert dh.histogram_add_(hist, ints[ctx.rank], async_op=True).wait() is hist
    expect_equal(hist, want_ints + 1, "histogram_add_")
    out = torch.zeros(2 * bins, dtype=torch.int64, device=ctx.device)[::2]
    assert dh.histogram(ints[ctx.rank], bins, out=out, async_op=True).wait() is out
    expect_equal(out, want_ints, "out=")
    rows = [s.reshape(1, -1) for s in ints]
    expect_equal(dh.batched_histogram(rows[ctx.rank], bins, async_op=True).wait(), want_ints.reshape(1, -1), "batched")
    local = torch_dsmhist.histogram(ints[ctx.rank], bins)
    expect_equal(dh.all_reduce_histogram(local, async_op=True).wait(), want_ints, "all_reduce_histogram")


@scenario()
def ranks_that_disagree_raise_everywhere(ctx: Context) -> None:
    x_int = torch.randint(0, 10, (100,), generator=ctx.gen("x")).to(ctx.device)
    x_float = torch.rand(100, generator=ctx.gen("f")).to(ctx.device)
    first = ctx.rank == 0
    cases = [
        ("bins", lambda: dh.histogram(x_int, 10 if first else 11)),
        ("max", lambda: dh.histogram(x_float, 10, 0.0, 1.0 if first else 2.0)),
        ("out_of_range", lambda: dh.histogram(x_int, 10, out_of_range="ignore" if first else "clamp")),
        ("binning mode", lambda: dh.histogram(x_float, 10, *((None, None) if first else (0.0, 1.0)))),
        ("count / sum dtype", lambda: dh.histogram(x_int, 10, dtype=torch.int64 if first else torch.int32)),
        ("count / sum dtype", lambda: dh.histogram(x_float, 10, weight=x_float if first else None)),
        ("batch shape", lambda: dh.batched_histogram(x_int.reshape(4 if first else 5, -1), 10)),
        ("function", lambda: dh.histogram(x_int, 10) if first else dh.batched_histogram(x_int.reshape(1, -1), 10)),
        (
            "bins",
            lambda: dh.all_reduce_histogram(torch.zeros(10 if first else 12, dtype=torch.int64, device=ctx.device)),
        ),
    ]
    for field, call in cases:
        expect_raises(ValueError, f"the same {field}", call, field)
    # Still in step: a correct call after the errors gives the right answer.
    expect_equal(dh.histogram(x_int, 10), torch.bincount(x_int.cpu(), minlength=10) * ctx.world, "after errors")


@scenario()
def local_error_raises_on_every_rank(ctx: Context) -> None:
    x = torch.rand(64, generator=ctx.gen("x")).to(ctx.device)
    bad_weight = torch.ones(63 if ctx.rank == 1 else 64, device=ctx.device)  # only rank 1 errs
    for lo, hi in ((0.0, 1.0), (None, None)):  # the data-range path checks the weight before its collectives too
        if ctx.rank == 1:
            expect_raises(ValueError, "weight", lambda: dh.histogram(x, 8, lo, hi, weight=bad_weight), "own error")
        else:
            expect_raises(
                RuntimeError,
                "group rank 1: ValueError",
                lambda: dh.histogram(x, 8, lo, hi, weight=bad_weight),
                "another rank's error",
            )
    # Rank 0's out has the wrong shape: rank 0 raises its own ValueError, the others a RuntimeError naming rank 0.
    out = torch.zeros(9 if ctx.rank == 0 else 8, dtype=torch.int64, device=ctx.device)
    if ctx.rank == 0:
        expect_raises(ValueError, "out must have shape", lambda: dh.histogram(x, 8, 0.0, 1.0, out=out), "own error")
    else:
        expect_raises(
            RuntimeError, "group rank 0: ValueError", lambda: dh.histogram(x, 8, 0.0, 1.0, out=out), "rank 0's error"
        )
    expect_equal(dh.histogram(x, 8, 0.0, 1.0), torch.histc(x.cpu(), 8, 0, 1).long() * ctx.world, "after errors")


@scenario()
def check_false_same_results(ctx: Context) -> None:
    ints = ctx.shards("int", lambda r, g: torch.randint(0, 99, (odd_size(g),), generator=g))
    floats = ctx.shards("float", lambda r, g: torch.randn(odd_size(g), generator=g) * (r + 2))
    expect_equal(dh.histogram(ints[ctx.rank], 99, check=False), reference_histogram(flat_cat(ints), 99), "index")
    expect_equal(dh.histogram(floats[ctx.rank], 99, check=False), reference_histogram(flat_cat(floats), 99), "range")


@scenario()
def process_groups(ctx: Context) -> None:
    everyone = dist.new_group(list(range(ctx.world)))
    last_only = dist.new_group([ctx.world - 1])
    ints = ctx.shards("int", lambda r, g: torch.randint(0, 20, (odd_size(g),), generator=g))
    expect_equal(dh.histogram(ints[ctx.rank], 20, group=everyone), reference_histogram(flat_cat(ints), 20), "all")
    if ctx.rank == ctx.world - 1:
        expect_equal(
            dh.histogram(ints[ctx.rank], 20, group=last_only),
            reference_histogram(ints[ctx.rank], 20),
            "a group of one rank",
        )
    else:
        expect_raises(
            RuntimeError, "not a member", lambda: dh.histogram(ints[ctx.rank], 20, group=last_only), "non-member"
        )


@scenario(cuda_only=True)
def no_host_sync(ctx: Context) -> None:
    # check=False never synchronises; check=True neither when the group has a CPU backend (with an NCCL-only group
    # it reads the gathered arguments back, by design, so only check=False is held to it there).
    ints = ctx.shards("int", lambda r, g: torch.randint(0, 999, (odd_size(g),), generator=g))
    floats = ctx.shards("float", lambda r, g: torch.randn(odd_size(g), generator=g) * (r + 2))
    host_check = "cpu" in [d.type for d in dist.group.WORLD._device_types]
    checks = (False, True) if host_check else (False,)
    hist = torch.zeros(999, dtype=torch.int64, device=ctx.device)
    torch.cuda.synchronize()
    with host_sync_raises():
        for check in checks:
            dh.histogram(ints[ctx.rank], 999, check=check)
            dh.histogram(floats[ctx.rank], 999, check=check)
            dh.batched_histogram(floats[ctx.rank].reshape(1, -1), 999, check=check)
            dh.histogram_add_(hist, ints[ctx.rank], check=check)
            dh.all_reduce_histogram(hist, check=check)


@scenario(cuda_only=True)
def cuda_graph_capture(ctx: Context) -> None:
    bins = 257
    static_int = torch.zeros(4099, dtype=torch.int64, device=ctx.device)
    static_float = torch.zeros(3001, dtype=torch.float32, device=ctx.device)
    host_check = "cpu" in [d.type for d in dist.group.WORLD._device_types]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (and the agreement check) outside the capture
        dh.histogram(static_int, bins)
        dh.histogram(static_float, bins)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        counts = dh.histogram(static_int, bins, check=host_check)
        by_data_range = dh.histogram(static_float, bins, check=host_check)
    for replay in range(3):
        ints = ctx.shards(f"int{replay}", lambda r, g: torch.randint(0, bins, (4099,), generator=g))
        floats = ctx.shards(f"float{replay}", lambda r, g: torch.randn(3001, generator=g) * (r + 1 + replay))
        static_int.copy_(ints[ctx.rank])
        static_float.copy_(floats[ctx.rank])
        graph.replay()
        expect_equal(counts, reference_histogram(flat_cat(ints), bins), f"replay {replay} counts")
        expect_equal(by_data_range, reference_histogram(flat_cat(floats), bins), f"replay {replay} data range")
    if not host_check:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            g2 = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g2, stream=stream, capture_error_mode="thread_local"):
                    dh.histogram(static_int, bins)
            except RuntimeError as exc:
                assert "check=False" in str(exc), str(exc)
            else:
                raise AssertionError("check=True under capture with an NCCL-only group must raise")


# ---------------------------------------------------------------------------------------------------------------
# Item 11: a failure on any rank, of any type, anywhere in the call, raises on every rank within a second.


class Boom(Exception):
    """An exception type torch_dsmhist knows nothing about."""


class Halt(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit (as a framework's cancellation can be)."""


def raising_tensor(kind: Type[BaseException]) -> torch.Tensor:
    """A tensor whose every torch operation (even reading .device) raises `kind`: a failure deep in a local step."""

    class Raising(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise kind(f"{kind.__name__} from the tensor subclass")

    return torch.zeros(16).as_subclass(Raising)


class Trigger(NamedTuple):
    """One rank-local failure: `bad` is what the failing ranks call, `good` what the others call."""

    bad: Callable[[Context], Callable[[], object]]
    error: Type[BaseException]  # what a failing rank must raise (its own error, its own type)
    fragment: str  # in that error's message, and so in the other ranks' RuntimeError
    good: Optional[Callable[[Context], Callable[[], object]]] = None  # default: a correct dh.histogram call
    failing: Sequence[int] = (1,)


def _x(ctx: Context) -> torch.Tensor:
    return torch.arange(16, device=ctx.device) % 4


def _xf(ctx: Context) -> torch.Tensor:
    return torch.rand(16, generator=ctx.gen("xf")).to(ctx.device)


TRIGGERS = {
    # The reproducer: a rank with no shard, on the default group.
    "none_input_default_group": Trigger(
        lambda c: lambda: dh.histogram(None, 20),
        TypeError,
        "input must be a",
        good=lambda c: lambda: dh.histogram(_x(c), 20),
    ),
    "list_input": Trigger(lambda c: lambda: dh.histogram([1, 2, 3], 4, group=c.quick), TypeError, "input must be"),
    "list_weight": Trigger(
        lambda c: lambda: dh.histogram(_xf(c), 4, 0.0, 1.0, weight=[1.0] * 16, group=c.quick),
        TypeError,
        "weight must be",
        good=lambda c: lambda: dh.histogram(_xf(c), 4, 0.0, 1.0, weight=_xf(c), group=c.quick),
    ),
    "list_hist": Trigger(
        lambda c: lambda: dh.histogram_add_([0] * 4, _x(c), group=c.quick),
        TypeError,
        "hist must be",
        good=lambda c: (
            lambda: dh.histogram_add_(torch.zeros(4, dtype=torch.int64, device=c.device), _x(c), group=c.quick)
        ),
    ),
    "list_hist_all_reduce": Trigger(
        lambda c: lambda: dh.all_reduce_histogram([0] * 4, group=c.quick),
        TypeError,
        "hist must be",
        good=lambda c: (
            lambda: dh.all_reduce_histogram(torch.zeros(4, dtype=torch.int64, device=c.device), group=c.quick)
        ),
    ),
    "min_not_a_number": Trigger(
        lambda c: lambda: dh.histogram(_x(c), 10, "abc", 3.0, group=c.quick), TypeError, "min must be"
    ),
    "bins_past_int64": Trigger(
        lambda c: lambda: dh.histogram(_x(c), 1 << 63, group=c.quick), ValueError, "bins must be"
    ),
    "bins_not_an_int": Trigger(
        lambda c: lambda: dh.histogram(_x(c), 4.5, group=c.quick), TypeError, "bins must be an int"
    ),
    "missing_argument": Trigger(lambda c: lambda: dh.histogram(_x(c), group=c.quick), TypeError, "'bins'"),
    "misspelt_keyword": Trigger(lambda c: lambda: dh.histogram(_x(c), 4, bin=4, group=c.quick), TypeError, "'bin'"),
    "check_not_a_bool": Trigger(
        lambda c: lambda: dh.histogram(_x(c), 4, group=c.quick, check="yes"), TypeError, "check must be"
    ),
    "memory_error_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(MemoryError), 4, group=c.quick), MemoryError, "subclass"
    ),
    "overflow_error_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(OverflowError), 4, group=c.quick), OverflowError, "subclass"
    ),
    "attribute_error_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(AttributeError), 4, group=c.quick), AttributeError, "subclass"
    ),
    "unknown_error_type_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(Boom), 4, group=c.quick), Boom, "subclass"
    ),
    # Not Exceptions: a Ctrl-C (or an exit) on one rank while it prepares must still reach the others.
    "keyboard_interrupt_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(KeyboardInterrupt), 4, group=c.quick),
        KeyboardInterrupt,
        "subclass",
    ),
    "system_exit_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(SystemExit), 4, group=c.quick), SystemExit, "subclass"
    ),
    "base_exception_in_local_step": Trigger(
        lambda c: lambda: dh.histogram(raising_tensor(Halt), 4, group=c.quick), Halt, "subclass"
    ),
    # Refused by the binning step, which runs after the range merge: it must be refused before the agreement.
    "data_range_bad_out_of_range": Trigger(
        lambda c: lambda: dh.histogram(_xf(c), 4, out_of_range="bogus", group=c.quick),
        ValueError,
        "out_of_range",
        good=lambda c: lambda: dh.histogram(_xf(c), 4, group=c.quick),
    ),
    "batched_0d_input": Trigger(
        lambda c: lambda: dh.batched_histogram(torch.tensor(3, device=c.device), 4, group=c.quick),
        ValueError,
        "at least 1 dim",
        good=lambda c: lambda: dh.batched_histogram(_x(c).reshape(2, 8), 4, group=c.quick),
    ),
    "hist_is_input": Trigger(
        lambda c: lambda: dh.histogram_add_(*[torch.zeros(4, dtype=torch.int64, device=c.device)] * 2, group=c.quick),
        ValueError,
        "share memory",
        good=lambda c: (
            lambda: dh.histogram_add_(torch.zeros(4, dtype=torch.int64, device=c.device), _x(c), group=c.quick)
        ),
    ),
    # Every rank fails, each its own way: each re-raises its own error.
    "every_rank_fails": Trigger(
        lambda c: (
            (lambda: dh.histogram(None, 4, group=c.quick))
            if c.rank == 0
            else (lambda: dh.histogram(_x(c), 0, group=c.quick))
        ),
        Exception,
        "must be",
        failing=(0, 1),
    ),
}


def gather_floats(ctx: Context, values: List[float]) -> List[List[float]]:
    mine = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    rows = [torch.empty_like(mine) for _ in range(ctx.world)]
    dist.all_gather(rows, mine)
    return torch.stack(rows).tolist()


def run_trigger(ctx: Context, trigger: Trigger, index: int) -> None:
    failing = ctx.rank in trigger.failing
    good = trigger.good or (lambda c: lambda: dh.histogram(_x(c), 4, group=c.quick))
    call = trigger.bad(ctx) if failing else good(ctx)
    # One rank calls 0.3 s after the other (which rank alternates): the early one waits in the collective.
    if ctx.rank == index % ctx.world:
        time.sleep(0.3)
    start = time.time()
    try:
        call()
        raised: Optional[BaseException] = None
    except BaseException as exc:  # noqa: BLE001 (the triggers include KeyboardInterrupt and SystemExit)
        raised = exc
    end = time.time()
    rows = gather_floats(ctx, [start, end])
    latency = end - max(row[0] for row in rows)
    print(
        f"[rank {ctx.rank}] {ctx.name}: raised {type(raised).__name__} {latency * 1e3:.1f} ms after the last "
        "rank's call",
        flush=True,
    )
    assert raised is not None, "the call returned instead of raising"
    if failing:
        if trigger.error is not Exception:
            assert type(raised) is trigger.error, f"own error: {type(raised).__name__}: {raised}"
        assert trigger.fragment in str(raised), f"own error {raised!r} lacks {trigger.fragment!r}"
    else:
        message = str(raised)
        assert type(raised) is RuntimeError, f"expected RuntimeError, got {type(raised).__name__}: {raised}"
        for rank in trigger.failing:  # (a trigger whose ranks fail each their own way names no one type)
            named = "" if trigger.error is Exception else trigger.error.__name__
            assert f"group rank {rank}: {named}" in message, message
        assert trigger.fragment in message, f"{message!r} lacks the failing rank's error {trigger.fragment!r}"
    assert latency < 1.0, f"raised {latency:.3f} s after the last rank's call"
    # Still in step: a correct call right after gives the right answer.
    expect_equal(
        dh.histogram(_x(ctx), 4, group=ctx.quick),
        torch.full((4,), 4 * ctx.world, dtype=torch.int64),
        "a correct call after the error",
    )


def _register_trigger(name: str, index: int) -> None:
    def run(ctx: Context) -> None:
        run_trigger(ctx, TRIGGERS[name], index)

    run.__name__ = f"rank_error_{name}"
    scenario()(run)


for _index, _name in enumerate(TRIGGERS):
    _register_trigger(_name, _index)


def raising_instance_tensor(error: BaseException) -> torch.Tensor:
    """A tensor whose every torch operation raises `error` itself (the same object each time)."""

    class Raising(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise error

    return torch.zeros(16).as_subclass(Raising)


def random_out(ctx: Context, salt: str, bins: int, dtype: torch.dtype) -> torch.Tensor:
    """A seeded, rank-specific out= tensor with nonzero values, so that any write to it shows."""
    g = ctx.gen(f"{salt}/rank{ctx.rank}")
    if dtype.is_floating_point:
        return (torch.randn(bins, generator=g, dtype=torch.float64) * 100).to(dtype).to(ctx.device)
    return torch.randint(-1000, 1000, (bins,), generator=g, dtype=dtype).to(ctx.device)


def expect_unchanged(tensor: torch.Tensor, before: torch.Tensor, what: str) -> None:
    """Bitwise: a refused call must not have written a single element (NaN payloads and -0.0 included)."""
    assert tensor.dtype == before.dtype and tensor.shape == before.shape, what
    got, want = tensor.cpu().contiguous(), before.cpu().contiguous()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), f"{what}: out was written"


@scenario()
def base_exception_on_one_rank_reaches_every_rank(ctx: Context) -> None:
    """Rank 1's preparation raises a BaseException (a Ctrl-C, an exit, another kind): rank 1 re-raises that very
    object once rank 0 has been told; rank 0 raises RuntimeError naming rank 1 and the error, within a second.
    Neither rank's out= is written."""
    shards = ctx.shards("x", lambda r, g: torch.randint(0, 8, (odd_size(g, 600),), generator=g))
    x = shards[ctx.rank]
    for kind in (KeyboardInterrupt, SystemExit, Halt):
        error = kind(f"{kind.__name__} while rank 1 prepared its call")
        out = random_out(ctx, kind.__name__, 8, torch.int64)
        before = out.clone()
        call_input = raising_instance_tensor(error) if ctx.rank == 1 else x
        start = time.time()
        try:
            dh.histogram(call_input, 8, out=out, accumulate=True, group=ctx.quick)
            raised: Optional[BaseException] = None
        except BaseException as exc:  # noqa: BLE001
            raised = exc
        end = time.time()
        latency = end - max(row[0] for row in gather_floats(ctx, [start]))
        if ctx.rank == 1:
            assert raised is error, f"{kind.__name__}: rank 1 raised {raised!r}, not its own error"
        else:
            assert type(raised) is RuntimeError, f"{kind.__name__}: rank 0 raised {raised!r}"
            assert f"group rank 1: {kind.__name__}: {error}" in str(raised), str(raised)
        assert latency < 1.0, f"{kind.__name__}: raised {latency:.3f} s after the last rank's call"
        expect_unchanged(out, before, kind.__name__)
    # A bare Ctrl-C has no message: the other ranks still get its type.
    out = random_out(ctx, "bare", 8, torch.int64)
    before = out.clone()
    error = KeyboardInterrupt()
    try:
        dh.histogram(raising_instance_tensor(error) if ctx.rank == 1 else x, 8, out=out, group=ctx.quick)
        raised = None
    except BaseException as exc:  # noqa: BLE001
        raised = exc
    if ctx.rank == 1:
        assert raised is error, f"bare KeyboardInterrupt: rank 1 raised {raised!r}"
    else:
        assert type(raised) is RuntimeError and str(raised).endswith("group rank 1: KeyboardInterrupt"), repr(raised)
    expect_unchanged(out, before, "bare KeyboardInterrupt")
    # Every rank interrupted: each re-raises its own.
    error = KeyboardInterrupt(f"rank {ctx.rank}")
    try:
        dh.histogram(raising_instance_tensor(error), 8, group=ctx.quick)
        raised = None
    except BaseException as exc:  # noqa: BLE001
        raised = exc
    assert raised is error, f"every rank interrupted: rank {ctx.rank} raised {raised!r}"
    expect_equal(
        dh.histogram(x, 8, group=ctx.quick),
        reference_histogram(flat_cat(shards), 8),
        "a correct call after the errors (still in step)",
    )


@scenario()
def data_range_accumulate_refused(ctx: Context) -> None:
    """Floating input without min/max cannot add into out: the single-process histogram refuses it (each call's data
    would give other bins), and so must the distributed one, with the same rule, on every rank, writing nothing."""
    x = (torch.randn(odd_size(ctx.gen("n"), 600), generator=ctx.gen(f"x{ctx.rank}")) * (ctx.rank + 1)).to(ctx.device)
    w = torch.rand(x.numel(), generator=ctx.gen(f"w{ctx.rank}")).to(ctx.device)
    for out_dtype, weight in ((torch.int64, None), (torch.int32, None), (torch.float32, w), (torch.float64, w)):
        what = f"{out_dtype} weight={weight is not None}"
        out = random_out(ctx, what, 4, out_dtype)
        before = out.clone()
        try:
            torch_dsmhist.histogram(x, 4, weight=weight, out=out.clone(), accumulate=True)
        except Exception as exc:  # noqa: BLE001
            single = exc
        else:
            raise AssertionError(f"{what}: the single-process histogram accepted it")
        assert "min and max" in str(single), str(single)
        for group, check in ((None, True), (ctx.quick, True), (ctx.quick, False)):
            try:
                dh.histogram(x, 4, weight=weight, out=out, accumulate=True, group=group, check=check)
            except Exception as exc:  # noqa: BLE001
                assert type(exc) is type(single), f"{what}: {type(exc).__name__}, not {type(single).__name__}"
                # The same rule's message (the text after the op's name, which names the function called).
                assert str(exc).split(": ", 1)[1] == str(single).split(": ", 1)[1], (
                    f"{what}: {exc!r} vs the single-process {single!r}"
                )
            else:
                raise AssertionError(f"{what} check={check}: accepted")
            expect_unchanged(out, before, f"{what} check={check}")
    # Only rank 1 asks for it (rank 0 gives a range): rank 0 hears of rank 1's refusal, and neither out is written.
    out = random_out(ctx, "one rank", 4, torch.int64)
    before = out.clone()
    bounds = (None, None) if ctx.rank == 1 else (-1.0, 1.0)
    if ctx.rank == 1:
        expect_raises(
            ValueError,
            "min and max",
            lambda: dh.histogram(x, 4, *bounds, out=out, accumulate=True, group=ctx.quick),
            "rank 1",
        )
    else:
        expect_raises(
            RuntimeError,
            "group rank 1: ValueError",
            lambda: dh.histogram(x, 4, *bounds, out=out, accumulate=True, group=ctx.quick),
            "rank 0",
        )
    expect_unchanged(out, before, "one rank refused")
    # Replacing out (accumulate=False) over the data's range stays allowed, as in the single-process call.
    shards = ctx.shards("whole", lambda r, g: torch.randn(odd_size(g, 600), generator=g) * (r + 1))
    out = random_out(ctx, "replace", 4, torch.int64)
    dh.histogram(shards[ctx.rank], 4, out=out, group=ctx.quick)
    expect_equal(out, reference_histogram(flat_cat(shards), 4), "accumulate=False over the data's range")


@scenario()
def accumulate_disagreement_caught(ctx: Context) -> None:
    """Rank 0 replaces its out, rank 1 adds into its own: the agreement check must refuse it on every rank (each would
    be left with a different "global" histogram), writing nothing."""
    ints = ctx.shards("int", lambda r, g: torch.randint(0, 6, (odd_size(g, 600),), generator=g))
    floats = ctx.shards("float", lambda r, g: torch.rand(odd_size(g, 600), generator=g))
    # Integer-valued weights: every partial sum is exact, so the accumulated sums can be compared exactly.
    weights = ctx.shards("w", lambda r, g: torch.randint(-3, 4, (floats[r].numel(),), generator=g).double())
    xi, xf, w = ints[ctx.rank], floats[ctx.rank], weights[ctx.rank]
    calls = [
        (
            "index",
            lambda out, acc: dh.histogram(xi, 6, out=out, accumulate=acc, group=ctx.quick),
            torch.int64,
            reference_histogram(flat_cat(ints), 6),
        ),
        (
            "given range",
            lambda out, acc: dh.histogram(xf, 6, 0.0, 1.0, out=out, accumulate=acc, group=ctx.quick),
            torch.int32,
            reference_histogram(flat_cat(floats), 6, 0.0, 1.0).int(),
        ),
        (
            "weighted",
            lambda out, acc: dh.histogram(xf, 6, 0.0, 1.0, weight=w, out=out, accumulate=acc, group=ctx.quick),
            torch.float64,
            reference_histogram(flat_cat(floats), 6, 0.0, 1.0, weight=flat_cat(weights)),
        ),
    ]
    for what, call, dtype, global_hist in calls:
        out = random_out(ctx, what, 6, dtype)
        before = out.clone()
        expect_raises(
            ValueError,
            "every rank of the group must pass the same accumulate; got group rank 0: False, group rank 1: True",
            lambda: call(out, ctx.rank == 1),
            what,
        )
        expect_unchanged(out, before, what)
        # Ranks that agree: accumulate=True on every rank adds the global histogram into each rank's out.
        call(out, True)
        expect_equal(out, before + global_hist.to(device=out.device, dtype=dtype), f"{what}, agreeing")


# ---------------------------------------------------------------------------------------------------------------
# Item 12: the agreement check's messages, signed zero, overlap, check=False.


@scenario()
def disagreement_names_each_rank_value(ctx: Context) -> None:
    x = _x(ctx)
    first = ctx.rank == 0
    cases = [
        (
            lambda: (
                dh.histogram(x, 4, group=ctx.quick)
                if first
                else dh.batched_histogram(x.reshape(1, -1), 4, group=ctx.quick)
            ),
            "group rank 0: torch_dsmhist.distributed.histogram, group rank 1: "
            "torch_dsmhist.distributed.batched_histogram",
        ),
        (
            lambda: dh.batched_histogram(x.reshape(4 if first else 2, -1), 4, group=ctx.quick),
            "group rank 0: (4,), group rank 1: (2,)",
        ),
        (
            lambda: dh.histogram(x, 4, dtype=torch.int64 if first else torch.int32, group=ctx.quick),
            "group rank 0: torch.int64, group rank 1: torch.int32",
        ),
        (
            lambda: dh.histogram(x, 4, out_of_range="ignore" if first else "clamp", group=ctx.quick),
            "group rank 0: 'ignore', group rank 1: 'clamp'",
        ),
        (lambda: dh.histogram(x, 4 if first else 5, group=ctx.quick), "group rank 0: 4, group rank 1: 5"),
        (
            lambda: dh.histogram(x.float(), 4, 0.0, 4.0 if first else 8.0, group=ctx.quick),
            "group rank 0: 4.0, group rank 1: 8.0",
        ),
    ]
    for call, values in cases:
        expect_raises(ValueError, values, call, values)


@scenario()
def signed_zero_min_agrees(ctx: Context) -> None:
    shards = ctx.shards("x", lambda r, g: torch.rand(odd_size(g, 600), generator=g) * 3 - 1)
    lo = 0.0 if ctx.rank == 0 else -0.0  # the same bins: not a disagreement
    got = dh.histogram(shards[ctx.rank], 12, lo, 2.0, group=ctx.quick)
    expect_equal(got, reference_histogram(flat_cat(shards), 12, 0.0, 2.0), "min=0.0 on rank 0, -0.0 on rank 1")


@scenario()
def overlap_refused_on_every_rank(ctx: Context) -> None:
    # As the single-process op refuses hist overlapping input or weight, on every rank and nothing written.
    h = torch.arange(4, device=ctx.device)
    expect_raises(
        ValueError,
        "hist and input share memory",
        lambda: dh.histogram_add_(h, h, group=ctx.quick),
        "histogram_add_(h, h)",
    )
    expect_equal(h, torch.arange(4), "h unchanged")
    hf = torch.zeros(4, dtype=torch.float32, device=ctx.device)
    xf = _xf(ctx)[:4]
    expect_raises(
        ValueError,
        "hist and weight share memory",
        lambda: dh.histogram_add_(hf, xf, 0.0, 1.0, weight=hf, group=ctx.quick),
        "weight is hist",
    )
    o = torch.arange(4, device=ctx.device)
    expect_raises(
        ValueError,
        "out and input share memory",
        lambda: dh.histogram(o, 4, out=o, group=ctx.quick),
        "histogram(o, out=o)",
    )
    expect_equal(o, torch.arange(4), "o unchanged")
    expanded = torch.zeros(1, dtype=torch.int64, device=ctx.device).expand(4)
    expect_raises(
        ValueError,
        "hist has elements that share memory",
        lambda: dh.histogram_add_(expanded, _x(ctx), group=ctx.quick),
        "expanded hist",
    )


@scenario()
def result_does_not_require_grad(ctx: Context) -> None:
    w = torch.ones(16, device=ctx.device, requires_grad=True)
    got = dh.histogram(_xf(ctx), 4, 0.0, 1.0, weight=w, group=ctx.quick)
    assert not got.requires_grad, "the result of an all-reduce must not claim a gradient"
    leaf = torch.zeros(4, device=ctx.device, requires_grad=True)
    expect_raises(
        ValueError,
        "leaf tensor that requires grad",
        lambda: dh.histogram_add_(leaf, _xf(ctx), 0.0, 1.0, weight=w.detach(), group=ctx.quick),
        "leaf hist",
    )


@scenario()
def forward_mode_refused_on_every_rank(ctx: Context) -> None:
    """A weight (or out, or all_reduce_histogram's hist) with a forward-mode tangent is refused up front on every
    rank: the all-reduce is not differentiable, and each rank's tangent would stay its own."""
    import torch.autograd.forward_ad as fwAD

    w = torch.rand(16, device=ctx.device, dtype=torch.float64)
    hist = torch.zeros(4, device=ctx.device, dtype=torch.float64)
    with fwAD.dual_level():
        dual_w = fwAD.make_dual(w, torch.ones_like(w))
        dual_hist = fwAD.make_dual(hist.clone(), torch.ones_like(hist))
        points = _xf(ctx)[:16].double().view(8, 2)
        edges = torch.linspace(0, 1, 5, device=ctx.device, dtype=torch.float64)
        calls = {
            "histogram": lambda: dh.histogram(_xf(ctx).double(), 4, 0.0, 1.0, weight=dual_w, group=ctx.quick),
            "histogram, data range": lambda: dh.histogram(_xf(ctx).double(), 4, weight=dual_w, group=ctx.quick),
            "histogram out=": lambda: dh.histogram(_xf(ctx), 4, 0.0, 1.0, out=dual_hist, group=ctx.quick),
            "histogram_add_": lambda: dh.histogram_add_(
                hist, _xf(ctx).double(), 0.0, 1.0, weight=dual_w, group=ctx.quick
            ),
            "batched_histogram": lambda: dh.batched_histogram(
                _xf(ctx).double().view(2, 8), 4, 0.0, 1.0, weight=dual_w.view(2, 8), group=ctx.quick
            ),
            "histogram_edges": lambda: dh.histogram_edges(_xf(ctx).double(), edges, weight=dual_w, group=ctx.quick),
            "histogramdd": lambda: dh.histogramdd(points, [edges, edges], weight=dual_w[:8], group=ctx.quick),
            "all_reduce_histogram": lambda: dh.all_reduce_histogram(dual_hist, group=ctx.quick),
        }
        for what, call in calls.items():
            expect_raises(NotImplementedError, "forward-mode AD tangent", call, what)
    assert not hist.any(), "a refused call wrote into hist"


@scenario(alone=True)
def check_false_different_bins_aborts(ctx: Context) -> None:
    # check=False: nothing tells the ranks apart before the all-reduce of 4 and 5 bins; gloo aborts a process.
    dh.histogram(_x(ctx), 4 if ctx.rank == 0 else 5, check=False)
    raise AssertionError("returned: the size mismatch went unnoticed")


@scenario(alone=True)
def check_false_refused_call_raises_alone(ctx: Context) -> None:
    # check=False: rank 1's refused call raises on rank 1 alone; rank 0 waits in the all-reduce until rank 1's
    # process exits (2 s later), then gets the backend's error.
    start = time.time()
    if ctx.rank == 1:
        expect_raises(ValueError, "bins must be", lambda: dh.histogram(_x(ctx), 0, check=False), "rank 1")
        assert time.time() - start < 1.0, "rank 1 must raise at once"
        return  # main() exits 2 s after an alone scenario on rank 1
    try:
        dh.histogram(_x(ctx), 4, check=False)
    except RuntimeError:
        waited = time.time() - start
        assert waited > 1.5, f"rank 0 raised after {waited:.2f} s, before rank 1's process exited"
        return
    raise AssertionError("rank 0 returned though rank 1 never joined the all-reduce")


# ---------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True, help='"gloo", "nccl" or e.g. "cpu:gloo,cuda:nccl"')
    parser.add_argument("--device", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(
        args.backend, timeout=datetime.timedelta(seconds=120), device_id=device if device.type == "cuda" else None
    )
    ctx = Context(rank, world, device, args.seed)
    ctx.quick = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=20))
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    results: Dict[str, str] = {}
    path = os.path.join(args.out, f"rank{rank}.json")
    for name in names:
        ctx.name = name
        try:
            if name in CUDA_ONLY and device.type != "cuda":
                raise Skip("CUDA only")
            {**SCENARIOS, **ALONE}[name](ctx)
            results[name] = "ok"
        except Skip as why:
            results[name] = f"skip: {why}"
        except Exception:  # noqa: BLE001 (every failure is reported, then the next scenario runs)
            results[name] = traceback.format_exc()
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
        if name in ALONE:  # the process group is broken by design: leave (rank 1 last, see its scenarios)
            time.sleep(2.0 * rank)
            os._exit(0)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
