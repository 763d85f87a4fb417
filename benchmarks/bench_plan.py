#!/usr/bin/env python3
"""The measurements behind the planner's thresholds (csrc/kernels/tuning.h): where the cluster tier stops paying and
where the partition tier starts.

    python benchmarks/bench_plan.py [--n N] [--out-dir DIR] [--weighted | --small | --bins B ...]

For bin counts from one block's shared memory to past the largest cluster's, on 2^28 int32 values of every
distribution of the suite (uniform, normal, one hot bin, zipf, sorted), it times:
  * tier cluster at the smallest cluster size that holds the bins, one more block, twice as many, and 16 blocks
    (so the cost of every extra block reading the input is visible; a size the device cannot launch shows n/a);
  * tier cluster_dsmem (the CUDA guide's remote DSMEM adds) at the smallest size, tier partition and tier global;
  * auto, i.e. what the planner picks.
Every result is checked against torch.bincount first (a mismatch is a FAIL and exit 1). Median ms of CUDA-event
timings. The verdict line per bin count is the worst case over the distributions of (cluster at its best size) /
(global): the planner keeps the cluster tier where that is below 1. For the partition tier it gives the worst case of
partition / global and of global / partition: the planner takes the partition where the first is the smaller.
Writes the "plan" section of RESULTS.md.

With --weighted it times the other accumulators instead (the measurements behind kClusterAutoMaxBlocksForSums and
keeping them off the partition tier, in csrc/kernels/tuning.h): float32 and float64 weights, and the deterministic
float64 sum (fixed point), auto, cluster (smallest size), global and partition, on the same inputs with integer
weights in [0, 4) (so float64 and the deterministic sum are exact, and float32 is exact in every bin whose total
stays below 2^24: the bins checked). Writes the "plan-weighted" section.

With --small it times calls of 2^21 to 2^24 values instead, where a tier's cost per call (zeroing and flushing its
bins) decides: device time per call from CUDA-graph replays of tier exchange, auto, and the tiers the plan takes
without the exchange (cluster, also in clusters of one block, partition, global), at 65536, 116224, 131072 and
262144 bins, uniform and one hot (the measurements behind kExchangeAutoMinElements and kClusterReplicas in
csrc/kernels/tuning.h). Writes the "plan-small" section.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

import benchlib as bl
from benchlib import torch_dsmhist

SECTION = "plan"  # this script's section of RESULTS.md
WEIGHTED_SECTION = "plan-weighted"
SELECTED_SECTION = "plan-selected"  # a run with --bins
SMALL_SECTION = "plan-small"  # a run with --small


def plannable_here(tier: str, bins: int) -> bool:
    """Whether `tier`, forced, can hold `bins` counts on this device."""
    try:
        with torch_dsmhist.force_tier(tier):
            torch_dsmhist.plan(bins)
        return True
    except ValueError:
        return False


def timed(call, reference: torch.Tensor, reps: int, check=None) -> Tuple[Optional[float], str]:
    """(median ms, status) of `call`, after checking its result against `reference` (equal, or `check(got, ref)`)."""
    try:
        got = call()
        if not (check(got, reference) if check else torch.equal(got, reference)):
            return None, "FAIL"
        del got
        first = bl.event_ms(call, 1)[0]
        if first < 100:
            # Two more warm-up calls, added for the first case of a bin count (uniform, auto), which read 8-9% slow
            # after one; it still reads 5-12% slow after three, an order effect of the run (NOTES.md).
            bl.event_ms(call, 2)
        runs = reps if first < 100 else 1
        return statistics.median(bl.event_ms(call, runs)), "ok"
    except ValueError as error:
        return None, "n/a: " + bl.first_line(error)[:60]


def header(title: str, failures: List[str], started: float) -> List[str]:
    """A section's title, its correctness failures (if any) and the device / run line."""
    props = torch.cuda.get_device_properties(0)
    lines = [title, ""]
    if failures:
        lines += ["**CORRECTNESS FAILURES:** " + "; ".join(failures), ""]
    return lines + [
        f"- Device: {torch.cuda.get_device_name(0)} ({props.multi_processor_count} SMs); torch "
        f"{torch.__version__}; date {bl.today()}; git commit: {bl.git_commit()}; "
        f"{time.perf_counter() - started:.0f} s"
    ]


def finish(name: str, lines: List[str], failures: List[str], out_dir: Optional[Path]) -> int:
    """Writes section `name` of RESULTS.md, prints it and the failures; the exit status."""
    section = "\n".join(lines) + "\n"
    bl.write_results_section(name, section, out_dir)
    print(section)
    return bl.exit_status(failures)


def weighted_call(tier: str, x: torch.Tensor, bins: int, weight: torch.Tensor, deterministic: bool):
    """A no-argument weighted histogram of x with `tier` forced ("auto": the planner's), optionally deterministic."""

    def call() -> torch.Tensor:
        previous = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(deterministic)
        try:
            with torch_dsmhist.force_tier(tier):
                return torch_dsmhist.histogram(x, bins, weight=weight)
        finally:
            torch.use_deterministic_algorithms(previous)

    return call


def float32_exact_where_small(got: torch.Tensor, reference: torch.Tensor) -> bool:
    """float32 sums of integer weights are exact wherever the bin's total stays below 2^24."""
    small = reference < 2.0**24
    return bool(torch.equal(got[small].double(), reference[small]))


# The pairs of tiers the planner chooses between for weighted sums (tuning.h): cluster or global up to
# kClusterAutoMaxBlocksForSums blocks, partition or global past them; each tier's worst distribution against the other.
RIVALS = (("cluster", "global"), ("partition", "global"))
VERDICT_RATIOS = ("cluster/global", "global/cluster", "partition/global", "global/partition")


def weighted_main(args) -> int:
    started = time.perf_counter()
    bins_list = [4096, 32768, 65536, 131072, 262144, 1048576, 4194304, 16777216]
    callers = (
        ("float32", torch.float32, False),
        ("float64", torch.float64, False),
        ("deterministic float64", torch.float64, True),
    )
    tiers = ("auto", "cluster", "global", "partition")
    rows: Dict[Tuple[int, str, str], Dict[str, Tuple[Optional[float], str]]] = {}
    failures: List[str] = []
    for bins, distribution in bl.progress([(b, d) for b in bins_list for d in bl.DISTRIBUTIONS], "cases"):
        gen = torch.Generator(device="cuda").manual_seed(bins)
        x = bl.make_values(distribution, args.n, bins, torch.int32, gen)
        w64 = torch.randint(0, 4, (args.n,), generator=gen, device="cuda").double()
        reference = torch.bincount(x, weights=w64, minlength=bins)
        for caller, dtype, deterministic in callers:
            w = w64 if dtype == torch.float64 else w64.float()
            check = float32_exact_where_small if dtype == torch.float32 else None
            cells = {
                tier: timed(weighted_call(tier, x, bins, w, deterministic), reference, args.reps, check)
                for tier in tiers
            }
            failures += [
                f"{caller} {tier} @ {bins} {distribution}" for tier, (_, status) in cells.items() if status == "FAIL"
            ]
            rows[(bins, distribution, caller)] = cells
            del w
            bl.release()
        del x, w64, reference
        bl.release()

    lines = header("# Plan thresholds for weighted sums (benchmarks/bench_plan.py --weighted)", failures, started)
    lines += [
        f"- 2^{args.n.bit_length() - 1} int32 values with integer weights in [0, 4), median ms of {args.reps} "
        "CUDA-event timings (1 when the first run took over 100 ms). `auto`: the planner's tier; `cluster`: the "
        "cluster tier forced at its smallest size. Verdict: each tier's worst distribution against its rival "
        "(`cluster / global`: the largest ratio of the cluster tier's time to global's).",
        "",
    ]
    verdict = []
    for caller, _, _ in callers:
        lines += [f"## {caller} weights" if caller != "deterministic float64" else "## deterministic float64 sums", ""]
        body = []
        for bins in bins_list:
            worst: Dict[str, float] = {}  # "a/b": the largest ratio of tier a's time to tier b's over distributions
            for d in bl.DISTRIBUTIONS:
                cells = rows[(bins, d, caller)]
                body.append(
                    [str(bins), d] + [bl.fmt(cells[t][0]) if cells[t][1] == "ok" else cells[t][1] for t in tiers]
                )
                for a, b in RIVALS:
                    if cells[a][0] and cells[b][0]:
                        worst[f"{a}/{b}"] = max(worst.get(f"{a}/{b}", 0.0), cells[a][0] / cells[b][0])
                        worst[f"{b}/{a}"] = max(worst.get(f"{b}/{a}", 0.0), cells[b][0] / cells[a][0])
            verdict.append([caller, str(bins)] + [f"{worst[k]:.2f}" if k in worst else "—" for k in VERDICT_RATIOS])
        lines += bl.md_table(["bins", "distribution"] + list(tiers), body)
    lines += ["## Verdict", ""] + bl.md_table(
        ["sum", "bins"] + [f"{k.replace('/', ' / ')} (worst)" for k in VERDICT_RATIOS], verdict
    )
    lines += ["", "Reproduce: `python benchmarks/bench_plan.py --weighted`."]
    return finish(WEIGHTED_SECTION, lines, failures, args.out_dir)


def small_main(args) -> int:
    started = time.perf_counter()
    tiers = ("auto", "exchange", "cluster", "cluster 1", "partition", "global")
    failures: List[str] = []
    body = []
    cases = [
        (bins, logn, d)
        for bins in (65536, 116224, 131072, 262144)
        for logn in (21, 22, 23, 24)
        for d in ("uniform", "one_hot")
    ]
    for bins, logn, distribution in bl.progress(cases, "small calls"):
        gen = torch.Generator(device="cuda").manual_seed(bins + logn)
        x = bl.make_values(distribution, 2**logn, bins, torch.int32, gen)
        reference = torch.bincount(x, minlength=bins)
        row = [str(bins), f"2^{logn}", distribution, torch_dsmhist.plan(bins, n=x.numel()).tier]
        for tier in tiers:
            name, _, size = tier.partition(" ")
            call = bl.forced(name, x, bins, cluster_size=int(size) if size else None)
            try:
                if not torch.equal(call(), reference):
                    failures.append(f"{tier} @ {bins} 2^{logn} {distribution}")
                    row.append("**FAIL**")
                    continue
                row.append(f"{bl.graph_ms(call, args.reps) * 1000:.1f}")
            except ValueError:
                row.append("n/a")
        body.append(row)
        del x, reference
        bl.release()
    lines = header("# Plan thresholds, small calls (benchmarks/bench_plan.py --small)", failures, started)
    lines += [
        "- int32 values, us of device time per call (CUDA-graph replay of 20 calls, median of "
        f"{args.reps} replays). `planned`: the tier the plan takes for the call. The planner takes tier "
        "exchange from kExchangeAutoMinElements (2^23) values a histogram (tuning.h). `cluster`: tier cluster "
        "at its planned size (bins one block holds: 2 blocks that each keep every bin, kClusterReplicas); "
        "`cluster 1`: in clusters of one block (n/a: they cannot hold the bins).",
        "",
    ]
    lines += bl.md_table(["bins", "values", "distribution", "planned"] + list(tiers), body)
    lines += ["", "Reproduce: `python benchmarks/bench_plan.py --small`."]
    return finish(SMALL_SECTION, lines, failures, args.out_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**28, help="int32 values per input (default 2^28)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md into this directory")
    parser.add_argument("--weighted", action="store_true", help="weighted and deterministic sums instead of counts")
    parser.add_argument("--bins", type=int, nargs="+", help="only these bin counts (default: the boundaries below)")
    parser.add_argument("--small", action="store_true", help="small calls: device time per call (CUDA graphs)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_plan needs a CUDA device")
        return 2
    if args.weighted:
        return weighted_main(args)
    if args.small:
        return small_main(args)
    started = time.perf_counter()
    shared, largest = bl.device_boundaries()
    if largest == shared:
        print("no cluster tier on this device / build: nothing to measure")
        return 0
    bins_list = sorted(
        set(args.bins)
        if args.bins
        else {
            shared + 1,
            65536,
            2 * shared,
            2 * shared + 1,
            131072,
            3 * shared,
            4 * shared,
            262144,
            393216,
            524288,
            786432,
            16 * shared,
            1048576,
            largest,
            largest + 1,
            4194304,
            16777216,
        }
    )
    rows: Dict[Tuple[int, str], Dict[str, Tuple[Optional[float], str]]] = {}
    failures: List[str] = []
    todo = [(bins, d) for bins in bins_list for d in bl.DISTRIBUTIONS]
    for bins, distribution in bl.progress(todo, "cases"):
        gen = torch.Generator(device="cuda").manual_seed(bins)
        x = bl.make_values(distribution, args.n, bins, torch.int32, gen)
        reference = torch.bincount(x, minlength=bins)
        cells: Dict[str, Tuple[Optional[float], str]] = {}
        cells["auto"] = timed(lambda: torch_dsmhist.histogram(x, bins), reference, args.reps)
        cells["global"] = timed(bl.forced("global", x, bins), reference, args.reps)
        cells["partition"] = timed(bl.forced("partition", x, bins), reference, args.reps)
        if plannable_here("exchange", bins):
            cells["exchange"] = timed(bl.forced("exchange", x, bins), reference, args.reps)
        # Blocks of the smallest cluster that holds the bins: tier cluster packs two counts a word, cluster_dsmem not.
        smallest = -(-bins // (2 * shared))
        if -(-bins // shared) <= 16:
            cells["cluster_dsmem"] = timed(
                bl.forced("cluster_dsmem", x, bins, cluster_size=max(2, -(-bins // shared))), reference, args.reps
            )
        if smallest <= 16:
            for size in sorted({smallest, min(smallest + 1, 16), min(2 * smallest, 16), 16}):
                cells[f"cluster {size}"] = timed(bl.forced("cluster", x, bins, cluster_size=size), reference, args.reps)
        failures += [f"{name} @ {bins} {distribution}" for name, (_, status) in cells.items() if status == "FAIL"]
        rows[(bins, distribution)] = cells
        del x, reference
        bl.release()

    title = "# Plan thresholds, selected bin counts" if args.bins else "# Plan thresholds"
    lines = header(f"{title} (benchmarks/bench_plan.py)", failures, started)
    lines += [
        f"- 2^{args.n.bit_length() - 1} int32 values, median ms of {args.reps} CUDA-event timings (1 when the "
        f"first run took over 100 ms). One block holds {shared} bins ({2 * shared} in tier cluster); the "
        f"largest cluster {largest}.",
        "- `cluster k`: tier cluster forced to k blocks (16-bit counts: twice one block's bins a block), split "
        "into the fewest ranges (a divisor of k) that hold the bins, the other blocks replicas of them that each "
        "read a share of the input and sum their counts through DSMEM. "
        "`best/global`: the best cluster size over global atomics, worst distribution. `partition / global` and "
        "`global / partition`: each tier's worst distribution against the other; the planner takes the partition "
        "tier past the bins where the first is the smaller (kPartitionAutoMinBins). `exchange`: tier exchange at "
        "its planned cluster size; `exchange / best other` and `best other / exchange`: against the fastest of "
        "partition, global and the cluster tier per distribution (the partition included below 232449 bins, "
        "where the planner does not take it), worst distribution each way. The planner takes the exchange for "
        "integer input by value from 232449 to 640000 bins (past tier cluster's 2 blocks, which its by-value body "
        "made faster), where its worst case against the partition is the smaller (tuning.h).",
        "",
    ]
    verdicts = []
    for bins in bins_list:
        body = []
        names: List[str] = []
        for d in bl.DISTRIBUTIONS:
            for name in rows[(bins, d)]:
                if name not in names:
                    names.append(name)
        worst = partition_worst = global_worst = exchange_worst = other_worst = None
        for d in bl.DISTRIBUTIONS:
            cells = rows[(bins, d)]
            body.append(
                [d]
                + [
                    bl.fmt(cells[n][0]) if n in cells and cells[n][1] == "ok" else (cells[n][1] if n in cells else "")
                    for n in names
                ]
            )
            clusters = [v for n, (v, s) in cells.items() if n.startswith("cluster ") and s == "ok"]
            g = cells["global"][0]
            if clusters and g:
                ratio = min(clusters) / g
                worst = ratio if worst is None else max(worst, ratio)
            part = cells["partition"][0]
            if part and g:
                partition_worst = part / g if partition_worst is None else max(partition_worst, part / g)
                global_worst = g / part if global_worst is None else max(global_worst, g / part)
            # The exchange against the best of the others (partition, global, the cluster tier at its best size).
            others = [
                v for n, (v, s) in cells.items() if n not in ("auto", "exchange", "cluster_dsmem") and s == "ok" and v
            ]
            ex = cells.get("exchange", (None, ""))[0]
            if ex and others:
                exchange_worst = max(exchange_worst or 0.0, ex / min(others))
                other_worst = max(other_worst or 0.0, min(others) / ex)
        verdicts.append((bins, worst, partition_worst, global_worst, exchange_worst, other_worst))
        lines += [
            f"## {bins} bins" + (f" — best cluster / global, worst distribution: {worst:.2f}" if worst else ""),
            "",
        ] + bl.md_table(["distribution"] + names, body)
    ratio = lambda r: f"{r:.2f}" if r else "—"
    lines += ["## Verdict", ""] + bl.md_table(
        [
            "bins",
            "best cluster / global (worst distribution)",
            "partition / global (worst)",
            "global / partition (worst)",
            "exchange / best other (worst)",
            "best other / exchange (worst)",
        ],
        [[str(b), ratio(w), ratio(pw), ratio(gw), ratio(ew), ratio(ow)] for b, w, pw, gw, ew, ow in verdicts],
    )
    selected = " --bins " + " ".join(map(str, bins_list)) if args.bins else ""
    lines += ["", f"Reproduce: `python benchmarks/bench_plan.py{selected}`."]
    # A run of selected bin counts keeps its own section, beside the full run's.
    return finish(SELECTED_SECTION if args.bins else SECTION, lines, failures, args.out_dir)


if __name__ == "__main__":
    sys.exit(main())
