"""Limits: inputs past 2^31 elements, the most bins that fit and a clear error beyond, int32 counts, empty inputs,
cluster sizes (the device's largest, and a device that cannot run 16), and the memory an op allocates.

Inputs past 2^31 elements are mostly stride-0 (expanded) views: billions of elements in a few bytes, so the index
arithmetic is tested past 2^31 (and the 32-bit block counters past 2^32) on any machine. The `slow` tests also
allocate real multi-GiB inputs or outputs on the GPU.
"""

import pytest
import torch

import torch_dsmhist

from conftest import DEVICES, cuda_only
from helpers import (
    adds_sums,
    cluster_available,
    cluster_block_capacity,
    cuda_memory_growth,
    deterministic_algorithms,
    make_index_values,
    make_range_values,
    max_cluster_size,
    reference_histogram,
    tier_variants,
)

INT32_MAX = 2**31 - 1


def tiers_for(bins: int):
    """(tier, cluster size) of every CUDA tier that can hold `bins`, clusters at the planner's and the largest size."""
    return [(tier, size) for _, tier, size in tier_variants(bins, cluster_sizes=(max_cluster_size(),))]


def repeated_rows(row: torch.Tensor, rows: int) -> torch.Tensor:
    """`rows` copies of `row` as a [rows, len(row)] view with row stride 0 (no memory beyond `row`)."""
    return row.expand(rows, row.numel())


# ----- int32 counts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_int32_counts_are_refused_when_a_bin_could_overflow(device):
    big = torch.zeros(1, dtype=torch.uint8, device=device).expand(INT32_MAX + 1)
    with pytest.raises(ValueError, match="int32 counts cannot hold the count of 2147483648 elements"):
        torch_dsmhist.histogram(big, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="int32 counts"):
        torch_dsmhist.batched_histogram(big.unsqueeze(0), 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="int32 counts"):
        torch_dsmhist.histogram_add_(torch.zeros(4, dtype=torch.int32, device=device), big)
    # 2^31 - 1 elements cannot overflow: the check is exact (checked on a cheap batched shape: 0 rows of that length).
    empty_rows = torch.zeros(1, dtype=torch.uint8, device=device).expand(0, INT32_MAX)
    assert torch_dsmhist.batched_histogram(empty_rows, 4, dtype=torch.int32).shape == (0, 4)
    with pytest.raises(ValueError, match="int32 counts"):
        torch_dsmhist.batched_histogram(
            torch.zeros(1, dtype=torch.uint8, device=device).expand(0, INT32_MAX + 1), 4, dtype=torch.int32
        )


@pytest.mark.parametrize("device", DEVICES)
def test_int32_hist_wraps_across_calls_like_int32_addition(device):
    hist = torch.full((3,), INT32_MAX, dtype=torch.int32, device=device)
    torch_dsmhist.histogram_add_(hist, torch.tensor([0, 0, 2], device=device))
    expected = torch.tensor([INT32_MAX, INT32_MAX, INT32_MAX], dtype=torch.int32) + torch.tensor(
        [2, 0, 1], dtype=torch.int32
    )  # torch's own int32 addition wraps the same way
    assert torch.equal(hist.cpu(), expected)
    assert hist[0].item() == -(2**31) + 1


@cuda_only
def test_int32_counts_allowed_for_short_rows_of_a_huge_batch():
    row = torch.arange(256, dtype=torch.uint8, device="cuda").repeat(2**22)  # 2^30 elements, 1 GiB
    x = repeated_rows(row, 3)  # 3 * 2^30 > 2^31 elements, but each histogram counts only 2^30
    out = torch_dsmhist.batched_histogram(x, 256, dtype=torch.int32)
    assert out.dtype == torch.int32
    assert torch.equal(out.cpu(), torch.full((3, 256), 2**22, dtype=torch.int32))


# ----- inputs past 2^31 elements -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_more_than_2_pow_31_elements_as_a_stride_zero_view(device):
    rows = 2**23 + 1
    x = repeated_rows(torch.arange(256, dtype=torch.uint8, device=device), rows)  # 2^31 + 256 elements
    expected = torch.full((256,), rows, dtype=torch.int64)
    assert torch.equal(torch_dsmhist.histogram(x, 256).cpu(), expected)
    if device == "cuda":
        for tier, size in tiers_for(256):
            with torch_dsmhist.force_tier(tier, size):
                assert torch.equal(torch_dsmhist.histogram(x, 256).cpu(), expected), (tier, size)


@cuda_only
@pytest.mark.slow
def test_inner_stride_zero_past_2_pow_32_elements():
    """One element read 2^32 + 7 times (the strided path). Block-local tiers only: 2^32 global atomics on one
    address would take seconds; the global tier's indexing past 2^31 is covered by the tests above."""
    n = 2**32 + 7
    x = torch.tensor([3], dtype=torch.int16, device="cuda").expand(n)
    for tier, size in [t for t in tiers_for(1000) if t[0] != "global"]:
        with torch_dsmhist.force_tier(tier, size):
            out = torch_dsmhist.histogram(x, 1000)
        assert out[3].item() == n and out.sum().item() == n, (tier, size)


@cuda_only
@pytest.mark.slow
def test_block_counters_cannot_wrap():
    """Every element in one bin, 2^40 of them (about 8e9 per block of the shared tier, past its 32-bit counters),
    and 2^36 in the cluster tiers' largest clusters (about 2^33 per cluster; tier exchange in 3 passes of at most 2^32
    a cluster): blocks must flush before wrapping."""
    hot = torch.full((2**20,), 5, dtype=torch.uint8, device="cuda")
    cases = [("shared", None, repeated_rows(hot, 2**20))]
    if max_cluster_size() >= 2:
        cases.append(("cluster", max_cluster_size(), repeated_rows(hot, 2**16)))
        cases.append(("cluster_dsmem", max_cluster_size(), repeated_rows(hot, 2**16)))
        cases.append(("exchange", max_cluster_size(), repeated_rows(hot, 2**16)))
    for tier, size, x in cases:
        with torch_dsmhist.force_tier(tier, size):
            out = torch_dsmhist.histogram(x, 256)
        assert out[5].item() == x.numel() and out.sum().item() == x.numel(), (tier, size)


@cuda_only
@pytest.mark.slow
def test_more_than_2_pow_31_elements_in_memory():
    n = 2**31 + 4099
    if torch.cuda.mem_get_info()[0] < 3 * n:
        pytest.skip("not enough GPU memory for a 2^31-element input")
    x = torch.arange(n, device="cuda", dtype=torch.int64).remainder_(251).to(torch.uint8)
    expected = torch.full((251,), n // 251, dtype=torch.long)
    expected[: n % 251] += 1
    for tier, size in tiers_for(251):
        with torch_dsmhist.force_tier(tier, size):
            assert torch.equal(torch_dsmhist.histogram(x, 251).cpu(), expected), (tier, size)
    strided = x[1::2]  # non-contiguous, > 2^30 elements at odd offsets
    ref = torch.zeros(251, dtype=torch.long)
    for chunk in strided.split(1 << 28):
        ref += torch.bincount(chunk.long(), minlength=251).cpu()
    assert torch.equal(torch_dsmhist.histogram(strided, 251).cpu(), ref)
    # Two rows of 2^30 + 2049 elements, one histogram each.
    rows = x[: 2 * (2**30 + 2049)].view(2, -1)
    batched = torch_dsmhist.batched_histogram(rows, 251)
    for r in range(2):
        ref = torch.zeros(251, dtype=torch.long)
        for chunk in rows[r].split(1 << 28):
            ref += torch.bincount(chunk.long(), minlength=251).cpu()
        assert torch.equal(batched[r].cpu(), ref)
    del x, strided, rows
    torch.cuda.empty_cache()


# ----- bins --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bins_beyond_memory_raise_a_clear_error(device):
    x = torch.tensor([1, 2, 3], device=device)
    with pytest.raises(RuntimeError, match=r"the output for bins=1125899906842624 .* could not be allocated"):
        torch_dsmhist.histogram(x, 2**50)
    with pytest.raises(ValueError, match="bins=4611686018427387904 .* overflows int64"):
        torch_dsmhist.histogram(x, 2**62)
    rows = torch.zeros(1, 1, dtype=torch.uint8, device=device).expand(2**40, 4)
    with pytest.raises(ValueError, match="overflows int64"):
        torch_dsmhist.batched_histogram(rows, 2**40)


@cuda_only
def test_out_of_memory_error_is_torch_out_of_memory():
    with pytest.raises(torch.OutOfMemoryError, match="bins="):
        torch_dsmhist.histogram(torch.tensor([1], device="cuda"), 2**50)


@cuda_only
@pytest.mark.slow
def test_more_than_2_pow_31_bins():
    """3 * 2^30 int64 bins (24 GiB) with values at both ends: bin indices past 2^31 in the global tier."""
    bins = 3 * 2**30
    if torch.cuda.mem_get_info()[0] < 8 * bins + 2**30:
        pytest.skip("not enough GPU memory for 3 * 2^30 int64 bins")
    values = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**31 + 1, bins - 2, bins - 1, bins - 1, bins, -1], device="cuda")
    out = torch_dsmhist.histogram(values, bins)
    assert torch_dsmhist.plan(bins).tier == "global"
    probe = torch.tensor([0, 1, 2, 2**31 - 1, 2**31, 2**31 + 1, bins - 3, bins - 2, bins - 1], device="cuda")
    assert out[probe].tolist() == [1, 1, 0, 1, 1, 1, 0, 1, 2]
    assert out.sum().item() == 8
    del out
    torch.cuda.empty_cache()


# ----- empty inputs ------------------------------------------------------------------------------------------------


def empty_cases(device: str):
    ints = torch.empty(0, dtype=torch.int32, device=device)
    floats = torch.empty(0, dtype=torch.float32, device=device)
    wide = torch.empty(4, 0, 7, dtype=torch.int64, device=device)
    return [
        ("index", lambda b: torch_dsmhist.histogram(ints, b), torch.int64),
        ("range", lambda b: torch_dsmhist.histogram(floats, b, 0.0, 1.0), torch.int64),
        ("data range", lambda b: torch_dsmhist.histogram(floats, b), torch.int64),
        ("weighted", lambda b: torch_dsmhist.histogram(floats, b, 0.0, 1.0, weight=floats), torch.float32),
        ("int32 counts", lambda b: torch_dsmhist.histogram(wide, b, dtype=torch.int32), torch.int32),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_zero_element_inputs(device):
    tiers = [("auto", None)] + (tiers_for(300) if device == "cuda" else [])
    for tier, size in tiers:
        with torch_dsmhist.force_tier(tier, size):
            for name, call, dtype in empty_cases(device):
                if name == "weighted" and tier != "auto" and not adds_sums(tier, size, 300):
                    continue  # a counts-only tier
                out = call(300)
                assert out.dtype == dtype and out.shape == (300,), (tier, name)
                assert not out.any(), (tier, name)
            hist = torch.arange(300, device=device)
            torch_dsmhist.histogram_add_(hist, torch.empty(0, 5, dtype=torch.uint8, device=device))
            assert torch.equal(hist.cpu(), torch.arange(300)), tier
            no_rows = torch_dsmhist.batched_histogram(torch.empty(0, 9, device=device), 300, 0.0, 1.0)
            assert no_rows.shape == (0, 300), tier
            empty_rows = torch_dsmhist.batched_histogram(torch.empty(3, 2, 0, dtype=torch.int16, device=device), 300)
            assert empty_rows.shape == (3, 2, 300) and not empty_rows.any(), tier


# ----- cluster sizes -----------------------------------------------------------------------------------------------


@cuda_only
def test_largest_cluster_the_device_allows(gen):
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    largest = max_cluster_size()
    assert largest >= 2
    capacity = cluster_block_capacity()  # count bins a block of tier cluster holds
    bins = capacity * (largest - 1) + 3  # needs every block of the largest cluster
    x = make_index_values(300007, bins, torch.int32, "uniform", gen).cuda()
    with torch_dsmhist.force_tier("cluster"):
        assert torch_dsmhist.plan(bins).cluster_size == largest
        out = torch_dsmhist.histogram(x, bins)
    assert torch.equal(out.cpu(), reference_histogram(x, bins))
    with torch_dsmhist.force_tier("cluster"), pytest.raises(ValueError, match="cannot hold these bins"):
        torch_dsmhist.histogram(x, capacity * largest + 1)
    if largest < 16:
        with torch_dsmhist.force_tier("cluster", largest + 1), pytest.raises(ValueError, match="cluster size"):
            torch_dsmhist.histogram(x, capacity * largest)


@cuda_only
def test_device_that_cannot_run_16_block_clusters(gen):
    """Planned as on a device whose largest cluster is 8 (max_cluster_size): no plan may use more."""
    if not cluster_available():
        pytest.skip("no cluster tier on this device / build")
    capacity = cluster_block_capacity()  # count bins a block of tier cluster holds
    x = make_index_values(200003, capacity * 16, torch.int32, "uniform", gen).cuda()
    with torch_dsmhist.force_tier("cluster", 16, max_cluster_size=8), pytest.raises(ValueError, match="cluster size"):
        torch_dsmhist.histogram(x, capacity * 16)
    with torch_dsmhist.force_tier("cluster", max_cluster_size=8), pytest.raises(ValueError, match="cannot hold"):
        torch_dsmhist.histogram(x, capacity * 8 + 1)
    bins = capacity * 8 - 5
    with torch_dsmhist.force_tier("cluster", max_cluster_size=8):
        assert torch_dsmhist.plan(bins).cluster_size == 8
        out = torch_dsmhist.histogram(x, bins)
    assert torch.equal(out.cpu(), reference_histogram(x, bins))
    # The automatic plan on a device of 1-block clusters: bins needing 2 blocks go to global atomics (the exchange and
    # the partition take counts only past 232448 bins).
    bins = capacity + 1
    with torch_dsmhist.force_tier("auto", max_cluster_size=1):
        assert torch_dsmhist.plan(bins).tier == "global"
        out = torch_dsmhist.histogram(x, bins)
    assert torch.equal(out.cpu(), reference_histogram(x, bins))
    # The override ended with the block: 2 blocks of tier cluster, by value and by a range.
    assert torch_dsmhist.plan(bins).tier == "cluster"
    assert torch_dsmhist.plan(bins, dtype=torch.float32).tier == "cluster"
    # Bins one block holds run as clusters of 2 replicas (kClusterReplicas); with 1-block clusters, in one block.
    bins = capacity - 5
    xf = x.float()
    for launchable, size in ((1, 1), (2, 2)):
        with torch_dsmhist.force_tier("auto", max_cluster_size=launchable):
            p = torch_dsmhist.plan(bins, dtype=torch.float32)
            assert (p.tier, p.cluster_size, p.bins_per_block) == ("cluster", size, bins), launchable
            out = torch_dsmhist.histogram(xf, bins, 0.0, float(bins))
        assert torch.equal(out.cpu(), reference_histogram(xf, bins, 0.0, float(bins))), launchable


# ----- memory ------------------------------------------------------------------------------------------------------


def rounded(nbytes: int) -> int:
    """What the caching allocator counts for a block of `nbytes` (rounded up to 512 bytes)."""
    return -(-nbytes // 512) * 512


def memory_cases(gen):
    bins = 4 * 2**20 + 3
    ints = make_index_values(2**22 + 5, bins, torch.int32, "uniform", gen).cuda()
    floats = make_range_values(2**22 + 5, -1.0, 1.0, torch.float32, "uniform", gen).cuda()
    weights = torch.rand(floats.shape, generator=gen).cuda()
    small = 300
    return [
        ("4M bins, global tier", bins, lambda: torch_dsmhist.histogram(ints, bins), 8 * bins, 0),
        ("4M bins, data range", bins, lambda: torch_dsmhist.histogram(floats, bins), 8 * bins, 16),
        ("4M bins, weighted", bins, lambda: torch_dsmhist.histogram(floats, bins, -1, 1, weight=weights), 4 * bins, 0),
        ("shared tier", small, lambda: torch_dsmhist.histogram(ints, small), 8 * small, 0),
        ("cluster tier", 100003, lambda: torch_dsmhist.histogram(ints, 100003), 8 * 100003, 0),
        (
            "batched",
            small,
            lambda: torch_dsmhist.batched_histogram(ints[: 2**22].view(1024, -1), small),
            8 * small * 1024,
            0,
        ),
    ]


PARTITION_WORKSPACE_BYTES = 256 << 20


@cuda_only
def test_memory_beyond_the_output_is_a_small_fixed_scratch(gen):
    for name, bins, call, output_bytes, scratch_bytes in memory_cases(gen):
        for tier, size in tiers_for(bins):
            with torch_dsmhist.force_tier(tier, size):
                call()  # first call: plans and configures kernels (no device allocation either, but keep it out)
                out, growth = cuda_memory_growth(call)
                extra = growth - rounded(output_bytes)
            # Tier "partition" (counts past 232448 bins, or forced) takes a workspace of at most 256 MiB, whatever n and bins (README).
            allowed = rounded(scratch_bytes) + (PARTITION_WORKSPACE_BYTES if tier == "partition" else 0)
            assert extra <= allowed, f"{name} ({tier}{size or ''}): {extra} bytes beyond the output"
            del out


@cuda_only
def test_memory_of_histogram_add_and_deterministic_sums(gen):
    bins = 2**20 + 1
    x = make_range_values(2**21, 0.0, 1.0, torch.float32, "uniform", gen).cuda()
    w = torch.rand(x.shape, generator=gen).cuda()
    hist = torch.zeros(bins, dtype=torch.int64, device="cuda")
    sums = torch.zeros(bins, dtype=torch.float32, device="cuda")
    # Counts at these bins take tier partition (past 232448 bins), whose workspace is its documented bound.
    partition = torch_dsmhist.plan(bins).tier == "partition"
    cases = [
        (
            "histogram_add_",
            lambda: torch_dsmhist.histogram_add_(hist, x, 0.0, 1.0),
            PARTITION_WORKSPACE_BYTES if partition else 0,
        ),
        ("histogram_add_ weighted", lambda: torch_dsmhist.histogram_add_(sums, x, 0.0, 1.0, weight=w), 0),
    ]
    for name, call, scratch in cases:
        call()
        _, growth = cuda_memory_growth(call)
        assert growth <= scratch, name
    # Deterministic weighted sums: 16 bytes of scratch per output bin, as documented.
    with deterministic_algorithms():
        torch_dsmhist.histogram(x, bins, 0.0, 1.0, weight=w)
        out, growth = cuda_memory_growth(lambda: torch_dsmhist.histogram(x, bins, 0.0, 1.0, weight=w))
        extra = growth - rounded(4 * bins)
    assert extra <= rounded(16 * bins)
    del out


# ----- ranges at the limits of the compute precision ---------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_range_that_rounds_to_one_value_uses_the_middle_bin(device):
    """[v - 1, v + 1] of a constant float32 v = 1e10 is [v, v] in float32: its values go to the middle bin, as in
    torch.histc on the CPU and numpy. (torch.histc on CUDA raises "max must be larger than min" here; the drop-in
    gives the CPU's answer on both devices, as the README says.)"""
    x = torch.full((5,), 1e10, device=device)
    for bins in (1, 4, 5):
        expected = torch.zeros(bins, dtype=torch.int64)
        expected[bins // 2] = 5
        assert torch.equal(torch_dsmhist.histogram(x, bins).cpu(), expected), bins
        assert torch.equal(torch_dsmhist.histogram(x, bins, 1e10, 1e10 + 1).cpu(), expected), bins
        assert torch.equal(torch_dsmhist.batched_histogram(x.view(1, 5), bins).cpu(), expected.view(1, -1)), bins
    assert torch.equal(torch_dsmhist.histc(x, 4).cpu(), torch.histc(x.cpu(), 4))
    # Values other than that one value are outside the range: dropped, or clamped to the edge bins.
    y = torch.tensor([1e10, 2e10, 0.0], device=device)
    assert torch.equal(torch_dsmhist.histogram(y, 4, 1e10, 1e10 + 1).cpu(), torch.tensor([0, 0, 1, 0]))
    assert torch.equal(
        torch_dsmhist.histogram(y, 4, 1e10, 1e10 + 1, out_of_range="clamp").cpu(), torch.tensor([1, 0, 1, 1])
    )


# ----- memory on the CPU -------------------------------------------------------------------------------------------

# README, "Limits and memory": beyond its output, a CPU call's scratch is at most max(4 MiB per thread, 10% of the
# output). Measured in a fresh process as the growth of its peak resident set (VmHWM, reset through
# /proc/self/clear_refs after the input exists) over the resident set before the call, less the output (which the
# call writes in full). The slack covers the allocator's own pages and the pool threads' stacks.
CPU_MEMORY_SCRIPT = """
import json, sys, torch, torch_dsmhist
threads = int(sys.argv[1])
torch.set_num_threads(threads)
MiB = 2**20

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

g = torch.Generator().manual_seed(int(sys.argv[2]))
ints = torch.randint(0, 2**24, (2**23 + 5,), generator=g, dtype=torch.int32)
floats = torch.rand(2**23 + 5, generator=g)
weights = torch.rand(2**23 + 5, generator=g)
weights64 = torch.rand(2**23 + 5, generator=g, dtype=torch.float64)
hist32 = torch.zeros(2**22, dtype=torch.float32)
cases = [
    ("counts, 2^24 bins, int64", lambda: torch_dsmhist.histogram(ints, 2**24), 8 * 2**24),
    ("counts, 2^24 bins, int32", lambda: torch_dsmhist.histogram(ints, 2**24, dtype=torch.int32), 4 * 2**24),
    ("counts, 2^20 bins (private copies)", lambda: torch_dsmhist.histogram(ints, 2**20), 8 * 2**20),
    ("counts, strided, 2^22 bins", lambda: torch_dsmhist.histogram(ints[::3], 2**22 + 1), 8 * (2**22 + 1)),
    ("weighted float32, 2^22 bins", lambda: torch_dsmhist.histogram(floats, 2**22, 0.0, 1.0, weight=weights), 4 * 2**22),
    ("weighted float64, 2^17 bins (slots)",
     lambda: torch_dsmhist.histogram(floats, 2**17, 0.0, 1.0, weight=weights64), 8 * 2**17),
    ("histogram_add_ float32, 2^22 bins",
     lambda: torch_dsmhist.histogram_add_(hist32, floats, 0.0, 1.0, weight=weights), 0),
    ("batched weighted float32",
     lambda: torch_dsmhist.batched_histogram(floats[: 2**23].view(64, -1), 2**16, 0.0, 1.0,
                                             weight=weights[: 2**23].view(64, -1)), 4 * 64 * 2**16),
]
extra = {}
for name, call, output_bytes in cases:
    call()  # warm: the pool's threads and their malloc arenas exist before the measurement
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    out = call()
    extra[name] = [status("VmHWM") - before - output_bytes, output_bytes]
    del out
print(json.dumps(extra))
"""


@pytest.mark.parametrize("threads", [1, 3])
def test_cpu_scratch_is_bounded(threads):
    import json
    import os
    import subprocess
    import sys

    # glibc returns large blocks to the system on free only below a fixed mmap threshold; a dynamic one would let a
    # call reuse pages an earlier call left resident, and the growth would miss them.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    result = subprocess.run(
        [sys.executable, "-c", CPU_MEMORY_SCRIPT, str(threads), "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    slack = 8 * 2**20
    for name, (extra, output_bytes) in json.loads(result.stdout).items():
        bound = max(4 * 2**20 * threads, output_bytes // 10)
        assert extra <= bound + slack, f"{name}: {extra / 2**20:.1f} MiB beyond the output (bound {bound / 2**20} MiB)"


CPU_ALLOCATION_SCRIPT = """
import resource, sys, torch, torch_dsmhist
torch.set_num_threads(2)
x = torch.rand(2**20 + 3)
w = torch.rand(2**20 + 3)
bins = 2**22
hist = torch.zeros(bins, dtype=torch.float32)
torch_dsmhist.histogram_add_(hist, x, 0.0, 1.0, weight=w)  # warm: pool threads and arenas exist
hist.zero_()

def vm_size():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

# Room for what the call allocates besides its scratch (a 16 MiB output for histogram, nothing for
# histogram_add_), plus 4 MiB: not enough for the 8 MiB of scratch (2 threads x 4 MiB).
for what, call, output_bytes in [
    ("histogram_add_", lambda: torch_dsmhist.histogram_add_(hist, x, 0.0, 1.0, weight=w), 0),
    ("histogram", lambda: torch_dsmhist.histogram(x, bins, 0.0, 1.0, weight=w), 4 * bins),
]:
    limit = vm_size() + output_bytes + 4 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    try:
        call()
        print(what, "no error")
    except RuntimeError as e:
        print(what, "RuntimeError", str(e).splitlines()[0])
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print("hist untouched", bool((hist == 0).all()))
"""


def test_cpu_scratch_allocation_failure_names_bins_and_bytes():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", CPU_ALLOCATION_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    for line in lines[:2]:
        assert (
            "RuntimeError" in line
            and "scratch for bins=4194304 (8388608 bytes" in line
            and "could not be allocated" in line
        ), line
    assert lines[2] == "hist untouched True"
