"""The bin-edges ops and the torch.histogram / histogramdd drop-ins on the CPU against torch's own CPU ops.

    python benchmarks/bench_edges_cpu.py [--values 4194304] [--points 1048576] [--reps 7]

Issue 50's CPU cases: 2^22 float32 values, 2^20 2-D points (and 2^20 3-D points), and batched_histogram of a
[64, 3, 224, 224] uint8 image batch (one histogram per image channel) against a loop of torch.bincount over its 192
rows; 1 thread, then every thread torch has. Each cell is the median wall time (ms) of `reps` calls after one
warm-up call whose result is checked against torch's (values and edges, exactly). Ratio = torch's time / ours (above
1: ours is faster). Prints the table and writes it to its section of benchmarks/RESULTS.md (with the machine, torch
version and date).
"""

import argparse
import datetime
import platform
import statistics
import time

import torch

from benchlib import torch_dsmhist, write_results_section

dropins = torch_dsmhist.dropins  # imported through benchlib, which finds the package in a source tree too


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def same(ours, theirs) -> bool:
    if isinstance(theirs, torch.Tensor):
        return torch.equal(ours.to(theirs.dtype), theirs)
    edges_ours = ours.bin_edges if isinstance(ours.bin_edges, tuple) else (ours.bin_edges,)
    edges_theirs = theirs.bin_edges if isinstance(theirs.bin_edges, tuple) else (theirs.bin_edges,)
    return torch.equal(ours.hist, theirs.hist) and all(torch.equal(a, b) for a, b in zip(edges_ours, edges_theirs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=1 << 22)
    parser.add_argument("--points", type=int, default=1 << 20)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.values, generator=g)
    points = torch.randn(args.points, 2, generator=g)
    points3 = torch.randn(args.points, 3, generator=g)
    edges = torch.sort(torch.randn(1001, generator=g)).values
    linspace = torch.linspace(-3.0, 3.0, 1001)
    images = torch.randint(0, 256, (64, 3, 224 * 224), generator=g, dtype=torch.uint8)
    cases = [
        ("dropins.histogram(x, 1000, range)", lambda: dropins.histogram(x, 1000, range=(-3.0, 3.0)),
         lambda: torch.histogram(x, 1000, range=(-3.0, 3.0))),
        ("dropins.histogram(x, random edges)", lambda: dropins.histogram(x, edges),
         lambda: torch.histogram(x, edges)),
        ("dropins.histogram(x, linspace edges)", lambda: dropins.histogram(x, linspace),
         lambda: torch.histogram(x, linspace)),
        ("dropins.histogramdd(pts, [100, 100], range)",
         lambda: dropins.histogramdd(points, [100, 100], range=[-3.0, 3.0, -3.0, 3.0]),
         lambda: torch.histogramdd(points, [100, 100], range=[-3.0, 3.0, -3.0, 3.0])),
        ("dropins.histogramdd(pts3, [16, 16, 16], range)",
         lambda: dropins.histogramdd(points3, [16, 16, 16], range=[-3.0, 3.0] * 3),
         lambda: torch.histogramdd(points3, [16, 16, 16], range=[-3.0, 3.0] * 3)),
        ("histogram_edges(x, random edges)", lambda: torch_dsmhist.histogram_edges(x, edges),
         lambda: torch.histogram(x, edges).hist),
        ("dropins.histogram(x, 1000), data range", lambda: dropins.histogram(x, 1000),
         lambda: torch.histogram(x, 1000)),
        ("histogram(x, 1000, -3, 3)", lambda: torch_dsmhist.histogram(x, 1000, -3.0, 3.0),
         lambda: torch.histc(x, 1000, -3.0, 3.0)),
        ("histogram(x, 1000), data range", lambda: torch_dsmhist.histogram(x, 1000),
         lambda: torch.histc(x, 1000)),
        ("batched_histogram(uint8 [64, 3, 224^2], 256) / a loop of torch.bincount",
         lambda: torch_dsmhist.batched_histogram(images, 256),
         lambda: torch.stack([torch.bincount(row, minlength=256) for row in images.view(-1, 224 * 224)]).view(64, 3, 256)),
    ]  # fmt: skip
    threads = sorted({1, torch.get_num_threads()})
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())  # fmt: skip
    lines = [
        "## Bin edges on the CPU: the drop-ins, histogram_edges and batched_histogram against torch's CPU ops",
        "",
        f"`python benchmarks/bench_edges_cpu.py`, {datetime.date.today()}: {cpu}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; {args.values} float32 values, {args.points} 2-D and 3-D points, 192 image rows of "
        f"50176 uint8; median wall ms of "
        f"{args.reps} after a call checked equal to torch's (values and edges). Ratio = torch's time / ours.",
        "",
        "| case | " + " | ".join(f"{t} thr: torch ms | ours ms | ratio" for t in threads) + " |",
        "|---|" + "---|---|---|" * len(threads),
    ]
    for name, ours, theirs in cases:
        cells = []
        for t in threads:
            torch.set_num_threads(t)
            if not same(ours(), theirs()):
                raise SystemExit(f"bench_edges_cpu: {name}: the result differs from torch's")
            theirs_ms, ours_ms = median_ms(theirs, args.reps), median_ms(ours, args.reps)
            cells.append(f"{theirs_ms:.1f} | {ours_ms:.1f} | {theirs_ms / ours_ms:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    write_results_section("bench_edges_cpu", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
