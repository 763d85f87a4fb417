#!/usr/bin/env python3
"""Bin edges and N-D histograms on the GPU (issue 16): torch_dsmhist.histogram_edges / histogramdd and their drop-ins
against torch.bucketize + torch.bincount, CuPy and torch on the CPU, beside the read floor and the issue's targets.

    python benchmarks/bench_edges.py [--quick] [--out-dir DIR] [--seed S]

Cases (2^26 float32 values drawn from randn; --quick: 2^20): 1-D over 100, 1000 and 10000 sorted non-uniform edges
(a sorted randn sample, so the bins follow the data's quantiles roughly); 2-D over 2^26 correlated points with
64x64, 256x256 and 1024x1024 bins (a sorted randn sample per dim). Contenders:
  * dsmhist: the op (histogram_edges, histogramdd) and the drop-in (dropins.histogram / dropins.histogramdd);
  * bucketize + bincount: torch.bucketize(right=True) - 1 is torch.histogram's bin of [e_i, e_{i+1}); a value equal to
    the last edge is moved into the last bin (closed, as torch's), anything outside goes to a spare bin that is cut off
    after torch.bincount. 2-D: each dim's index, linearised (row-major) into one bincount;
  * CuPy's cupy.histogram / cupy.histogramdd (numpy's rule, the same as torch's) when cupy imports, else n/a;
  * torch.histogram / torch.histogramdd on the CPU, on the first 2^22 values only (--quick: 2^16), wall time;
  * the read floor: the input's bytes at the measured device-to-device copy bandwidth;
  * for 1024x1024: the 1-D op on 2^26 uniform int32 values over 1048576 bins, the target the 2-D case must meet.
Before anything is timed, the op on the CPU subset must equal torch's CPU result exactly, and every contender must
equal the op on the whole input; a torch_dsmhist mismatch is FAIL (exit 1), another library's is noted beside its time.
Times are medians of CUDA events after warm-up. Writes its section of benchmarks/RESULTS.md and two plots under
benchmarks/plots/ (edges_1d.png, edges_2d.png).
"""

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from benchlib import (
    HERE,
    Cell,
    copy_bandwidth,
    first_line,
    fmt,
    git_commit,
    log,
    md_table,
    median_event_ms,
    progress,
    release,
    throughput_plot,
    today,
    torch_dsmhist,
    wall_median_ms,
    write_results_section,
)

SECTION = "edges-benchmark"  # this script's section of RESULTS.md
PLOTS = HERE / "plots"
ONE_MILLION_BINS = 1 << 20

# Contenders in table order, with their column labels.
LABELS = {
    "op": "dsmhist op",
    "dropin": "dsmhist drop-in",
    "idiom": "bucketize + bincount",
    "cupy": "CuPy",
    "cpu": "torch CPU",
    "floor": "read floor",
    "op_1m": "1-D op, 1M bins",
}
OURS = ("op", "dropin", "op_1m")


@dataclass(frozen=True)
class Case:
    label: str
    dims: int  # 1: histogram over edges; 2: a 2-D histogram
    size: int  # 1-D: the number of edges; 2-D: the bins per dim
    max_ms: Optional[float] = None  # the op's target time; None: no absolute target
    min_speedups: Tuple[Tuple[str, float], ...] = ()  # (contender, the factor the op must be faster by)
    versus_one_million_bins: bool = False  # the op must be no slower than the 1-D op at 1M bins


CASES = (
    Case("100 non-uniform edges", 1, 100, 0.15, (("cupy", 7.0),)),
    Case("1000 edges", 1, 1000, 0.15, (("cupy", 7.0),)),
    Case("10000 edges", 1, 10000, 0.25, (("cupy", 7.0),)),
    Case("2-D, 64x64 bins", 2, 64, 0.3, (("cupy", 30.0), ("idiom", 14.0))),
    Case("2-D, 256x256 bins", 2, 256, 0.3, (("cupy", 30.0), ("idiom", 14.0))),
    Case("2-D, 1024x1024 bins", 2, 1024, versus_one_million_bins=True),
)


@dataclass
class Result:
    case: Case
    cpu_scale: float = 1.0  # the op's input size / torch CPU's (the CPU contender runs on fewer values)
    cells: Dict[str, Cell] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------
# The torch idiom (pure torch: runs on any device, so its rule is checked on the CPU by tests/test_benchmarks.py)
# ---------------------------------------------------------------------------------------------------------------


def edge_bin_index(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """torch.histogram's bin of each value (int64): i for edges[i] <= v < edges[i+1], the last bin closed; -1 below
    the first edge, len(edges) - 1 above the last edge and for NaN."""
    bins = edges.numel() - 1
    # bucketize copies a strided input to contiguous memory anyway (a 2-D column); copying here says so, unwarned.
    index = torch.bucketize(values.contiguous(), edges, right=True) - 1  # the last i with edges[i] <= v
    return torch.where(values == edges[-1], bins - 1, index)


def bucketize_bincount(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """The 1-D histogram over `edges` with torch.bucketize and torch.bincount (int64 counts)."""
    bins = edges.numel() - 1
    index = edge_bin_index(values, edges)
    index = torch.where((index >= 0) & (index < bins), index, bins)  # outside: the spare bin, cut off below
    return torch.bincount(index, minlength=bins + 1)[:bins]


def linearised_bincount(points: torch.Tensor, edges: Sequence[torch.Tensor]) -> torch.Tensor:
    """The N-D histogram of points [N, D]: each dim's bucketize index, linearised row-major into one bincount."""
    shape = [e.numel() - 1 for e in edges]
    total = 1
    for bins in shape:
        total *= bins
    flat = torch.zeros(points.shape[0], dtype=torch.int64, device=points.device)
    inside = torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    for d, (dim_edges, bins) in enumerate(zip(edges, shape)):
        index = edge_bin_index(points[:, d], dim_edges)
        inside &= (index >= 0) & (index < bins)
        flat = flat * bins + index
    flat = torch.where(inside, flat, total)
    return torch.bincount(flat, minlength=total + 1)[:total].view(shape)


# ---------------------------------------------------------------------------------------------------------------
# Verdicts and the RESULTS.md section (pure python)
# ---------------------------------------------------------------------------------------------------------------


def speedup(result: Result, over: str) -> Optional[float]:
    """How many times faster the op is than `over` (None when either was not measured). The CPU contender ran on
    fewer values, so its time is scaled to the op's input size first."""
    ours, theirs = result.cells.get("op"), result.cells.get(over)
    if ours is None or theirs is None or ours.value is None or theirs.value is None or ours.failed:
        return None
    return theirs.value * (result.cpu_scale if over == "cpu" else 1.0) / ours.value


def target_text(case: Case) -> str:
    parts = [f"<= {fmt(case.max_ms)} ms"] if case.max_ms is not None else []
    parts += [f">= {factor:g}x {LABELS[name]}" for name, factor in case.min_speedups]
    if case.versus_one_million_bins:
        parts.append(f"<= {LABELS['op_1m']}")
    return ", ".join(parts)


def verdict(result: Result) -> str:
    """ "met", or "missed: ..." naming each target missed and by how much, or "not measured: ..." for what is
    missing."""
    case, ours = result.case, result.cells.get("op")
    if ours is None or ours.value is None or ours.failed:
        return "not measured: the op failed"
    misses, unknown = [], []
    if case.max_ms is not None and ours.value > case.max_ms:
        misses.append(f"{fmt(ours.value)} ms is {ours.value / case.max_ms:.2f}x the {fmt(case.max_ms)} ms target")
    for name, factor in case.min_speedups:
        got = speedup(result, name)
        if got is None:
            unknown.append(LABELS[name])
        elif got < factor:
            misses.append(f"{got:.1f}x {LABELS[name]}, not {factor:g}x")
    if case.versus_one_million_bins:
        reference = result.cells.get("op_1m")
        if reference is None or reference.value is None or reference.failed:
            unknown.append(LABELS["op_1m"])
        elif ours.value > reference.value:
            misses.append(f"{ours.value / reference.value:.2f}x the 1-D op's {fmt(reference.value)} ms at 1M bins")
    if misses:
        return "missed: " + "; ".join(misses) + (f" ({', '.join(unknown)} not measured)" if unknown else "")
    return "met" + (f" ({', '.join(unknown)} not measured)" if unknown else "")


def render(
    results: Sequence[Result], n: int, n_cpu: int, copy_bw: float, device: str, cupy_source: str, quick: bool
) -> str:
    columns = ["op", "dropin", "idiom", "cupy", "cpu", "floor", "op_1m"]
    header = (
        [f"case ({n_label(n)} float32)"]
        + [LABELS[c] for c in columns[:4]]
        + [
            f"torch CPU ({n_label(n_cpu)} values)",
            "read floor",
            LABELS["op_1m"],
            "op vs idiom",
            "op vs CuPy",
            "op vs torch CPU (scaled)",
            "op / floor",
            "target",
            "verdict",
        ]
    )
    rows, notes = [], []
    for result in results:
        cells = []
        for name in columns:
            cell = result.cells.get(name)
            cells.append("" if cell is None else cell.text())
            if cell is not None and cell.note:
                notes.append(f"- {result.case.label}, {LABELS[name]}: {cell.note}")
        ratios = [
            f"{r:.1f}x" if r is not None else ""
            for r in (speedup(result, "idiom"), speedup(result, "cupy"), speedup(result, "cpu"))
        ]
        ours, floor = result.cells.get("op"), result.cells.get("floor")
        over_floor = (
            f"{ours.value / floor.value:.1f}x"
            if ours and floor and ours.value and floor.value and not ours.failed
            else ""
        )
        rows.append([result.case.label] + cells + ratios + [over_floor, target_text(result.case), verdict(result)])
    lines = [
        "## Bin edges and N-D histograms (issue 16): median ms of CUDA events" + (" (--quick sizes)" if quick else ""),
        "",
        f"- Device: {device}; torch {torch.__version__}; CuPy: {cupy_source}; date {today()}; "
        f"git commit: {git_commit()}",
        f"- Input: {n_label(n)} float32 values from randn (2-D: {n_label(n)} points [N, 2], the second coordinate "
        "correlated with the first); edges: a sorted randn sample (1-D: that many edges; 2-D: bins + 1 per dim). "
        "Counts int64.",
        "- bucketize + bincount: `torch.bucketize(x, edges, right=True) - 1` (torch.histogram's `[e_i, e_{i+1})`), "
        "a value equal to the last edge moved into the last bin, values outside counted in a spare bin cut off after "
        "`torch.bincount`; 2-D: the per-dim indices linearised into one bincount. CuPy: `cupy.histogram(x, edges)` / "
        "`cupy.histogramdd(points, bins=[edges...])` (numpy's rule, the same as torch's).",
        f"- torch CPU: torch.histogram / torch.histogramdd on the first {n_label(n_cpu)} values only (wall time); its "
        f"ratio scales that time by {n // n_cpu} to the full input. Read floor: the input's bytes at the "
        f"device-to-device copy bandwidth, {copy_bw / 1e12:.2f} TB/s (bytes read + written).",
        "- Checked before timing: the op on the CPU subset equals torch's CPU result; every contender equals the op "
        "on the whole input (differences are noted below the table).",
        "",
    ]
    lines += md_table(header, rows)
    if notes:
        lines += ["Notes:", ""] + notes + [""]
    lines += [
        "Plots: [1-D](plots/edges_1d.png), [2-D](plots/edges_2d.png). "
        "Reproduce: `python benchmarks/bench_edges.py` (or `bash benchmarks/device_run.sh edges`)."
    ]
    return "\n".join(lines) + "\n"


def n_label(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def plot(results: Sequence[Result], n: int, n_cpu: int, copy_bw: float) -> List[Path]:
    written = []
    for dims, name, xlabel, item_bytes in ((1, "edges_1d.png", "edges", 4), (2, "edges_2d.png", "bins per dim", 8)):
        series: Dict[str, List[Tuple[float, float]]] = {}
        for result in (r for r in results if r.case.dims == dims):
            for key, cell in result.cells.items():
                if key in ("floor", "op_1m") or cell.value is None or cell.failed:
                    continue
                count = n_cpu if key == "cpu" else n
                label = LABELS[key] + (f" ({n_label(n_cpu)} values)" if key == "cpu" else "")
                series.setdefault(label, []).append((result.case.size, count / (cell.value * 1e-3)))
        unit = "values" if dims == 1 else "points"
        if throughput_plot(
            PLOTS / name,
            series,
            f"{dims}-D histogram over edges, {n_label(n)} float32 {unit}",
            xlabel,
            ylabel=f"{unit} / s",
            floor=(copy_bw / item_bytes, f"read floor (copy bandwidth / {item_bytes} B)"),
        ):
            written.append(PLOTS / name)
    return written


# ---------------------------------------------------------------------------------------------------------------
# Measuring (CUDA only)
# ---------------------------------------------------------------------------------------------------------------


def load_cupy():
    """(cupy, description) or (None, why not)."""
    if importlib.util.find_spec("cupy") is None:
        return None, "not installed (column n/a)"
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        accelerators = os.environ.get("CUPY_ACCELERATORS", "CuPy's default")
        return cupy, f"{cupy.__version__} (CUPY_ACCELERATORS: {accelerators})"
    except Exception as error:  # an installed but unusable CuPy (wrong CUDA major) leaves its column n/a
        return None, f"unusable ({first_line(error)})"


def make_inputs(case: Case, n: int, gen: torch.Generator) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """(values [n] or points [n, 2], edges per dim) on the device."""
    if case.dims == 1:
        values = torch.randn(n, generator=gen, device="cuda")
        return values, [torch.randn(case.size, generator=gen, device="cuda").sort().values]
    first = torch.randn(n, generator=gen, device="cuda")
    second = 0.6 * first + 0.8 * torch.randn(n, generator=gen, device="cuda")
    points = torch.stack([first, second], dim=1)
    return points, [torch.randn(case.size + 1, generator=gen, device="cuda").sort().values for _ in range(2)]


def contenders(case: Case, data: torch.Tensor, edges: List[torch.Tensor], cupy) -> Dict[str, Callable]:
    """Calls returning int64 counts of the whole input, by contender."""
    if case.dims == 1:
        calls = {
            "op": lambda: torch_dsmhist.histogram_edges(data, edges[0]),
            "dropin": lambda: torch_dsmhist.dropins.histogram(data, edges[0]).hist,
            "idiom": lambda: bucketize_bincount(data, edges[0]),
        }
    else:
        calls = {
            "op": lambda: torch_dsmhist.histogramdd(data, edges),
            "dropin": lambda: torch_dsmhist.dropins.histogramdd(data, bins=edges).hist,
            "idiom": lambda: linearised_bincount(data, edges),
        }
    if cupy is not None:
        cdata, cedges = cupy.from_dlpack(data), [cupy.from_dlpack(e) for e in edges]
        if case.dims == 1:
            calls["cupy"] = lambda: cupy.histogram(cdata, cedges[0])[0]
        else:
            calls["cupy"] = lambda: cupy.histogramdd(cdata, bins=cedges)[0]
    return calls


def as_counts(result) -> torch.Tensor:
    return (result if isinstance(result, torch.Tensor) else torch.from_dlpack(result)).to(torch.int64)


def measure(
    case: Case, data: torch.Tensor, edges: List[torch.Tensor], cupy, n_cpu: int, copy_bw: float, warmup: int, reps: int
) -> Tuple[Result, bool]:
    """The case's cells, and whether a torch_dsmhist result was wrong."""
    result, wrong = Result(case, cpu_scale=data.shape[0] / n_cpu), False
    cpu_data, cpu_edges = data[:n_cpu].cpu(), [e.cpu() for e in edges]
    if case.dims == 1:
        cpu_call = lambda: torch.histogram(cpu_data, cpu_edges[0]).hist  # noqa: E731
        ours_on_subset = torch_dsmhist.histogram_edges(data[:n_cpu], edges[0])
    else:
        cpu_call = lambda: torch.histogramdd(cpu_data, bins=cpu_edges).hist  # noqa: E731
        ours_on_subset = torch_dsmhist.histogramdd(data[:n_cpu], edges)
    if not torch.equal(ours_on_subset.cpu(), cpu_call().to(torch.int64)):
        wrong = True
        result.cells["op"] = Cell(status="FAIL", note=f"differs from torch's CPU result on {n_label(n_cpu)} values")
        return result, wrong
    result.cells["cpu"] = Cell(wall_median_ms(cpu_call, reps=5))

    calls = contenders(case, data, edges, cupy)
    expected = as_counts(calls["op"]())
    for name, call in calls.items():
        try:
            got = as_counts(call())
        except Exception as error:  # another library running out of memory must not stop the benchmark
            wrong |= name in OURS
            result.cells[name] = Cell(status="ERROR" if name in OURS else "n/a", note=first_line(error))
            continue
        differing = int((got != expected).sum())
        if differing and name in OURS:
            wrong = True
            result.cells[name] = Cell(status="FAIL", note=f"{differing} bins differ from the op")
            continue
        del got
        note = f"{differing} bins differ from the op" if differing else ""
        result.cells[name] = Cell(median_event_ms(call, warmup, reps), note=note)
    del expected
    result.cells["floor"] = Cell(data.numel() * data.element_size() / copy_bw * 1e3)
    if case.versus_one_million_bins:
        ids = torch.randint(0, ONE_MILLION_BINS, (data.shape[0],), device="cuda", dtype=torch.int32)
        call = lambda: torch_dsmhist.histogram(ids, ONE_MILLION_BINS)  # noqa: E731
        if torch.equal(call(), torch.bincount(ids, minlength=ONE_MILLION_BINS)):
            result.cells["op_1m"] = Cell(median_event_ms(call, warmup, reps))
        else:
            wrong = True
            result.cells["op_1m"] = Cell(status="FAIL", note="differs from torch.bincount")
    return result, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2^20 values (2^16 on the CPU), 5 timed runs")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md and the plots into this directory")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_edges needs a CUDA device")
        return 2
    n, n_cpu = (2**20, 2**16) if args.quick else (2**26, 2**22)
    warmup, reps = (2, 5) if args.quick else (3, 15)
    cupy, cupy_source = load_cupy()
    copy_bw = copy_bandwidth(8 * n)
    log(f"{torch.cuda.get_device_name()}: copy {copy_bw / 1e12:.2f} TB/s; CuPy {cupy_source}; seed {args.seed}")
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    results, failed = [], False
    for (case,) in progress([(c,) for c in CASES], "bench_edges"):
        data, edges = make_inputs(case, n, gen)
        result, wrong = measure(case, data, edges, cupy, n_cpu, copy_bw, warmup, reps)
        failed |= wrong
        results.append(result)
        log(
            f"{case.label}: "
            + ", ".join(f"{LABELS[k]} {c.text()}" for k, c in result.cells.items())
            + f" -> {verdict(result)}"
        )
        del data, edges
        release()
    section = render(results, n, n_cpu, copy_bw, torch.cuda.get_device_name(), cupy_source, args.quick)
    write_results_section(SECTION, section, args.out_dir)
    for path in plot(results, n, n_cpu, copy_bw):
        if args.out_dir:
            args.out_dir.mkdir(parents=True, exist_ok=True)
            (args.out_dir / path.name).write_bytes(path.read_bytes())
    print(section)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
