#!/usr/bin/env python3
"""Correctness-checked GPU benchmark of torch_dsmhist's strategy tiers against torch.bincount and torch.histc.

Sections: device-to-device copy bandwidth (the read floor); a large-input sweep (2^28 uniform int32 values, bins
256 .. 2^20) of the auto plan, each forced tier, torch.bincount and torch.histc(float); adversarial rows (one hot
bin; 2^30 uint8 values); small inputs (MoE token counting), host-timed per call. Every torch_dsmhist result is
compared with torch.bincount before it is timed: a mismatch is marked FAIL and makes the script exit 1.
Writes its section of benchmarks/RESULTS.md (the "tiers" markers) and, when matplotlib is present,
benchmarks/throughput_vs_bins.png.

Usage: python benchmarks/bench_tiers.py [--quick] [--out-dir DIR]
"""

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from benchlib import (
    HERE,
    Cell,
    bincount,
    contender_labels,
    copy_into,
    event_ms,
    exit_status,
    first_line,
    forced,
    git_commit,
    histc,
    host_us,
    log,
    md_table,
    progress,
    release,
    throughput_plot,
    tier_names,
    today,
    torch_dsmhist,
    write_results_section,
)

STARTED = time.perf_counter()
SECTION = "tiers"  # this script's section of RESULTS.md
WARMUP, REPS = 3, 15
SLOW_MS = 250.0  # a variant whose first run is slower than this is timed as the median of 3 runs after 1 warm-up
GUARD_S = 1.0  # a variant estimated slower than this per run (from 1/PROBE_DIV of the input) is skipped
PROBE_DIV = 16
BUDGET_S = 150.0  # past this many seconds of the run, every remaining variant is timed as the median of 3 runs
SMALL_CALLS = 200
# The automatic plan and every tier the planner may pick, from the extension's tier table.
DSM = ("auto",) + tier_names(planner_only=True)
CONTENDERS = DSM + ("bincount", "histc")
LABELS = contender_labels(DSM[1:], histc_label="torch.histc(float)")


@dataclass(frozen=True)
class Config:
    n_large: int
    bins: Tuple[int, ...]
    n_hot: int
    hot_bins: Tuple[int, ...]
    n_u8: int
    copy_bytes: int
    small_n: Tuple[int, ...] = (4096, 65536, 1048576)
    small_bins: Tuple[int, ...] = (8, 256)


FULL = Config(2**28, (256, 4096, 32768, 58112, 65536, 131072, 262144, 1048576), 2**28, (4096, 65536), 2**30, 2**30)
QUICK = Config(2**24, (256, 4096, 65536, 262144), 2**24, (4096, 65536), 2**26, 2**28)


Row = Dict[str, Cell]


def call_for(name: str) -> Callable[[torch.Tensor, int], torch.Tensor]:
    if name == "bincount":
        return bincount
    if name == "histc":
        return histc
    return lambda x, bins: forced(name, x, bins)()


def timed_call(
    call: Callable[[torch.Tensor, int], torch.Tensor], x: torch.Tensor, bins: int
) -> Tuple[List[torch.Tensor], float]:
    """One event-timed call: ([its result], ms)."""
    out: List[torch.Tensor] = []
    return out, event_ms(lambda: out.append(call(x, bins)), 1)[0]


def measure(name: str, x: torch.Tensor, bins: int, reference: Optional[torch.Tensor]) -> Cell:
    """Check a contender against torch.bincount's `reference` (when given), then time it: median ms of REPS runs
    after WARMUP. One estimated over GUARD_S per run from 1/PROBE_DIV of the input is checked on that part only."""
    call = call_for(name)
    try:
        call(x[:1024], bins)  # loads the kernel and plans outside the timings; an infeasible forced tier raises here
        part = x[: max(1, x.numel() // PROBE_DIV)]
        out, estimate = timed_call(call, part, bins)
        skip = estimate * PROBE_DIV > GUARD_S * 1e3
        if skip:
            reference = None if reference is None else torch.bincount(part, minlength=bins)
        else:
            out, first = timed_call(call, x, bins)
        passed = reference is None or torch.equal(out[0], reference)
        del out
        if not skip:
            reps = REPS if first < SLOW_MS and time.perf_counter() - STARTED < BUDGET_S else 3
            for _ in range(WARMUP if reps == REPS else 1):
                call(x, bins)
            ms = statistics.median(event_ms(lambda: call(x, bins), reps))
    except ValueError as error:  # a forced tier that cannot hold the bins
        return Cell(status="n/a", note=first_line(error))
    except RuntimeError as error:
        return Cell(status="ERROR", note=first_line(error))
    if not passed:
        return Cell(None if skip else ms, "FAIL", "result differs from torch.bincount")
    if skip:
        return Cell(
            estimate * PROBE_DIV,
            "skip",
            f"one run estimated at {estimate * PROBE_DIV / 1e3:.1f} s from "
            f"1/{PROBE_DIV} of the input (counts checked on that part): not timed",
        )
    return Cell(
        ms,
        "ok",
        ""
        if reps == REPS
        else f"median of {reps} runs after 1 warm-up (a slow first run or past the {BUDGET_S:g} s time budget)",
    )


def bench_row(x: torch.Tensor, bins: int) -> Row:
    reference = torch.bincount(x, minlength=bins)
    cells = {name: measure(name, x, bins, reference) for name in DSM}
    del reference
    cells["bincount"] = measure("bincount", x, bins, None)
    x_float = x.float()
    cells["histc"] = measure("histc", x_float, bins, None)
    del x_float
    return cells


def run_cases(cases: Sequence[Tuple[str, int, Callable[[], torch.Tensor]]], desc: str) -> Dict[str, Row]:
    """Make each case's input (label, bins, factory), benchmark every contender on it, and free it."""
    rows = {}
    for label, bins, make in progress(cases, desc):
        x = make()
        rows[label] = bench_row(x, bins)
        del x
        release()
    return rows


def large_cases(cfg: Config) -> List[Tuple[str, int, Callable[[], torch.Tensor]]]:
    return [
        (str(b), b, lambda b=b: torch.randint(0, b, (cfg.n_large,), device="cuda", dtype=torch.int32)) for b in cfg.bins
    ]


def adversarial_cases(cfg: Config) -> List[Tuple[str, int, Callable[[], torch.Tensor]]]:
    hot, u8 = cfg.n_hot.bit_length() - 1, cfg.n_u8.bit_length() - 1
    return [
        (
            f"one hot bin (all 7), 2^{hot} int32, bins={b}",
            b,
            lambda: torch.full((cfg.n_hot,), 7, dtype=torch.int32, device="cuda"),
        )
        for b in cfg.hot_bins
    ] + [
        (
            f"uniform 2^{u8} uint8, bins=256",
            256,
            lambda: torch.randint(0, 256, (cfg.n_u8,), dtype=torch.uint8, device="cuda"),
        )
    ]


def copy_bandwidth(n_bytes: int) -> float:
    """Device-to-device copy of n_bytes: (bytes read + bytes written) / median time, in bytes/s."""
    src = torch.ones(n_bytes // 4, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(WARMUP):
        dst.copy_(src)
    ms = statistics.median(event_ms(lambda: dst.copy_(src), REPS))
    del src, dst
    release()
    return 2 * n_bytes / (ms * 1e-3)


def small_inputs(cfg: Config) -> Dict[str, Row]:
    """Per-call host time of small int64 inputs (expert ids as torch.topk returns them)."""
    scratch = torch.empty(1, device="cuda")
    rows = {}
    cases = [(f"{n}, {b}", n, b) for n in cfg.small_n for b in cfg.small_bins]
    for label, n, bins in progress(cases, "small inputs (n, bins)"):
        x = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int64)
        x_float = x.float()
        auto = host_us(lambda: torch_dsmhist.histogram(x, bins), SMALL_CALLS)
        if not torch.equal(torch_dsmhist.histogram(x, bins), torch.bincount(x, minlength=bins)):
            auto.status, auto.note = "FAIL", "result differs from torch.bincount"
        rows[label] = {
            "auto": auto,
            "bincount": host_us(lambda: torch.bincount(x, minlength=bins), SMALL_CALLS),
            "histc": host_us(lambda: torch.histc(x_float, bins, 0, bins), SMALL_CALLS),
            "empty": host_us(scratch.zero_, SMALL_CALLS),
        }
    return rows


def speedup(row: Row) -> str:
    """Best of torch.bincount / torch.histc divided by dsmhist auto (> 1: dsmhist is faster)."""
    best = min(filter(None, (row[k].measured for k in ("bincount", "histc"))), default=None)
    auto = row["auto"].measured
    return "—" if not best or not auto else f"{best / auto:.2f}x"


def timing_table(first: str, rows: Dict, names: Sequence[str] = CONTENDERS) -> List[str]:
    header = [first] + [LABELS[k] for k in names] + ["auto speedup vs best torch"]
    return md_table(header, ([str(key)] + [row[k].text() for k in names] + [speedup(row)] for key, row in rows.items()))


def render(
    cfg: Config,
    quick: bool,
    bw: float,
    large: Dict[str, Row],
    adv: Dict[str, Row],
    small: Dict[str, Row],
    failures: List[str],
) -> str:
    props = torch.cuda.get_device_properties(0)
    floor_ms = 4 * cfg.n_large / bw * 1e3
    lines = ["# torch_dsmhist tier benchmark" + (" (--quick smoke run, not reference numbers)" if quick else ""), ""]
    if failures:
        lines += ["**CORRECTNESS FAILURES:** " + "; ".join(failures), ""]
    lines += [
        f"- Device: {torch.cuda.get_device_name(0)}, {props.multi_processor_count} SMs",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}; torch_dsmhist {torch_dsmhist.__version__}",
        f"- Date: {today()}; git commit: {git_commit()}",
        f"- Copy bandwidth: {bw / 1e12:.2f} TB/s ({cfg.copy_bytes / 2**30:g} GiB device-to-device copy, "
        f"bytes read + written / median time); floor for reading 2^{cfg.n_large.bit_length() - 1} int32 once "
        f"at that rate: {floor_ms:.3f} ms ({bw / 4 / 1e9:.0f} G elements/s)",
        "",
        f"## Large inputs: 2^{cfg.n_large.bit_length() - 1} uniform int32 values, median ms of {REPS} (CUDA events)",
        "",
    ]
    lines += timing_table("bins", large)
    lines += ["## Adversarial inputs (median ms)", ""] + timing_table("case", adv)
    plan_rows = [(str(b), torch_dsmhist.plan(b)) for b in cfg.bins]
    plan_rows.append(("256 (uint8)", torch_dsmhist.plan(256, dtype=torch.uint8)))
    lines += ["## Plans chosen (auto)", ""] + md_table(
        ["bins", "tier", "cluster size", "shared bytes / block", "threads / block", "bins / block"],
        (
            [b, p.tier, p.cluster_size, p.shared_bytes_per_block, p.threads_per_block, p.bins_per_block]
            for b, p in plan_rows
        ),
    )
    lines += [
        f"## Small inputs (MoE token counting): int64 ids, host-timed µs per call ({SMALL_CALLS} calls, "
        "one synchronize)",
        "",
    ]
    lines += timing_table("n, bins", small, ("auto", "bincount", "histc", "empty"))
    notes: Dict[str, List[str]] = {}
    for section in (large, adv, small):
        for key, row in section.items():
            for name, cell in row.items():
                if cell.note:
                    notes.setdefault(f"{cell.status if cell.status != 'ok' else '*'}: {cell.note}", []).append(
                        f"{LABELS[name]} @ {key}"
                    )
    lines += [
        "## Notes",
        "",
        "- n/a: the forced tier cannot hold these bins (ValueError). skip: estimated over "
        f"{GUARD_S:g} s per run. *: see below. Speedup = min(bincount, histc) / auto.",
    ]
    lines += [f"- {note} — {', '.join(where)}" for note, where in notes.items()]
    lines += [
        "",
        "## How to reproduce",
        "",
        "`python benchmarks/bench_tiers.py` (add `--quick` for a smoke run, `--out-dir DIR` to copy the results)",
        "",
    ]
    return "\n".join(lines)


def plot(large: Dict[str, Row], n: int, bw: float, path: Path) -> bool:
    series = {
        LABELS[name]: [(int(b), n / (r[name].measured * 1e-3)) for b, r in large.items() if r[name].measured]
        for name in CONTENDERS
    }
    return throughput_plot(
        path,
        series,
        f"{torch.cuda.get_device_name(0)}: 2^{n.bit_length() - 1} uniform int32 values",
        "bins",
        floor=(bw / 4, "read floor (copy bandwidth / 4 B)"),
        dpi=120,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 2^24 and fewer bins, for a fast smoke run")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md and the plot into this directory")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or not torch_dsmhist.built_with_cuda():
        print(
            f"bench_tiers: needs a CUDA device and a CUDA build of torch_dsmhist (CUDA device: "
            f"{torch.cuda.is_available()}, built with CUDA: {torch_dsmhist.built_with_cuda()}); "
            "nothing measured, RESULTS.md not written."
        )
        return 0
    cfg = QUICK if args.quick else FULL
    torch.manual_seed(0)
    log(f"bench_tiers on {torch.cuda.get_device_name(0)}, {'quick' if args.quick else 'full'} mode")
    bw = copy_bandwidth(cfg.copy_bytes)
    log(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    large = run_cases(large_cases(cfg), "large sweep, bins")
    adv, small = run_cases(adversarial_cases(cfg), "adversarial"), small_inputs(cfg)
    failures = [
        f"{LABELS[name]} @ {key}: {cell.status} ({cell.note})"
        for section in (large, adv, small)
        for key, row in section.items()
        for name, cell in row.items()
        if cell.failed
    ]
    report = render(cfg, args.quick, bw, large, adv, small, failures)
    print(report)
    write_results_section(SECTION, report)
    outputs = [HERE / "RESULTS.md"]
    if plot(large, cfg.n_large, bw, HERE / "throughput_vs_bins.png"):
        outputs.append(HERE / "throughput_vs_bins.png")
    copy_into(args.out_dir, outputs)
    log(f"wrote {', '.join(str(p) for p in outputs)} in {time.perf_counter() - STARTED:.0f} s")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
