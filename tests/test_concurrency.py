"""Concurrency: calls from several Python threads and on several CUDA streams at once give right answers, a forced
tier stays in its thread, the per-device plan cache can be filled from many threads at once (in a fresh process), and
on a machine with two GPUs every call runs on its input's device. The CPU tests run everywhere; the CUDA tests skip
without a GPU, the multi-GPU tests without a second one."""

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import pytest
import torch

import torch_dsmhist

from conftest import CUDA_OK, CUDA_SKIP_REASON, DEVICES, cuda_only
from helpers import (
    ALL_DTYPES,
    CLUSTER_TIERS,
    DISTRIBUTIONS,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    WEIGHT_DTYPES,
    cluster_available,
    make_index_values,
    make_range_values,
    reference_histogram,
    shared_capacity,
)

THREADS = 8
BARRIER_TIMEOUT_S = 120.0  # a thread that never reaches a barrier breaks it instead of hanging the others
JOIN_TIMEOUT_S = 300.0  # a thread still running after this fails the test (a deadlock shows up as a failure)
# torch.cuda._sleep's spin on the stream (about 25 ms at 2 GHz): the calls queued behind it run only when it ends, so
# a call that ran on some other stream than the current one would read inputs and histograms not yet written.
SLEEP_CYCLES = 50_000_000

# Bin counts per device: on CUDA they cover the shared tier (4099), the cluster tier where there is one (58113 and
# 100003, past one H100 block's shared memory) and global atomics (200003), so the threads plan different tiers.
CPU_BINS = [1, 3, 64, 1000, 4099]
CUDA_BINS = [1, 64, 4099, 58113, 100003, 200003]

TWO_GPUS = CUDA_OK and torch.cuda.device_count() >= 2
two_gpus = pytest.mark.skipif(
    not TWO_GPUS,
    reason=CUDA_SKIP_REASON if not CUDA_OK else f"needs two CUDA devices, found {torch.cuda.device_count()}",
)


# ------------------------------------------------------------------------------------------------------------------
# Helpers: threads whose failures reach pytest, seeded draws, result checks, and calls with their expected results
# ------------------------------------------------------------------------------------------------------------------


def run_threads(
    count: int,
    target: Callable[[int], None],
    *,
    main: Optional[Callable[[], None]] = None,
    barriers: Sequence[threading.Barrier] = (),
) -> None:
    """Runs ``target(i)`` for i in range(count), one thread each, released together by a start barrier.

    ``main``, if given, runs in the calling thread after that same barrier. The first failure of any thread (an
    assert included) is raised here, so it fails the test; on a failure every barrier (the start barrier and those in
    ``barriers``) is aborted so the other threads stop instead of waiting. A thread still running after
    JOIN_TIMEOUT_S fails the test too.
    """
    start = threading.Barrier(count + (main is not None), timeout=BARRIER_TIMEOUT_S)
    failures = []
    lock = threading.Lock()

    def record(where: str, exc: BaseException) -> None:
        with lock:
            failures.append((where, exc))
        for barrier in (start, *barriers):
            barrier.abort()

    def body(i: int) -> None:
        try:
            start.wait()
            target(i)
        except BaseException as exc:  # everything, pytest outcomes included, goes to the caller
            record(f"thread {i}", exc)

    threads = [threading.Thread(target=body, args=(i,), name=f"dsmhist-test-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    if main is not None:
        try:
            start.wait()
            main()
        except BaseException as exc:
            record("the main thread", exc)
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    if failures:
        # A broken barrier is only the echo of another thread's failure: report the cause.
        causes = [f for f in failures if not isinstance(f[1], threading.BrokenBarrierError)] or failures
        where, exc = causes[0]
        if hasattr(exc, "add_note"):
            among = f"{count} threads" + (" and the main thread" if main is not None else "")
            exc.add_note(f"(raised in {where}; {len(failures)} failure(s) among {among})")
        raise exc
    assert not hung, f"threads still running after {JOIN_TIMEOUT_S} s (deadlock?): {hung}"


def thread_seeds(gen: torch.Generator, count: int) -> list:
    """One seed per thread, drawn from the test's generator: each thread owns its generator (none is shared)."""
    return torch.randint(0, 2**62, (count,), generator=gen).tolist()


class Draw:
    """Seeded random choices for one thread."""

    def __init__(self, seed: int):
        self.g = torch.Generator()
        self.g.manual_seed(seed)

    def integer(self, low: int, high: int) -> int:
        """Uniform in [low, high)."""
        return int(torch.randint(low, high, (1,), generator=self.g))

    def choice(self, options: Sequence):
        return options[self.integer(0, len(options))]


def resolve(device) -> torch.device:
    """The device with its index ("cuda" becomes cuda:<current>), to compare with an output's device."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def check_result(got: torch.Tensor, expected: torch.Tensor, device: torch.device, what: str) -> None:
    """Device, dtype and shape as expected; counts exactly equal, weighted sums close (CUDA adds floats atomically)."""
    assert got.device == device, f"{what}: output on {got.device}, expected on {device}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    got = got.cpu()
    if expected.dtype.is_floating_point:
        tolerance = 1e-9 if expected.dtype == torch.float64 else 1e-4
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=10 * tolerance, msg=lambda m: f"{what}: {m}")
    else:
        differ = int((got != expected).sum())
        assert differ == 0, f"{what}: {differ} of {got.numel()} bins differ from the reference"


@dataclass
class Job:
    """One call: `run` takes `inputs` moved to a device and returns the histogram, which must equal `expected`."""

    what: str
    run: Callable[..., torch.Tensor]
    inputs: Tuple[torch.Tensor, ...]  # on the CPU
    expected: torch.Tensor  # on the CPU

    def check(self, got: torch.Tensor, device: torch.device) -> None:
        check_result(got, self.expected, device, self.what)


JOB_KINDS = 6


def make_job(kind: int, draw: Draw, max_n: int, bin_choices: Sequence[int]) -> Job:
    """A call of one op with fresh random inputs and its reference result. Kinds 0..JOB_KINDS-1: histogram by value,
    weighted histogram over a range, histogram over the data's range, histogram_add_ into a fresh hist, batched
    counts, batched weighted sums."""
    g = draw.g
    n = draw.integer(1, max_n + 1)
    bins = draw.choice(bin_choices)
    if kind == 0:
        x = make_index_values(n, bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        policy = draw.choice(["ignore", "clamp"])
        return Job(
            f"histogram({x.dtype}[{n}], {bins}, out_of_range={policy})",
            lambda x, bins=bins, policy=policy: torch_dsmhist.histogram(x, bins, out_of_range=policy),
            (x,),
            reference_histogram(x, bins, out_of_range=policy),
        )
    if kind == 1:
        x = make_range_values(n, -1.0, 1.0, draw.choice(ALL_DTYPES), draw.choice(DISTRIBUTIONS), g)
        w = torch.rand(n, generator=g, dtype=torch.float64).to(draw.choice(WEIGHT_DTYPES))
        return Job(
            f"histogram({x.dtype}[{n}], {bins}, -1, 1, weight={w.dtype})",
            lambda x, w, bins=bins: torch_dsmhist.histogram(x, bins, -1.0, 1.0, weight=w),
            (x, w),
            reference_histogram(x, bins, -1.0, 1.0, weight=w),
        )
    if kind == 2:
        x = make_range_values(n, -2.0, 7.0, draw.choice(FLOAT_DTYPES), "uniform", g)
        return Job(
            f"histogram({x.dtype}[{n}], {bins}) over the data's range",
            lambda x, bins=bins: torch_dsmhist.histogram(x, bins),
            (x,),
            reference_histogram(x, bins),
        )
    if kind == 3:
        x = make_index_values(n, bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        count_dtype = draw.choice([torch.int32, torch.int64])

        def add_into_threes(x, bins=bins, count_dtype=count_dtype):
            # The hist is made (and filled) on the current stream of x's device, like the call that adds into it.
            hist = torch.full((bins,), 3, dtype=count_dtype, device=x.device)
            returned = torch_dsmhist.histogram_add_(hist, x)
            assert returned is hist, "histogram_add_ must return hist"
            return hist

        return Job(
            f"histogram_add_({count_dtype}[{bins}] of threes, {x.dtype}[{n}])",
            add_into_threes,
            (x,),
            (reference_histogram(x, bins) + 3).to(count_dtype),
        )
    rows = draw.integer(1, 9)
    cols = max(1, n // rows)
    if kind == 4:
        x = make_index_values(rows * cols, bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        x = x.reshape(rows, cols)
        return Job(
            f"batched_histogram({x.dtype}[{rows}, {cols}], {bins}, out_of_range=clamp)",
            lambda x, bins=bins: torch_dsmhist.batched_histogram(x, bins, out_of_range="clamp"),
            (x,),
            torch.stack([reference_histogram(row, bins, out_of_range="clamp") for row in x]),
        )
    x = make_range_values(rows * cols, 0.0, 1.0, torch.float32, "uniform", g).reshape(rows, cols)
    w = torch.rand(rows, cols, generator=g, dtype=torch.float64).to(draw.choice(WEIGHT_DTYPES))
    return Job(
        f"batched_histogram(float32[{rows}, {cols}], {bins}, 0, 1, weight={w.dtype})",
        lambda x, w, bins=bins: torch_dsmhist.batched_histogram(x, bins, 0.0, 1.0, weight=w),
        (x, w),
        torch.stack([reference_histogram(r, bins, 0.0, 1.0, weight=rw) for r, rw in zip(x, w)]),
    )


def to_device(tensors: Sequence[torch.Tensor], device: torch.device) -> Tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in tensors)


# ------------------------------------------------------------------------------------------------------------------
# Many Python threads calling every op at once (CPU and CUDA)
# ------------------------------------------------------------------------------------------------------------------


def mixed_calls(device: torch.device, seed: int, iterations: int, max_n: int, bin_choices: Sequence[int]) -> None:
    """One thread's share: every op in every mode on fresh inputs, each result checked as soon as it is back, and two
    running histograms (counts and weighted sums) of this thread's own, checked at the end."""
    draw = Draw(seed)
    g = draw.g
    run_bins = draw.choice(bin_choices)
    running = torch.zeros(run_bins, dtype=draw.choice([torch.int64, torch.int32]), device=device)
    running_expected = torch.zeros(run_bins, dtype=torch.int64)
    sums = torch.zeros(run_bins, dtype=torch.float64, device=device)
    sums_expected = torch.zeros(run_bins, dtype=torch.float64)
    for it in range(iterations):
        n = draw.integer(0, max_n + 1)
        bins = draw.choice(bin_choices)
        policy = draw.choice(["ignore", "clamp"])
        where = f"iteration {it}: n={n}, bins={bins}, out_of_range={policy}"

        # Bin = value, int32 or int64 counts.
        x = make_index_values(n, bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        count_dtype = draw.choice([None, torch.int32, torch.int64])
        got = torch_dsmhist.histogram(x.to(device), bins, out_of_range=policy, dtype=count_dtype)
        expected = reference_histogram(x, bins, out_of_range=policy, dtype=count_dtype)
        check_result(got, expected, device, f"histogram by value of {x.dtype}, {where}")

        # A given range, any input dtype.
        x = make_range_values(n, -3.0, 5.0, draw.choice(ALL_DTYPES), draw.choice(DISTRIBUTIONS), g)
        got = torch_dsmhist.histogram(x.to(device), bins, -3.0, 5.0, out_of_range=policy)
        expected = reference_histogram(x, bins, -3.0, 5.0, out_of_range=policy)
        check_result(got, expected, device, f"histogram over [-3, 5] of {x.dtype}, {where}")

        # The data's own range, then weights over a given range.
        x = make_range_values(n, -3.0, 5.0, draw.choice(FLOAT_DTYPES), "uniform", g)
        got = torch_dsmhist.histogram(x.to(device), bins, out_of_range=policy)
        check_result(got, reference_histogram(x, bins, out_of_range=policy), device, f"data range {x.dtype}, {where}")
        w = torch.rand(n, generator=g, dtype=torch.float64).to(draw.choice(WEIGHT_DTYPES))
        got = torch_dsmhist.histogram(x.to(device), bins, -3.0, 5.0, weight=w.to(device), out_of_range=policy)
        expected = reference_histogram(x, bins, -3.0, 5.0, weight=w, out_of_range=policy)
        check_result(got, expected, device, f"{w.dtype} weights on {x.dtype}, {where}")

        # This thread's running histograms.
        x = make_index_values(n, run_bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        assert torch_dsmhist.histogram_add_(running, x.to(device), out_of_range=policy) is running
        running_expected += reference_histogram(x, run_bins, out_of_range=policy)
        x = make_range_values(n, 0.0, 1.0, torch.float32, "uniform", g)
        w = torch.rand(n, generator=g).to(draw.choice(WEIGHT_DTYPES))
        torch_dsmhist.histogram_add_(sums, x.to(device), 0.0, 1.0, weight=w.to(device), out_of_range=policy)
        sums_expected += reference_histogram(x, run_bins, 0.0, 1.0, weight=w.double(), out_of_range=policy)

        # One histogram per row: counts (sometimes of a strided view), and weighted sums.
        rows = draw.integer(1, 13)
        x = make_index_values(rows * (n // rows), bins, draw.choice(INTEGER_DTYPES), draw.choice(DISTRIBUTIONS), g)
        x = x.reshape(rows, n // rows)
        if draw.integer(0, 2):
            x = x[:, ::2]
        got = torch_dsmhist.batched_histogram(x.to(device), bins, out_of_range=policy)
        expected = torch.stack([reference_histogram(row, bins, out_of_range=policy) for row in x])
        check_result(got, expected, device, f"batched {x.dtype}{list(x.shape)}, {where}")
        x = make_range_values(rows * (n // rows), 0.0, 1.0, torch.float64, "uniform", g).reshape(rows, n // rows)
        w = torch.rand(x.shape, generator=g, dtype=torch.float64)
        got = torch_dsmhist.batched_histogram(x.to(device), bins, 0.0, 1.0, weight=w.to(device))
        expected = torch.stack([reference_histogram(r, bins, 0.0, 1.0, weight=rw) for r, rw in zip(x, w)])
        check_result(got, expected, device, f"batched weighted float64{list(x.shape)}, {where}")

    check_result(running, running_expected.to(running.dtype), device, f"running {running.dtype} histogram_add_")
    check_result(sums, sums_expected, device, "running float64 weighted histogram_add_")


@pytest.mark.parametrize("device", DEVICES)
def test_threads_calling_every_op_at_once(device, gen):
    device = resolve(device)
    settings = (
        dict(iterations=10, max_n=20000, bin_choices=CPU_BINS)
        if device.type == "cpu"
        else dict(iterations=12, max_n=300000, bin_choices=CUDA_BINS)
    )
    seeds = thread_seeds(gen, THREADS)
    run_threads(THREADS, lambda i: mixed_calls(device, seeds[i], **settings))


def test_tier_override_is_thread_local(gen):
    """force_tier sets a thread-local override: threads inside different force_tier blocks at the same time each see
    their own, the main thread sees its own, and none leaks into a thread started meanwhile. (CPU calls ignore the
    tier; torch.ops.dsmhist._get_tier_override shows it on any build.)"""
    baseline = tuple(torch.ops.dsmhist._get_tier_override())
    assert baseline[:2] == ("auto", 0)
    forced = [
        ("global", 0),
        ("shared", 0),
        ("cluster", 3),
        ("cluster", 0),
        ("cluster_dsmem", 2),
        ("auto", 0),
        ("global", 0),
    ]
    x = make_index_values(10007, 50, torch.int64, "uniform", gen)
    expected = reference_histogram(x, 50)
    inside = threading.Barrier(len(forced) + 1, timeout=BARRIER_TIMEOUT_S)
    leaving = threading.Barrier(len(forced) + 1, timeout=BARRIER_TIMEOUT_S)

    def in_thread(i: int) -> None:
        tier, size = forced[i]
        assert tuple(torch.ops.dsmhist._get_tier_override()) == baseline, "a new thread starts from the default"
        with torch_dsmhist.force_tier(tier, size or None):
            inside.wait()  # from here until `leaving`, every thread and the main thread are inside their force_tier
            for _ in range(3):
                assert tuple(torch.ops.dsmhist._get_tier_override())[:2] == (tier, size)
                check_result(torch_dsmhist.histogram(x, 50), expected, torch.device("cpu"), f"under {tier}")
            leaving.wait()
        assert tuple(torch.ops.dsmhist._get_tier_override()) == baseline

    def in_main() -> None:
        with torch_dsmhist.force_tier("shared"):
            inside.wait()
            assert tuple(torch.ops.dsmhist._get_tier_override())[:2] == ("shared", 0)
            leaving.wait()
        assert tuple(torch.ops.dsmhist._get_tier_override()) == baseline

    run_threads(len(forced), in_thread, main=in_main, barriers=(inside, leaving))

    seen = []
    with torch_dsmhist.force_tier("global"):
        late = threading.Thread(target=lambda: seen.append(tuple(torch.ops.dsmhist._get_tier_override())))
        late.start()
        late.join(JOIN_TIMEOUT_S)
    assert seen == [baseline], "a thread started inside force_tier must not inherit the override"


# ------------------------------------------------------------------------------------------------------------------
# CUDA streams: one per thread, and several interleaved from one thread
# ------------------------------------------------------------------------------------------------------------------

RUNNING_BINS = 4099


def calls_on_own_stream(device: torch.device, seed: int, calls: int, max_n: int, bin_choices: Sequence[int]) -> None:
    """On a new stream of `device`: every op `calls` times back to back with no synchronisation in between, each on
    a fresh copy of its input made on that stream, plus a running histogram_add_; then one synchronisation and the
    checks. Inputs and expected results are made on the CPU beforehand."""
    draw = Draw(seed)
    jobs = [make_job(k % JOB_KINDS, draw, max_n, bin_choices) for k in range(calls)]
    batches = [
        make_index_values(draw.integer(1, max_n + 1), RUNNING_BINS, torch.int64, "uniform", draw.g)
        for _ in range(calls)
    ]
    stream = torch.cuda.Stream(device=device)
    with torch.cuda.stream(stream):
        job_inputs = [to_device(job.inputs, device) for job in jobs]
        batch_inputs = [batch.to(device) for batch in batches]
        torch.cuda._sleep(SLEEP_CYCLES)  # everything below waits for this on `stream` (see SLEEP_CYCLES)
        running = torch.zeros(RUNNING_BINS, dtype=torch.int64, device=device)
        outputs = []
        for job, inputs, batch in zip(jobs, job_inputs, batch_inputs):
            outputs.append(job.run(*(t.clone() for t in inputs)))
            torch_dsmhist.histogram_add_(running, batch.clone())
    stream.synchronize()
    for job, got in zip(jobs, outputs):
        job.check(got, device)
    expected = torch.zeros(RUNNING_BINS, dtype=torch.int64)
    for batch in batches:
        expected += reference_histogram(batch, RUNNING_BINS)
    check_result(running, expected, device, f"running histogram_add_ on a stream of {device}")


@cuda_only
def test_threads_each_on_their_own_stream(gen):
    device = resolve("cuda")
    seeds = thread_seeds(gen, THREADS)
    run_threads(
        THREADS,
        lambda i: calls_on_own_stream(device, seeds[i], calls=4 * JOB_KINDS, max_n=200000, bin_choices=CUDA_BINS),
    )


@cuda_only
def test_one_thread_interleaving_streams(gen):
    """One thread issues calls round-robin over four streams, each stream with its own running histogram (of its
    own bin count), then synchronises once: per-stream order is kept and no stream disturbs another."""
    device = resolve("cuda")
    draw = Draw(thread_seeds(gen, 1)[0])
    run_bins = [300, 4099, 100003, 200003]
    rounds = 2 * JOB_KINDS
    jobs = [[make_job((k + r) % JOB_KINDS, draw, 200000, CUDA_BINS) for r in range(rounds)] for k in range(4)]
    batches = [
        [make_index_values(draw.integer(1, 200001), bins, torch.int32, "uniform", draw.g) for _ in range(rounds)]
        for bins in run_bins
    ]
    # Inputs and histograms are made beforehand on the current stream; every side stream waits for them.
    job_inputs = [[to_device(job.inputs, device) for job in row] for row in jobs]
    batch_inputs = [[batch.to(device) for batch in row] for row in batches]
    hists = [torch.full((bins,), k, dtype=torch.int64, device=device) for k, bins in enumerate(run_bins)]
    producer = torch.cuda.current_stream(device)
    streams = [torch.cuda.Stream(device=device) for _ in run_bins]
    for stream in streams:
        stream.wait_stream(producer)
    outputs = [[None] * rounds for _ in streams]
    for r in range(rounds):
        for k, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                if r == 0 and k % 2 == 0:
                    torch.cuda._sleep(SLEEP_CYCLES)  # puts the even streams behind the odd ones
                outputs[k][r] = jobs[k][r].run(*job_inputs[k][r])
                torch_dsmhist.histogram_add_(hists[k], batch_inputs[k][r])
    for stream in streams:
        producer.wait_stream(stream)
    torch.cuda.synchronize(device)
    for k, bins in enumerate(run_bins):
        for r in range(rounds):
            jobs[k][r].check(outputs[k][r], device)
        expected = torch.full((bins,), k, dtype=torch.int64)
        for batch in batches[k]:
            expected += reference_histogram(batch, bins)
        check_result(hists[k], expected, device, f"running histogram_add_ on stream {k}")


@cuda_only
def test_forced_tier_stays_in_its_thread(gen):
    """Threads inside force_tier blocks of different tiers at the same moment each get their own plan and right
    counts; the main thread meanwhile gets the automatic plan, and each thread gets it back when it leaves."""
    bins = 4099
    large = shared_capacity() + 1  # more than one block holds: forced "shared" cannot plan it
    auto, auto_large = torch_dsmhist.plan(bins), torch_dsmhist.plan(large)
    assert auto.tier == "shared" and auto_large.tier != "shared"
    forced = [("auto", 0), ("global", 0), ("shared", 0), ("global", 0), ("auto", 0)]
    if cluster_available():
        forced += [(tier, size) for tier in CLUSTER_TIERS for size in (2, 0)]
    baseline = tuple(torch.ops.dsmhist._get_tier_override())
    x = make_index_values(300007, bins, torch.int32, "uniform", gen)
    expected = reference_histogram(x, bins)
    device = resolve("cuda")
    xd = x.to(device)
    inside = threading.Barrier(len(forced) + 1, timeout=BARRIER_TIMEOUT_S)
    leaving = threading.Barrier(len(forced) + 1, timeout=BARRIER_TIMEOUT_S)

    def in_thread(i: int) -> None:
        tier, size = forced[i]
        with torch_dsmhist.force_tier(tier, size or None):
            inside.wait()  # from here until `leaving`, every thread is inside its own force_tier
            assert tuple(torch.ops.dsmhist._get_tier_override())[:2] == (tier, size)
            p = torch_dsmhist.plan(bins)
            if tier == "auto":
                assert p == auto and torch_dsmhist.plan(large) == auto_large
            else:
                assert p.tier == tier, f"forced {tier} in this thread, planned {p.tier}"
                assert size == 0 or p.cluster_size == size
            if tier == "shared":
                with pytest.raises(ValueError, match="shared"):
                    torch_dsmhist.plan(large)
            for _ in range(3):
                check_result(torch_dsmhist.histogram(xd, bins), expected, device, f"forced {tier} {size}")
            leaving.wait()
        assert tuple(torch.ops.dsmhist._get_tier_override()) == baseline
        assert torch_dsmhist.plan(bins) == auto and torch_dsmhist.plan(large) == auto_large

    def in_main() -> None:
        inside.wait()
        assert tuple(torch.ops.dsmhist._get_tier_override()) == baseline
        assert torch_dsmhist.plan(bins) == auto and torch_dsmhist.plan(large) == auto_large
        check_result(torch_dsmhist.histogram(xd, bins), expected, device, "main thread, no tier forced")
        leaving.wait()

    run_threads(len(forced), in_thread, main=in_main, barriers=(inside, leaving))


# ------------------------------------------------------------------------------------------------------------------
# The plan cache filled from many threads at once, in a fresh process
# ------------------------------------------------------------------------------------------------------------------

# argv: mode ("sequential" or "concurrent"), the tests directory (for helpers), a seed. Prints the plans of every
# (bins, input dtype, weight dtype) combination as one JSON line; exits non-zero on any mismatch or failure.
PLAN_CACHE_SCRIPT = r"""
import itertools, json, os, random, sys, threading, traceback
import torch
import torch_dsmhist

mode, tests_dir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tests_dir)
from helpers import make_index_values, make_range_values, reference_histogram

BINS = [1, 100, 4099, 30000, 58112, 58113, 70001, 100003, 131072, 131073, 300007]
DTYPES = [torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
WEIGHTS = [None, torch.float16, torch.bfloat16, torch.float32, torch.float64]
COMBOS = list(itertools.product(BINS, DTYPES, WEIGHTS))
THREADS = 16
torch.cuda.init()  # torch's CUDA state only: nothing of torch_dsmhist has run on the GPU yet, its caches are empty
DEVICE = torch.device("cuda", torch.cuda.current_device())


def name(combo):
    bins, dtype, weight = combo
    return f"{bins}/{dtype}/{weight}"


def plan_of(combo):
    bins, dtype, weight = combo
    p = torch_dsmhist.plan(bins, DEVICE, dtype=dtype, weight_dtype=weight)
    assert p.device == DEVICE, p
    return [p.tier, p.cluster_size, p.shared_bytes_per_block, p.threads_per_block, p.bins_per_block]


def check_ops(combo, g):
    # histogram and batched_histogram of this combination, against the reference.
    bins, dtype, weight = combo
    n = 7 * 2861
    if dtype.is_floating_point:
        x, span = make_range_values(n, -1.0, 1.0, dtype, "uniform", g), dict(min=-1.0, max=1.0)
    else:
        x, span = make_index_values(n, bins, dtype, "uniform", g), {}
    w = None if weight is None else torch.rand(n, generator=g, dtype=torch.float64).to(weight)
    rows = x.reshape(7, -1)
    row_weights = [None] * 7 if w is None else list(w.reshape(7, -1))
    on_device = lambda t: None if t is None else t.to(DEVICE)
    results = [
        (
            torch_dsmhist.histogram(x.to(DEVICE), bins, weight=on_device(w), **span),
            reference_histogram(x, bins, weight=w, **span),
        ),
        (
            torch_dsmhist.batched_histogram(
                rows.to(DEVICE), bins, weight=on_device(None if w is None else w.reshape(7, -1)), **span
            ),
            torch.stack([reference_histogram(r, bins, weight=rw, **span) for r, rw in zip(rows, row_weights)]),
        ),
    ]
    for what, (got, expected) in zip(["histogram", "batched_histogram"], results):
        got = got.cpu()
        assert got.dtype == expected.dtype and got.shape == expected.shape, (what, name(combo), got.dtype, got.shape)
        if expected.dtype.is_floating_point:
            tol = 1e-9 if expected.dtype == torch.float64 else 1e-4
            ok = torch.allclose(got, expected, rtol=tol, atol=10 * tol)
        else:
            ok = torch.equal(got, expected)
        assert ok, f"{what} gives wrong results for {name(combo)}"


if mode == "sequential":
    print(json.dumps({name(c): plan_of(c) for c in COMBOS}, sort_keys=True))
    sys.exit(0)

# Even threads walk the combinations in one shared order (so they reach the same cold entries together), odd threads
# in orders of their own. Each combination's ops run once, in the thread `runner` names, just before its plan() call.
shared_order = COMBOS[:]
random.Random(seed).shuffle(shared_order)
orders = []
for i in range(THREADS):
    order = shared_order if i % 2 == 0 else random.Random(seed + i).sample(COMBOS, len(COMBOS))
    orders.append(order)
runner = {c: k % THREADS for k, c in enumerate(shared_order)}
plans = [dict() for _ in range(THREADS)]
errors = []
barrier = threading.Barrier(THREADS, timeout=120)


def work(i):
    try:
        g = torch.Generator()
        g.manual_seed(seed + 1000 * i)
        barrier.wait()
        for combo in orders[i]:
            if runner[combo] == i:
                check_ops(combo, g)
            plans[i][name(combo)] = plan_of(combo)
    except BaseException:
        errors.append(f"thread {i}:\n{traceback.format_exc()}")
        barrier.abort()


threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join(400)
if any(t.is_alive() for t in threads):
    print("threads still running after 400 s (deadlock?)", file=sys.stderr, flush=True)
    os._exit(3)
real = [e for e in errors if "BrokenBarrierError" not in e] or errors
if real:
    print(f"{len(errors)} thread(s) failed; first:\n{real[0]}", file=sys.stderr)
    sys.exit(1)
first = plans[0]
for i, p in enumerate(plans):
    differ = sorted(k for k in first if p.get(k) != first[k])
    if differ or p.keys() != first.keys():
        print(f"thread {i} planned differently from thread 0: {differ[:5]}", file=sys.stderr)
        sys.exit(1)
after = {name(c): plan_of(c) for c in COMBOS}  # single-threaded, the cache now warm
differ = sorted(k for k in first if after[k] != first[k])
if differ:
    print(f"plans made concurrently differ from those made afterwards: {differ[:5]}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(first, sort_keys=True))
"""


@cuda_only
def test_plan_cache_filled_from_many_threads_at_once(gen):
    """In a fresh process, 16 threads plan 440 (bins, dtype, weight dtype) combinations on first use, all at once, and
    run the ops: they must agree with each other, with the same process's plans afterwards, and with a process that
    plans them one by one from one thread."""
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    tests_dir = os.path.dirname(os.path.abspath(__file__))

    def plans(mode: str) -> dict:
        result = subprocess.run(
            [sys.executable, "-c", PLAN_CACHE_SCRIPT, mode, tests_dir, str(seed)],
            capture_output=True,
            text=True,
            timeout=480,
        )
        assert result.returncode == 0, f"{mode} run exited with {result.returncode}:\n{result.stderr[-4000:]}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    sequential = plans("sequential")
    concurrent = plans("concurrent")
    assert len(sequential) == 11 * 8 * 5 and sequential.keys() == concurrent.keys()
    differ = sorted(k for k in sequential if concurrent[k] != sequential[k])
    assert not differ, "plans differ between the concurrent and the sequential process: " + ", ".join(
        f"{k}: {concurrent[k]} vs {sequential[k]}" for k in differ[:5]
    )


# ------------------------------------------------------------------------------------------------------------------
# Two GPUs: every call runs on its input's device
# ------------------------------------------------------------------------------------------------------------------


@two_gpus
@pytest.mark.parametrize("current, target", [(0, 1), (1, 0)])
def test_every_op_runs_on_its_inputs_device(current, target, gen):
    device = torch.device("cuda", target)
    draw = Draw(thread_seeds(gen, 1)[0])
    jobs = [make_job(kind, draw, 100000, [300, 4099, 100003, 200003]) for kind in range(JOB_KINDS) for _ in range(2)]
    batches = [make_index_values(50000, 4099, torch.int16, "uniform", draw.g) for _ in range(3)]
    with torch.cuda.device(current):
        for job in jobs:
            got = job.run(*to_device(job.inputs, device))
            assert torch.cuda.current_device() == current, f"{job.what} changed the current device"
            job.check(got, device)
        running = torch.zeros(4099, dtype=torch.int64, device=device)
        for batch in batches:
            torch_dsmhist.histogram_add_(running, batch.to(device))
        assert torch.cuda.current_device() == current
        out = torch.empty(4099, dtype=torch.int32, device=device)
        assert torch_dsmhist.histogram(batches[0].to(device), 4099, out=out) is out
        assert torch.cuda.current_device() == current
        p = torch_dsmhist.plan(100003, device=device)
        assert torch_dsmhist.plan(100003, device=target) == p
        assert torch.cuda.current_device() == current
    check_result(running, sum(reference_histogram(b, 4099) for b in batches), device, "histogram_add_ into a hist")
    check_result(out, reference_histogram(batches[0], 4099, dtype=torch.int32), device, "histogram(out=)")
    assert p.device == device and p.tier in ("shared", "cluster", "partition", "global")
    with torch.cuda.device(target):
        assert torch_dsmhist.plan(100003) == p  # the same plan as with that device current


@two_gpus
def test_call_uses_the_current_stream_of_its_inputs_device(gen):
    """With cuda:0 current and a side stream current on cuda:1, calls on cuda:1 inputs run on that side stream."""
    x = make_index_values(1 << 20, 4099, torch.int32, "uniform", gen)
    f = make_range_values(1 << 20, -1.0, 1.0, torch.float32, "uniform", gen)
    x1, f1 = x.to("cuda:1"), f.to("cuda:1")
    side = torch.cuda.Stream(device=1)
    side.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.device(0):
        with torch.cuda.stream(side):  # makes cuda:1 current with `side` as its current stream
            torch.cuda._sleep(SLEEP_CYCLES)
            fresh_x, fresh_f = x1.clone(), f1.clone()  # written only after the sleep, on `side`
            hist = torch.zeros(4099, dtype=torch.int64, device="cuda:1")
            with torch.cuda.device(0):  # cuda:0 current again; cuda:1's current stream stays `side`
                assert torch.cuda.current_stream(1) == side
                counts = torch_dsmhist.histogram(fresh_x, 4099)
                data_range = torch_dsmhist.histogram(fresh_f, 1000)  # range found on cuda:1, in a scratch there
                torch_dsmhist.histogram_add_(hist, fresh_x)
                per_row = torch_dsmhist.batched_histogram(fresh_x.reshape(64, -1), 4099)
                assert torch.cuda.current_device() == 0
    side.synchronize()
    device = torch.device("cuda", 1)
    check_result(counts, reference_histogram(x, 4099), device, "histogram")
    check_result(data_range, reference_histogram(f, 1000), device, "histogram over the data's range")
    check_result(hist, reference_histogram(x, 4099), device, "histogram_add_")
    check_result(per_row, torch.stack([reference_histogram(r, 4099) for r in x.reshape(64, -1)]), device, "batched")


@two_gpus
def test_threads_on_both_devices_each_on_their_own_stream(gen):
    """Four threads, two per GPU, each issuing every op on a stream of its GPU without synchronising in between."""
    devices = [torch.device("cuda", i % 2) for i in range(4)]
    seeds = thread_seeds(gen, len(devices))
    run_threads(
        len(devices),
        lambda i: calls_on_own_stream(devices[i], seeds[i], calls=3 * JOB_KINDS, max_n=200000, bin_choices=CUDA_BINS),
    )


@two_gpus
def test_tensors_on_two_devices_raise():
    x1 = torch.arange(8, device="cuda:1")
    with pytest.raises(ValueError, match="hist is on"):
        torch_dsmhist.histogram_add_(torch.zeros(8, dtype=torch.int64, device="cuda:0"), x1)
    with pytest.raises(ValueError, match="weight is on"):
        torch_dsmhist.histogram(x1, 8, weight=torch.ones(8, device="cuda:0"))
    with pytest.raises(ValueError, match="weight is on"):
        torch_dsmhist.batched_histogram(x1.reshape(2, 4), 8, weight=torch.ones(2, 4, device="cuda:0"))
