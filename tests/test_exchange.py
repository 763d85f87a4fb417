"""Tier "exchange" (csrc/kernels/tier_exchange.cuh), forced: counts of every input dtype and layout against the
reference, in every cluster size that walks a different path (1: no remote block; 5: warps left without a source
block; 8 and 16: the default sizes), tiles cut at their edges, batched rows (one pass per row), histogram_add_, CUDA
graph replay, no host sync, and its refusal of sums. The tests that force every tier (test_cuda, test_limits,
test_fuzz) run it too."""

import pytest
import torch
from conftest import CUDA_OK, CUDA_SKIP_REASON
from helpers import (
    DISTRIBUTIONS,
    cluster_available,
    host_sync_raises,
    make_index_values,
    make_range_values,
    plannable,
    reference_histogram,
)

import torch_dsmhist

pytestmark = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)

TILE = 1024 * 16  # values a block takes per round for inputs of up to 4 bytes (8-byte inputs: half)


@pytest.fixture(autouse=True)
def needs_clusters():
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")


def exchange(size=None):
    return torch_dsmhist.force_tier("exchange", size)


@pytest.mark.parametrize("size", [None, 1, 5, 8, 16])
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_counts_every_distribution_and_cluster_size(size, distribution, gen):
    for bins in (7, 4099, 131073, 262147):
        if not plannable("exchange", size, bins):
            continue
        x = make_index_values(3 * TILE * 16 + 12345, bins, torch.int32, distribution, gen).cuda()
        with exchange(size):
            got = torch_dsmhist.histogram(x, bins, out_of_range="clamp")
        assert torch.equal(got.cpu(), reference_histogram(x, bins, out_of_range="clamp")), (bins, size)


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
    views = {"strided": x[1::3], "rows": x.view(7, -1)[:, 5:], "rows strided": x.view(7, -1)[:, ::2],
             "transposed": x.view(7, -1).t()}
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
    assert torch.equal(rows.cpu(), torch.stack([reference_histogram(r, bins, dtype=torch.int32) for r in x[:, 1:].cpu()]))
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
