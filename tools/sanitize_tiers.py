"""Small runs of every tier and op, forced, for compute-sanitizer. run_sanitizers.py runs it under every tool; by hand:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python tools/sanitize_tiers.py

Each case is checked against the reference too; the exit status is non-zero if any case is wrong.
"""

import functools
import itertools
import os
import re
import sys
import time
from pathlib import Path

import torch

# The cases are built from the test suite's helpers (tier lists, value makers, the reference); an in-place build of
# the extension sits in the repository root.
REPOSITORY = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPOSITORY / "tests"), str(REPOSITORY)]
import torch_dsmhist  # noqa: E402

import helpers  # noqa: E402


def cases(gen: torch.Generator):
    """(name, tier, cluster size, call, expected) for every tier and op, made (as every generator's here) by the
    case makers further down, histogram_case and the others. `expected` is a callable: main() runs it only for the
    cases it keeps, so a run of a few cases never computes the references of the others (each a device-to-host copy,
    slow beside other sanitized processes on the GPU)."""
    capacity = helpers.shared_capacity()
    # Every tier of the extension's table, at the (cluster size, bins) it can run of these.
    # (Tier exchange's own sizes, 8 blocks at 100003 bins and 16 at 262144, have dense by-value kernels of their own.)
    runs = {False: [(None, 1000), (None, 100003)], True: [(2, 1000), (3, 100003), (None, 100003), (None, 262144)]}
    tiers = [
        (t.name, size, bins)
        for t in helpers.TIERS
        for size, bins in runs[t.cluster]
        if helpers.plannable(t.name, size, bins)
    ]
    for tier, size, bins in tiers:
        label = f"{tier}{size or ''} bins={bins}"
        x = helpers.make_index_values(10007, bins, torch.int32, "uniform", gen).cuda()
        f = helpers.make_range_values(4099, -1.0, 1.0, torch.float16, "uniform", gen).cuda()
        w = torch.rand(4099, generator=gen, dtype=torch.float64).cuda()
        sums = helpers.adds_sums(tier, size, bins)  # false for a counts-only tier
        one = [
            ("int32 contiguous+offset", x[3:], {}),
            ("int32 strided", x[:10000].reshape(100, 100)[:, 1::3], {}),
            ("int32 clamp", x[1:], dict(out_of_range="clamp")),
            ("fp16 data range", f, {}),
        ]
        if tier in ("cluster", "partition"):  # keys over a range given on the host: branch-free (narrow_range_bin)
            one.append(("fp16 range", f, dict(min=-0.5, max=0.5)))
            one.append(("fp16 range clamp", f, dict(min=-0.5, max=0.5, out_of_range="clamp")))
        if sums:
            one.append(("fp16 fp32-weighted clamp", f, dict(min=-0.5, max=0.5, weight=w.float(), out_of_range="clamp")))
        if sums and bins <= capacity // 2:  # float64 sums take 8 bytes a bin
            one.append(("fp16 fp64-weighted", f, dict(min=-0.5, max=0.5, weight=w)))
        for what, data, kwargs in one:
            yield histogram_case(f"{label} histogram {what}", tier, size, data, bins, **kwargs)
        yield histogram_add_case(f"{label} histogram_add_ strided", tier, size, x[1::2], bins, torch.int64)
        for rows, what in (
            (x[:10000].reshape(500, 20), "500 short rows"),
            (x[1:].reshape(2, 5003), "2 long rows"),
            (x[:9999].reshape(99, 101)[:, 1::2], "99 strided rows"),
        ):
            yield batched_case(f"{label} batched {what}", tier, size, rows, bins)
        # Each worker (block, or cluster) takes two rows or more, so a worker's flush between rows runs. This is
        # the 500 and 99 rows' path at a few rows a worker: racecheck could not finish those at 100003 bins and up
        # in a 600 s call on the H100 (at 1000 bins, 500 rows took 94-370 s).
        count = 2 * rows_workers(tier, size, bins) + 1
        rows = helpers.make_index_values(count * 18, bins, torch.int32, "uniform", gen).cuda().view(count, 18)[:, 1::2]
        yield batched_case(
            f"{label} batched {rows.shape[0]} strided rows, two or more a worker", tier, size, rows, bins
        )
        if sums and bins <= capacity // 2:  # the fixed-point sums take 8 bytes a bin
            weighted = histogram_case(
                f"{label} deterministic weighted", tier, size, f, bins, min=-0.5, max=0.5, weight=w.float()
            )
            yield deterministic(weighted)


def rows_workers(tier: str, size, bins: int) -> int:
    """Workers (blocks, or clusters) of the grid that a batched call of many short rows gets in `tier`: a call of
    fewer rows gets no more (so 2 x this + 1 rows give every worker two rows or more)."""
    with torch_dsmhist.force_tier(tier, size):
        shape = torch_dsmhist.plan(bins, "cuda", rows=100_000, row_length=9)
    return shape.grid_blocks // shape.cluster_size


def byte_tally_cases(gen: torch.Generator):
    """Tier shared's byte tallies (counts of uint8 / int8 in work items of 16384 elements or more): 1-D misaligned,
    a range with clamp, histogram_add_, long batched rows, a hot value."""
    for dtype in (torch.uint8, torch.int8):
        x = helpers.make_index_values(70001, 256, dtype, "uniform", gen).cuda()
        label = f"shared byte tallies {str(dtype)[6:]}"
        yield histogram_case(f"{label} histogram misaligned", "shared", None, x[1:], 256)
        clamped_range = dict(min=-20.0, max=99.5, out_of_range="clamp")
        yield histogram_case(f"{label} histogram range clamp", "shared", None, x, 37, **clamped_range)
        yield histogram_add_case(f"{label} histogram_add_", "shared", None, x, 300, torch.int32)
        yield batched_case(f"{label} batched 2 long rows", "shared", None, x[:70000].reshape(2, 35000), 256)
        hot = torch.full((65537,), 9, dtype=dtype, device="cuda")
        yield histogram_case(f"{label} one hot value", "shared", None, hot, 256)


def boundary_cases(gen: torch.Generator):
    """Tails and boundaries: lengths around the 16-byte vector width at misaligned starts, in every tier; bin counts
    at the edge of one block's shared memory; clusters whose every block is (nearly) full."""
    capacity = helpers.shared_capacity()
    sizes = {False: (None,), True: (2, 5)}
    tiers = [(t.name, size) for t in helpers.TIERS for size in sizes[t.cluster] if helpers.plannable(t.name, size, 256)]
    base = helpers.make_index_values(4096, 256, torch.uint8, "uniform", gen).cuda()
    w = torch.rand(4096, generator=gen).cuda()
    for tier, size in tiers:
        label = f"{tier}{size or ''} bins=256"
        sums = helpers.adds_sums(tier, size, 256)  # false for a counts-only tier
        for n in (1, 15, 16, 17, 47):
            for offset in (0, 1, 7):
                x = base[offset : offset + n]
                yield histogram_case(f"{label} uint8 n={n} offset={offset}", tier, size, x, 256)
                if sums:
                    weighted = f"{label} uint8 weighted n={n} offset={offset}"
                    yield histogram_case(weighted, tier, size, x, 256, weight=w[offset : offset + n])
        rows = base[3 : 3 + 33 * 17].view(33, 17)
        yield batched_case(f"{label} batched 33 rows of 17 at offset 3", tier, size, rows, 256, dtype=torch.int32)
    x = helpers.make_index_values(50021, capacity + 2, torch.int64, "uniform", gen).cuda()
    for bins in (capacity, capacity + 1):
        name = f"auto bins={bins} (one block's capacity{' + 1' if bins > capacity else ''})"
        yield histogram_case(name, "auto", None, x, bins)
    if helpers.cluster_available():
        largest = helpers.max_cluster_size()
        full = [(t.name, size) for t in helpers.TIERS if t.cluster for size in sorted({2, 7, largest})]
        for tier, size in full:
            bins = size * capacity - 1
            if not helpers.plannable(tier, size, bins):  # tier exchange: its staging shares the blocks' shared memory
                bins = size * (capacity // 2) - 1
            y = helpers.make_index_values(70001, bins, torch.int32, "uniform", gen).cuda()
            yield histogram_case(f"{tier}{size} bins={bins} (full blocks)", tier, size, y, bins)


def partition_item_cases(gen: torch.Generator):
    """Tier partition's work items when the chunks outnumber kernel 3's blocks (several rounds of items) and one
    chunk holds most of the values (it is cut into many items): 4M and 16M bins, a hot chunk beside uniform values."""
    for bins in ((4 << 20) + 7, (16 << 20) + 3):
        spread = helpers.make_index_values(1_500_007, bins, torch.int32, "uniform", gen)
        x = torch.where(torch.rand(spread.numel(), generator=gen) < 0.6, spread.remainder(30011), spread).cuda()
        yield histogram_case(f"partition bins={bins} hot chunk", "partition", None, x, bins)


def packed_sweep_cases(gen: torch.Generator):
    """Tier cluster's 16-bit counts swept into the output between rounds: clusters of one range (1, 2 and 4 blocks,
    each past the first a replica that keeps every bin, the copies summed through DSMEM at the flush) and of two
    ranges (2 blocks, and 4: two replicas each) whose work items are long enough for several sweeps (2 x the block's
    bins each), Zipf ranks with a hot bin in a high half (past 2^14 in a block between sweeps, so the sweeps move
    counts), dense, strided, and as 3 batched rows (a flush through the replicas per row). Integer input by value
    runs the by-value body (dropping); at 2 blocks also the clamping body, the general one (int32 over a range) and the
    range bodies (float32 over a range, dropped and clamped), on data with values outside the bins, and int64 input."""
    if not helpers.cluster_available():
        return
    for size, bins in ((1, 100003), (2, 100003), (4, 100003), (2, 200003), (4, 200003)):
        ranges = 1 if bins <= helpers.cluster_block_capacity() else 2
        zipf = helpers.make_index_values(1_000_002, bins, torch.int32, "zipf", gen)
        hot = torch.full((300_007,), -(-bins // ranges) - 3, dtype=torch.int32)  # range 0's last bins: a high half
        values = torch.cat([zipf, hot])
        x = values[torch.randperm(values.numel(), generator=gen)].cuda()
        label = f"cluster{size} bins={bins} packed sweeps"
        for what, data in (("dense", x), ("strided", x[::2])):
            yield histogram_case(f"{label} {what}", "cluster", size, data, bins)
        yield batched_case(f"{label} batched", "cluster", size, x[: 3 * 433_336].view(3, -1), bins)
        if size == 2:
            edgy = x.clone()
            edgy[::101] = -5
            edgy[1::101] = bins + 5
            bodies = (("clamped", {"out_of_range": "clamp"}), ("by range", {"min": 0.0, "max": float(bins)}))
            for what, kwargs in bodies:
                yield histogram_case(f"{label} {what}", "cluster", size, edgy, bins, **kwargs)
            for what, rule in (("float32 by range", "ignore"), ("float32 by range clamped", "clamp")):
                yield histogram_case(
                    f"{label} {what}", "cluster", size, edgy.float(), bins, min=0.0, max=float(bins), out_of_range=rule
                )
            yield histogram_case(f"{label} int64 strided", "cluster", size, edgy.long()[1::3], bins)


def long_weighted_sum_cases(gen: torch.Generator):
    """Tier global's body for long weighted float sums (a cache that claims a slot on a bin's second add, read one
    vector at a time): 33 elements a thread on this GPU's full grid, Zipf ranks over 65539 bins, float32 and float64
    weights."""
    n = helpers.global_tier_elements(33)
    x = helpers.make_index_values(n, 65539, torch.int32, "zipf", gen).cuda()
    w = torch.randint(-1, 2, (n,), generator=gen).double().cuda()
    for weight in (w.float(), w):
        yield histogram_case(f"global long {str(weight.dtype)[6:]}-weighted", "global", None, x, 65539, weight=weight)


def bin_index_cases(gen: torch.Generator):
    """The backward's bin-index kernel (dsmhist._bin_indices): misaligned starts and tails, strided and 2-D views, a
    data-derived range and given range keys; checked against the CPU implementation."""
    base = helpers.make_range_values(9001, -1.0, 1.0, torch.float16, "uniform", gen).cuda()
    ids = helpers.make_index_values(9001, 300, torch.int32, "uniform", gen).cuda()
    views = [
        ("fp16 offset 1", base[1:4000], {}),
        ("fp16 n=17 offset 7", base[7:24], dict(min=-0.5, max=0.5)),
        ("fp16 strided 2-D", base[:9000].view(90, 100)[:, 3::7], dict(out_of_range="clamp")),
        ("int32 index strided", ids[::3], {}),
        ("int32 range transposed", ids[:9000].view(30, 300).t(), dict(min=0.0, max=300.0, out_of_range="clamp")),
    ]
    for what, data, kwargs in views:
        yield cpu_checked_case(f"auto bin indices {what}", torch.ops.dsmhist._bin_indices, data, 300, **kwargs)
    keys = torch.ops.dsmhist._finite_range_keys(base)
    yield cpu_checked_case(
        "auto bin indices with range keys", torch.ops.dsmhist._bin_indices, base[5:], 300, range_keys=keys
    )


def edges_cases(gen: torch.Generator):
    """The edges ops (histogram_edges, histogramdd), the one pass in each of its modes and the two stages where it
    declines: misaligned, strided, NaN, clamp and weighted calls, edges from a few bins up to more than shared memory
    holds; checked against the CPU implementation."""
    values = helpers.make_range_values(20011, -1.0, 1.0, torch.float32, "uniform", gen)
    values[::97] = float("nan")
    weights = torch.rand(20011, generator=gen, dtype=torch.float64)
    for bins in (3, 1000, 9000):
        edges = torch.sort(torch.rand(bins + 1, generator=gen) * 1.6 - 0.8).values
        calls = [
            ("offset 3", values[3:], {}),
            ("strided", values[::5], dict(out_of_range="clamp")),
            ("fp64-weighted", values[1:], dict(weight=weights[1:])),
        ]
        for what, data, kwargs in calls:
            name = f"auto histogram_edges bins={bins} {what}"
            yield cpu_checked_case(name, torch_dsmhist.histogram_edges, data, edges, **kwargs)
    points = helpers.make_range_values(3 * 7001, -1.0, 1.0, torch.float32, "uniform", gen).view(7001, 3)
    grid = [torch.sort(torch.rand(n + 1, generator=gen) * 2 - 1).values for n in (5, 64, 200)]
    yield cpu_checked_case("auto histogramdd 5x64x200 strided points", torch_dsmhist.histogramdd, points[1:, :], grid)
    # Dense, aligned 3-D points: the 3-dim kernel's vector loads, 7001 points (a tail past the last whole vector).
    cube = [torch.sort(torch.rand(17, generator=gen) * 2 - 1).values for _ in range(3)]
    yield cpu_checked_case("auto histogramdd 16x16x16 dense points", torch_dsmhist.histogramdd, points, cube)
    # Batched rows in the one pass: block shares that split rows, and blocks that flush many small rows.
    for rows, per_row in ((5, 1400), (350, 20)):
        batch = points[: rows * per_row].view(rows, per_row, 3)
        yield cpu_checked_case(f"auto histogramdd 16x16x16 batched {rows} rows", torch_dsmhist.histogramdd, batch, cube)
    # The one pass's modes (docs/tiers/edges.md): 5x64x200 bins above is "shared" with packed counts (two to a
    # word); 400x400 is "owned" by 2 blocks, packed; 1024x1024 is "global".
    square = [torch.sort(torch.rand(401, generator=gen) * 2 - 1).values for _ in range(2)]
    yield cpu_checked_case("auto histogramdd 400x400 (owned, packed)", torch_dsmhist.histogramdd, points[:, 1:], square)
    wide = [torch.sort(torch.rand(1025, generator=gen) * 2 - 1).values for _ in range(2)]
    yield cpu_checked_case(
        "auto histogramdd 1024x1024 (global atomics)", torch_dsmhist.histogramdd, points[1:, :2], wide
    )
    # Packed counts swept between rounds: 2^23 points, one block a SM (about 63500 points a block, a sweep every
    # 49152), in two bins of one word (bins 0 and 32768 of 256x256).
    grid256 = [torch.sort(torch.rand(257, generator=gen) * 2 - 1).values for _ in range(2)]
    centres = [(e[:-1] + e[1:]) / 2 for e in grid256]
    rows = torch.randint(0, 2, (1 << 23,), generator=gen) * 128
    swept = torch.stack([centres[0][rows], centres[1][torch.zeros_like(rows)]], 1)
    yield cpu_checked_case("auto histogramdd 256x256 packed, swept", torch_dsmhist.histogramdd, swept, grid256)
    # The two stages' first through the one pass's lookup (edge_keys_kernel) under a forced tier, in 1-4 dims: dense
    # (vector loads and stores, a tail past the last whole vector), misaligned by a coordinate, strided.
    flat = helpers.make_range_values(4 * 7001 + 1, -1.0, 1.0, torch.float32, "uniform", gen)
    for dims in (1, 2, 3, 4):
        dim_edges = [torch.sort(torch.rand(n + 1, generator=gen) * 2 - 1).values for n in (37, 300, 9, 5)[:dims]]
        layouts = {
            "dense": flat[: 7001 * dims].view(7001, dims),
            "misaligned": flat[1 : 1 + 7001 * dims].view(7001, dims),
            "strided": flat[: 8 * 3500].view(3500, 8)[:, : 2 * dims : 2],
        }
        for what, pts in layouts.items():
            name = f"global histogramdd lookup then tier, {dims}-D {what}"
            case = cpu_checked_case(name, torch_dsmhist.histogramdd, pts, dim_edges, out_of_range="clamp")
            yield (case[0], "global", *case[2:])
    # From 2^24 points, counts that no one block holds take the lookup and the planned tier (auto: partition).
    many = helpers.make_range_values(2 * (1 << 24) + 2, -1.0, 1.0, torch.float32, "uniform", gen)[2:].view(-1, 2)
    yield cpu_checked_case(
        "auto histogramdd 1024x1024 2^24 points (lookup, partition)", torch_dsmhist.histogramdd, many, wide
    )
    # Unsorted edges (CUDA does not check them: that would synchronise) give unspecified counts but must never write
    # outside the output, in any mode; counts are deterministic, so the reference is the same call.
    for shape in ((1000,), (400, 400), (1024, 1024)):
        shuffled = [torch.rand(b + 1, generator=gen) * 2 - 1 for b in shape]
        unsorted_points = points[:, : len(shape)].clone()
        unsorted_points[::13, 0] = shuffled[0][-1]  # the last edge, which is not the largest one
        for out_of_range in ("ignore", "clamp"):
            if len(shape) == 1:
                op, args = torch_dsmhist.histogram_edges, (unsorted_points[:, 0], shuffled[0])
            else:
                op, args = torch_dsmhist.histogramdd, (unsorted_points, shuffled)
            call = functools.partial(op, *on_device(args, "cuda"), out_of_range=out_of_range)
            label = "x".join(map(str, shape))
            reference = functools.partial(lambda c: c().cpu(), call)
            yield f"auto {op.__name__} unsorted edges {label} {out_of_range}", "auto", None, call, reference


def moe_cases(gen: torch.Generator):
    """The MoE routing kernel at its launch shapes: one block, a cluster for the ids, a cluster for the padding (few
    ids, many slots), an expert map, ids out of range; outputs flattened into one tensor to compare."""

    def flattened(op):
        """op with its outputs flattened into one tensor, to compare."""
        return lambda *args, **kwargs: torch.cat([t.reshape(-1).long().cpu() for t in op(*args, **kwargs)])

    shapes = [(8, 256, 256, False), (600, 64, 16, False), (20000, 128, 64, True), (5003, 8, 1, False)]
    for n, experts, block, mapped in shapes:
        ids = torch.randint(-1, experts + 1, (n,), generator=gen, dtype=torch.int32)
        expert_map = torch.randint(-1, experts, (experts,), generator=gen, dtype=torch.int32) if mapped else None
        label = f"moe_align_block_size {n} ids, {experts} experts, block {block}{', expert_map' if mapped else ''}"
        yield cpu_checked_case(
            label, flattened(torch_dsmhist.moe_align_block_size), ids, block, experts, expert_map=expert_map
        )
    ids = torch.randint(0, 64, (4096, 8), generator=gen)
    yield cpu_checked_case("moe_routing 32768 ids, 64 experts", flattened(torch_dsmhist.moe_routing), ids, 64)


def histogram_case(name: str, tier: str, size, data: torch.Tensor, bins: int, **kwargs):
    """A case of torch_dsmhist.histogram(data, bins, **kwargs), expected to equal the reference of the same call."""
    call = functools.partial(torch_dsmhist.histogram, data, bins, **kwargs)
    expected = functools.partial(helpers.reference_histogram, data, bins, **kwargs)
    return name, tier, size, call, expected


def histogram_add_case(name: str, tier: str, size, data: torch.Tensor, bins: int, dtype: torch.dtype):
    """A case of torch_dsmhist.histogram_add_ of `data` into `bins` ones of `dtype` (so a bin the kernel overwrites,
    rather than adds to, is caught), expected to equal 1 + the reference."""
    call = functools.partial(torch_dsmhist.histogram_add_, torch.ones(bins, dtype=dtype, device="cuda"), data)
    return name, tier, size, call, lambda: 1 + helpers.reference_histogram(data, bins, dtype=dtype)


def batched_case(name: str, tier: str, size, rows: torch.Tensor, bins: int, **kwargs):
    """A case of torch_dsmhist.batched_histogram(rows, bins, **kwargs), expected to equal the reference of each row."""
    call = functools.partial(torch_dsmhist.batched_histogram, rows, bins, **kwargs)
    return (
        name,
        tier,
        size,
        call,
        lambda: torch.stack([helpers.reference_histogram(row, bins, **kwargs) for row in rows.cpu()]),
    )


def on_device(value, device: str):
    """`value` with the tensors in it (itself, or the items of a list, tuple or dict) moved to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(on_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: on_device(item, device) for key, item in value.items()}
    return value


def cpu_checked_case(name: str, op, *args, **kwargs):
    """A case of op(*args, **kwargs) on CUDA copies of its tensors, tier auto, expected to equal the op on CPU copies
    (the CPU implementation is the reference of ops that the reference histogram does not cover)."""
    call = functools.partial(op, *on_device(args, "cuda"), **on_device(kwargs, "cuda"))
    # The CPU copies are made only for a case that runs: each is a device-to-host copy.
    return name, "auto", None, call, lambda: op(*on_device(args, "cpu"), **on_device(kwargs, "cpu"))


def deterministic(case):
    """`case` with its call run under torch.use_deterministic_algorithms(True): weighted sums take the fixed-point
    path."""
    name, tier, size, call, expected = case

    def deterministic_call():
        with helpers.deterministic_algorithms():
            return call()

    return name, tier, size, deterministic_call, expected


def main() -> int:
    gen = torch.Generator().manual_seed(1234)
    failures = 0
    count = 0
    for name, tier, size, call, reference in itertools.chain(
        cases(gen),
        byte_tally_cases(gen),
        boundary_cases(gen),
        partition_item_cases(gen),
        packed_sweep_cases(gen),
        long_weighted_sum_cases(gen),
        bin_index_cases(gen),
        edges_cases(gen),
        moe_cases(gen),
    ):
        if not re.search(os.environ.get("DSMHIST_SANITIZE_CASES", ""), name):
            continue
        started = time.time()
        expected = reference()
        with torch_dsmhist.force_tier(tier, size):
            out = call().cpu()
        tolerance = 1e-5 if out.dtype == torch.float32 else 1e-9
        ok = out.dtype == expected.dtype and torch.allclose(
            out.double(), expected.double(), rtol=tolerance, atol=tolerance
        )
        failures += not ok
        count += 1
        print(f"{'ok  ' if ok else 'FAIL'} {name} ({time.time() - started:.1f} s)")
    print(f"sanitize_tiers: {count - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
