#!/usr/bin/env python3
"""The benchmark suite: torch_dsmhist (auto and every forced tier) against torch.bincount, torch.histc and CUB's
DeviceHistogram::HistogramEven, over bins, distributions, dtypes and input sizes, checked and plotted.

    python benchmarks/bench_suite.py [--quick] [--out-dir DIR] [--no-cub]

Sections:
  * bins: 2^28 int32 values (2^24 with --quick) of each distribution (uniform, normal, one hot bin, zipf, sorted),
    bins from 16 to 16M including the tier boundaries of this device (one block's shared memory, the largest
    cluster's), every contender;
  * dtypes: uint8 (2^30 values, 256 bins), int32, int64 and float32 with a range, uniform;
  * sizes: 2^12 .. 2^28 uniform int32 values at 256 and 65536 bins (device time per call, from CUDA-graph replays
    of 20 calls: no host launch overhead), and host-timed calls for the
    small ones (the MoE token-counting case), beside an empty kernel.
Every result is compared with torch.bincount before it is timed (values are integers, so the exact bin of each is
known, float32 included; torch.histc reads a float32 copy of integer input). A torch_dsmhist mismatch is marked FAIL
and the script exits 1; another library's mismatch (torch.histc's float32 arithmetic misplaces a few values at some
bin counts) is noted beside its time. Times are medians of CUDA-event timings
after warm-up; inputs smaller than twice the L2 cache are rotated over copies (up to 256) so that calls read from HBM
rather than from the L2 their previous call filled.
The measured HBM read bandwidth (a read-only reduction) and copy bandwidth are printed and drawn as the floor.

CUB: built once from benchmarks/cub_harness.cu with nvcc into build/bench/ (about 30 s), loaded with ctypes; if that
fails, CuPy's cupy.histogram (CUB's HistogramRange when CUPY_ACCELERATORS=cub) stands in, else the column is n/a.
Writes its section of benchmarks/RESULTS.md (with issue 15's targets judged from the run: suite_targets.py) and PNG
plots to benchmarks/plots/. --quick fits in about two minutes once the CUB harness is built.
"""

import itertools
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import suite_targets
from benchlib import (
    DISTRIBUTIONS,
    HERE,
    Cell,
    Cub,
    bincount,
    contender_labels,
    copy_into,
    device_boundaries,
    event_ms,
    exit_status,
    first_line,
    fmt,
    forced,
    git_commit,
    gpu_benchmark_args,
    graph_ms,
    histc,
    host_us,
    log,
    make_values,
    md_table,
    progress,
    release,
    rotation,
    throughput_plot,
    tier_names,
    today,
    torch_dsmhist,
    write_results_section,
)

SECTION = "suite"  # this script's section of RESULTS.md
DEVICE = "cuda"
STARTED = time.perf_counter()
# The automatic plan and every tier of the extension's tier table.
TIERS = ("auto",) + tier_names()
CONTENDERS = TIERS + ("bincount", "histc", "cub")
# Contenders that cannot run inside a CUDA graph capture, timed by CUDA events instead in section "sizes".
UNCAPTURABLE = {
    "bincount": "torch.bincount reads max() back to the host",
    "cub": "the CUB harness launches on the stream it was prepared on",
}
# The most bins the CUB contender is run at (past it, see contender_call).
CUB_MAX_BINS = 4194304
LABELS = contender_labels(TIERS[1:], cub="CUB HistogramEven")


@dataclass(frozen=True)
class Config:
    n: int
    distributions: Tuple[str, ...]
    bins: Tuple[int, ...]
    dtype_n: int
    sizes: Tuple[int, ...]
    size_bins: Tuple[int, ...]
    small_max: int
    warmup: int
    reps: int
    slow_ms: float  # a contender slower than this on its first run is timed as the median of 3


FULL = Config(
    2**28,
    DISTRIBUTIONS,
    (16, 64, 256, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 4194304, 16777216),
    2**28,
    tuple(2**k for k in range(12, 29, 2)),
    (256, 65536),
    2**20,
    3,
    15,
    200.0,
)
QUICK = Config(
    2**24,
    ("uniform", "one_hot", "zipf"),
    (64, 4096, 65536, 262144, 1048576),
    2**24,
    (2**12, 2**16, 2**20, 2**24),
    (256, 65536),
    2**16,
    2,
    7,
    50.0,
)


# ---------------------------------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------------------------------


def contender_call(name: str, x: torch.Tensor, bins: int, cub: Cub) -> Callable[[], torch.Tensor]:
    """A no-argument call of contender `name` on x (the histogram over bins [0, bins) of x's integer values)."""
    floating = x.is_floating_point()
    lo, hi = (0.0, float(bins)) if floating else (None, None)
    if name == "auto":  # the plain public call, as users make it
        return lambda: torch_dsmhist.histogram(x, bins, lo, hi)
    if name in TIERS:
        dsmhist = forced(name, x, bins, lo, hi)
        dsmhist()  # an infeasible forced tier raises ValueError here
        return dsmhist
    if name == "bincount":
        if floating:
            raise ValueError("torch.bincount takes integer input only")
        return lambda: bincount(x, bins)
    if name == "histc":  # integer input: a float32 copy made here, outside the timing (values stay exact)
        x_float = x if floating else x.float()
        return lambda: histc(x_float, bins)
    if name == "cub":
        if not cub.available():
            raise ValueError(cub.source)
        if bins > CUB_MAX_BINS:
            raise ValueError(
                f"CUB's HistogramEven made an illegal memory access at 8388608 and 16777216 bins on the "
                f"H100 (2^28 int32, 2026-11-25), which ends the process's CUDA context: run up to "
                f"{CUB_MAX_BINS}"
            )
        if x.numel() > 2**31 - 1:
            raise ValueError("CUB's int counters hold 2^31 - 1")
        return cub.prepare(x, bins)
    raise ValueError(name)


def measure(
    name: str, inputs: List[torch.Tensor], bins: int, reference: torch.Tensor, cub: Cub, cfg: Config, section: str = ""
) -> Cell:
    """Check `name` on every rotated copy's first call against torch.bincount's reference, then time it over the
    copies: median ms of cfg.reps CUDA-event timings after cfg.warmup (3 runs after 1 when the first run is slow);
    in section "sizes", device time per call from CUDA-graph replays (graph_ms) where the call can be captured."""
    try:
        calls = [contender_call(name, x, bins, cub) for x in inputs]
        result: List[torch.Tensor] = []
        first = event_ms(lambda: result.append(calls[0]()), 1)[0]
        wrong = int((result.pop().long() != reference).sum())
        if wrong and name in TIERS:
            return Cell(None, "FAIL", "result differs from torch.bincount")
        reps, warmup = (cfg.reps, cfg.warmup) if first < cfg.slow_ms else (3, 1)
        rotating = itertools.cycle(calls)
        for _ in range(warmup):
            next(rotating)()
        if section == "sizes" and name not in UNCAPTURABLE:
            ms = graph_ms(lambda: next(rotating)(), reps)
        else:
            ms = statistics.median(event_ms(lambda: next(rotating)(), reps))
    except ValueError as error:
        return Cell(status="n/a", note=first_line(error))
    except RuntimeError as error:
        return Cell(status="ERROR", note=first_line(error))
    notes = [f"median of {reps} runs (first run over {cfg.slow_ms:g} ms)"] if reps != cfg.reps else []
    if section == "sizes" and name in UNCAPTURABLE:
        notes.append(f"CUDA-event time per call, host launch overhead included: {UNCAPTURABLE[name]}")
    if wrong:  # another library's own binning (torch.histc's float32 arithmetic misplaces some exact values)
        notes.append("its counts differ from torch.bincount's in some bins (its own rounding); timed anyway")
    return Cell(ms, note="; ".join(notes))


# ---------------------------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    section: str
    label: str
    distribution: str
    dtype: torch.dtype
    n: int
    bins: int
    contenders: Sequence[str] = CONTENDERS
    cells: Dict[str, Cell] = field(default_factory=dict)


def cases(cfg: Config, boundaries: Tuple[int, int]) -> List[Case]:
    shared, cluster = boundaries
    bins = sorted(set(cfg.bins) | {shared, shared + 1, cluster, cluster + 1})
    found = [Case("bins", f"{b}", d, torch.int32, cfg.n, b) for d in cfg.distributions for b in bins]
    dtype_bins = (256, 4096, 65536) if cfg is FULL else (256, 65536)
    found += [
        Case(
            "dtypes",
            f"uint8, 2^{(4 * cfg.dtype_n).bit_length() - 1}, 256 bins",
            "uniform",
            torch.uint8,
            4 * cfg.dtype_n,
            256,
        )
    ]
    for dtype in (torch.int32, torch.int64, torch.float32):
        found += [Case("dtypes", f"{str(dtype)[6:]}, {b} bins", "uniform", dtype, cfg.dtype_n, b) for b in dtype_bins]
    found += [
        Case("sizes", f"2^{n.bit_length() - 1}, {b} bins", "uniform", torch.int32, n, b)
        for b in cfg.size_bins
        for n in cfg.sizes
    ]
    return found


def run_case(case: Case, cub: Cub, cfg: Config, l2_bytes: int) -> None:
    gen = torch.Generator(device=DEVICE).manual_seed(case.bins * 1000 + case.n % 997)
    x = make_values(case.distribution, case.n, case.bins, case.dtype, gen)
    reference = torch.bincount(x.long() if x.dtype != torch.int64 else x, minlength=case.bins)
    inputs = rotation(x, l2_bytes)
    for name in case.contenders:
        case.cells[name] = measure(name, inputs, case.bins, reference, cub, cfg, case.section)
    del x, inputs, reference
    release()


def small_calls(cfg: Config) -> Dict[str, Dict[str, Cell]]:
    """Host time per call of small int64 inputs (expert ids), 200 calls and one synchronize."""
    scratch = torch.empty(1, device=DEVICE)
    rows = {}
    for n in [s for s in cfg.sizes if s <= cfg.small_max]:
        for bins in (8, 256):
            x = torch.randint(0, bins, (n,), device=DEVICE)
            xf = x.float()
            row = {
                "auto": host_us(lambda: torch_dsmhist.histogram(x, bins)),
                "op": host_us(lambda: torch.ops.dsmhist.histogram(x, bins)),
                "bincount": host_us(lambda: torch.bincount(x, minlength=bins)),
                "histc": host_us(lambda: torch.histc(xf, bins, 0, bins)),
                "empty": host_us(scratch.zero_),
            }
            if not torch.equal(torch_dsmhist.histogram(x, bins), torch.bincount(x, minlength=bins)):
                row["auto"] = Cell(row["auto"].value, "FAIL", "result differs from torch.bincount")
            rows[f"{n}, {bins}"] = row
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Bandwidth, report, plots
# ---------------------------------------------------------------------------------------------------------------


def bandwidths(n_bytes: int) -> Tuple[float, float]:
    """(read, copy) bandwidth in bytes/s over n_bytes: the faster of two read-only reductions (float32 sum, int32
    max; torch's int32 sum widens to int64 and does not reach the bandwidth), and a device-to-device copy."""
    x = torch.ones(n_bytes // 4, dtype=torch.float32, device=DEVICE)
    as_int = x.view(torch.int32)
    y = torch.empty_like(x)
    reads = [lambda: torch.sum(x), lambda: torch.amax(as_int)]
    for fn in reads + [lambda: y.copy_(x)]:
        for _ in range(3):
            fn()
    read = max(n_bytes / (statistics.median(event_ms(fn, 15)) * 1e-3) for fn in reads)
    copy = 2 * n_bytes / (statistics.median(event_ms(lambda: y.copy_(x), 15)) * 1e-3)
    del x, as_int, y
    release()
    return read, copy


def speedups(cells: Dict[str, Cell]) -> Tuple[str, str]:
    """(best torch / auto, best other contender / auto) as text."""

    def ok(name: str) -> Optional[float]:
        return cells[name].measured if name in cells else None

    auto = ok("auto")
    torch_best = min(filter(None, (ok("bincount"), ok("histc"))), default=None)
    any_best = min(filter(None, (ok("bincount"), ok("histc"), ok("cub"))), default=None)
    show = lambda best: "—" if not auto or not best else f"{best / auto:.2f}x"  # noqa: E731
    return show(torch_best), show(any_best)


def table(rows: Sequence[Case], first: str, floor_ms: Callable[[Case], float]) -> List[str]:
    header = [first] + [LABELS[c] for c in CONTENDERS] + ["floor", "auto vs best torch", "auto vs best other"]
    body = []
    for case in rows:
        body.append(
            [case.label]
            + [case.cells[c].text() if c in case.cells else "" for c in CONTENDERS]
            + [fmt(floor_ms(case)), *speedups(case.cells)]
        )
    return md_table(header, body)


def render(
    cfg: Config,
    quick: bool,
    read_bw: float,
    copy_bw: float,
    boundaries: Tuple[int, int],
    done: List[Case],
    small: Dict[str, Dict[str, Cell]],
    cub: Cub,
    failures: List[str],
    seconds: float,
) -> str:
    props = torch.cuda.get_device_properties(0)
    shared, cluster = boundaries

    def floor_ms(case: Case) -> float:
        return case.n * torch.empty((), dtype=case.dtype).element_size() / read_bw * 1e3

    lines = ["# Benchmark suite" + (" (--quick: a smoke run, not reference numbers)" if quick else ""), ""]
    if failures:
        lines += ["**CORRECTNESS FAILURES:** " + "; ".join(failures), ""]
    lines += [
        f"- Device: {torch.cuda.get_device_name(0)}, {props.multi_processor_count} SMs, "
        f"L2 {props.L2_cache_size / 2**20:.0f} MiB; torch {torch.__version__}; torch_dsmhist "
        f"{torch_dsmhist.__version__}; date {today()}; git commit: {git_commit()}; {seconds:.0f} s",
        f"- HBM read bandwidth {read_bw / 1e12:.2f} TB/s (the faster of a float32 sum and an int32 max); copy {copy_bw / 1e12:.2f} TB/s "
        "(bytes read + written). Floor: reading the input once at the read bandwidth.",
        f"- Tier boundaries here: one block holds {shared} bins; the largest cluster {cluster}.",
        f"- CUB contender: {cub.source}. Median ms of {cfg.reps} CUDA-event timings after {cfg.warmup} warm-ups; "
        "inputs under twice the L2 rotate over up to 256 copies (so the smallest stay in L2, as freshly made data "
        "would). torch.histc on integer rows reads a float32 copy. n/a: the contender cannot run that case (see Notes).",
        "",
    ]
    if not quick:  # the targets are set at the full run's sizes
        index = {(c.section, c.distribution, c.label): c for c in done}

        def ms(section: str, distribution: str, label: str, contender: str) -> Optional[float]:
            case = index.get((section, distribution, label))
            return case.cells[contender].measured if case is not None and contender in case.cells else None

        lines += suite_targets.render(ms)
    for distribution in cfg.distributions:
        rows = [c for c in done if c.section == "bins" and c.distribution == distribution]
        if rows:
            lines += [f"## {distribution}: 2^{cfg.n.bit_length() - 1} int32 values, median ms by bins", ""]
            lines += table(rows, "bins", floor_ms)
    lines += ["## dtypes (uniform), median ms", ""] + table(
        [c for c in done if c.section == "dtypes"], "case", floor_ms
    )
    lines += [
        "## sizes (uniform int32), ms of device time per call (CUDA-graph replay of 20 calls, median of the replays)",
        "",
    ] + table([c for c in done if c.section == "sizes"], "n, bins", floor_ms)
    lines += ["## small calls, host-timed µs per call (int64 ids; `op`: torch.ops.dsmhist.histogram directly)", ""]
    names = ("auto", "op", "bincount", "histc", "empty")
    lines += md_table(
        ["n, bins"] + [LABELS.get(n, n) for n in names],
        ([key] + [row[n].text() for n in names] for key, row in small.items()),
    )
    notes: Dict[str, List[str]] = {}
    for case in done:
        for name, cell in case.cells.items():
            if cell.note:
                note = re.sub(r" \(bins=[^)]*\)", "", cell.note)  # one line per kind of note, not per bin count
                notes.setdefault(f"{'*' if cell.status == 'ok' else cell.status}: {note}", []).append(
                    f"{LABELS[name]} @ {case.section} {case.distribution} {case.label}"
                )
    lines += ["## Notes", ""] + [
        f"- {note} — {', '.join(where[:6])}{' …' if len(where) > 6 else ''}" for note, where in notes.items()
    ]
    lines += [
        "",
        "Plots: `benchmarks/plots/suite_*.png`. Reproduce: `python benchmarks/bench_suite.py` "
        "(`--quick` for a smoke run).",
    ]
    return "\n".join(lines) + "\n"


def plot(done: List[Case], cfg: Config, read_bw: float, folder: Path) -> List[Path]:
    groups = [
        (
            f"suite_bins_{d}.png",
            "bins",
            [c for c in done if c.section == "bins" and c.distribution == d],
            f"{d}, 2^{cfg.n.bit_length() - 1} int32",
        )
        for d in cfg.distributions
    ]
    groups += [
        (
            f"suite_sizes_{b}.png",
            "n",
            [c for c in done if c.section == "sizes" and c.bins == b],
            f"uniform int32, {b} bins",
        )
        for b in cfg.size_bins
    ]
    written = []
    for filename, axis, rows, title in groups:
        if not rows:
            continue
        series = {
            LABELS[name]: [
                (c.bins if axis == "bins" else c.n, c.n / (c.cells[name].measured * 1e-3))
                for c in rows
                if name in c.cells and c.cells[name].measured
            ]
            for name in CONTENDERS
        }
        path = folder / filename
        if not throughput_plot(
            path,
            series,
            f"{torch.cuda.get_device_name(0)}: {title}",
            axis,
            floor=(read_bw / 4, "floor: HBM read bandwidth / 4 B"),
            fontsize=7,
        ):
            return []
        written.append(path)
    return written


def main() -> int:
    args = gpu_benchmark_args(
        "bench_suite",
        __doc__,
        quick="a smaller sweep that fits in about two minutes",
        out_dir="also copy RESULTS.md and the plots into this directory",
        no_cub="leave CUB out",
    )
    if args is None:
        return 2
    cfg = QUICK if args.quick else FULL
    cub = Cub(not args.no_cub)
    read_bw, copy_bw = bandwidths(2**31 if not args.quick else 2**29)
    log(
        f"{torch.cuda.get_device_name(0)}: read {read_bw / 1e12:.2f} TB/s, copy {copy_bw / 1e12:.2f} TB/s; "
        f"CUB: {cub.source}"
    )
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    boundaries = device_boundaries()
    todo = cases(cfg, boundaries)
    done: List[Case] = []
    small: Dict[str, Dict[str, Cell]] = {}

    def report(complete: bool) -> Tuple[str, List[str]]:
        """Render and write what is measured so far (every case), so a run cut short still leaves its figures."""
        failures = [
            f"{LABELS[n]} @ {c.section} {c.distribution} {c.label}: {cell.status} ({cell.note})"
            for c in done
            for n, cell in c.cells.items()
            if cell.failed
        ]
        failures += [f"{key}: {cell.status}" for key, row in small.items() for cell in row.values() if cell.failed]
        if not complete:
            failures.append(f"INCOMPLETE RUN: {len(done)} of {len(todo)} cases measured so far")
        section = render(
            cfg, args.quick, read_bw, copy_bw, boundaries, done, small, cub, failures, time.perf_counter() - STARTED
        )
        write_results_section(SECTION, section, args.out_dir)
        return section, failures

    for case in progress([(f"{c.section} {c.distribution} {c.label}", c) for c in todo], "cases"):
        run_case(case[1], cub, cfg, l2_bytes)
        done.append(case[1])
        report(complete=False)
    small = small_calls(cfg)
    section, failures = report(complete=True)
    plots = plot(done, cfg, read_bw, HERE / "plots")
    copy_into(args.out_dir, plots)
    print(section)
    log(f"done in {time.perf_counter() - STARTED:.0f} s; plots: {', '.join(p.name for p in plots)}")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
