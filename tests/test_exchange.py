"""Tier "exchange" (csrc/kernels/tier_exchange.cuh): counts of every input dtype and layout against the reference,
in every cluster size that walks a different path (1: no remote block; 5: warps left without a source block; 8 and
16: the default sizes, whose dense by-value kernels are their own), dropped and clamped values, tiles cut at their
edges, batched rows (one pass per row), histogram_add_, CUDA graph replay, no host sync, and its refusal of sums;
then the planner's window for it (tier_exchange.cuh, planner_takes) and the planned calls.
The tests that force every tier (test_cuda, test_limits, test_fuzz) run it too."""

import pytest
import torch

import torch_dsmhist

from conftest import CUDA_OK, CUDA_SKIP_REASON
from helpers import (
    DISTRIBUTIONS,
    cluster_available,
    cluster_block_capacity,
    host_sync_raises,
    make_index_values,
    make_range_values,
    plannable,
    reference_histogram,
)

pytestmark = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)

TILE = 1024 * 16  # values a block takes per round for inputs of up to 4 bytes (8-byte inputs: half)


@pytest.fixture(autouse=True)
def needs_clusters():
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")


def exchange(size=None):
    return torch_dsmhist.force_tier("exchange", size)


@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])  # dense kernels of their own at 8 and 16 blocks
@pytest.mark.parametrize("size", [None, 1, 5, 8, 16])
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_counts_every_distribution_and_cluster_size(size, distribution, out_of_range, gen):
    for bins in (7, 4099, 131073, 262147):
        if not plannable("exchange", size, bins):
            continue
        x = make_index_values(3 * TILE * 16 + 12345, bins, torch.int32, distribution, gen).cuda()
        with exchange(size):
            got = torch_dsmhist.histogram(x, bins, out_of_range=out_of_range)
        assert torch.equal(got.cpu(), reference_histogram(x, bins, out_of_range=out_of_range)), (bins, size)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("size", [None, 8, 16])
def test_clamped_dense_values_at_the_dtype_limits(dtype, size, gen):
    """Dense input clamped into the bins takes its own kernels at 8 and 16 blocks: the dtype's extremes, values just
    outside the bins, and (8-byte input) values whose low 32 bits are a bin, all land in the first or last bin."""
    info = torch.iinfo(dtype)
    bins = 200 if info.bits == 8 else 100003
    extremes = [info.min, info.min + 1, -1, bins, bins + 1, info.max - 1, info.max]
    if info.bits == 64:
        extremes += [-(1 << 32), (1 << 32) + 5, (1 << 31) + 5, -(1 << 31) - 5]
    n = 3 * TILE * 16 + 12345
    x = make_index_values(n, bins, dtype, "uniform", gen)
    picks = torch.randint(0, n, (n // 7,), generator=gen)
    pool = torch.tensor([e for e in extremes if info.min <= e <= info.max], dtype=dtype)
    x[picks] = pool[torch.randint(0, len(pool), (len(picks),), generator=gen)]
    x = x.cuda()
    for view in (x, x[5:]):  # aligned and not
        with exchange(size):
            got = torch_dsmhist.histogram(view, bins, out_of_range="clamp")
        assert torch.equal(got.cpu(), reference_histogram(view, bins, out_of_range="clamp")), (dtype, size)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_dtypes_by_value_and_by_range(dtype, gen):
    bins = 256 if dtype in (torch.uint8, torch.int8) else 100003
    x = make_index_values(2 * TILE + 77, bins, dtype, "uniform", gen).cuda()
    with exchange():
        by_value = torch_dsmhist.histogram(x[1:], bins)
        by_range = torch_dsmhist.histogram(x[3:], 37, -3.0, float(bins) / 2, out_of_range="clamp")
    assert torch.equal(by_value.cpu(), reference_histogram(x[1:], bins))
    assert torch.equal(by_range.cpu(), reference_histogram(x[3:], 37, -3.0, float(bins) / 2, out_of_range="clamp"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_float_dtypes_range_and_data_range(dtype, gen):
    x = make_range_values(2 * TILE + 5, -1.0, 1.0, dtype, "uniform", gen).cuda()
    bins = 150001
    with exchange():
        ranged = torch_dsmhist.histogram(x[1:], bins, -0.75, 0.75)
        data = torch_dsmhist.histogram(x, bins)
    assert torch.equal(ranged.cpu(), reference_histogram(x[1:], bins, -0.75, 0.75))
    assert torch.equal(data.cpu(), reference_histogram(x, bins))


@pytest.mark.parametrize("n", [1, 15, 16, 17, TILE - 1, TILE, TILE + 1, 8 * TILE + 3])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_tile_edges_at_misaligned_starts(n, offset, gen):
    bins = 131073
    base = make_index_values(8 * TILE + 16, bins, torch.int32, "uniform", gen).cuda()
    x = base[offset : offset + n]
    with exchange(8):
        got = torch_dsmhist.histogram(x, bins)
    assert torch.equal(got.cpu(), reference_histogram(x, bins)), (n, offset)


def test_strided_views_and_rows_into_one_histogram(gen):
    bins = 200003
    x = make_index_values(7 * 100003, bins, torch.int64, "sorted", gen).cuda()
    views = {
        "strided": x[1::3],
        "rows": x.view(7, -1)[:, 5:],
        "rows strided": x.view(7, -1)[:, ::2],
        "transposed": x.view(7, -1).t(),
    }
    for name, v in views.items():
        with exchange():
            got = torch_dsmhist.histogram(v, bins)
        assert torch.equal(got.cpu(), reference_histogram(v, bins)), name


def test_batched_rows_and_histogram_add(gen):
    bins = 140009
    x = make_index_values(5 * 300007, bins, torch.int32, "uniform", gen).cuda().view(5, -1)
    hist = torch.ones(bins, dtype=torch.int32, device="cuda")
    with exchange(16):
        rows = torch_dsmhist.batched_histogram(x[:, 1:], bins, dtype=torch.int32)
        torch_dsmhist.histogram_add_(hist, x)
    assert torch.equal(
        rows.cpu(), torch.stack([reference_histogram(r, bins, dtype=torch.int32) for r in x[:, 1:].cpu()])
    )
    assert torch.equal(hist.cpu().long(), 1 + reference_histogram(x, bins))


def test_refuses_sums_and_writes_nothing(gen):
    x = make_index_values(10007, 1000, torch.int32, "uniform", gen).cuda()
    w = torch.rand(10007, generator=gen).cuda()
    out = torch.full((1000,), 3.0, device="cuda")
    hist = torch.full((1000,), 3.0, device="cuda")
    with exchange(), pytest.raises(ValueError, match="counts only"):
        torch_dsmhist.histogram(x, 1000, weight=w, out=out)
    with exchange(), pytest.raises(ValueError, match="counts only"):
        torch_dsmhist.histogram_add_(hist, x, weight=w)
    assert bool((out == 3.0).all()) and bool((hist == 3.0).all())


def test_graph_replay_and_no_host_sync(gen):
    bins = 131073
    x = make_index_values(1 << 20, bins, torch.int32, "sorted", gen).cuda()
    with exchange():
        torch_dsmhist.histogram(x, bins)  # plans and configures the kernel outside the capture
        torch.cuda.synchronize()
        with host_sync_raises():
            torch_dsmhist.histogram(x[1:], bins)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch_dsmhist.histogram(x, bins)
    x.copy_(make_index_values(1 << 20, bins, torch.int32, "uniform", gen).cuda())
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), reference_histogram(x, bins))


# The planner's window (tier_exchange.cuh, planner_takes): counts of integer input binned by value, past the bins of
# tier cluster's 2 automatic blocks, up to what 16 blocks hold in the exchange's layout of 4-byte input (72448 bytes of
# staging, counters and work before the bins, exchange_kernels.cuh), a histogram of at least 2^23 elements. On an H100:
# 232449 to 640000 bins.
AUTO_MIN_ELEMENTS = 1 << 23


def auto_min_bins() -> int:
    return 2 * cluster_block_capacity() + 1


def auto_max_bins() -> int:
    return 16 * ((torch.cuda.get_device_properties().shared_memory_per_block_optin - 72448) // 4)


def test_planner_takes_it_for_counts_by_value_in_its_window():
    window = ((auto_min_bins(), 16), (262144, 16), (524288, 16), (auto_max_bins(), 16))
    for bins, size in window:
        for dtype in (torch.int32, torch.int64, torch.int16):
            p = torch_dsmhist.plan(bins, dtype=dtype)
            assert (p.tier, p.cluster_size) == ("exchange", size), (bins, dtype)
        assert torch_dsmhist.plan(bins, n=AUTO_MIN_ELEMENTS).tier == "exchange"
        assert torch_dsmhist.plan(bins, rows=3, row_length=AUTO_MIN_ELEMENTS).tier == "exchange"
        # Outside it: fewer elements a histogram, sums, or input binned by a range.
        assert torch_dsmhist.plan(bins, n=AUTO_MIN_ELEMENTS - 1).tier != "exchange"
        assert torch_dsmhist.plan(bins, rows=3, row_length=AUTO_MIN_ELEMENTS - 1).tier != "exchange"
        for weight_dtype in (torch.float32, torch.float64):
            assert torch_dsmhist.plan(bins, weight_dtype=weight_dtype).tier != "exchange"
        assert torch_dsmhist.plan(bins, dtype=torch.float32).tier != "exchange"
    # Below it, tier cluster's by-value body (2 blocks of 16-bit counts) where the cluster tiers run.
    assert torch_dsmhist.plan(auto_min_bins() - 1).tier != "exchange"
    if cluster_available():
        for bins in (116225, 131072, auto_min_bins() - 1):
            assert torch_dsmhist.plan(bins).tier == "cluster", bins
    assert torch_dsmhist.plan(auto_max_bins() + 1).tier == "partition"
    # Forced with no size: 8 blocks (kExchangeSmallCluster) while they keep at most 16384 bins a block, then 16.
    with exchange():
        assert torch_dsmhist.plan(131072).cluster_size == 8
        assert torch_dsmhist.plan(131073).cluster_size == 16


def test_planned_calls_are_right(gen):
    """Calls the planner gives the exchange, in the kernels each takes: dense input (16 blocks), aligned or not,
    dropping or clamping values out of range (the dense kernels), strided input (the by-value kernel), int64 and
    int16, and a batched call; an integer call with a range is planned elsewhere and right too. (The 8-block dense
    kernels, which only a forced call reaches now, are tested above.)"""
    n = AUTO_MIN_ELEMENTS + 4099
    for bins in (auto_min_bins(), 393217, auto_max_bins()):
        for distribution in DISTRIBUTIONS:
            x = make_index_values(n + 1, bins, torch.int32, distribution, gen).cuda()
            for v in (x[:n], x[1:]):
                got = torch_dsmhist.histogram(v, bins)
                assert torch.equal(got.cpu(), reference_histogram(v, bins)), (bins, distribution)
    bins = 300007
    x = make_index_values(2 * n + 3, bins, torch.int64, "uniform", gen).cuda()
    views = {"strided": x[1::2], "int64": x[:n], "int16": x[:n].clamp(-5, 30000).to(torch.int16)}
    for name, v in views.items():
        assert torch.equal(torch_dsmhist.histogram(v, bins).cpu(), reference_histogram(v, bins)), name
    assert torch.equal(
        torch_dsmhist.histogram(x[:n], bins, out_of_range="clamp").cpu(),
        reference_histogram(x[:n], bins, out_of_range="clamp"),
    )
    ranged = torch_dsmhist.histogram(x[:n], 150001, -2.0, 250000.0)
    assert torch.equal(ranged.cpu(), reference_histogram(x[:n], 150001, -2.0, 250000.0))
    rows = x[: 2 * n].view(2, n)
    assert torch.equal(
        torch_dsmhist.batched_histogram(rows, bins).cpu(),
        torch.stack([reference_histogram(r, bins) for r in rows.cpu()]),
    )
