#!/usr/bin/env python3
"""The DSMEM exchange probe (benchmarks/exchange_probe.cu, issue 15's lead "DSMEM exchange") beside the op.

The probe counts 2^28 int32 values in [0, bins) with a cluster whose blocks own interleaved bins and pass each value
to its owner through distributed shared memory (counts only, dense 1-D input: not the op). Each variant's result is
checked against torch.bincount before it is timed (a mismatch makes the script exit 1); then it is timed beside the
op's plan (auto) and tier partition forced, on the same data. Median of CUDA-event timings after warm-up.

Writes its section of benchmarks/RESULTS.md (between the exchange-probe markers, appended if absent).

Usage: python benchmarks/bench_exchange.py [--out-dir DIR] [--seed S]
"""

import argparse
import ctypes
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from benchlib import (DISTRIBUTIONS, cuda_library, forced, git_commit, make_values, median_event_ms, release, today,
                      torch_dsmhist, write_results_section)

SECTION = "exchange-probe"  # this script's section of RESULTS.md
WARMUP, REPS = 3, 15
N = 2**28

# The probe's variants (exchange_histogram_int32's `variant`): values a thread takes a round, and whether one fence a
# block publishes a round's staging (after a block barrier) instead of every warp's release at the cluster barrier.
VARIANTS = {0: "8 a thread", 1: "8 a thread, one fence", 2: "16 a thread, one fence"}
# (bins, cluster blocks): the cluster's blocks own bins / blocks each (at most 65536, and the shared memory a block
# can have).
CASES = [(131072, 8), (262144, 8), (262144, 16), (524288, 16)]


class Probe:
    def __init__(self) -> None:
        self.library, self.name = cuda_library("exchange_probe.cu")
        self.entry = self.library.exchange_histogram_int32
        self.entry.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                               ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]

    def prepare(self, x: torch.Tensor, bins: int, cluster: int,
                variant: int) -> Tuple[Callable[[], torch.Tensor], ctypes.c_int]:
        """A call counting x into a fresh-zeroed int64 histogram, and where each call writes the clusters it
        launched."""
        out = torch.empty(bins, dtype=torch.int64, device=x.device)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        clusters = ctypes.c_int(0)

        def call() -> torch.Tensor:
            out.zero_()
            status = self.entry(x.data_ptr(), x.numel(), bins, out.data_ptr(), cluster, variant, stream,
                                ctypes.byref(clusters))
            if status != 0:
                raise RuntimeError(f"exchange probe returned cudaError {status}")
            return out
        return call, clusters


def run_case(probe: Probe, bins: int, cluster: int, distribution: str,
             gen: torch.Generator) -> Tuple[Dict[str, Optional[float]], Dict[int, int]]:
    x = make_values(distribution, N, bins, torch.int32, gen)
    expected = torch.bincount(x, minlength=bins)
    times: Dict[str, Optional[float]] = {}
    clusters: Dict[int, int] = {}
    for variant, name in VARIANTS.items():
        call, launched = probe.prepare(x, bins, cluster, variant)
        equal = torch.equal(call(), expected)
        clusters[variant] = launched.value
        if not equal:
            print(f"FAIL: probe {name} differs from torch.bincount ({bins} bins, {distribution})", flush=True)
            times[name] = None
            continue
        times[name] = median_event_ms(call, WARMUP, REPS)
    for tier in ("auto", "partition"):
        times[tier] = median_event_ms(forced(tier, x, bins), WARMUP, REPS)
    del x, expected
    release()
    return times, clusters


def render(results: List[tuple], seed: int, probe: Probe) -> str:
    names = list(VARIANTS.values()) + ["auto", "partition"]
    lines = [
        "## DSMEM exchange probe (issue 15): 2^28 int32 values, median ms of 15 (CUDA events)",
        "",
        f"- Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {today()}; "
        f"git commit: {git_commit()}; seed {seed}; probe {probe.name}",
        "- The probe (`benchmarks/exchange_probe.cu`) counts only dense int32 values; `auto` and `partition` are the op "
        "(its plan, and tier partition forced) on the same data. Blocks of 1024 threads; a warp step of one bin extends "
        "the warp's run instead of going through the exchange. `one fence`: one thread's fence a block publishes the "
        "round (after a block barrier), where the cluster barrier's release makes every warp wait for its loads in "
        "flight. Clusters: how many ran at once (the grid). Every probe result was "
        "checked against torch.bincount.",
        "",
        "| bins | cluster blocks | distribution | " + " | ".join(names) + " | best probe / best op | clusters |",
        "|---|---|---|" + "---|" * (len(names) + 2),
    ]
    for bins, cluster, distribution, times, clusters in results:
        cells = ["**FAIL**" if times.get(n) is None else f"{times[n]:.3g}" for n in names]
        probe_best = min((times[n] for n in VARIANTS.values() if times.get(n) is not None), default=None)
        op_best = min(times["auto"], times["partition"])
        ratio = f"{probe_best / op_best:.2f}" if probe_best else "n/a"
        grids = "/".join(str(c) for c in clusters.values())
        lines.append(f"| {bins} | {cluster} | {distribution} | " + " | ".join(cells) + f" | {ratio} | {grids} |")
    lines += ["", "Reproduce: `python benchmarks/bench_exchange.py`."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md into this directory")
    parser.add_argument("--seed", type=int, default=torch.seed() % 2**31, help="the values' seed (default: fresh)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_exchange needs a CUDA device")
        return 2
    if torch.cuda.get_device_capability() < (9, 0):
        print("bench_exchange needs thread block clusters (sm_90 or newer)")
        return 2
    probe = Probe()
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    print(f"seed {args.seed}", flush=True)
    results = []
    failed = False
    for bins, cluster in CASES:
        for distribution in DISTRIBUTIONS:
            times, clusters = run_case(probe, bins, cluster, distribution, gen)
            failed |= any(t is None for t in times.values())
            print(f"{bins} bins, {cluster} blocks, {distribution}: " +
                  ", ".join(f"{k} {v:.3g}" if v else f"{k} FAIL" for k, v in times.items()), flush=True)
            results.append((bins, cluster, distribution, times, clusters))
    section = render(results, args.seed, probe)
    write_results_section(SECTION, section, args.out_dir)
    print(section)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
