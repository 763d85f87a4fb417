#!/usr/bin/env python3
"""GPU benchmark of batched_histogram (one histogram per row) against the best torch idioms.

Contenders: torch_dsmhist.batched_histogram; the offset trick (row * bins + value, one torch.bincount over all rows,
then a reshape); and scatter_add_ of ones into a [rows, bins] tensor. Every result is checked against the offset
trick before it is timed (a mismatch makes the script exit 1). Median of CUDA-event timings after warm-up.

Writes its section of benchmarks/RESULTS.md (between the batched-benchmark markers, appended if absent); the other
sections stay as they are.

Usage: python benchmarks/bench_batched.py [--out-dir DIR]
"""

import sys
from typing import Dict, List, Optional

import torch

from benchlib import git_commit, gpu_benchmark_args, median_event_ms, today, torch_dsmhist, write_results_section

SECTION = "batched-benchmark"  # this script's section of RESULTS.md
WARMUP, REPS = 3, 15

# (label, rows, row length, bins, input dtype)
CASES = [
    ("many short rows: 65536 x 256 uint8, 256 bins", 65536, 256, 256, torch.uint8),
    ("many short rows: 65536 x 256 int32, 256 bins", 65536, 256, 256, torch.int32),
    ("image channels: 96 x 2^20 uint8, 256 bins", 96, 2**20, 256, torch.uint8),
    ("1024 x 16384 int32, 4096 bins", 1024, 16384, 4096, torch.int32),
    ("a few long rows: 8 x 2^24 int32, 65536 bins", 8, 2**24, 65536, torch.int32),
    ("a few long rows, many bins: 4 x 2^25 int32, 1048576 bins", 4, 2**25, 1048576, torch.int32),
]


def offset_bincount(x: torch.Tensor, bins: int) -> torch.Tensor:
    rows = x.shape[0]
    offsets = torch.arange(rows, device=x.device).unsqueeze(1) * bins
    return torch.bincount((x.long() + offsets).reshape(-1), minlength=rows * bins).reshape(rows, bins)


def scatter_add(x: torch.Tensor, bins: int) -> torch.Tensor:
    out = torch.zeros(x.shape[0], bins, dtype=torch.int64, device=x.device)
    return out.scatter_add_(1, x.long(), torch.ones(1, 1, dtype=torch.int64, device=x.device).expand_as(x))


def run_case(rows: int, length: int, bins: int, dtype: torch.dtype, gen: torch.Generator) -> Dict[str, Optional[float]]:
    x = torch.randint(0, bins, (rows, length), generator=gen, device="cuda", dtype=torch.int64).to(dtype)
    expected = offset_bincount(x, bins)
    contenders = {
        "dsmhist": lambda: torch_dsmhist.batched_histogram(x, bins),
        "dsmhist int32 counts": lambda: torch_dsmhist.batched_histogram(x, bins, dtype=torch.int32),
        "offset + bincount": lambda: offset_bincount(x, bins),
        "scatter_add_": lambda: scatter_add(x, bins),
    }
    times: Dict[str, Optional[float]] = {}
    for name, fn in contenders.items():
        got = fn()
        if not torch.equal(got.long(), expected):
            print(f"FAIL: {name} differs from the offset trick", flush=True)
            times[name] = None
            continue
        times[name] = median_event_ms(fn, WARMUP, REPS)
    return times


def render(results: List[tuple]) -> str:
    names = ["dsmhist", "dsmhist int32 counts", "offset + bincount", "scatter_add_"]
    lines = [
        "## batched_histogram: one histogram per row (median ms of 15, CUDA events)",
        "",
        f"- Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {today()}; "
        f"git commit: {git_commit()}",
        "- Uniform values in [0, bins); counts int64 unless noted. `offset + bincount`: `bincount(x + row * bins)` "
        "reshaped; `scatter_add_`: ones scattered into `[rows, bins]`. Every result was checked against the offset trick.",
        "",
        "| case | " + " | ".join(names) + " | speedup vs best torch idiom | plan |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for label, rows, length, bins, dtype, times in results:
        cells = ["**FAIL**" if times.get(n) is None else f"{times[n]:.3g}" for n in names]
        best_torch = min(t for n, t in times.items() if n in names[2:] and t is not None)
        ours = times.get("dsmhist")
        speedup = f"{best_torch / ours:.2f}x" if ours else "n/a"
        plan = torch_dsmhist.plan(bins, dtype=dtype, rows=rows, row_length=length)
        plan_text = plan.tier + (
            f" ({plan.cluster_size} block{'s' if plan.cluster_size > 1 else ''})" if plan.tier == "cluster" else ""
        )
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {speedup} | {plan_text} |")
    lines += ["", "Reproduce: `python benchmarks/bench_batched.py`."]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = gpu_benchmark_args("bench_batched", __doc__)
    if args is None:
        return 2
    gen = torch.Generator(device="cuda").manual_seed(7)
    results = []
    failed = False
    for i, (label, rows, length, bins, dtype) in enumerate(CASES, 1):
        print(f"[{i}/{len(CASES)}] {label}", flush=True)
        times = run_case(rows, length, bins, dtype, gen)
        torch.cuda.empty_cache()  # the case's inputs are gone: give their memory back before the next
        failed |= any(t is None for t in times.values())
        print("    " + ", ".join(f"{k} {v:.3g} ms" if v else f"{k} FAIL" for k, v in times.items()), flush=True)
        results.append((label, rows, length, bins, dtype, times))
    section = render(results)
    write_results_section(SECTION, section, args.out_dir)
    print(section)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
