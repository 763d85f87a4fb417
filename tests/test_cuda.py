"""CUDA-only behaviour: every tier forced on the same data, tier boundaries, no host sync, CUDA graphs, streams,
and the path a build takes on this device (inputs past 2^31 elements: test_limits.py). Skipped without a GPU."""

import os
import subprocess
import sys

import pytest
import torch

import torch_dsmhist

from conftest import CUDA_OK, CUDA_SKIP_REASON
from helpers import (
    CLUSTER_TIERS,
    DISTRIBUTIONS,
    SUM_KINDS,
    TIER_NAMES,
    adds_sums,
    block_capacity,
    cluster_available,
    cluster_block_capacity,
    deterministic_algorithms,
    exact_weights,
    global_tier_elements,
    host_sync_raises,
    make_index_values,
    make_range_values,
    max_cluster_size,
    plannable,
    reference_histogram,
    shared_capacity,
    sum_weights,
    tier_variants,
)

pytestmark = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("bins", [1, 5, 256, 4099, 58111, 100003, 131073, 929793])
def test_every_tier_gives_identical_counts(distribution, bins, gen):
    x = make_index_values(300007, bins, torch.int32, distribution, gen).cuda()
    expected = reference_histogram(x, bins, out_of_range="clamp")
    results = {}
    for name, tier, size in tier_variants(bins):
        with torch_dsmhist.force_tier(tier, size):
            results[name] = torch_dsmhist.histogram(x, bins, out_of_range="clamp").cpu()
    assert len(results) >= 2 or bins > shared_capacity() * max(1, max_cluster_size())
    for name, out in results.items():
        assert torch.equal(out, expected), f"tier {name} differs from the reference"


@pytest.mark.parametrize("tier", TIER_NAMES)
@pytest.mark.parametrize(
    "dtype", [torch.uint8, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
)
def test_every_tier_range_mode_with_weights(tier, dtype, gen):
    bins = 1000
    clustered = tier in CLUSTER_TIERS
    if clustered and not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    x = make_range_values(100003, -5.0, 5.0, dtype, "uniform", gen).cuda()
    w = torch.rand(100003, generator=gen, dtype=torch.float64).cuda()
    size = 3 if clustered else None
    with torch_dsmhist.force_tier(tier, size):
        counts = torch_dsmhist.histogram(x, bins, -5.0, 5.0)
        data_range = torch_dsmhist.histogram(x, bins) if dtype.is_floating_point else None
    assert torch.equal(counts.cpu(), reference_histogram(x, bins, -5.0, 5.0))
    if data_range is not None:
        assert torch.equal(data_range.cpu(), reference_histogram(x, bins))
    if not adds_sums(tier, size, bins):  # a counts-only tier refuses sums by name, and writes nothing
        out = torch.full((bins,), 7.0, dtype=torch.float64, device="cuda")
        with torch_dsmhist.force_tier(tier, size), pytest.raises(ValueError, match="counts only"):
            torch_dsmhist.histogram(x, bins, -5.0, 5.0, weight=w, out=out)
        assert bool((out == 7.0).all())
        return
    with torch_dsmhist.force_tier(tier, size):
        weighted = torch_dsmhist.histogram(x, bins, -5.0, 5.0, weight=w)
        weighted32 = torch_dsmhist.histogram(x, bins, -5.0, 5.0, weight=w.float())
    torch.testing.assert_close(weighted.cpu(), reference_histogram(x, bins, -5.0, 5.0, weight=w), rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(
        weighted32.cpu(), reference_histogram(x, bins, -5.0, 5.0, weight=w.float()), rtol=1e-5, atol=1e-3
    )


def test_auto_plan_at_tier_boundaries(gen):
    capacity = shared_capacity()
    packed = cluster_block_capacity()  # tier cluster's 16-bit counts: twice tier shared's bins a block
    assert torch_dsmhist.plan(capacity).tier == "shared"
    # Past one block: the cluster tier where it runs (one block of packed counts up to `packed` bins); without it,
    # counts take tier partition.
    counts_above = "cluster" if cluster_available() else "partition"
    assert torch_dsmhist.plan(capacity + 1, dtype=torch.float32).tier == counts_above
    # The measured limit of the automatic cluster tier: 2 blocks (kClusterAutoMaxBlocks, csrc/kernels/tuning.h), for
    # input binned by a range and by value alike (past it, integer input by value takes tier exchange:
    # test_exchange.py).
    assert torch_dsmhist.plan(2 * packed, dtype=torch.float32).tier == counts_above
    if cluster_available():
        for bins in (packed + 1, 2 * packed):
            assert torch_dsmhist.plan(bins).tier == "cluster", bins
    # Past it, counts take tier partition (past the same 2 blocks: 232448 bins on an H100), weighted sums global.
    assert torch_dsmhist.plan(2 * packed + 1, dtype=torch.float32).tier == "partition"
    assert torch_dsmhist.plan(2 * packed + 1, weight_dtype=torch.float32).tier == "global"
    if not cluster_available():  # integer input by value too (no exchange), and only from 2^23 values
        assert torch_dsmhist.plan(capacity + 1).tier == "partition"
        assert torch_dsmhist.plan(capacity + 1, n=(1 << 23) - 1).tier == "global"
        assert torch_dsmhist.plan(capacity + 1, n=1 << 23).tier == "partition"
    if cluster_available():
        # Bins one block holds: a cluster of 2 replicas (kClusterReplicas) that each keep them all; past it, 2 ranges.
        for bins, ranges in ((capacity + 1, 1), (packed, 1), (packed + 1, 2), (2 * packed, 2)):
            p = torch_dsmhist.plan(bins, dtype=torch.float32)
            assert (p.cluster_size, p.bins_per_block) == (2, -(-bins // ranges)), bins
    assert torch_dsmhist.plan(capacity // 2, weight_dtype=torch.float64).tier == "shared"
    assert torch_dsmhist.plan(capacity // 2 + 1, weight_dtype=torch.float64).tier != "shared"
    # Weighted and deterministic sums never take the cluster tier (kClusterAutoMaxBlocksForSums, 1): past tier shared
    # (capacity bins with float32 sums, capacity // 2 with 8-byte sums) they take global, whose hot-bin cache holds
    # sums, up to 2 blocks and beyond.
    for weight_dtype, most in ((torch.float32, capacity), (torch.float64, capacity // 2)):
        assert torch_dsmhist.plan(most, weight_dtype=weight_dtype).tier == "shared"
        for bins in (most + 1, 2 * most, 2 * most + 1):
            assert torch_dsmhist.plan(bins, weight_dtype=weight_dtype).tier == "global"
            with deterministic_algorithms(True):
                assert torch_dsmhist.plan(bins, weight_dtype=weight_dtype).tier == "global"
    for bins in (capacity - 1, capacity, capacity + 1, packed, packed + 1, 2 * packed, 2 * packed + 1):
        x = make_index_values(200003, bins, torch.int64, "uniform", gen).cuda()
        assert torch.equal(torch_dsmhist.histogram(x, bins).cpu(), reference_histogram(x, bins)), bins


def test_plan_reports_cluster_layout():
    """Tier cluster keeps counts as 16-bit halves of 32-bit words, rounded up to 16-byte vectors (8 bins): one block
    holds every bin up to cluster_block_capacity(), and the automatic plan runs such bins as clusters of 2 blocks
    that each keep them all; a forced size splits into the fewest ranges that hold the bins, its other blocks
    replicas. Tier cluster_dsmem and sums keep 4 bytes a bin, one range a block."""
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    bins = 100003
    auto = torch_dsmhist.plan(bins)
    assert (auto.tier, auto.cluster_size, auto.bins_per_block) == ("cluster", 2, bins)
    assert auto.shared_bytes_per_block == -(-bins // 8) * 16
    readme = torch_dsmhist.plan(100_000)  # the README's example
    assert (
        readme.tier,
        readme.cluster_size,
        readme.shared_bytes_per_block,
        readme.threads_per_block,
        readme.bins_per_block,
    ) == ("cluster", 2, 200000, 1024, 100000)
    with torch_dsmhist.force_tier("cluster", 3):
        three = torch_dsmhist.plan(bins)  # 3 replicas of one range
    assert (three.cluster_size, three.bins_per_block) == (3, bins)
    with torch_dsmhist.force_tier("cluster", 4):
        four = torch_dsmhist.plan(2 * bins)  # 2 ranges of 2 replicas
    assert (four.cluster_size, four.bins_per_block) == (4, bins)
    with torch_dsmhist.force_tier("cluster", 3):
        split = torch_dsmhist.plan(2 * bins)  # 3 has no divisor of 2: 3 ranges
    assert split.bins_per_block == -(-2 * bins // 3)
    assert split.shared_bytes_per_block == -(-split.bins_per_block // 8) * 16
    with torch_dsmhist.force_tier("cluster"):
        sums = torch_dsmhist.plan(bins, weight_dtype=torch.float32)
    with torch_dsmhist.force_tier("cluster_dsmem"):
        dsmem = torch_dsmhist.plan(bins)
    assert dsmem.tier == "cluster_dsmem"
    for p in (sums, dsmem):
        assert p.cluster_size >= 2
        assert p.bins_per_block == -(-bins // p.cluster_size)
        assert p.shared_bytes_per_block == p.bins_per_block * 4
    for p in (auto, three, four, split, sums, dsmem):
        assert p.shared_bytes_per_block <= torch.cuda.get_device_properties().shared_memory_per_block_optin
    with torch_dsmhist.force_tier("cluster", 1):
        assert torch_dsmhist.plan(cluster_block_capacity()).cluster_size == 1
        with pytest.raises(ValueError, match="cluster"):
            torch_dsmhist.plan(cluster_block_capacity() + 1)


def test_plan_takes_the_partition_tier_past_two_cluster_blocks_of_counts(gen):
    """The planner's partition threshold (tier_partition.cuh, auto_min_bins): counts past the bins of tier cluster's 2
    automatic blocks, 232448 on an H100 (integer input binned by value: past tier exchange's window, 640000 on an
    H100: test_exchange.py), not weighted sums (global is faster on all 5 distributions for them up to 4M bins:
    tuning.h); the planned call is right on adversarial data, weighted or not."""
    first = 2 * cluster_block_capacity() + 1
    if cluster_available():  # without the cluster tiers the partition starts past tier shared (test above)
        assert torch_dsmhist.plan(first - 1, dtype=torch.float32).tier != "partition"
    assert torch_dsmhist.plan(first, dtype=torch.float32).tier == "partition"
    assert torch_dsmhist.plan(16 * first).tier == "partition"  # past the exchange's window too
    if not cluster_available():  # without the exchange the partition takes integer input from there too
        assert torch_dsmhist.plan(first).tier == "partition"
    for weight_dtype in (torch.float32, torch.float64):
        assert torch_dsmhist.plan(first, weight_dtype=weight_dtype).tier == "global"
        assert torch_dsmhist.plan(16 << 20, weight_dtype=weight_dtype).tier == "global"
    assert torch_dsmhist.plan(33521664).tier == "partition"  # the tier's capacity for counts (README)
    assert torch_dsmhist.plan(33521665).tier == "global"
    for bins in (first, (4 << 20) + 7):
        for distribution in DISTRIBUTIONS:
            x = make_index_values(3_000_017, bins, torch.int32, distribution, gen).cuda()
            assert torch.equal(torch_dsmhist.histogram(x, bins).cpu(), reference_histogram(x, bins)), (
                bins,
                distribution,
            )
            w = torch.randint(-3, 5, (x.numel(),), generator=gen).double().cuda()
            assert torch.equal(
                torch_dsmhist.histogram(x, bins, weight=w).cpu(), reference_histogram(x, bins, weight=w)
            ), (bins, distribution, "weighted")


@pytest.mark.parametrize("bins", [(1 << 20) + 3, (4 << 20) + 7])
def test_partition_tier_over_several_slices(bins, gen):
    """2^28 + 12345 values: tier partition's workspace (256 MiB) takes them in three slices, each cut into work items
    by its own chunk totals. Uniform, skewed (a few chunks hold most values), sorted, one hot and two edge bins, the
    aligned input (vector loads) and a misaligned view of it (element loads), against torch.bincount."""
    n = (1 << 28) + 12345
    cuda_gen = torch.Generator(device="cuda")
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    cuda_gen.manual_seed(seed)
    for distribution in ("uniform", "skewed", "sorted", "one_hot", "two_edges"):
        if distribution == "uniform":
            x = torch.randint(0, bins, (n,), device="cuda", generator=cuda_gen, dtype=torch.int32)
        elif distribution == "skewed":
            u = torch.rand(n, device="cuda", generator=cuda_gen)
            x = (u.pow_(6) * bins).to(torch.int32)
            del u
        elif distribution == "sorted":
            x = torch.randint(0, bins, (n,), device="cuda", generator=cuda_gen, dtype=torch.int32).sort().values
        elif distribution == "one_hot":
            x = torch.full((n,), bins // 3, device="cuda", dtype=torch.int32)
        else:
            x = torch.randint(0, 2, (n,), device="cuda", generator=cuda_gen, dtype=torch.int32) * (bins - 1)
        expected = torch.bincount(x, minlength=bins)
        with torch_dsmhist.force_tier("partition"):
            assert torch.equal(torch_dsmhist.histogram(x, bins), expected), (bins, distribution, seed)
            misaligned = torch_dsmhist.histogram(x[1:], bins)
        expected[x[0].long()] -= 1
        assert torch.equal(misaligned, expected), (bins, distribution, "misaligned", seed)
        del x, expected, misaligned
    torch.cuda.empty_cache()


@pytest.mark.parametrize("hot_share", [2, 4])
def test_partition_counts_runs_of_one_bin_among_others(hot_share, gen):
    """One bin in every position but one of each hot_share (so no 16-byte input vector is of one bin: kernel 1
    partitions them all, and its hot-bin cache never takes them), the rest uniform over 1M + 3 bins: kernel 3 sees
    runs whose 16-byte vectors are of one bin (and warps of such vectors), beside vectors split by a run's ends.
    Counts (int64 and int32), float32 / float64 weights and histogram_add_, aligned and misaligned, forced partition,
    against the reference."""
    bins = (1 << 20) + 3
    n = (1 << 23) + 12345
    cuda_gen = torch.Generator(device="cuda")
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    cuda_gen.manual_seed(seed)
    x = torch.randint(0, bins, (n,), device="cuda", generator=cuda_gen, dtype=torch.int32)
    hot = int(torch.randint(0, bins, (1,), generator=gen))
    x.view(-1)[: n // hot_share * hot_share].view(-1, hot_share)[:, 1:] = hot
    weight = torch.rand(n, device="cuda", generator=cuda_gen, dtype=torch.float64)
    with torch_dsmhist.force_tier("partition"):
        for view in (x, x[1:]):
            expected = torch.bincount(view, minlength=bins)
            assert torch.equal(torch_dsmhist.histogram(view, bins), expected), (hot_share, seed)
            assert torch.equal(torch_dsmhist.histogram(view, bins, dtype=torch.int32), expected.int()), seed
            accumulated = expected.clone()
            torch_dsmhist.histogram_add_(accumulated, view)
            assert torch.equal(accumulated, 2 * expected), (hot_share, seed)
            w = weight[-view.numel() :]
            sums = torch.bincount(view, weights=w, minlength=bins)
            torch.testing.assert_close(torch_dsmhist.histogram(view, bins, weight=w), sums, msg=f"seed {seed}")
            torch.testing.assert_close(
                torch_dsmhist.histogram(view, bins, weight=w.float()),
                sums.float(),
                rtol=1e-4,
                atol=1e-3,
                msg=f"seed {seed}",
            )


@pytest.mark.parametrize("bins", [(4 << 20) + 7, (16 << 20) + 3])
def test_partition_counts_short_runs_one_a_thread(bins, gen):
    """Tier partition's kernel 3 counts a batch of runs whose every run is a few 16-byte vectors one run a thread
    (kPartitionOwnRunMaxVectors), and other batches end to end across the block. At 4M and 16M bins the uniform 60%
    of 2^23 values leave runs of about 40 and 10 entries in each of a chunk's tiles, while a hot chunk (the other 40%
    on its 30011 bins) has runs of thousands: both ways in one call, and a run's first and last vector partial.
    Counts into int64 and int32, histogram_add_ onto a nonzero histogram, batched rows, and at 4M bins float32,
    float64 and deterministic weighted sums, which count every batch end to end (64-bit sums hold at most 1023 chunks
    of 16384 bins, under 16M), forced partition, exactly against the reference."""
    n = (1 << 23) + 5
    spread = make_index_values(n, bins, torch.int32, "uniform", gen)
    x = torch.where(torch.rand(n, generator=gen) < 0.4, spread.remainder(30011), spread)
    expected = reference_histogram(x, bins)
    start = torch.randint(0, 1000, (bins,), generator=gen)
    xc = x.cuda()
    with torch_dsmhist.force_tier("partition"):
        assert torch.equal(torch_dsmhist.histogram(xc, bins).cpu(), expected), bins
        assert torch.equal(torch_dsmhist.histogram(xc, bins, dtype=torch.int32).cpu(), expected.int()), bins
        accumulated = start.cuda()
        torch_dsmhist.histogram_add_(accumulated, xc)
        assert torch.equal(accumulated.cpu(), start + expected), bins
        if bins < 16 << 20:
            integers, scaled = exact_weights(n, gen)
            for kind in SUM_KINDS:
                w = sum_weights(kind, integers, scaled)
                with deterministic_algorithms(kind == "deterministic"):
                    got = torch_dsmhist.histogram(xc, bins, weight=w.cuda()).cpu()
                assert torch.equal(got, reference_histogram(x, bins, weight=w).to(got.dtype)), (bins, kind)
        rows = x[: 2 * (n // 2)].view(2, -1)
        got = torch_dsmhist.batched_histogram(rows.cuda(), bins).cpu()
    assert torch.equal(got, torch.stack([reference_histogram(r, bins) for r in rows])), bins


def runs_of_bins(n: int, bins: int, gen: torch.Generator) -> torch.Tensor:
    """n int32 values in runs of one bin (random lengths 1-40, random bins, a few out of range)."""
    lengths = torch.randint(1, 41, (n,), generator=gen)
    runs = int((lengths.cumsum(0) < n).sum()) + 1
    values = torch.randint(-2, bins + 2, (runs,), generator=gen)
    return values.repeat_interleave(lengths[:runs])[:n].to(torch.int32)


@pytest.mark.parametrize("distribution", ["one_hot", "sorted", "two_edges", "runs"])
@pytest.mark.parametrize("bins", [300, 100003, 300007])
def test_weighted_sums_of_runs_of_one_bin_every_tier(distribution, bins, gen):
    """Weighted and deterministic sums add a thread's consecutive contributions to one bin once (a warp's, when all
    are of one bin; in tier partition a 16-byte vector's and a warp's). Every tier forced, on one hot bin, sorted
    data, two edge bins and runs of random lengths; 1-D (aligned, misaligned, strided), batched rows whose
    neighbours share a bin, and histogram_add_; integer weights in [-3, 4] (zeros add nothing), so float64, float32
    (every total below 2^24) and the deterministic sum are exact against the float64 reference."""
    n = 300_007
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    if distribution == "runs":
        x = runs_of_bins(n, bins, local)
    else:
        x = make_index_values(n, bins, torch.int32, distribution, local)
    x = x.cuda()
    w64 = exact_weights(n, local)[0].cuda()
    rows = x[: 5 * 60_000].view(5, 60_000)
    cases = {
        "aligned": (x, slice(None)),
        "misaligned": (x[1:], slice(1, None)),
        "strided": (x[::3], slice(None, None, 3)),
    }
    # The float64 references, the same for every tier and sum.
    expected = {
        layout: reference_histogram(xs, bins, weight=w64[part]).double() for layout, (xs, part) in cases.items()
    }
    expected_rows = torch.stack(
        [reference_histogram(r, bins, weight=wr).double() for r, wr in zip(rows, w64[: rows.numel()].view(5, -1))]
    )
    for kind in SUM_KINDS:
        w = sum_weights(kind, w64, w64)
        with deterministic_algorithms(kind == "deterministic"):
            for name, tier, size in tier_variants(bins):
                if not plannable(tier, size, bins, weight_dtype=w.dtype):
                    continue
                where = f"tier {name}, {kind}, seed {seed}"
                with torch_dsmhist.force_tier(tier, size):
                    for layout, (xs, part) in cases.items():
                        got = torch_dsmhist.histogram(xs, bins, weight=w[part]).cpu().double()
                        assert torch.equal(got, expected[layout]), f"{where}, {layout}"
                    got = torch_dsmhist.batched_histogram(rows, bins, weight=w[: rows.numel()].view(5, -1)).cpu()
                    assert torch.equal(got.double(), expected_rows), f"{where}, batched"
                    hist = torch.ones(bins, dtype=w.dtype, device="cuda")
                    torch_dsmhist.histogram_add_(hist, x, weight=w)
                    assert torch.equal(hist.cpu().double(), 1 + expected["aligned"]), f"{where}, histogram_add_"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])
def test_weighted_sums_by_value_in_tier_shared(dtype, out_of_range, gen):
    """Tier shared's by-value bodies (sums of integer input binned by value, each value's bin a compare instead of the
    Binner's): every integer dtype, values below 0 and past the bins dropped or clamped, float32, float64 and
    deterministic sums, aligned, misaligned, strided, batched and histogram_add_; integer weights, so every sum is
    exact against the float64 reference."""
    bins = 100 if dtype in (torch.uint8, torch.int8) else 3001
    n = 200_003
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    lowest = 0 if dtype == torch.uint8 else -5
    x = torch.randint(lowest, bins + 5, (n,), generator=local).to(dtype)
    x[:1000] = bins - 1  # a run of the last bin, which the clamped values join
    integers, scaled = exact_weights(n, local)
    rows = x[: 4 * 50_000].view(4, 50_000)
    for kind in SUM_KINDS:
        w = sum_weights(kind, integers, scaled)
        where = f"{dtype}, {out_of_range}, {kind}, seed {seed}"
        with deterministic_algorithms(kind == "deterministic"), torch_dsmhist.force_tier("shared"):
            for layout, part in (
                ("aligned", slice(None)),
                ("misaligned", slice(3, None)),
                ("strided", slice(1, None, 3)),
            ):
                got = torch_dsmhist.histogram(x[part].cuda(), bins, weight=w[part].cuda(), out_of_range=out_of_range)
                expected = reference_histogram(x[part], bins, weight=w[part], out_of_range=out_of_range)
                assert torch.equal(got.cpu().double(), expected.double()), f"{where}, {layout}"
            got = torch_dsmhist.batched_histogram(
                rows.cuda(), bins, weight=w[: rows.numel()].view(4, -1).cuda(), out_of_range=out_of_range
            )
            for r in range(4):
                expected = reference_histogram(
                    rows[r], bins, weight=w[r * 50_000 : (r + 1) * 50_000], out_of_range=out_of_range
                )
                assert torch.equal(got[r].cpu().double(), expected.double()), f"{where}, batched row {r}"
            hist = torch.ones(bins, dtype=w.dtype, device="cuda")
            torch_dsmhist.histogram_add_(hist, x.cuda(), weight=w.cuda(), out_of_range=out_of_range)
            expected = 1 + reference_histogram(x, bins, weight=w, out_of_range=out_of_range).double()
            assert torch.equal(hist.cpu().double(), expected), f"{where}, histogram_add_"


@pytest.mark.parametrize("bins", [1000, 65539, 1048579])
def test_weighted_sums_of_hot_bins_in_the_global_tier_cache(bins, gen):
    """Tier global sums a block's hot bins in its shared-memory cache (HotBinCache: one slot per bin mod 2048, claimed
    by the first bin that lands there; for float sums, on its second add there). Shuffled data, so no run merging:
    two hot bins of one slot (only one can claim it), a hot last bin, a warm bin, a cold tail; batched rows whose hot
    bin is the same (flat tags keep them apart); histogram_add_. Weights are integers times 2^k (k in [-8, 8]):
    float64 and the deterministic sum are exact against the float64 reference, and a wrong largest exponent from a
    cached maximum would overflow the deterministic sum's fixed point; float32 takes plain integers (totals below
    2^24). Then non-finite weights reach a cached slot (inf + finite, inf + -inf)."""
    slots = 2048  # kGlobalCacheSlots (csrc/kernels/tuning.h)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    hot = {3: 200_001, (3 + slots) % bins: 150_003, bins - 1: 30_001, bins // 3: 33}
    parts = [torch.full((c,), b, dtype=torch.int64) for b, c in hot.items()]
    parts.append(torch.randint(-2, bins + 2, (100_007,), generator=local))
    x = torch.cat(parts)
    order = torch.randperm(x.numel(), generator=local)
    x = x[order].to(torch.int32).cuda()
    integers, scaled = exact_weights(x.numel(), local)
    rows = x[: 4 * 100_000].view(4, 100_000)
    for kind in SUM_KINDS:
        w = sum_weights(kind, integers, scaled).cuda()
        expected = reference_histogram(x, bins, weight=w.double()).double()
        expected_rows = torch.stack(
            [
                reference_histogram(r, bins, weight=wr.double()).double()
                for r, wr in zip(rows, w[: rows.numel()].view(4, -1))
            ]
        )
        where = f"{kind}, bins {bins}, seed {seed}"
        with deterministic_algorithms(kind == "deterministic"):
            with torch_dsmhist.force_tier("global"):
                got = torch_dsmhist.histogram(x, bins, weight=w).cpu().double()
                assert torch.equal(got, expected), where
                got = torch_dsmhist.batched_histogram(rows, bins, weight=w[: rows.numel()].view(4, -1)).cpu()
                assert torch.equal(got.double(), expected_rows), f"{where}, batched"
                hist = torch.full((bins,), 0.5, dtype=w.dtype, device="cuda")
                torch_dsmhist.histogram_add_(hist, x, weight=w)
                assert torch.equal(hist.cpu().double(), 0.5 + expected), f"{where}, histogram_add_"
                # Non-finite weights on the two hot bins of one slot: +inf beside finite ones, and +inf with -inf.
                special = w.clone()
                first, second = (x == 3).nonzero()[:2, 0], (x == (3 + slots) % bins).nonzero()[:2, 0]
                special[first] = float("inf")
                special[second[0]], special[second[1]] = float("inf"), float("-inf")
                got = torch_dsmhist.histogram(x, bins, weight=special).cpu().double()
                torch.testing.assert_close(
                    got,
                    reference_histogram(x, bins, weight=special.double()).double(),
                    rtol=0,
                    atol=0,
                    equal_nan=True,
                    msg=f"{where}, non-finite",
                )


@pytest.mark.parametrize("bins", [1000, 65539])
def test_weighted_sums_that_cancel_in_the_global_tier_cache(bins, gen):
    """A block's cached sum of exactly zero is not added to the output (HotBinCache::flush skips it). One block of
    tier global (1000 elements: 256 threads of 4), shuffled: a hot bin whose weights come in pairs +a, -a (its cached
    sum ends at zero), a hot bin beside it whose weights do not cancel, a cold tail. Every sum kind is exact (integers
    times 2^k), so the cancelled bin must read exactly what it held before the call: 0 from histogram, 0.5 after
    histogram_add_; under the deterministic sum its largest exponent is still taken from the nonzero weights."""
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    cancelled, hot = bins // 2, 7
    cold = torch.randint(-2, bins + 2, (300,), generator=local)
    cold[(cold == cancelled) | (cold == hot)] = -1  # out of range: adds nothing
    x = torch.cat([torch.full((400,), cancelled), torch.full((300,), hot), cold])
    order = torch.randperm(x.numel(), generator=local)
    integers, scaled = exact_weights(x.numel(), local)
    magnitudes = torch.randint(1, 5, (200,), generator=local).double()
    exponents = torch.pow(2.0, torch.randint(-8, 9, (200,), generator=local).double())
    integers[:400] = torch.cat([magnitudes, -magnitudes])
    scaled[:400] = torch.cat([magnitudes * exponents, -magnitudes * exponents])
    integers[400:700] = integers[400:700].abs() + 1  # the hot neighbour's total cannot be zero
    scaled[400:700] = integers[400:700]
    x, integers, scaled = x[order].to(torch.int32).cuda(), integers[order], scaled[order]
    for kind in SUM_KINDS:
        w = sum_weights(kind, integers, scaled).cuda()
        expected = reference_histogram(x, bins, weight=w.double()).double()
        assert expected[cancelled] == 0 and expected[hot] != 0
        where = f"{kind}, bins {bins}, seed {seed}"
        with deterministic_algorithms(kind == "deterministic"), torch_dsmhist.force_tier("global"):
            got = torch_dsmhist.histogram(x, bins, weight=w).cpu().double()
            assert torch.equal(got, expected), where
            hist = torch.full((bins,), 0.5, dtype=w.dtype, device="cuda")
            torch_dsmhist.histogram_add_(hist, x, weight=w)
            assert torch.equal(hist.cpu().double(), 0.5 + expected), f"{where}, histogram_add_"


CLAIM_ON_REPEAT_MIN_PER_THREAD = 32  # kGlobalSumsClaimOnRepeatMinPerThread (csrc/kernels/tuning.h)


def test_long_weighted_sums_take_the_claim_on_repeat_body():
    """Tier global runs weighted float sums whose threads take at least kGlobalSumsClaimOnRepeatMinPerThread
    elements each with a cache that claims a slot on a bin's second add (one more 4-byte word a slot: 2048 x 12
    bytes for float32 sums, x 16 for float64); shorter sums and counts keep the first-add cache (2048 x 8 bytes for
    counts and float32 sums, x 12 for float64). The launch the plan reports says which body runs."""
    slots, short, long = 2048, 4096, 1 << 30
    for weight_dtype, sum_bytes in ((torch.float32, 4), (torch.float64, 8)):
        with torch_dsmhist.force_tier("global"):
            assert torch_dsmhist.plan(65536, n=short, weight_dtype=weight_dtype).shared_bytes_per_block == slots * (
                4 + sum_bytes
            )
            assert torch_dsmhist.plan(65536, n=long, weight_dtype=weight_dtype).shared_bytes_per_block == slots * (
                8 + sum_bytes
            )
    with torch_dsmhist.force_tier("global"):
        assert torch_dsmhist.plan(65536, n=long).shared_bytes_per_block == slots * 8


@pytest.mark.parametrize("pattern", ["one_hot", "alternating", "slot_mates", "zipf"])
def test_long_weighted_sums_in_the_claim_on_repeat_body(pattern, gen):
    """The claim-on-repeat body of tier global (long weighted float sums): a bin's first add in a block goes to the
    output and the slot remembers the bin (atomicExch); its next add claims the slot. 40 elements a thread on this
    GPU's full grid, 65539 bins: one bin everywhere (every thread meets it at once), two bins of one slot alternating
    in every thread's vector (each add forgets the other: nothing is ever claimed), every bin of one slot
    (b + 2048 k) in random order, and Zipf ranks. float64 weights are integers times 2^k (exact); float32 weights
    in {-1, 0, 1}, so every partial sum is an integer below 2^24 and exact. histogram and histogram_add_."""
    bins, slots, base = 65539, 2048, 11
    n = global_tier_elements(CLAIM_ON_REPEAT_MIN_PER_THREAD + 8)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    if pattern == "one_hot":
        x = torch.full((n,), base + 3 * slots)
    elif pattern == "alternating":
        x = torch.tensor([base, base + slots]).repeat(n // 2)
    elif pattern == "slot_mates":
        x = base + slots * torch.randint(0, (bins - base - 1) // slots + 1, (n,), generator=local)
    else:
        x = make_index_values(n, bins, torch.int32, "zipf", local)
    x = x.to(torch.int32).cuda()
    integers, scaled = exact_weights(x.numel(), local)
    for w in (integers.sign().float().cuda(), scaled.cuda()):
        expected = reference_histogram(x, bins, weight=w.double()).double()
        where = f"{pattern}, {w.dtype}, seed {seed}"
        with torch_dsmhist.force_tier("global"):
            assert torch_dsmhist.plan(bins, n=x.numel(), weight_dtype=w.dtype).shared_bytes_per_block == slots * (
                8 + w.element_size()
            ), where
            assert torch.equal(torch_dsmhist.histogram(x, bins, weight=w).cpu().double(), expected), where
            hist = torch.full((bins,), 0.5, dtype=w.dtype, device="cuda")
            torch_dsmhist.histogram_add_(hist, x, weight=w)
            assert torch.equal(hist.cpu().double(), 0.5 + expected), f"{where}, histogram_add_"


@pytest.mark.parametrize("layout", ["sorted", "alternating_lanes", "lane_groups"])
def test_weighted_sums_of_lane_runs_in_the_global_tier_cache(layout, gen):
    """Tier global's cache of hot bins under data where a warp's lanes hit slots together (lane l reads the 16-byte
    vector l of its warp's step, so 4 int32 values a lane): sorted data with 32 values a bin (warps straddling
    bins), lanes alternating between two bins drawn per step (17 and 2065 share a slot, so one of them misses), and
    runs of 1 to 7 lanes drawn from 5 bins; read from an offset view too (the vectors shift against the values).
    Weights are integers times 2^k, so float64 and the deterministic sum are exact; float32 takes small integers."""
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    local = torch.Generator().manual_seed(seed)
    bins, n = 65539, (1 << 21) + 13
    if layout == "sorted":
        x = torch.randint(0, bins, (n,), generator=local).sort().values
    elif layout == "alternating_lanes":
        steps = n // 128 + 1  # a warp's step: 32 lanes of 4 values; each step alternates lanes between two bins
        pairs = torch.tensor([17, 40000, 2065, 33])[torch.randint(0, 4, (steps, 2), generator=local)]
        x = pairs.repeat_interleave(4, dim=1).repeat(1, 16).reshape(-1)[:n]
    else:
        lane_bins = torch.tensor([5, 2053, 9, 60000, bins - 1])[torch.randint(0, 5, (n // 4 + 1,), generator=local)]
        lengths = torch.randint(1, 8, (n // 4 + 1,), generator=local)
        x = lane_bins.repeat_interleave(lengths).repeat_interleave(4)[:n]
    x = x.to(torch.int32).cuda()
    integers, scaled = exact_weights(n, local)
    for kind in SUM_KINDS:
        w = sum_weights(kind, integers, scaled).cuda()
        with deterministic_algorithms(kind == "deterministic"):
            for start in (0, 1):
                xs, ws = x[start:], w[start:]
                expected = reference_histogram(xs, bins, weight=ws.double()).double()
                with torch_dsmhist.force_tier("global"):
                    got = torch_dsmhist.histogram(xs, bins, weight=ws).cpu().double()
                assert torch.equal(got, expected), f"{layout}, {kind}, offset {start}, seed {seed}"


def test_plan_takes_global_for_few_elements_per_bin(gen):
    """The automatic plan's rules for a given call (tuning.h): 16384 bins or more with fewer than 32 elements a bin
    take tier "global" (tiers shared and cluster decline), and tier "partition" needs 2^23 elements; a call without
    n is planned as a large one. The planned calls are right on adversarial data at each boundary."""
    cluster = "cluster" if cluster_available() else "global"
    cases = [
        (8192, 10, "shared"),
        (16384, 32 * 16384 - 1, "global"),
        (16384, 32 * 16384, "shared"),
        (65536, 32 * 65536 - 1, "global"),
        (65536, 32 * 65536, cluster),
        (1 << 20, (1 << 23) - 1, "global"),
        (1 << 20, 1 << 23, "partition"),
    ]
    for bins, n, tier in cases:
        assert torch_dsmhist.plan(bins, n=n).tier == tier, (bins, n)
    # No call given: a large one (without the cluster tiers, counts past tier shared take the partition).
    assert torch_dsmhist.plan(65536).tier == ("cluster" if cluster_available() else "partition")
    # Batched: the elements of a row are what one histogram gets.
    assert torch_dsmhist.plan(65536, rows=64, row_length=32 * 65536 - 1).tier == "global"
    assert torch_dsmhist.plan(65536, rows=2, row_length=32 * 65536).tier == cluster
    for bins, n, _ in cases[1:5]:
        for distribution in DISTRIBUTIONS:
            x = make_index_values(n, bins, torch.int32, distribution, gen).cuda()
            assert torch.equal(torch_dsmhist.histogram(x, bins).cpu(), reference_histogram(x, bins)), (
                bins,
                n,
                distribution,
            )
    rows = make_index_values(3 * 20001, 65536, torch.int64, "uniform", gen).view(3, 20001).cuda()
    expected = torch.stack([reference_histogram(row, 65536) for row in rows])
    assert torch.equal(torch_dsmhist.batched_histogram(rows, 65536).cpu(), expected)


def test_plan_of_a_call_reports_its_launch():
    """plan(n=...) / plan(rows=..., row_length=...) report what that call's launch uses (the tier's shape function),
    where the plan alone reports a large 1-D call's shape."""
    sms = torch.cuda.get_device_properties().multi_processor_count
    large = torch_dsmhist.plan(256)
    assert large.grid_blocks is None and large.tier == "shared"
    one_d = torch_dsmhist.plan(256, n=(1 << 24) + 3)
    assert (one_d.cluster_size, one_d.threads_per_block) == (large.cluster_size, large.threads_per_block)
    assert 1 <= one_d.grid_blocks <= sms * 2048 // one_d.threads_per_block
    # A small 1-D call runs as one cluster (of up to 8 blocks; one block without cluster code).
    small = torch_dsmhist.plan(256, n=40000)
    assert small.grid_blocks == small.cluster_size and 1 <= small.cluster_size <= 8
    if cluster_available():
        assert small.cluster_size == 5  # min(8 blocks, one per 8192 elements): the README's example
    # Many short rows of a batched call get smaller blocks than the plan's.
    short_rows = torch_dsmhist.plan(256, rows=65536, row_length=256)
    assert 0 < short_rows.threads_per_block < large.threads_per_block
    assert short_rows.cluster_size == 1 and short_rows.grid_blocks >= 1
    # An empty call launches nothing.
    empty = torch_dsmhist.plan(256, n=0)
    assert (empty.threads_per_block, empty.cluster_size, empty.grid_blocks) == (0, 0, 0)
    # The cluster tier's launch: clusters of the plan's size.
    if cluster_available():
        bins = 3 * shared_capacity()  # tier cluster: 2 blocks of 16-bit counts
        clustered = torch_dsmhist.plan(bins, dtype=torch.float32, n=1 << 24)
        assert clustered.tier == "cluster"
        assert clustered.cluster_size == torch_dsmhist.plan(bins, dtype=torch.float32).cluster_size
        assert clustered.grid_blocks % clustered.cluster_size == 0
    with torch_dsmhist.force_tier("global"):
        forced = torch_dsmhist.plan(256, n=1 << 20)
    assert forced.tier == "global" and forced.cluster_size == 1 and forced.grid_blocks >= 1


def test_forced_tier_that_cannot_hold_the_bins_raises(gen):
    x = torch.zeros(10, dtype=torch.long, device="cuda")
    with torch_dsmhist.force_tier("shared"), pytest.raises(ValueError, match="shared"):
        torch_dsmhist.histogram(x, shared_capacity() + 1)
    if cluster_available():
        for tier in CLUSTER_TIERS:
            with torch_dsmhist.force_tier(tier, 2), pytest.raises(ValueError, match="cluster"):
                torch_dsmhist.histogram(x, block_capacity(tier) * 2 + 1)
            with torch_dsmhist.force_tier(tier), pytest.raises(ValueError, match="cluster"):
                torch_dsmhist.histogram(x, block_capacity(tier) * 16 + 1)


def test_build_takes_the_expected_path():
    """DSMHIST_EXPECT_CLUSTER=1 / 0 (set by benchmarks/device_run.sh) asserts the cluster tier is / is not used."""
    expect = os.environ.get("DSMHIST_EXPECT_CLUSTER")
    if expect is None:
        pytest.skip("DSMHIST_EXPECT_CLUSTER not set")
    assert cluster_available() == (expect == "1")
    if expect == "0":
        for tier in CLUSTER_TIERS:
            with torch_dsmhist.force_tier(tier), pytest.raises(ValueError, match="sm_90"):
                torch_dsmhist.histogram(torch.zeros(4, dtype=torch.long, device="cuda"), 100003)


@pytest.mark.parametrize("tier", CLUSTER_TIERS)
def test_sixteen_block_clusters(tier, gen):
    if not cluster_available() or max_cluster_size() < 16:
        pytest.skip("this device does not run 16-block clusters")
    bins = block_capacity(tier) * 15 + 7  # needs all 16 blocks of a cluster tier; not a multiple of 16
    if not plannable(tier, 16, bins):  # tier exchange keeps its staging beside the bins: half as many a block
        bins = shared_capacity() * 15 // 2 + 7
    x = make_index_values(400009, bins, torch.int32, "uniform", gen).cuda()
    with torch_dsmhist.force_tier(tier, 16):
        assert torch_dsmhist.plan(bins).cluster_size == 16
        out = torch_dsmhist.histogram(x, bins)
    assert torch.equal(out.cpu(), reference_histogram(x, bins))


def test_no_host_synchronisation(gen):
    x = make_index_values(100003, 5000, torch.int32, "uniform", gen).cuda()
    f = torch.randn(100003, generator=gen).cuda()
    w = torch.rand(100003, generator=gen).cuda()
    hist = torch.zeros(5000, dtype=torch.int64, device="cuda")
    variants = [("auto", None), ("shared", None), ("global", None)]
    if cluster_available():
        variants += [(tier, 2) for tier in CLUSTER_TIERS]
    torch.cuda.synchronize()
    with host_sync_raises():
        for tier, size in variants:
            with torch_dsmhist.force_tier(tier, size):
                torch_dsmhist.histogram(x, 5000)
                torch_dsmhist.histogram(f, 5000)  # range found on the device
                torch_dsmhist.histogram(x[:100002].reshape(-1, 7)[:, ::2], 5000, dtype=torch.int32)
                torch_dsmhist.histogram_add_(hist, x)
                torch_dsmhist.batched_histogram(x[:100000].reshape(1000, 100), 5000)
                if tier != "auto" and not adds_sums(tier, size, 5000):
                    continue  # a counts-only tier
                torch_dsmhist.histogram(f, 5000, -1.0, 1.0, weight=w, out_of_range="clamp")
                torch_dsmhist.batched_histogram(f[:100002].reshape(7, -1), 5000, weight=w[:100002].reshape(7, -1))
                with deterministic_algorithms():
                    torch_dsmhist.histogram(f, 5000, -1.0, 1.0, weight=w)


def test_cuda_graph_capture_and_replay(gen):
    static_tokens = torch.randint(0, 64, (8192,), generator=gen).cuda()
    static_scores = torch.randn(8192, generator=gen).cuda()

    def step():
        return torch_dsmhist.histogram(static_tokens, 64), torch_dsmhist.histogram(static_scores, 50)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        counts, hist = step()
    for _ in range(3):
        tokens = torch.randint(0, 64, (8192,), generator=gen)
        scores = torch.randn(8192, generator=gen) * 3
        static_tokens.copy_(tokens)
        static_scores.copy_(scores)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(counts.cpu(), torch.bincount(tokens, minlength=64))
        assert torch.equal(hist.cpu(), reference_histogram(scores, 50))


def test_cuda_graph_running_histogram_and_batched(gen):
    """histogram_add_ inside a graph: every replay adds the new batch; batched_histogram replays on new data."""
    static_batch = torch.zeros(4096, dtype=torch.int64, device="cuda")
    static_rows = torch.zeros(32, 500, dtype=torch.uint8, device="cuda")
    running = torch.zeros(128, dtype=torch.int64, device="cuda")

    def step():
        torch_dsmhist.histogram_add_(running, static_batch)
        return torch_dsmhist.batched_histogram(static_rows, 256)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    running.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        per_row = step()
    expected = torch.zeros(128, dtype=torch.int64)
    for _ in range(3):
        batch = torch.randint(0, 128, (4096,), generator=gen)
        rows = torch.randint(0, 256, (32, 500), generator=gen, dtype=torch.uint8)
        static_batch.copy_(batch)
        static_rows.copy_(rows)
        graph.replay()
        torch.cuda.synchronize()
        expected += torch.bincount(batch, minlength=128)
        assert torch.equal(running.cpu(), expected)
        assert torch.equal(per_row.cpu(), torch.stack([torch.bincount(r.long(), minlength=256) for r in rows]))


@pytest.mark.parametrize(
    "shape, bins",
    [
        ((4099, 37), 16),  # many short rows: one block per row, stored without atomics
        ((257, 1000), 300),
        ((3, 300007), 4099),  # a few long rows: rows cut into segments, flushed with atomics
        ((2, 200003), 100003),  # past one block's shared memory: the cluster tier per row
    ],
)
def test_batched_every_tier_gives_identical_counts(shape, bins, gen):
    x = make_index_values(shape[0] * shape[1], bins, torch.int32, "uniform", gen).reshape(shape).cuda()
    expected = torch.stack([reference_histogram(row, bins, out_of_range="clamp") for row in x.cpu()])
    for name, tier, size in tier_variants(bins):
        with torch_dsmhist.force_tier(tier, size):
            got = torch_dsmhist.batched_histogram(x, bins, out_of_range="clamp").cpu()
            strided = torch_dsmhist.batched_histogram(x[:, 1::2], bins, out_of_range="clamp").cpu()
        assert torch.equal(got, expected), f"tier {name} differs from the reference"
        strided_expected = torch.stack(
            [reference_histogram(row, bins, out_of_range="clamp") for row in x[:, 1::2].cpu()]
        )
        assert torch.equal(strided, strided_expected), f"tier {name} (strided rows) differs from the reference"


def test_histogram_add_every_tier(gen):
    bins = 100003
    x = make_index_values(500009, bins, torch.int64, "sorted", gen).cuda()
    for name, tier, size in tier_variants(bins):
        hist = torch.ones(bins, dtype=torch.int32, device="cuda")
        with torch_dsmhist.force_tier(tier, size):
            torch_dsmhist.histogram_add_(hist, x)
            torch_dsmhist.histogram_add_(hist, x[::7])
        expected = 1 + reference_histogram(x, bins) + reference_histogram(x[::7], bins)
        assert torch.equal(hist.cpu().long(), expected), f"tier {name}"


CAPTURE_ON_FIRST_CALL = """
import sys
import torch
import torch_dsmhist
tier, bins = sys.argv[1], int(sys.argv[2])
ids = torch.zeros(1 << 16, dtype=torch.int64, device="cuda")
scores = torch.zeros(1 << 16, dtype=torch.float16, device="cuda")
graph = torch.cuda.CUDAGraph()
with torch_dsmhist.force_tier(tier), torch.cuda.graph(graph):  # the op's first call in this process
    counts = torch_dsmhist.histogram(ids, bins)
    hist = torch_dsmhist.histogram(scores, bins)
new_ids = torch.randint(0, bins, ids.shape, device="cuda")
new_scores = torch.randn(scores.shape, device="cuda").half()
ids.copy_(new_ids)
scores.copy_(new_scores)
graph.replay()
torch.cuda.synchronize()
assert torch.equal(counts, torch.bincount(new_ids, minlength=bins)), "counts"
lo, hi = new_scores.float().min().item(), new_scores.float().max().item()
assert torch.equal(hist, torch.histc(new_scores.float(), bins, lo, hi).long()), "data-range histogram"
print("ok")
"""


@pytest.mark.parametrize(
    "tier, bins", [("auto", 300)] + [(tier, bins) for tier in TIER_NAMES for bins in (300, 100003)]
)
def test_cuda_graph_capture_on_the_first_call(tier, bins):
    """Planning (kernel attributes, occupancy queries) must also work when the first call is inside a capture."""
    if tier in CLUSTER_TIERS and not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    if tier != "auto" and not plannable(tier, None, bins):
        pytest.skip(f"tier {tier} cannot hold {bins} bins on this device")
    result = subprocess.run(
        [sys.executable, "-c", CAPTURE_ON_FIRST_CALL, tier, str(bins)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_runs_on_the_current_stream(gen):
    x = make_index_values(1 << 22, 4096, torch.int32, "uniform", gen).cuda()
    expected = reference_histogram(x, 4096)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outs = [torch_dsmhist.histogram(x, 4096) for _ in range(4)]
    torch.cuda.current_stream().wait_stream(stream)
    for out in outs:
        assert torch.equal(out.cpu(), expected)


def test_weighted_is_deterministic_under_deterministic_algorithms(gen):
    """torch.use_deterministic_algorithms(True) selects the fixed-point path: the same bits on every run and every
    tier (integer addition has no order), where float atomics differ from run to run."""
    bins = 4099
    x = make_range_values(1 << 20, 0.0, 1.0, torch.float32, "uniform", gen).cuda()
    w = (torch.randn(1 << 20, generator=gen) * 1000).cuda()
    results = {}
    with deterministic_algorithms():
        for name, tier, size in tier_variants(bins):
            if not adds_sums(tier, size, bins):
                continue  # a counts-only tier (its refusal: test_every_tier_range_mode_with_weights)
            with torch_dsmhist.force_tier(tier, size):
                results[name] = [torch_dsmhist.histogram(x, bins, 0.0, 1.0, weight=w).cpu() for _ in range(2)]
        counts = torch_dsmhist.histogram(x, bins, 0.0, 1.0)  # counts take the usual path
    first = next(iter(results.values()))[0]
    for name, runs in results.items():
        for run in runs:
            assert torch.equal(run, first), f"tier {name} gives other bits"
    torch.testing.assert_close(first, reference_histogram(x, bins, 0.0, 1.0, weight=w), rtol=1e-5, atol=1e-2)
    assert torch.equal(counts.cpu(), reference_histogram(x, bins, 0.0, 1.0))


def fixed_point_rule(x: torch.Tensor, bins: int, w: torch.Tensor) -> torch.Tensor:
    """docs/semantics.md's deterministic sum, step by step in float64 and int64 on the host: each bin's largest
    exponent, each weight rounded (half to even) to its bin's fixed-point unit, the integers summed, one rounding."""
    x, w = x.cpu().long(), w.cpu().double()
    count_bits = max(0, (x.numel() - 1).bit_length())  # ceil(log2 n)
    biased = (w.abs().view(torch.int64) >> 52) & 0x7FF  # the double's biased exponent (subnormal doubles: 1)
    codes = torch.zeros(bins, dtype=torch.int64).scatter_reduce_(
        0, x, torch.where(w == 0, 0, biased.clamp(min=1)), "amax"
    )
    shift = 1084 - count_bits - codes
    integers = torch.round(torch.ldexp(w, shift[x].double())).long()  # torch.round: half to even
    sums = torch.zeros(bins, dtype=torch.int64).index_add_(0, x, integers)
    return torch.where(codes == 0, 0.0, torch.ldexp(sums.double(), -shift.double())).float()


def test_deterministic_sums_follow_the_fixed_point_rule(gen):
    """Bit for bit docs/semantics.md's rule on every tier that sums: float32 weights loaded beside their values (an
    integer conversion of the significand) and loaded by offset (through float64). Magnitudes 2^-40 to 2^40 in one
    bin, so most weights round; subnormal weights, zeros, negatives; and weights half way between two units."""
    bins, n = 37, 200003
    x = torch.randint(0, bins, (n,), generator=gen, dtype=torch.int32)
    w = torch.randn(n, generator=gen) * torch.pow(2.0, torch.randint(-40, 41, (n,), generator=gen).float())
    w[:: 1 << 10] = 2.0**-140  # subnormal in float32
    w[1 :: 1 << 10] = 0.0
    # Bin 5 holds only these: its largest weight is below 2^40, so (n < 2^18) its unit is 2^(40 - 62 + 18) = 2^-4,
    # and odd multiples of 2^-5 fall half way between two units (rounded to the even one).
    x[x == 5] = 6
    x[:64] = 5
    w[:64] = torch.tensor([2.0**40 - 2.0**16] + [3 * 2.0**-5, -5 * 2.0**-5, 5 * 2.0**-5, 7 * 2.0**-5] * 15 + [1.0] * 3)
    expected = fixed_point_rule(x, bins, w)
    x, w = x.cuda(), w.cuda()
    with deterministic_algorithms():
        for name, tier, size in tier_variants(bins):
            if adds_sums(tier, size, bins):
                with torch_dsmhist.force_tier(tier, size):
                    got = torch_dsmhist.histogram(x, bins, weight=w).cpu()
                differ = (got != expected).nonzero().flatten().tolist()
                assert not differ, f"tier {name}: bins {differ[:8]} differ from the rule"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_input_on_a_non_current_device(gen):
    x = make_index_values(10007, 300, torch.int64, "uniform", gen)
    out = torch_dsmhist.histogram(x.to("cuda:1"), 300)
    assert out.device == torch.device("cuda:1")
    assert torch.equal(out.cpu(), reference_histogram(x, 300))


@pytest.mark.parametrize("input_dtype", [torch.uint8, torch.int16, torch.int32, torch.int64, torch.float32])
def test_float32_weights_loaded_beside_their_values(input_dtype, gen):
    """Float32 weights are loaded with their values' 16-byte vectors (16, 8 or 4 bytes a load) where they sit at the
    input's alignment, one by one where they do not, and element by element with strided weights. Every offset of the
    weights against the input (0-3 elements, so each case of the load), strided weights and batched rows whose starts
    shift the alignment row by row; tiers shared and global forced and the planner's choice; float32 sums of integer
    weights, the deterministic path and float64 sums (histogram_add_ into float64) of scaled weights (exact in
    float32): each equal to the float64 reference (so the tiers and the two loads agree bit for bit)."""
    bins, n, rows, row_length = 251, 100003, 7, 1001
    x = make_index_values(n + 4, bins, torch.int32 if input_dtype.is_floating_point else input_dtype, "uniform", gen)
    x = x.to(input_dtype)
    integers, scaled = exact_weights(2 * n + 8, gen)
    rng = (0.0, float(bins)) if input_dtype.is_floating_point else (None, None)
    xc = x.cuda()
    for tier in ("auto", "shared", "global"):
        for kind in SUM_KINDS:
            wc = (integers if kind == "float32" else scaled).float().cuda()
            out_dtype = torch.float64 if kind == "float64" else torch.float32
            layouts = {f"input +{i}, weights +{j}": (slice(i, i + n), wc[j : j + n]) for i in (0, 1) for j in range(4)}
            layouts["strided weights"] = (slice(0, n), wc[: 2 * n : 2])
            for name, (xs, w) in layouts.items():
                with torch_dsmhist.force_tier(tier), deterministic_algorithms(kind == "deterministic"):
                    if kind == "float64":
                        got = torch.zeros(bins, dtype=torch.float64, device="cuda")
                        torch_dsmhist.histogram_add_(got, xc[xs], *rng, weight=w)
                    else:
                        got = torch_dsmhist.histogram(xc[xs], bins, *rng, weight=w)
                expected = reference_histogram(x[xs], bins, *rng, weight=w.cpu()).to(out_dtype)
                assert torch.equal(got.cpu(), expected), (tier, kind, name, input_dtype)
            if kind == "float64":
                continue  # batched_histogram sums float32 weights in float32
            batch = xc[: rows * row_length].view(rows, row_length)
            w = wc[1 : 1 + rows * row_length].view(rows, row_length)
            with torch_dsmhist.force_tier(tier), deterministic_algorithms(kind == "deterministic"):
                got = torch_dsmhist.batched_histogram(batch, bins, *rng, weight=w).cpu()
            expected = torch.stack(
                [reference_histogram(r, bins, *rng, weight=rw) for r, rw in zip(batch.cpu(), w.cpu())]
            ).to(out_dtype)
            assert torch.equal(got, expected), (tier, kind, "batched", input_dtype)
