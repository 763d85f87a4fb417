"""The CPU path: it runs on torch's intra-op pool, its results do not depend on the thread count (weighted sums
bitwise, counts exactly), every internal path (private copies, split bins, raw 8/16-bit patterns, slots of weighted
sums, short and long batched rows) agrees with the reference, and it honours torch.set_num_threads. The memory bound
and the allocation error are in test_limits.py."""

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_edges import reference_nd, values_on_and_beside_edges

import torch_dsmhist

from helpers import make_index_values, make_range_values, reference_histogram, sprinkle_specials, torch_setting

ROOT = Path(__file__).resolve().parent.parent
THREAD_COUNTS = sorted({1, 2, 3, max(4, os.cpu_count() or 1)})


def threads(count: int) -> contextlib.AbstractContextManager:
    """torch.set_num_threads(count) for the block, the previous count restored after it."""
    return torch_setting(torch.get_num_threads, torch.set_num_threads, count)


def with_each_thread_count(call):
    results = []
    for count in THREAD_COUNTS:
        with threads(count):
            results.append(call())
    return results


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor (so NaN equals NaN and -0.0 differs from 0.0); integers as they are."""
    return {torch.float32: lambda: t.view(torch.int32), torch.float64: lambda: t.view(torch.int64)}.get(
        t.dtype, lambda: t
    )()


def assert_bitwise_equal(results, what):
    for count, result in zip(THREAD_COUNTS[1:], results[1:]):
        assert torch.equal(bits(results[0]), bits(result)), f"{what}: {count} threads differ from 1 thread"


def mixed_weights(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Weights of mixed signs and magnitudes: any change in the order of additions changes the rounding."""
    w = torch.randn(n, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(-4, 5, (n,), generator=gen)
    return w.to(dtype)


# Bins and sizes that reach each path of the weighted sums: slots added in order (few bins), bins split among the
# threads and summed in element order (more than 2^18 bins, or fewer elements than 4 per bin).
WEIGHTED_CASES = [
    pytest.param(2**20 + 3, 1000, id="slots"),
    pytest.param(2**20 + 3, 2**18 + 5, id="split-bins"),
    pytest.param(30011, 70001, id="few-elements"),
]


@pytest.mark.parametrize("n,bins", WEIGHTED_CASES)
@pytest.mark.parametrize("weight_dtype", [torch.float64, torch.float32, torch.float16])
def test_weighted_sums_are_bitwise_equal_for_any_thread_count(n, bins, weight_dtype, gen):
    x = make_range_values(2 * n, -1.0, 1.0, torch.float32, "uniform", gen)[::2]  # non-contiguous
    w = mixed_weights(2 * n, weight_dtype, gen)[1::2]
    results = with_each_thread_count(lambda: torch_dsmhist.histogram(x, bins, -1.0, 1.0, weight=w))
    assert_bitwise_equal(results, f"histogram n={n} bins={bins} {weight_dtype}")
    expected = reference_histogram(x, bins, -1.0, 1.0, weight=w.double()).double()
    scale = reference_histogram(x, bins, -1.0, 1.0, weight=w.double().abs()).double()
    rel = 1e-12 if weight_dtype == torch.float64 else 1e-6
    err = (results[0].double() - expected).abs()
    assert bool((err <= rel * scale + 1e-300).all()), f"largest error {(err - rel * scale).max().item()}"
    # Added into a float32 hist: the sums are rounded once onto what the hist held, for every thread count.
    start = torch.randn(bins, generator=gen, dtype=torch.float32)
    added = with_each_thread_count(
        lambda: torch_dsmhist.histogram_add_(start.clone(), x, -1.0, 1.0, weight=w.to(torch.float32))
    )
    assert_bitwise_equal(added, "histogram_add_ float32")


@pytest.mark.parametrize("row_length", [1001, 2**18 + 7], ids=["short-rows", "long-rows"])
def test_batched_weighted_sums_are_bitwise_equal_for_any_thread_count(row_length, gen):
    rows = 5 if row_length > 2**18 else 301
    x = make_range_values(rows * row_length, 0.0, 1.0, torch.float64, "uniform", gen).view(rows, row_length)
    w = mixed_weights(rows * row_length, torch.float64, gen).view(rows, row_length)
    x, w = x.t().contiguous().t(), w[:, :]  # column-major input, row-major weights
    for bins in (37, 5000):
        results = with_each_thread_count(lambda: torch_dsmhist.batched_histogram(x, bins, 0.0, 1.0, weight=w))
        assert_bitwise_equal(results, f"batched rows={rows} bins={bins}")
        for r in (0, rows - 1):
            expected = reference_histogram(x[r], bins, 0.0, 1.0, weight=w[r])
            torch.testing.assert_close(results[0][r], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("bins", [1, 251, 70001, 2**20 - 3, 2**21 + 1])  # 2^20 - 3: int64 counts in 32-bit windows
def test_counts_are_exact_for_any_thread_count(dtype, bins, gen):
    n = 2**20 + 7 if dtype in (torch.int16, torch.int32) else 300007  # 16-bit: the raw-pattern path from 2^20
    x = make_index_values(2 * n, bins, dtype, "uniform", gen)[1::2]
    expected = reference_histogram(x, bins)
    for out_of_range in ("ignore", "clamp"):
        results = with_each_thread_count(lambda: torch_dsmhist.histogram(x, bins, out_of_range=out_of_range))
        ref = reference_histogram(x, bins, out_of_range=out_of_range)
        for count, result in zip(THREAD_COUNTS, results):
            assert torch.equal(result, ref), f"{count} threads, {out_of_range}"
    hist = torch.arange(bins, dtype=torch.int32)
    for count in THREAD_COUNTS:
        with threads(count):
            torch_dsmhist.histogram_add_(hist, x)
    assert torch.equal(hist, torch.arange(bins, dtype=torch.int32) + len(THREAD_COUNTS) * expected.int())
    wide = torch.arange(bins, dtype=torch.int64) + (1 << 40)  # int64 counts added past 32 bits
    for count in THREAD_COUNTS:
        with threads(count):
            torch_dsmhist.histogram_add_(wide, x)
    assert torch.equal(wide, torch.arange(bins, dtype=torch.int64) + (1 << 40) + len(THREAD_COUNTS) * expected)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.float16, torch.bfloat16])
def test_raw_pattern_path_range_binning(dtype, gen):
    """8/16-bit input counted per bit pattern, then mapped through the Binner's table: range mode, NaN, +-inf and
    clamping give the reference's bins."""
    n = 2**20 + 13
    lo, hi = {torch.uint8: (10.0, 200.0), torch.int8: (-30.0, 100.0), torch.int16: (-300.0, 1000.0)}.get(
        dtype, (-2.5, 3.0)
    )
    x = make_range_values(n, lo, hi, dtype, "uniform", gen)
    if dtype.is_floating_point:
        x = sprinkle_specials(x, gen)
    for bins in (7, 300):
        for out_of_range in ("ignore", "clamp"):
            for count in (1, 3):
                with threads(count):
                    got = torch_dsmhist.histogram(x, bins, lo, hi, out_of_range=out_of_range)
                assert torch.equal(got, reference_histogram(x, bins, lo, hi, out_of_range=out_of_range)), (
                    bins,
                    out_of_range,
                    count,
                )


def test_long_rows_of_a_strided_batch(gen):
    """Rows of at least 2^18 elements are each counted by every thread: row offsets of a permuted view."""
    x = make_index_values(3 * 2 * (2**18 + 3), 1000, torch.int32, "uniform", gen).view(2, 3, -1).permute(1, 0, 2)
    for count in (1, 2, 3):
        with threads(count):
            got = torch_dsmhist.batched_histogram(x, 1000)
        for i in range(3):
            for j in range(2):
                assert torch.equal(got[i, j], reference_histogram(x[i, j], 1000)), (count, i, j)


def test_set_num_threads_is_respected_and_the_pool_is_used():
    """The extension forks torch's OpenMP pool (it is compiled with OpenMP) and only as wide as
    torch.set_num_threads: a fresh process gains worker threads on its first wide call, none with 1 thread."""
    script = textwrap.dedent(
        """
        import os, torch, torch_dsmhist
        def live_threads():
            return len(os.listdir("/proc/self/task"))
        x = torch.from_numpy(__import__("numpy").random.default_rng(1).integers(0, 1000, 2**22))
        torch.set_num_threads(1)
        base = live_threads()
        torch_dsmhist.histogram(x, 1000)
        one = live_threads()
        torch.set_num_threads(3)
        torch_dsmhist.histogram(x, 1000)
        print(base, one, live_threads())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    base, one, three = map(int, out.stdout.split())
    assert one == base, "a 1-thread call started threads"
    assert three >= base + 2, f"3 threads asked, the pool grew from {base} to {three} threads"


def test_readme_quick_start_installs_what_ci_installs():
    """The README's first line and .ci/run install the same packages (torch pinned alike) and build the same way."""
    readme = (ROOT / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start") : readme.index("## API")]
    first_line = next(line for line in quick_start.splitlines() if line.startswith("pip install"))
    install, build, demo = [part.strip() for part in first_line.split("&&")]
    ci = (ROOT / ".ci" / "run").read_text()
    ci_install = next(line for line in ci.splitlines() if line.startswith("python -m pip install") and "-e" not in line)
    ci_build = next(line for line in ci.splitlines() if line.startswith("python -m pip install") and " -e " in line)
    assert set(install.split()[2:]) == {w for w in ci_install.split()[4:] if not w.startswith("-")}
    assert "torch==2.13.0" in install.split()
    assert build.split()[2:] == [w for w in ci_build.split()[4:] if w not in ("-q", "--disable-pip-version-check")]
    assert demo == "python -m torch_dsmhist"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a visible GPU makes auto mode build CUDA")
def test_auto_mode_without_a_gpu_builds_cpu_only_and_says_so():
    env = {k: v for k, v in os.environ.items() if k not in ("DSMHIST_CUDA", "TORCH_CUDA_ARCH_LIST")}
    out = subprocess.run(
        [sys.executable, "setup.py", "--version"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("torch_dsmhist:")]
    assert lines == [
        "torch_dsmhist: no CUDA GPU visible, building the CPU-only extension "
        "(DSMHIST_CUDA=1 or TORCH_CUDA_ARCH_LIST builds the CUDA kernels anyway)"
    ]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("distribution", ["uniform", "one_hot", "sorted", "two_edges"])
def test_one_histogram_of_raw_patterns_in_every_layout(dtype, distribution, gen):
    """One histogram of an 8/16-bit input tallies raw bit patterns run by run (4 interleaved tables for bytes, a tail
    of 1-3 elements after the groups of 4): contiguous, misaligned, strided and transposed 2-D views of odd sizes,
    int32 and int64 counts, at every thread count, each equal to the reference."""
    n = 2**20 + 13  # 16-bit inputs take the raw-pattern path from 2^20 elements
    base = make_index_values(2 * n + 3, 1000, dtype, distribution, gen)
    layouts = {
        "contiguous": base[:n],
        "misaligned": base[1 : n + 1],
        "strided": base[::2],
        "transposed": base[: 1031 * 1033].view(1031, 1033).t(),
    }
    for name, x in layouts.items():
        for out_dtype in (torch.int64, torch.int32):
            expected = reference_histogram(x, 1000, dtype=out_dtype)
            got = with_each_thread_count(lambda: torch_dsmhist.histogram(x, 1000, dtype=out_dtype))
            assert all(torch.equal(g, expected) for g in got), (name, out_dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize("distribution", ["uniform", "one_hot", "sorted", "two_edges"])
def test_short_byte_rows_count_raw_patterns(dtype, distribution, gen):
    """Batched 1-byte rows shorter than kLongRow count raw byte patterns per row (4 tables, 4 bytes at a time): every
    binning rule, odd row lengths (a tail of 1-3 bytes), strided and misaligned rows, int32 and int64 counts, any
    thread count; against the reference, row by row."""
    for rows, length in ((192, 50_177), (7, 3), (33, 1_001)):
        x = make_index_values(rows * length + 1, 256, dtype, distribution, gen)[1:].view(rows, length)  # misaligned
        for bins, lo, hi, rule in ((256, None, None, "ignore"), (100, None, None, "clamp"), (7, -5.0, 90.5, "ignore")):
            expected = torch.stack([reference_histogram(row, bins, lo, hi, out_of_range=rule) for row in x])
            for out_dtype in (torch.int64, torch.int32):
                got = with_each_thread_count(
                    lambda: torch_dsmhist.batched_histogram(x, bins, lo, hi, out_of_range=rule, dtype=out_dtype)
                )
                assert all(torch.equal(g, expected.to(out_dtype)) for g in got), (rows, length, bins, rule, out_dtype)
        strided = x[:, ::3]
        expected = torch.stack([reference_histogram(row, 256) for row in strided])
        assert torch.equal(torch_dsmhist.batched_histogram(strided, 256), expected), (rows, length)


@pytest.mark.parametrize("specials", ["nan and infinities", "nan only"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_data_range_found_in_every_lane_and_layout(dtype, specials, gen):
    """The data-range pass keeps 16 minima and maxima side by side: the smallest and the largest value placed in each
    of the 16 lanes and in the tail, with NaN (and +-inf) around them, in contiguous, strided and batched (one range
    for all rows) floating inputs, at 1, 2 and 3 threads, each equal to the reference. A unit-stride float32 / float64
    run without infinities keeps its plain min and max (NaN must not enter them); a run with one is folded again with
    non-finite values as +-inf (cpu_range.cpp)."""
    n = 3 * 4096 + 13
    base = sprinkle_specials(torch.rand(n, generator=gen, dtype=torch.float64) * 50 - 20, gen, fraction=0.05)
    if specials == "nan only":
        base[torch.isinf(base)] = float("nan")
    for position in [*range(16), 16 * 100 + 5, n - 1]:
        x = base.clone()
        x[position] = -70.0
        x[(position * 7 + 3) % n] = 90.0
        x = x.to(dtype)
        layouts = {"contiguous": x, "strided": torch.stack([x, x]).t().reshape(-1)[1::2], "offset": x[1:]}
        for name, view in layouts.items():
            expected = reference_histogram(view, 37)
            for count in (1, 2, 3):
                with threads(count):
                    assert torch.equal(torch_dsmhist.histogram(view, 37), expected), (dtype, position, name, count)
        rows = x[: 3 * 4096].view(3, 4096)
        with threads(2):
            got = torch_dsmhist.batched_histogram(rows, 37)
        lo, hi = reference_range(rows)
        expected = torch.stack([reference_histogram(r, 37, lo, hi) for r in rows])
        assert torch.equal(got, expected), (dtype, position, "batched")


def reference_range(x: torch.Tensor):
    """The finite min and max of x, as floats (the data range of a call without min / max)."""
    finite = x.double()[torch.isfinite(x.double())]
    return float(finite.min()), float(finite.max())


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_float32_range_binning_in_vector_blocks_is_the_rule(layout, gen):
    """Float32 range binning on the CPU computes each block's bins with selects instead of branches (cpu_scan.h,
    BlockRangeBinner) up to 2^24 bins, and with the Binner past that: both give the rule's bins (helpers'
    reference, torch.histc's arithmetic) for values on and beside every bin boundary, NaN, +-inf and past either end,
    a range whose span overflows (scaled by 2^-64), one that collapses to a point in float32, dropped and clamped,
    counts and float32 weights, odd lengths (partial blocks), at every thread count."""
    cases = ((65536, 0.0, 1.0), (1000, -3.0, 3.0), (77, -1e38, 3e38), (5, 2.0**25, 2.0**25 + 1.0), (2**24, 0.0, 1.0))
    cases += ((2**24 + 1, 0.0, 1.0),)  # past the block binner: the Binner's path, same bins
    for bins, lo, hi in cases:
        edges = torch.linspace(lo, hi, min(bins, 4096) + 1, dtype=torch.float64).float()
        x = values_on_and_beside_edges(edges, 50_001, gen)
        x[:8] = torch.tensor([lo, hi, 2.0**25, float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
        if layout == "strided":
            x = torch.stack([x, -x], 1).reshape(-1)[::2]
        w = torch.randint(-3, 4, x.shape, generator=gen).float()  # integers: the sums are exact in any order
        for oor in ("ignore", "clamp"):
            expected = reference_histogram(x, bins, lo, hi, out_of_range=oor)
            expected_sums = reference_histogram(x, bins, lo, hi, weight=w, out_of_range=oor, dtype=torch.float32)
            for got in with_each_thread_count(lambda: torch_dsmhist.histogram(x, bins, lo, hi, out_of_range=oor)):
                assert torch.equal(got, expected), (layout, bins, lo, hi, oor)
            got = torch_dsmhist.histogram(x, bins, lo, hi, weight=w, out_of_range=oor)
            assert torch.equal(got, expected_sums), (layout, bins, lo, hi, oor, "weighted")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_equal_width_edges_on_and_beside_every_edge(dtype, layout, gen):
    """histogram_edges over equal-width edges (torch.linspace's, as the drop-ins' int bins make them): a run,
    contiguous or strided, takes each value's equal-width position where its fraction clears the edges' slack
    (edges_cpu.cpp, equal_width_bins, equal_width_guess), the search elsewhere. Values on every edge and one step to
    each side, NaN, +-inf and past either end, dropped and clamped, at every thread count: numpy's searchsorted bins.
    float16 edges stray up to a quarter bin from equal width (a wide slack, many values searched)."""
    for bins, lo, hi in ((1000, -4.0, 4.0), (37, 0.1, 7.3), (1, -1.0, 1.0)):
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).to(dtype)
        x = values_on_and_beside_edges(edges, 70_001, gen)
        if layout == "strided":
            x = torch.stack([x, x], 1).reshape(-1)[::2]
        for clamp in (False, True):
            expected = torch.from_numpy(reference_nd(x.reshape(-1, 1), [edges], clamp=clamp)).long()
            oor = "clamp" if clamp else "ignore"
            for got in with_each_thread_count(lambda: torch_dsmhist.histogram_edges(x, edges, out_of_range=oor)):
                assert torch.equal(got, expected), (dtype, layout, bins, oor)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
@pytest.mark.parametrize("dims", [2, 3])
def test_equal_width_nd_edges_on_and_beside_every_edge(dtype, layout, dims, gen):
    """histogramdd whose every dim has equal-width edges (the drop-ins' int bins): a point's flat bin by arithmetic
    where every coordinate's fraction clears its dim's slack (edges_cpu.cpp, guess_point), the search for the others.
    Coordinates on every edge and one step to each side, NaN, +-inf and past either end, dropped and clamped, at every
    thread count, in [N, D] rows, an offset view and a transposed one; and the same points with one dim's edges
    uneven (every point searched): numpy's searchsorted bins."""
    n_bins = [100, 37, 16][:dims]
    spans = [(-4.0, 4.0), (0.1, 7.3), (-1.0, 2.5)]
    edges = [torch.linspace(*spans[d], b + 1, dtype=torch.float64).to(dtype) for d, b in enumerate(n_bins)]
    uneven = list(edges)
    uneven[-1] = torch.sort(torch.rand(n_bins[-1] + 1, generator=gen, dtype=torch.float64) * 3.5 - 1.0).values
    uneven[-1] = uneven[-1].to(dtype)
    points = torch.stack([values_on_and_beside_edges(e, 60_001, gen) for e in edges], 1)
    if layout == "offset":
        points = torch.cat([points[:1], points], 0)[1:]
    elif layout == "transposed":
        points = points.t().contiguous().t()
    for each in (edges, uneven):
        for clamp in (False, True):
            expected = torch.from_numpy(reference_nd(points, each, clamp=clamp)).long()
            oor = "clamp" if clamp else "ignore"
            for got in with_each_thread_count(lambda: torch_dsmhist.histogramdd(points, each, out_of_range=oor)):
                assert torch.equal(got, expected), (dtype, layout, dims, oor, each is edges)
