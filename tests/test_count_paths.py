"""Count paths on CUDA that only some data reaches, checked exactly against an independent reference: hot bins at the
edges of the cluster tier's per-block bin ranges (a block's first and last bin, past 2^16 counts), the global tier's
run merging and per-block cache of hot bins (two hot bins sharing a cache slot, batched rows sharing the cache), and
small 1-D calls, which run as one cluster that sums its blocks' bins through DSMEM and stores the output itself, and
1-byte inputs, which tier "shared" counts per byte value (lane-striped tallies) and bins at each flush, and tier
partition's kernel 3 on chunks of short runs only (counted with no barrier) beside chunks of long or uneven runs.
Skipped without a GPU."""

import pytest
import torch

import torch_dsmhist

from conftest import CUDA_OK, CUDA_SKIP_REASON
from helpers import (
    cluster_available,
    cluster_block_capacity,
    deterministic_algorithms,
    make_index_values,
    max_cluster_size,
    reference_histogram,
    shared_capacity,
)

pytestmark = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)

WRAP = 1 << 16  # counts past 16 bits
CACHE_SLOTS = 2048  # kGlobalCacheSlots (csrc/kernels/tuning.h)


def hot_values(bins: int, hot: dict, background: int, gen: torch.Generator) -> torch.Tensor:
    """`hot[b]` copies of each bin b, plus `background` uniform values in [0, bins) (a few outside), shuffled."""
    parts = [torch.full((count,), b, dtype=torch.int64) for b, count in hot.items()]
    parts.append(torch.randint(-2, bins + 2, (background,), generator=gen))
    values = torch.cat(parts)
    return values[torch.randperm(values.numel(), generator=gen)]


def cluster_ranges(bins: int, size: int):
    """(ranges, bins a range) of tier cluster forced to `size` blocks: the fewest ranges (a divisor of the size) that
    hold the bins, the cluster's other blocks replicas of them. Checked against the plan."""
    ranges = next(r for r in range(1, size + 1) if size % r == 0 and -(-bins // r) <= cluster_block_capacity())
    with torch_dsmhist.force_tier("cluster", size):
        p = torch_dsmhist.plan(bins)
    assert (p.cluster_size, p.bins_per_block) == (size, -(-bins // ranges)), (bins, size)
    return ranges, p.bins_per_block


def cluster_sizes_for(bins: int):
    """Cluster sizes to force: the smallest tier cluster accepts and a few more that the device launches."""
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    sizes = []
    for size in (1, 2, 3, 4, 5, max_cluster_size()):
        if size <= max_cluster_size() and size not in sizes:
            try:
                with torch_dsmhist.force_tier("cluster", size):
                    torch_dsmhist.plan(bins)
                sizes.append(size)
            except ValueError:
                continue
    assert sizes, "tier cluster could not hold the bins at any size"
    return sizes


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
@pytest.mark.parametrize("count_dtype", [torch.int64, torch.int32])
def test_cluster_hot_bins_at_block_edges(order, count_dtype, gen):
    bins = 100003  # odd, so the blocks' ranges are uneven
    sizes = cluster_sizes_for(bins)
    for size in sizes:
        ranges, step = cluster_ranges(bins, size)
        hot = {0: 3 * WRAP + 5, 1: 2 * WRAP + 7}
        hot[step - 1] = WRAP + 1  # the last bin of range 0
        if ranges > 1:
            hot[step] = 2 * WRAP  # the first bin of range 1
        hot[bins - 1] = WRAP - 1 + 2 * WRAP  # the last bin of all
        hot[bins // 2 | 1] = 4 * WRAP + 3
        x = hot_values(bins, hot, 200003, gen)
        if order == "sorted":
            x = x.sort().values
        expected = reference_histogram(x, bins).to(count_dtype)
        x = x.cuda()
        with torch_dsmhist.force_tier("cluster", size):
            assert torch_dsmhist.plan(bins).cluster_size == size
            out = torch_dsmhist.histogram(x, bins, dtype=count_dtype)
            assert torch.equal(out.cpu(), expected), f"cluster of {size}"
            # Accumulating into a histogram that already holds counts.
            start = torch.randint(0, 1000, (bins,), generator=gen, dtype=count_dtype)
            hist = start.cuda()
            torch_dsmhist.histogram_add_(hist, x)
            assert torch.equal(hist.cpu(), start + expected), f"histogram_add_, cluster of {size}"


@pytest.mark.parametrize("layout", ["dense", "sorted", "strided", "offset"])
def test_cluster_packed_halves_of_one_word(layout, gen):
    """Tier cluster keeps a block's counts as 16-bit halves of 32-bit words (local bin l and l + words share word l,
    words = ceil(block bins / 8) * 4) and sweeps the halves past 2^14 into the output every few rounds. Both halves
    of one word far past 2^16, beside cold bins, in clusters of one range (1, 2 and 4 blocks: each block a replica
    that holds every bin, the copies summed through DSMEM at the flush) and of two ranges (200003 bins in 2 and 4
    blocks): no carry from one half may reach the other, and no count may be lost to a sweep."""
    cases = [(100003, s) for s in cluster_sizes_for(100003) if s in (1, 2, 4)]
    cases += [(200003, s) for s in cluster_sizes_for(200003) if s in (2, 4)]
    for bins, size in cases:
        ranges, block_bins = cluster_ranges(bins, size)
        words = -(-block_bins // 8) * 4
        hot = {}
        for block in range(ranges):
            first = block * block_bins
            hot[first + 5] = 3 * WRAP + 1  # low half of word 5
            hot[first + words + 5] = 5 * WRAP - 1  # high half of word 5
            hot[first + words - 1] = WRAP  # the last low half, beside the first high half
            hot[first + words] = WRAP + 3
        x = hot_values(bins, hot, 300007, gen)
        if layout == "sorted":
            x = x.sort().values
        expected = reference_histogram(x, bins)
        x = x.cuda()
        if layout == "strided":
            x = torch.stack([x, torch.full_like(x, bins + 9)], 1).flatten()[::2]
        elif layout == "offset":
            x = torch.cat([x[:3], x])[3:]
        with torch_dsmhist.force_tier("cluster", size):
            out = torch_dsmhist.histogram(x, bins)
        assert torch.equal(out.cpu(), expected), f"{bins} bins, cluster of {size} ({ranges} ranges)"


@pytest.mark.parametrize("half", ["low", "high"])
def test_cluster_replicas_sum_halves_past_16_bits(half, gen):
    """The replicas of a range sum their copies of a bin at the flush: 2^16 values of one bin, read by one cluster of
    2 or 4 blocks in fewer rounds than a sweep waits for, leave 2^15 (or 2^14) in each copy's half, whose sum is
    2^16, one past what a half holds. Then 3 * 2^16 values, swept on the way."""
    bins = 100003
    words = -(-bins // 8) * 4
    hot = 11 if half == "low" else words + 11
    for size in [s for s in cluster_sizes_for(bins) if s in (2, 4)]:
        for n in (WRAP, 3 * WRAP):
            x = torch.full((n,), hot, dtype=torch.int64)
            expected = reference_histogram(x, bins)
            with torch_dsmhist.force_tier("cluster", size):
                if n == WRAP:  # one cluster, every block a replica of every bin
                    assert torch_dsmhist.plan(bins, n=n).grid_blocks == size
                    assert cluster_ranges(bins, size) == (1, bins)
                out = torch_dsmhist.histogram(x.cuda(), bins)
            assert torch.equal(out.cpu(), expected), f"cluster of {size}, {n} values"


@pytest.mark.parametrize("binning", ["by_value", "clamped", "by_range"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_cluster_packed_bodies_at_the_dtype_limits(dtype, binning, gen):
    """Tier cluster's packed counts have bodies of their own for integer input binned by value, dropping or clamping
    what is out of range (a key is a subtraction and an unsigned compare, after a clamp), and the binner's general
    body for a range. The same data through each: hot bins past 2^16 at every range's first and last bin, the dtype's
    extremes, values just outside the bins and (8-byte input) values whose low 32 bits are a bin; in clusters of one
    range (1 and 2 blocks) and of two (2 and 4 blocks); dense, offset by one element and strided."""
    info = torch.iinfo(dtype)
    bins_list = [200] if info.bits == 8 else [100003] + ([200003] if info.bits >= 32 else [])
    extremes = [info.min, info.min + 1, -2, -1, info.max - 1, info.max]
    if info.bits == 64:
        extremes += [-(1 << 32), (1 << 32) + 5, (1 << 31) + 5, -(1 << 31) - 5]
    for bins in bins_list:
        extra = [bins, bins + 1]
        for size in [s for s in cluster_sizes_for(bins) if s in (1, 2, 4)]:
            ranges, block_bins = cluster_ranges(bins, size)
            edges = sorted({b for r in range(ranges) for b in (r * block_bins, min(bins, (r + 1) * block_bins) - 1)})
            hot = {b: WRAP + 3 + b % 7 for b in edges if b <= info.max}
            x = hot_values(min(bins, info.max + 1), hot, 100003, gen)
            picks = torch.randint(0, x.numel(), (x.numel() // 9,), generator=gen)
            pool = torch.tensor([e for e in extremes + extra if info.min <= e <= info.max], dtype=torch.int64)
            x[picks] = pool[torch.randint(0, len(pool), (len(picks),), generator=gen)]
            x = x.to(dtype)
            args = {"by_value": {}, "clamped": {"out_of_range": "clamp"}, "by_range": {"min": 0.0, "max": float(bins)}}
            kwargs = args[binning]
            xc = x.cuda()
            for name, view in (("dense", xc), ("offset", xc[1:]), ("strided", xc[::3])):
                with torch_dsmhist.force_tier("cluster", size):
                    got = torch_dsmhist.histogram(view, bins, **kwargs)
                expected = reference_histogram(view, bins, **kwargs)
                assert torch.equal(got.cpu(), expected), f"{bins} bins, cluster of {size} ({ranges} ranges), {name}"


def range_values(dtype: torch.dtype, lo: float, hi: float, bins: int, hot: dict, gen: torch.Generator) -> torch.Tensor:
    """Values of `dtype` for `bins` bins over [lo, hi]: every edge lo + k (hi - lo) / bins and (float32 / float64) its
    neighbouring floats, lo and hi, values outside, NaN and infinities (floating dtypes), uniform background, and
    `hot[b]` copies of bin b's centre; shuffled."""
    floating = dtype.is_floating_point
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    parts = [torch.empty(0, dtype=torch.float64)]
    if floating:
        e = edges.to(dtype)
        parts.append(e.double())
        if dtype in (torch.float32, torch.float64):
            parts += [torch.nextafter(e, e + 1).double(), torch.nextafter(e, e - 1).double()]
        parts.append(torch.tensor([float("nan"), float("inf"), -float("inf")] * 5, dtype=torch.float64))
    width = (hi - lo) / bins
    parts += [torch.full((count,), lo + (b + 0.5) * width, dtype=torch.float64) for b, count in hot.items()]
    parts.append(torch.rand(100003, generator=gen, dtype=torch.float64) * (hi - lo) * 1.2 + lo - 0.1 * (hi - lo))
    values = torch.cat(parts)
    values = values if floating else values.round()
    return values[torch.randperm(values.numel(), generator=gen)].to(dtype)


# A range for each input type of the range tests: integer values drawn around it must fit the type.
TEST_RANGES = {torch.int32: (-1000.5, 99000.25), torch.int16: (-20000.5, 20000.25), torch.uint8: (30.5, 200.25)}


@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int16, torch.uint8]
)
def test_cluster_packed_range_equals_global_and_the_reference(dtype, out_of_range, gen):
    """Tier cluster's packed counts over a range (floating input, and integer input given min and max; the range
    bodies of input binned in float among them): the same data through them, through tier global and the independent
    reference must agree bin for bin: every edge and its neighbours, min and max, values outside, NaN and infinities,
    hot bins past 2^16 at every block range's first and last bin; an explicit range and (dropped) the data's own; in
    clusters of one range (1 and 2 blocks) and of two (2 and 4 blocks); dense, offset and strided."""
    lo, hi = (-3.25, 7.5) if dtype.is_floating_point else TEST_RANGES[dtype]
    for bins in (100003, 200003):
        for size in [s for s in cluster_sizes_for(bins) if s in (1, 2, 4)]:
            ranges, block_bins = cluster_ranges(bins, size)
            hot = {
                b: WRAP + 3 + b % 5
                for r in range(ranges)
                for b in (r * block_bins, min(bins, (r + 1) * block_bins) - 1)
            }
            x = range_values(dtype, lo, hi, bins, hot, gen).cuda()
            calls = {"explicit range": dict(min=lo, max=hi, out_of_range=out_of_range)}
            if dtype.is_floating_point and out_of_range == "ignore":
                calls["data range"] = {}
            for what, kwargs in calls.items():
                for name, view in (("dense", x), ("offset", x[1:]), ("strided", x[::3])):
                    with torch_dsmhist.force_tier("cluster", size):
                        got = torch_dsmhist.histogram(view, bins, **kwargs)
                    with torch_dsmhist.force_tier("global"):
                        in_global = torch_dsmhist.histogram(view, bins, **kwargs)
                    label = f"{bins} bins, cluster of {size} ({ranges} ranges), {what}, {name}"
                    assert torch.equal(got, in_global), label
                    if what == "explicit range":  # the data's range is found on the device: tier global's check above
                        assert torch.equal(got.cpu(), reference_histogram(view, bins, **kwargs)), label


def edge_sample(dtype: torch.dtype, lo: float, hi: float, bins: int, gen: torch.Generator) -> torch.Tensor:
    """Values of `dtype` for `bins` bins over [lo, hi] (bins up to 2^24 + 1): about 50000 edges lo + k (hi - lo) /
    bins with their neighbouring floats, the first and last two edges, lo and hi and their neighbours, values outside,
    NaN and infinities, uniform background; shuffled."""
    k = torch.cat([torch.randint(0, bins + 1, (50000,), generator=gen), torch.tensor([0, 1, bins - 1, bins])])
    edges = (lo + k.double() * ((hi - lo) / bins)).to(dtype)
    ends = torch.tensor([lo, hi], dtype=torch.float64).to(dtype)
    parts = [edges, torch.nextafter(edges, edges + 1), torch.nextafter(edges, edges - 1), ends]
    parts += [torch.nextafter(ends, ends + 1), torch.nextafter(ends, ends - 1)]
    parts.append(torch.tensor([float("nan"), float("inf"), -float("inf")] * 5, dtype=dtype))
    background = torch.rand(200003, generator=gen, dtype=torch.float64) * (hi - lo) * 1.2 + lo - 0.1 * (hi - lo)
    parts.append(background.to(dtype))
    values = torch.cat([p.to(dtype) for p in parts])
    return values[torch.randperm(values.numel(), generator=gen)]


@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_narrow_range_keys_at_their_limits(dtype, out_of_range, gen):
    """The keys of input binned over a range in float without a branch (Binner::narrow_range_bin: tier cluster's
    range bodies, tier partition's plain keys) against tier global and the reference, at the limits of where they
    apply: 2^24 bins (the float below bins truncates to the last bin) and 2^24 + 1 (the general path), a range whose
    span times the bins overflows float (operands scaled by 2^-64), a range that rounds to one float (the middle
    bin), and a span under 2^-100 (the device divides: the general path); edges and their neighbouring floats, min
    and max, values outside, NaN and infinities; dense and strided; an explicit range, and the data's own."""
    if dtype == torch.float32:
        ranges = [(-3.25, 7.5), (-3e38, 3e38), (2.0**25, 2.0**25 + 1), (0.0, 1e-31)]
    else:
        ranges = [(-3.25, 7.5), (-60000.0, 60000.0) if dtype == torch.float16 else (-3e38, 3e38)]
    cases = [("partition", None, bins) for bins in (1000003, 1 << 24, (1 << 24) + 1)]
    if cluster_available():
        cases += [("cluster", size, 100003) for size in (1, 2) if size <= max_cluster_size()]
    for tier, size, bins in cases:
        for lo, hi in ranges:
            x = edge_sample(dtype, lo, hi, bins, gen).cuda()
            for name, view in (("dense", x), ("strided", x[::3])):
                calls = {"explicit range": dict(min=lo, max=hi, out_of_range=out_of_range)}
                if out_of_range == "ignore":
                    calls["data range"] = {}
                for what, kwargs in calls.items():
                    with torch_dsmhist.force_tier(tier, size):
                        got = torch_dsmhist.histogram(view, bins, **kwargs)
                    with torch_dsmhist.force_tier("global"):
                        in_global = torch_dsmhist.histogram(view, bins, **kwargs)
                    label = f"{tier} {size}, {bins} bins over [{lo}, {hi}], {what}, {name}"
                    assert torch.equal(got, in_global), label
                    if what == "explicit range":
                        assert torch.equal(got.cpu(), reference_histogram(view, bins, **kwargs)), label


def test_cluster_packed_zero_adds_on_few_words(gen):
    """Where a warp's keys differ, each lane adds every one of its keys with no branch: a key not counted (a value
    dropped here) adds zero to the lane's own word, lane % words when a block has fewer than 32 words (under 64 bins).
    Few bins, a fifth of the values outside them, hot bins among them (so warps hold one key, mixed keys and none),
    dense and strided, in clusters of 1 and 2 blocks: every count exact."""
    for bins in (1, 5, 13, 63, 64, 65):
        x = hot_values(bins, {0: 3 * 32 * 4 + 1, bins - 1: 257}, 100003, gen)
        x[torch.randint(0, x.numel(), (x.numel() // 5,), generator=gen)] = -7
        xc = x.to(torch.int32).cuda()
        for size in [s for s in cluster_sizes_for(bins) if s in (1, 2)]:
            for name, view in (("dense", xc), ("strided", xc[::3])):
                with torch_dsmhist.force_tier("cluster", size):
                    got = torch_dsmhist.histogram(view, bins)
                assert torch.equal(got.cpu(), reference_histogram(view, bins)), (
                    f"{bins} bins, cluster of {size}, {name}"
                )


def test_cluster_hot_bins_batched_rows(gen):
    bins = 120001
    sizes = cluster_sizes_for(bins)
    rows = [hot_values(bins, {r: WRAP + 17 * r, r + 1: 2 * WRAP - 17 * r}, 50001, gen) for r in range(3)]
    x = torch.stack(rows).cuda()
    expected = torch.stack([reference_histogram(row, bins) for row in x])
    for size in sizes:
        with torch_dsmhist.force_tier("cluster", size):
            assert torch.equal(torch_dsmhist.batched_histogram(x, bins).cpu(), expected.cpu()), f"cluster of {size}"
            strided = x[:, ::2]
            assert torch.equal(
                torch_dsmhist.batched_histogram(strided, bins).cpu(),
                torch.stack([reference_histogram(r, bins) for r in strided]).cpu(),
            )


@pytest.mark.parametrize("bins", [1000, shared_capacity() * 2 + 17 if CUDA_OK else 0, 1048579])
def test_global_tier_hot_bins(bins, gen):
    # Two hot bins in one cache slot (only one can claim it), one hot bin per run of equal values, and a cold tail.
    hot = {3: 500001, 3 + CACHE_SLOTS: 400003, bins - 1: 70001, bins // 3: 33}
    hot = {b % bins: c for b, c in hot.items()}
    x = hot_values(bins, hot, 300007, gen)
    for order, data in (("shuffled", x), ("sorted", x.sort().values)):
        expected = reference_histogram(data, bins)
        data = data.cuda()
        with torch_dsmhist.force_tier("global"):
            out = torch_dsmhist.histogram(data, bins)
            out32 = torch_dsmhist.histogram(data, bins, dtype=torch.int32)
            clamped = torch_dsmhist.histogram(data, bins, out_of_range="clamp")
            hist = torch.ones(bins, dtype=torch.int64, device="cuda")
            torch_dsmhist.histogram_add_(hist, data)
        assert torch.equal(out.cpu(), expected), order
        assert torch.equal(out32.cpu(), expected.int()), order
        assert torch.equal(clamped.cpu(), reference_histogram(data.cpu(), bins, out_of_range="clamp")), order
        assert torch.equal(hist.cpu(), expected + 1), order


def test_global_tier_hot_bins_batched(gen):
    # Flat output bins tag the cache, so rows share it: the same hot bin of different rows must stay apart.
    bins = 5003
    x = torch.stack(
        [hot_values(bins, {7: 90001 + 3 * r, (7 + CACHE_SLOTS) % bins: 30 - 3 * r}, 20011, gen) for r in range(5)]
    ).cuda()
    expected = torch.stack([reference_histogram(row, bins) for row in x])
    with torch_dsmhist.force_tier("global"):
        out = torch_dsmhist.batched_histogram(x, bins)
        transposed = torch_dsmhist.batched_histogram(x.t().contiguous().t(), bins)
    assert torch.equal(out.cpu(), expected.cpu())
    assert torch.equal(transposed.cpu(), expected.cpu())


@pytest.mark.parametrize("n", [1, 100, 8191, 8193, 30001, 65536, 65537])
def test_small_calls_in_one_launch(n, gen):
    bins = 300
    x = torch.randint(-2, bins + 2, (n,), generator=gen)
    w = torch.rand(n, generator=gen, dtype=torch.float64)
    expected = reference_histogram(x, bins)
    xc, wc = x.cuda(), w.cuda()
    assert torch.equal(torch_dsmhist.histogram(xc, bins).cpu(), expected)
    assert torch.equal(torch_dsmhist.histogram(xc, bins, dtype=torch.int32).cpu(), expected.int())
    assert torch.equal(
        torch_dsmhist.histogram(xc, bins, out_of_range="clamp").cpu(),
        reference_histogram(x, bins, out_of_range="clamp"),
    )
    torch.testing.assert_close(
        torch_dsmhist.histogram(xc, bins, weight=wc).cpu(),
        reference_histogram(x, bins, weight=w),
        rtol=1e-12,
        atol=1e-9,
    )
    hist = torch.full((bins,), 5, dtype=torch.int64, device="cuda")
    torch_dsmhist.histogram_add_(hist, xc)
    assert torch.equal(hist.cpu(), expected + 5)
    # A 2-D view with a gap between rows: several rows feed one histogram.
    if n >= 2:
        grid = torch.randint(0, bins, (n // 2 + 1, 3), generator=gen)
        view = grid.cuda()[:, ::2]
        assert torch.equal(torch_dsmhist.histogram(view, bins).cpu(), reference_histogram(grid[:, ::2], bins))
    # Deterministic weighted sums take their own passes (no stores): same sums to the last bit on a rerun.
    with deterministic_algorithms():
        first = torch_dsmhist.histogram(xc, bins, weight=wc)
        second = torch_dsmhist.histogram(xc, bins, weight=wc)
    assert torch.equal(first, second)
    torch.testing.assert_close(first.cpu(), reference_histogram(x, bins, weight=w), rtol=1e-12, atol=1e-9)


TALLY_MIN_ITEM = 2 * 256 * 32  # kByteTallyMinItemElements (csrc/kernels/tuning.h)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize("distribution", ["uniform", "one_hot", "sorted", "two_edges"])
def test_byte_tallies(dtype, distribution, gen):
    """1-byte counts in work items long enough for the byte tallies (and just too short for them), every binning
    rule (index, clamp, a range, a range with clamp, bins past the 256 values), 1-D and batched, strided and
    misaligned, histogram_add_, against the CPU reference."""
    assert torch_dsmhist.plan(256, dtype=dtype, n=1 << 24).shared_bytes_per_block == 256 * 4 + 256 * 32 * 4
    for n in (65537, 3 * TALLY_MIN_ITEM - 1, 3_000_017):
        x = make_index_values(n + 1, 256, dtype, distribution, gen)
        xc = x.cuda()[1:]  # misaligned by one element
        x = x[1:]
        for bins, lo, hi, rule in (
            (256, None, None, "ignore"),
            (100, None, None, "clamp"),
            (7, -5.0, 90.5, "ignore"),
            (250, -100.0, 60.0, "clamp"),
            (1000, None, None, "ignore"),
        ):
            expected = reference_histogram(x, bins, lo, hi, out_of_range=rule)
            for tier in ("auto", "shared"):
                with torch_dsmhist.force_tier(tier):
                    got = torch_dsmhist.histogram(xc, bins, lo, hi, out_of_range=rule)
                assert torch.equal(got.cpu(), expected), (n, bins, lo, hi, rule, tier)
            hist = torch.full((bins,), 3, dtype=torch.int32, device="cuda")
            torch_dsmhist.histogram_add_(hist, xc, lo, hi, out_of_range=rule)
            assert torch.equal(hist.cpu(), expected.int() + 3), (n, bins, rule, "histogram_add_")
        strided = xc[::3]
        assert torch.equal(torch_dsmhist.histogram(strided, 256).cpu(), reference_histogram(x[::3], 256)), n
    # Batched: long rows tally, short rows count per bin; both against the reference, row by row.
    for rows, length in ((3, 4 * TALLY_MIN_ITEM + 5), (2000, 301)):
        x = make_index_values(rows * length, 256, dtype, distribution, gen).view(rows, length)
        expected = torch.stack([reference_histogram(row, 200, -20.0, 180.0, out_of_range="clamp") for row in x])
        got = torch_dsmhist.batched_histogram(x.cuda(), 200, -20.0, 180.0, out_of_range="clamp")
        assert torch.equal(got.cpu(), expected), (rows, length)
    short = torch_dsmhist.plan(256, dtype=dtype, rows=2000, row_length=301)
    assert short.shared_bytes_per_block == 256 * 4


def test_byte_tallies_one_hot_value_in_long_input(gen):
    """One hot byte value over 40M elements: every lane's copy of its tally grows, and the merge sums 32 copies."""
    x = torch.full((40_000_003,), 200, dtype=torch.uint8)
    x[torch.randint(0, x.numel(), (1000,), generator=gen)] = 7
    expected = reference_histogram(x, 256)
    assert torch.equal(torch_dsmhist.histogram(x.cuda(), 256).cpu(), expected)


PARTITION_TILE = 8192  # kPartitionThreads x kPartitionValuesPerThread (csrc/kernels/tuning.h)
PARTITION_CHUNK_BINS = 32768  # counts: kPartitionChunkBytes / 4


def test_partition_chunks_of_short_runs_and_uneven_runs(gen):
    """Tier partition's kernel 3 counts an item one run a thread with no barrier only when kernel 2 found no long run
    in its chunk; else batch by batch, end to end where a batch has a long run, searching each vector's run from a
    guessed place. At 4M bins the uniform values leave runs of ~40 entries in every tile (no barrier). Chunk 3 also
    gets 3000 values inside one tile: one long run, so all its batches go the other way. Chunks 5 and 6 get a share
    of the values that grows (chunk 5) or shrinks (chunk 6) along the input, runs of 0 to ~2000 entries: a vector's
    run lies far past (5) or before (6) the place guessed from an even spread. Forced partition, counts into int64
    and int32 and histogram_add_, exactly against the reference."""
    bins, n = (4 << 20) + 7, (1 << 23) + 5
    x = make_index_values(n, bins, torch.int32, "uniform", gen)

    def chunk_values(chunk: int, count: int) -> torch.Tensor:
        return chunk * PARTITION_CHUNK_BINS + torch.randint(
            0, PARTITION_CHUNK_BINS, (count,), generator=gen, dtype=torch.int32
        )

    start = 37 * PARTITION_TILE + 1000
    x[start : start + 3000] = chunk_values(3, 3000)
    share = torch.linspace(0.0, 0.25, n)
    x = torch.where(torch.rand(n, generator=gen) < share, chunk_values(5, n), x)
    x = torch.where(torch.rand(n, generator=gen) < share.flip(0), chunk_values(6, n), x)
    expected = reference_histogram(x, bins)
    xc = x.cuda()
    with torch_dsmhist.force_tier("partition"):
        assert torch.equal(torch_dsmhist.histogram(xc, bins).cpu(), expected)
        assert torch.equal(torch_dsmhist.histogram(xc, bins, dtype=torch.int32).cpu(), expected.int())
        start_counts = torch.randint(0, 1000, (bins,), generator=gen)
        accumulated = start_counts.cuda()
        torch_dsmhist.histogram_add_(accumulated, xc)
    assert torch.equal(accumulated.cpu(), start_counts + expected)
