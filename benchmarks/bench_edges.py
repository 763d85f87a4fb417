#!/usr/bin/env python3
"""Bin edges and N-D histograms on the GPU (issue 50; the benchmark began with issue 16): torch_dsmhist.histogram_edges
/ histogramdd and their drop-ins against the ops' two-stage path, torch.bucketize + torch.bincount, CuPy and torch on
the CPU, beside the read floor and issue 50's targets.

    python benchmarks/bench_edges.py [--quick] [--out-dir DIR] [--seed S]

Cases (float32 from randn, int64 counts; --quick: each input 64x smaller, 2^20 values or points, 3-D 2^19): 1-D,
2^26 values over 100, 1000 and 10000 sorted non-uniform edges (a sorted randn sample, so the bins follow the data's
quantiles roughly) and over torch.linspace(-4, 4, 1001), 1000 equal-width bins; 2-D, 2^26 correlated points [N, 2]
with 64x64, 256x256 and 1024x1024 bins; 3-D, 2^25 correlated points [N, 3] with 16x16x16 bins (N-D edges: a sorted
randn sample of bins + 1 per dim). Contenders:
  * dsmhist: the op (histogram_edges, histogramdd) and the drop-in (dropins.histogram / dropins.histogramdd);
  * two stages: the same op call under `torch_dsmhist.force_tier(T)`, T "shared" up to 32768 bins in all, else
    "exchange" up to 262144, else "partition". On CUDA a forced tier makes the edges ops take their two-stage path (bin every point into an int32
    index buffer, then the index-mode histogram through that tier) instead of the fused one-pass path, so this
    column shows what fusing gained (the op itself takes the two stages for counts no one block holds from 2^24
    points: 1024x1024, where the two columns are one path);
  * op with min/max (the linspace case only): torch_dsmhist.histogram(x, 1000, min=-4, max=4), the same values
    counted into equal-width bins by arithmetic instead of a search of the edges;
  * bucketize + bincount: torch.bucketize(right=True) - 1 is torch.histogram's bin of [e_i, e_{i+1}); a value equal to
    the last edge is moved into the last bin (closed, as torch's), anything outside goes to a spare bin that is cut off
    after torch.bincount. N-D: each dim's index, linearised (row-major) into one bincount;
  * CuPy's cupy.histogram / cupy.histogramdd (numpy's rule, the same as torch's) when cupy imports, else n/a;
  * torch.histogram / torch.histogramdd on the CPU, on the first 1/16 of the input only (2^22 values; 3-D: 2^21
    points; --quick: 2^16 / 2^15), wall time;
  * the read floor: the input's bytes (values x 4, or points x dims x 4) at the measured device-to-device copy
    bandwidth.
Targets (issue 50): the op's time (<= 0.15 ms at 100 and 1000 edges, <= 0.35 ms at 10000, <= 0.25 ms at 64x64 and
256x256, <= 0.6 ms at 1024x1024, <= 0.2 ms at 16x16x16), >= 4.8x CuPy at 10000 edges, the op within 1.2x of the op
with min/max over linspace edges, and the N-D drop-in within 1.1x of the op.
Before anything is timed, the op on the CPU subset must equal torch's CPU result exactly, and every contender must
equal the op on the whole input; a torch_dsmhist mismatch (op, drop-in, two stages) is FAIL (exit 1), another
contender's (the op with min/max included: its equal-width arithmetic need not place a value next to an edge as
torch.linspace's rounded edges do) is noted beside its time. Times are medians of CUDA events after warm-up. Writes
its section of benchmarks/RESULTS.md and two plots under benchmarks/plots/ (edges_1d.png, edges_2d.png).
"""

import argparse
import contextlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import benchlib as bl
from benchlib import torch_dsmhist

SECTION = "edges-benchmark"  # this script's section of RESULTS.md
PLOTS = bl.HERE / "plots"
QUICK_SHIFT = 6  # --quick: each input 2^6 times smaller
CPU_SHIFT = 4  # torch CPU runs on the first 1/2^4 of each input
SHARED_MAX_BINS = 32768  # two stages: the shared tier up to this many bins in all, the exchange tier above
EXCHANGE_MAX_BINS = 262144  # ... and the partition tier above this (a forced exchange refused 1048576 bins, H200)
LINSPACE_RANGE = (-4.0, 4.0)  # the linspace case's edges span this range (all but ~6e-5 of randn's values)

# Contenders in table order, with their column labels.
LABELS = {
    "op": "dsmhist op",
    "dropin": "dsmhist drop-in",
    "stages": "two stages",
    "minmax": "op with min/max",
    "idiom": "bucketize + bincount",
    "cupy": "CuPy",
    "cpu": "torch CPU",
    "floor": "read floor",
}
OURS = ("op", "dropin", "stages")  # a mismatch or an error of these is FAIL / ERROR (exit 1)


@dataclass(frozen=True)
class Case:
    label: str
    dims: int  # 1: histogram over edges; D >= 2: a D-dim histogram of points [N, D]
    size: int  # 1-D: the number of edges; N-D: the bins per dim
    log2_n: int = 26  # the input: 2^log2_n values (1-D) or points (N-D), before --quick
    max_ms: Optional[float] = None  # the op's target time; None: no absolute target
    min_speedups: Tuple[Tuple[str, float], ...] = ()  # (contender, the factor the op must be faster by)
    within: Tuple[Tuple[str, float, str], ...] = ()  # (contender, factor F, reference): contender's ms <= F x ref's
    linspace: bool = False  # 1-D: edges torch.linspace(*LINSPACE_RANGE, size), also timed as the op with min/max

    @property
    def bins(self) -> int:
        """The bins in all (1-D: edges - 1; N-D: the product over dims)."""
        return self.size - 1 if self.dims == 1 else self.size**self.dims


DROPIN_WITHIN_OP = (("dropin", 1.1, "op"),)
CASES = (
    Case("100 non-uniform edges", 1, 100, max_ms=0.15),
    Case("1000 edges", 1, 1000, max_ms=0.15),
    Case("10000 edges", 1, 10000, max_ms=0.35, min_speedups=(("cupy", 4.8),)),
    Case("1000 bins, linspace edges", 1, 1001, within=(("op", 1.2, "minmax"),), linspace=True),
    Case("2-D, 64x64 bins", 2, 64, max_ms=0.25, within=DROPIN_WITHIN_OP),
    Case("2-D, 256x256 bins", 2, 256, max_ms=0.25, within=DROPIN_WITHIN_OP),
    Case("2-D, 1024x1024 bins", 2, 1024, max_ms=0.6, within=DROPIN_WITHIN_OP),
    Case("3-D, 16x16x16 bins", 3, 16, log2_n=25, max_ms=0.2, within=DROPIN_WITHIN_OP),
)


def sizes(case: Case, quick: bool) -> Tuple[int, int]:
    """(values or points of the case's input, of torch CPU's subset)."""
    n = 2 ** (case.log2_n - (QUICK_SHIFT if quick else 0))
    return n, n >> CPU_SHIFT


def input_bytes(case: Case, n: int) -> int:
    """The float32 input's bytes: values x 4 (1-D) or points x dims x 4 (N-D): what the read floor reads."""
    return n * case.dims * 4


def stages_tier(case: Case) -> str:
    """The tier forced for the two-stage contender (counts: shared while the bins fit it, exchange while its clusters
    hold them, else partition, which holds any bins)."""
    if case.bins <= SHARED_MAX_BINS:
        return "shared"
    return "exchange" if case.bins <= EXCHANGE_MAX_BINS else "partition"


@dataclass
class Result:
    case: Case
    cpu_scale: float = 1.0  # the op's input size / torch CPU's (the CPU contender runs on fewer values)
    cells: Dict[str, bl.Cell] = field(default_factory=dict)


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


def timed(result: Result, name: str) -> Optional[float]:
    """The contender's ms where it ran, matched or was only noted, and was timed; else None."""
    cell = result.cells.get(name)
    return None if cell is None else cell.measured


def speedup(result: Result, over: str) -> Optional[float]:
    """How many times faster the op is than `over` (None when either was not measured). The CPU contender ran on
    fewer values, so its time is scaled to the op's input size first."""
    ours, theirs = timed(result, "op"), timed(result, over)
    if ours is None or theirs is None:
        return None
    return theirs * (result.cpu_scale if over == "cpu" else 1.0) / ours


def target_text(case: Case) -> str:
    parts = [f"<= {bl.fmt(case.max_ms)} ms"] if case.max_ms is not None else []
    parts += [f">= {factor:g}x {LABELS[name]}" for name, factor in case.min_speedups]
    parts += [f"{LABELS[name]} <= {factor:g}x {LABELS[reference]}" for name, factor, reference in case.within]
    return ", ".join(parts)


def verdict(result: Result) -> str:
    """ "met", or "missed: ..." naming each target missed and by how much, or "not measured: ..." for what is
    missing."""
    case, ours = result.case, timed(result, "op")
    if ours is None:
        return "not measured: the op failed"
    misses: List[str] = []
    unknown: List[str] = []
    if case.max_ms is not None and ours > case.max_ms:
        misses.append(f"{bl.fmt(ours)} ms is {ours / case.max_ms:.2f}x the {bl.fmt(case.max_ms)} ms target")
    for name, factor in case.min_speedups:
        got = speedup(result, name)
        if got is None:
            unknown.append(LABELS[name])
        elif got < factor:
            misses.append(f"{got:.1f}x {LABELS[name]}, not {factor:g}x")
    for name, factor, reference in case.within:
        mine, theirs = timed(result, name), timed(result, reference)
        if mine is None or theirs is None:
            unknown += [LABELS[k] for k in (name, reference) if timed(result, k) is None and LABELS[k] not in unknown]
        elif mine > factor * theirs:
            misses.append(
                f"{LABELS[name]} {bl.fmt(mine)} ms is {mine / theirs:.2f}x {LABELS[reference]}'s {bl.fmt(theirs)} ms, "
                f"not <= {factor:g}x"
            )
    suffix = f" ({', '.join(unknown)} not measured)" if unknown else ""
    return ("missed: " + "; ".join(misses) if misses else "met") + suffix


def input_text(case: Case, n: int) -> str:
    return f"{n_label(n)} values" if case.dims == 1 else f"{n_label(n)} points [N, {case.dims}]"


def render(results: Sequence[Result], copy_bw: float, device: str, cupy_source: str, quick: bool) -> str:
    columns = ["op", "dropin", "stages", "minmax", "idiom", "cupy", "cpu", "floor"]
    header = (
        ["case", "input (float32)"]
        + [LABELS[c] for c in columns[:6]]
        + [
            f"torch CPU (first 1/{1 << CPU_SHIFT})",
            "read floor",
            "two stages / op",
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
            for r in (
                speedup(result, "stages"),
                speedup(result, "idiom"),
                speedup(result, "cupy"),
                speedup(result, "cpu"),
            )
        ]
        ours, floor = timed(result, "op"), timed(result, "floor")
        over_floor = f"{ours / floor:.1f}x" if ours is not None and floor is not None else ""
        n = sizes(result.case, quick)[0]
        rows.append(
            [result.case.label, input_text(result.case, n)]
            + cells
            + ratios
            + [over_floor, target_text(result.case), verdict(result)]
        )
    subsets = ", ".join(
        f"{n_label(n_cpu)} of {n_label(n)}"
        for n, n_cpu in sorted({sizes(r.case, quick) for r in results}, reverse=True)
    )
    lo, hi = LINSPACE_RANGE
    lines = [
        "## Bin edges and N-D histograms (issue 50): median ms of CUDA events" + (" (--quick sizes)" if quick else ""),
        "",
        f"- Device: {device}; torch {torch.__version__}; CuPy: {cupy_source}; date {bl.today()}; "
        f"git commit: {bl.git_commit()}",
        "- Input: float32 from randn, the size in the input column (N-D: points [N, D], each coordinate 0.6x the "
        "previous one + 0.8x a new randn, so they are correlated); edges: a sorted randn sample (1-D: that many edges; "
        f"N-D: bins + 1 per dim), or `torch.linspace({lo:g}, {hi:g}, 1001)` in the linspace case. Counts int64.",
        "- two stages: the op's call under `torch_dsmhist.force_tier(T)` (T: `shared` up to "
        f"{SHARED_MAX_BINS} bins in all, `exchange` up to {EXCHANGE_MAX_BINS}, else `partition`). On CUDA a forced tier makes the edges ops take their "
        "two-stage path (bin every point into an int32 index buffer, then the index-mode histogram through that tier) "
        "instead of the fused one-pass path, so `two stages / op` is what fusing gained (the op itself takes the two "
        "stages for counts no one block holds from 2^24 points, 1024x1024 here: there both are one path). Its result "
        "must equal the op's exactly.",
        f"- op with min/max (linspace case): `torch_dsmhist.histogram(x, 1000, min={lo:g}, max={hi:g})`, the same "
        "values counted into equal-width bins by arithmetic; compared with the op's result, a difference (a value next "
        "to an edge placed differently than by torch.linspace's rounded edges) is noted, not failed.",
        "- bucketize + bincount: `torch.bucketize(x, edges, right=True) - 1` (torch.histogram's `[e_i, e_{i+1})`), "
        "a value equal to the last edge moved into the last bin, values outside counted in a spare bin cut off after "
        "`torch.bincount`; N-D: the per-dim indices linearised into one bincount. CuPy: `cupy.histogram(x, edges)` / "
        "`cupy.histogramdd(points, bins=[edges...])` (numpy's rule, the same as torch's).",
        f"- torch CPU: torch.histogram / torch.histogramdd on the first 1/{1 << CPU_SHIFT} of each input only "
        f"({subsets} values or points; wall time); its ratio scales that time by {1 << CPU_SHIFT} to "
        "the full input. Read floor: the input's bytes (values x 4 B; points x dims x 4 B) at the device-to-device "
        f"copy bandwidth, {copy_bw / 1e12:.2f} TB/s (bytes read + written).",
        "- Checked before timing: the op on the CPU subset equals torch's CPU result; every contender equals the op "
        "on the whole input (differences are noted below the table).",
        "",
    ]
    lines += bl.md_table(header, rows)
    if notes:
        lines += ["Notes:", ""] + notes + [""]
    lines += [
        "Plots: [1-D](plots/edges_1d.png), [2-D](plots/edges_2d.png) (the linspace and 3-D cases are in the table "
        "only). Reproduce: `python benchmarks/bench_edges.py` (or `bash benchmarks/device_run.sh edges`)."
    ]
    return "\n".join(lines) + "\n"


def n_label(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def plot(results: Sequence[Result], copy_bw: float, quick: bool) -> List[Path]:
    """Throughput against edges (1-D) and bins per dim (2-D). The linspace case (1001 edges, beside the 1000-edge
    case) and the 3-D case (one size, 12-byte points under another floor) are left to the table."""
    written = []
    for dims, name, xlabel in ((1, "edges_1d.png", "edges"), (2, "edges_2d.png", "bins per dim")):
        chosen = [r for r in results if r.case.dims == dims and not r.case.linspace]
        if not chosen:
            continue
        series: Dict[str, List[Tuple[float, float]]] = {}
        for result in chosen:
            n, n_cpu = sizes(result.case, quick)
            for key, cell in result.cells.items():
                if key in ("floor", "minmax") or cell.measured is None:
                    continue
                count = n_cpu if key == "cpu" else n
                label = LABELS[key] + (f" (first 1/{1 << CPU_SHIFT})" if key == "cpu" else "")
                series.setdefault(label, []).append((result.case.size, count / (cell.measured * 1e-3)))
        unit = "values" if dims == 1 else "points"
        item_bytes = input_bytes(chosen[0].case, 1)
        if bl.throughput_plot(
            PLOTS / name,
            series,
            f"{dims}-D histogram over edges, {n_label(sizes(chosen[0].case, quick)[0])} float32 {unit}",
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
        return None, f"unusable ({bl.first_line(error)})"


def make_inputs(case: Case, n: int, gen: torch.Generator) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """(values [n] or points [n, D], edges per dim) on the device."""
    if case.dims == 1:
        values = torch.randn(n, generator=gen, device="cuda")
        if case.linspace:
            return values, [torch.linspace(*LINSPACE_RANGE, case.size, device="cuda")]
        return values, [torch.randn(case.size, generator=gen, device="cuda").sort().values]
    coords = [torch.randn(n, generator=gen, device="cuda")]
    for _ in range(case.dims - 1):
        coords.append(0.6 * coords[-1] + 0.8 * torch.randn(n, generator=gen, device="cuda"))
    points = torch.stack(coords, dim=1)
    del coords
    return points, [torch.randn(case.size + 1, generator=gen, device="cuda").sort().values for _ in range(case.dims)]


def contenders(case: Case, data: torch.Tensor, edges: List[torch.Tensor], cupy) -> Dict[str, Callable]:
    """Calls returning int64 counts of the whole input, by contender ("stages" is the op's call: measure() runs it
    under force_tier)."""
    if case.dims == 1:
        op = lambda: torch_dsmhist.histogram_edges(data, edges[0])
        calls = {"op": op, "dropin": lambda: torch_dsmhist.dropins.histogram(data, edges[0]).hist, "stages": op}
        if case.linspace:
            lo, hi = LINSPACE_RANGE
            calls["minmax"] = lambda: torch_dsmhist.histogram(data, case.size - 1, min=lo, max=hi)
        calls["idiom"] = lambda: bucketize_bincount(data, edges[0])
    else:
        op = lambda: torch_dsmhist.histogramdd(data, edges)
        calls = {
            "op": op,
            "dropin": lambda: torch_dsmhist.dropins.histogramdd(data, bins=edges).hist,
            "stages": op,
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


def check_and_time(name: str, call: Callable, expected: torch.Tensor, warmup: int, reps: int) -> Tuple[bl.Cell, bool]:
    """The contender's cell, timed only once its result was checked against the op's; and whether it is a
    torch_dsmhist result that was wrong (or raised)."""
    ours = name in OURS
    try:
        got = as_counts(call())
    except Exception as error:  # another library running out of memory must not stop the benchmark
        return bl.Cell(status="ERROR" if ours else "n/a", note=bl.first_line(error)), ours
    differing = int((got != expected).sum())
    del got
    if differing and ours:
        return bl.Cell(status="FAIL", note=f"{differing} bins differ from the op"), True
    note = f"{differing} bins differ from the op" if differing else ""
    if differing and name == "minmax":
        note += " (its equal-width arithmetic against torch.linspace's rounded edges: a different contender)"
    return bl.Cell(bl.median_event_ms(call, warmup, reps), note=note), False


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
        result.cells["op"] = bl.Cell(status="FAIL", note=f"differs from torch's CPU result on {n_label(n_cpu)} values")
        return result, wrong
    result.cells["cpu"] = bl.Cell(bl.wall_median_ms(cpu_call, reps=5))

    calls = contenders(case, data, edges, cupy)
    expected = as_counts(calls["op"]())
    for name, call in calls.items():
        # The two-stage contender is checked and timed inside one force_tier block, so entering it is not timed.
        forced = torch_dsmhist.force_tier(stages_tier(case)) if name == "stages" else contextlib.nullcontext()
        with forced:
            result.cells[name], failed = check_and_time(name, call, expected, warmup, reps)
        wrong |= failed
    del expected
    result.cells["floor"] = bl.Cell(input_bytes(case, data.shape[0]) / copy_bw * 1e3)
    return result, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="inputs 64x smaller (2^20 values), 5 timed runs")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md and the plots into this directory")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_edges needs a CUDA device")
        return 2
    warmup, reps = (2, 5) if args.quick else (3, 15)
    cupy, cupy_source = load_cupy()
    copy_bw = bl.copy_bandwidth(max(input_bytes(c, sizes(c, args.quick)[0]) for c in CASES))
    bl.log(f"{torch.cuda.get_device_name()}: copy {copy_bw / 1e12:.2f} TB/s; CuPy {cupy_source}; seed {args.seed}")
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    results, failed = [], False
    for (case,) in bl.progress([(c,) for c in CASES], "bench_edges"):
        n, n_cpu = sizes(case, args.quick)
        data, edges = make_inputs(case, n, gen)
        result, wrong = measure(case, data, edges, cupy, n_cpu, copy_bw, warmup, reps)
        failed |= wrong
        results.append(result)
        bl.log(
            f"{case.label}: "
            + ", ".join(f"{LABELS[k]} {c.text()}" for k, c in result.cells.items())
            + f" -> {verdict(result)}"
        )
        del data, edges
        bl.release()
    section = render(results, copy_bw, torch.cuda.get_device_name(), cupy_source, args.quick)
    bl.write_results_section(SECTION, section, args.out_dir)
    bl.copy_into(args.out_dir, plot(results, copy_bw, args.quick))
    print(section)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
