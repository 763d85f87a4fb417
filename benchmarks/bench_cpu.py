#!/usr/bin/env python3
"""CPU benchmark: torch_dsmhist.histogram on the CPU against torch.bincount and numpy's bincount / histogram.

    python benchmarks/bench_cpu.py [--n 268435456] [--threads 1,2,4,8,16] [--bins 256,4096,65536,1048576,16777216]
                                   [--reps 3] [--out-dir DIR] [--section cpu-benchmark]

Measures, side by side in one run (median ms of --reps after one warm-up, perf_counter):
  - thread scaling: uniform int32 index binning at each bin count, for each --threads count (torch.set_num_threads);
  - torch.bincount (int32 input, minlength=bins) and numpy's bincount and histogram(bins, range) at 1 thread and at
    the most threads (numpy runs on one thread either way; torch.bincount takes torch's pool);
  - range against index binning: uint8 (256 bins over [0, 255] against index) and float32 (bins over [0, 1) against
    int32 index binning), at 1 thread and the most threads;
  - weighted float64 sums (65536 bins) at each thread count.
numpy is timed on min(n, 2^24) values (its histogram alone would take minutes at 2^28) and its figures are scaled to
n by throughput, as the table says. Prints a compact table; writes its section of benchmarks/RESULTS.md (between the
markers of --section, default cpu-benchmark, appended if absent; a second machine's figures go in a section of their
own) and benchmarks/plots/cpu_throughput.png when matplotlib is present.
A contender whose warm-up call takes over 2 s is timed once more, not --reps times.
"""

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchlib import (
    HERE,
    cpu_name,
    git_commit,
    throughput_plot,
    today,
    torch_dsmhist,
    wall_median_ms,
    write_results_section,
)

PLOT = HERE / "plots" / "cpu_throughput.png"
NUMPY_MAX = 2**24


def median_ms(fn, reps: int) -> float:
    # A slow contender (np.histogram at many bins): after a warm-up over 2 s, one more run is enough.
    return wall_median_ms(fn, reps, slow_s=2.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**28)
    parser.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1 and all cores)")
    parser.add_argument("--bins", default="256,4096,65536,1048576,16777216")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md and the plot into this directory")
    parser.add_argument(
        "--section", default="cpu-benchmark", help="the RESULTS.md section to write (its markers' name)"
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    thread_counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, cores})
    bin_counts = [int(b) for b in args.bins.split(",")]
    n, reps = args.n, args.reps
    lo_t, hi_t = min(thread_counts), max(thread_counts)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]

    g = torch.Generator().manual_seed(0)
    m = min(n, NUMPY_MAX)
    scale_np = n / m
    rows = []
    for bins in bin_counts:
        x = torch.randint(0, bins, (n,), generator=g, dtype=torch.int32)
        expected = None
        dsm = {}
        for t in thread_counts:
            torch.set_num_threads(t)
            got = torch_dsmhist.histogram(x, bins)
            if expected is None:
                expected = torch.bincount(x, minlength=bins)
            if not torch.equal(got, expected):
                raise SystemExit(f"bench_cpu: bins={bins}, {t} threads: result differs from torch.bincount")
            dsm[t] = median_ms(lambda: torch_dsmhist.histogram(x, bins), reps)
        bincount = {}
        for t in (lo_t, hi_t):
            torch.set_num_threads(t)
            bincount[t] = median_ms(lambda: torch.bincount(x, minlength=bins), reps)
        xs = x[:m].numpy()
        np_bincount = median_ms(lambda: np.bincount(xs, minlength=bins), reps) * scale_np
        np_histogram = median_ms(lambda: np.histogram(xs, bins=bins, range=(0, bins)), reps) * scale_np
        rows.append(dict(bins=bins, dsm=dsm, bincount=bincount, np_bincount=np_bincount, np_histogram=np_histogram))
        line = " ".join(f"{t}t {dsm[t]:.1f}" for t in thread_counts)
        print(
            f"bins={bins}: dsmhist ms {line} | bincount {lo_t}t {bincount[lo_t]:.1f} {hi_t}t {bincount[hi_t]:.1f} | "
            f"np.bincount {np_bincount:.1f} np.histogram {np_histogram:.1f}",
            flush=True,
        )
        del x, xs, expected

    # Range against index binning, and weighted sums.
    mode_rows = []
    u8 = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
    f32 = torch.rand(n, generator=g)
    i32 = torch.randint(0, 65536, (n,), generator=g, dtype=torch.int32)
    for t in (lo_t, hi_t):
        torch.set_num_threads(t)
        mode_rows.append(
            dict(
                threads=t,
                u8_index=median_ms(lambda: torch_dsmhist.histogram(u8, 256), reps),
                u8_range=median_ms(lambda: torch_dsmhist.histogram(u8, 256, 0.0, 255.0), reps),
                i32_index=median_ms(lambda: torch_dsmhist.histogram(i32, 65536), reps),
                f32_range=median_ms(lambda: torch_dsmhist.histogram(f32, 65536, 0.0, 1.0), reps),
            )
        )
    del u8, i32
    w = torch.rand(n, generator=g, dtype=torch.float64)
    weighted = {}
    results = []
    for t in thread_counts:
        torch.set_num_threads(t)
        results.append(torch_dsmhist.histogram(f32, 65536, 0.0, 1.0, weight=w))
        weighted[t] = median_ms(lambda: torch_dsmhist.histogram(f32, 65536, 0.0, 1.0, weight=w), reps)
    identical = all(torch.equal(results[0].view(torch.int64), r.view(torch.int64)) for r in results[1:])
    del f32, w
    torch.set_num_threads(hi_t)
    elapsed = time.perf_counter() - started
    # Other processes on the cores skew the thread-scaling columns: the 1-minute load average says how busy they were.
    load = (load_before, os.getloadavg()[0])

    lines = section(rows, mode_rows, weighted, identical, thread_counts, n, m, reps, elapsed, load)
    print("\n".join(lines))
    write_results_section(args.section, "\n".join(lines), args.out_dir)
    plot(rows, thread_counts, n, args.out_dir)
    return 0


def section(rows, mode_rows, weighted, identical, thread_counts, n, m, reps, elapsed, load):
    lo_t, hi_t = min(thread_counts), max(thread_counts)
    log_n = n.bit_length() - 1
    n_text = f"2^{log_n}" if n == 1 << log_n else str(n)
    lines = [
        f"## CPU: {n_text} uniform int32 values, median ms of {reps}",
        "",
        f"- Machine: {cpu_name()}, {os.cpu_count()} logical cores; torch {torch.__version__} "
        f"(parallel backend: {torch.__config__.parallel_info().split('ATen parallel backend:')[-1].strip()}), "
        f"numpy {np.__version__}; date {today()}; git commit {git_commit()}; whole run "
        f"{elapsed:.0f} s; 1-minute load average {load[0]:.2f} before, {load[1]:.2f} after (other processes on the "
        "cores).",
        f"- Threads: torch.set_num_threads({', '.join(map(str, thread_counts))}). numpy runs on one thread, timed on "
        f"{m} values and scaled to {n_text} by throughput.",
        "- Ratios: contender time / dsmhist time at the same thread count (> 1: dsmhist is faster).",
        "",
        "| bins | "
        + " | ".join(f"dsmhist {t}t" for t in thread_counts)
        + f" | scaling {lo_t}→{hi_t}t"
        + f" | bincount {lo_t}t | bincount {hi_t}t | np.bincount | np.histogram | ÷bincount {lo_t}t | ÷bincount {hi_t}t"
        + f" | ÷np.bincount {lo_t}t / {hi_t}t | ÷np.histogram {lo_t}t / {hi_t}t |",
        "|---" * (len(thread_counts) + 9) + "|",
    ]
    for r in rows:
        d, b = r["dsm"], r["bincount"]
        lines.append(
            f"| {r['bins']} | "
            + " | ".join(f"{d[t]:.1f}" for t in thread_counts)
            + f" | {d[lo_t] / d[hi_t]:.2f}x | {b[lo_t]:.1f} | {b[hi_t]:.1f} | {r['np_bincount']:.1f} | "
            f"{r['np_histogram']:.1f} | {b[lo_t] / d[lo_t]:.2f}x | {b[hi_t] / d[hi_t]:.2f}x | "
            f"{r['np_bincount'] / d[lo_t]:.1f}x / {r['np_bincount'] / d[hi_t]:.1f}x | "
            f"{r['np_histogram'] / d[lo_t]:.1f}x / {r['np_histogram'] / d[hi_t]:.1f}x |"
        )
    lines += [
        "",
        "Range against index binning (ms; ratio range / index, target ≤ 1.5):",
        "",
        "| threads | uint8 index, 256 bins | uint8 range [0, 255], 256 bins | ratio | int32 index, 65536 bins "
        "| float32 range [0, 1), 65536 bins | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in mode_rows:
        lines.append(
            f"| {r['threads']} | {r['u8_index']:.1f} | {r['u8_range']:.1f} | "
            f"{r['u8_range'] / r['u8_index']:.2f} | {r['i32_index']:.1f} | {r['f32_range']:.1f} | "
            f"{r['f32_range'] / r['i32_index']:.2f} |"
        )
    lines += [
        "",
        "Weighted float64 sums, float32 values, 65536 bins (ms): "
        + ", ".join(f"{t}t {weighted[t]:.1f}" for t in thread_counts)
        + f"; results bitwise identical across thread counts: {'yes' if identical else 'NO'}.",
        "",
        f"![CPU throughput](plots/{PLOT.name})",
        "",
        "Reproduce: `python benchmarks/bench_cpu.py --n N --threads 1,2,...` (after building the extension).",
    ]
    return lines


def plot(rows, thread_counts, n, out_dir) -> None:
    lo_t, hi_t = min(thread_counts), max(thread_counts)
    bins = [r["bins"] for r in rows]
    gvals = lambda ms: n / (ms * 1e-3) / 1e9  # noqa: E731
    series, styles = {}, {}
    for t in thread_counts:
        series[f"dsmhist, {t} thread{'s' * (t > 1)}"] = list(zip(bins, [gvals(r["dsm"][t]) for r in rows]))
    for t in sorted({lo_t, hi_t}):
        label = f"torch.bincount, {t} thread{'s' * (t > 1)}"
        series[label] = list(zip(bins, [gvals(r["bincount"][t]) for r in rows]))
        styles[label] = {"linestyle": "--", "marker": "x"}
    for label, key, marker in (("np.bincount", "np_bincount", "s"), ("np.histogram", "np_histogram", "^")):
        series[label] = list(zip(bins, [gvals(r[key]) for r in rows]))
        styles[label] = {"linestyle": ":", "marker": marker}
    if not throughput_plot(
        PLOT,
        series,
        f"CPU histogram throughput, {os.cpu_count()} cores",
        "bins",
        ylabel="G values / s (uniform int32)",
        styles=styles,
        figsize=(7, 4.5),
        dpi=100,
    ):
        print("bench_cpu: matplotlib not installed, no plot", file=sys.stderr)
        return
    if out_dir:
        shutil.copy(PLOT, out_dir / PLOT.name)


if __name__ == "__main__":
    sys.exit(main())
