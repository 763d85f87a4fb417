"""What every benchmark script shares: the package import, device facts, the command line and exit status, timing
(CUDA events, host clocks), inputs (the suite's distributions, L2-rotating copies, the device's tier boundaries), the
contenders (torch.bincount, torch.histc, a forced tier, CUB), result cells and tables, the marked section of
RESULTS.md a script owns, and throughput plots. The scripts import this module and never each other, so any of them
can run first.
"""

import argparse
import ctypes
import datetime
import hashlib
import importlib.util
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch  # before torch_dsmhist: the extension links against torch's libraries

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
try:
    import torch_dsmhist
except ImportError:  # an in-place build in the repository root
    sys.path.append(str(HERE.parent))
    import torch_dsmhist
from torch_dsmhist._api import tier_table  # noqa: E402

try:
    from tqdm import tqdm
except ImportError:
    tqdm = None

__all__ = ["torch_dsmhist", "tier_table"]  # re-exported: scripts take the package from here, already importable

# ---------------------------------------------------------------------------------------------------------------
# Device and run facts
# ---------------------------------------------------------------------------------------------------------------


def git_commit() -> str:
    """The short commit of the benchmarked tree ("-dirty" when tracked files differ), DSMHIST_COMMIT when set (a
    copy of the tree with no .git), else "unknown"."""
    if os.environ.get("DSMHIST_COMMIT"):
        return os.environ["DSMHIST_COMMIT"]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        return git("rev-parse", "--short", "HEAD").strip() + ("-dirty" if git("status", "--porcelain", "-uno") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def today() -> str:
    return datetime.date.today().isoformat()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def run_facts() -> str:
    """The run as a results section states it, one sentence: "<device>, torch <version>, <date>, commit <commit>"."""
    return f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {today()}, commit {git_commit()}."


def tier_names(planner_only: bool = False) -> Tuple[str, ...]:
    """The extension's tiers in the planner's order (only those the planner may pick, when asked)."""
    return tuple(tier.name for tier in tier_table() if tier.planner_may_pick or not planner_only)


# ---------------------------------------------------------------------------------------------------------------
# Command line, progress and errors
# ---------------------------------------------------------------------------------------------------------------

OUT_DIR_HELP = "also copy RESULTS.md into this directory"


def gpu_benchmark_args(script: str, doc: str, **options: str) -> Optional[argparse.Namespace]:
    """Parse the command line of the GPU benchmark `script`, whose docstring is `doc` (its first line describes the
    script in --help). None, after saying that `script` needs a CUDA device, when there is none: the script then
    measures nothing (--help still works without one).

    Each keyword names an option and gives its help text; --help lists them in the order given. `out_dir` is
    --out-dir, a directory (args.out_dir: a Path, or None), listed first with OUT_DIR_HELP unless given; any other
    keyword is a switch (no_cub: --no-cub, args.no_cub: a bool). Scripts with options of other kinds build their own
    parser."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if "out_dir" not in options:
        options = {"out_dir": OUT_DIR_HELP, **options}
    for name, help_text in options.items():
        flag = "--" + name.replace("_", "-")
        if name == "out_dir":
            parser.add_argument(flag, type=Path, help=help_text)
        else:
            parser.add_argument(flag, action="store_true", help=help_text)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA device")
        return None
    return args


def log(message: str) -> None:
    (tqdm.write if tqdm is not None else print)(message)


def progress(items: Sequence[Tuple[Any, ...]], desc: str) -> Iterator[Tuple[Any, ...]]:
    """Iterate over (label, ...) tuples with a tqdm bar, or a printed line per item."""
    if tqdm is not None:
        yield from tqdm(items, desc=desc, leave=False)
        return
    for i, item in enumerate(items, 1):
        print(f"{desc} [{i}/{len(items)}] {item[0]}", flush=True)
        yield item


def first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def exit_status(failures: Sequence[str]) -> int:
    """A script's exit status after its correctness failures, each printed to stderr: 1 when there was one, else 0."""
    for failure in failures:
        print(f"CORRECTNESS FAILURE: {failure}", file=sys.stderr)
    return 1 if failures else 0


def release() -> None:
    """Wait for the device and give cached memory back (between cases, so one case's inputs do not crowd the next)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------


def event_ms(fn: Callable[[], object], runs: int) -> List[float]:
    """GPU time of each of `runs` back-to-back calls, in ms, from CUDA events."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def graph_ms(fn: Callable[[], object], reps: int, calls_per_graph: int = 20) -> float:
    """Device time of one call in ms: `calls_per_graph` calls captured once in a CUDA graph (after warm-up on a side
    stream), the median of `reps` replays divided by the calls. No host launch overhead is in it, as for a caller
    that replays graphs (a model under CUDA graphs). Raises RuntimeError for a call that cannot be captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_graph):
            fn()
    graph.replay()
    return statistics.median(event_ms(graph.replay, reps)) / calls_per_graph


def median_event_ms(fn: Callable[[], object], warmup: int, reps: int) -> float:
    """Median of `reps` CUDA-event timings after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(event_ms(fn, reps))


def copy_bandwidth(n_bytes: int, warmup: int = 3, reps: int = 15) -> float:
    """Bytes/s of a device-to-device copy of n_bytes, counting bytes read + written: the rate a one-pass kernel that
    reads its input once can hope for, so input bytes / this is its floor."""
    src = torch.ones(n_bytes // 4, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    ms = median_event_ms(lambda: dst.copy_(src), warmup, reps)
    del src, dst
    release()
    return 2 * n_bytes / (ms * 1e-3)


def host_us(fn: Callable[[], object], calls: int = 200, batches: int = 5) -> "Cell":
    """Host time per call in µs: `calls` back-to-back calls in `batches` batches, each ended by one synchronize, after
    10 warm-ups; the median batch. One batch alone caught the host's hiccups (a 2.6x outlier on the H100 machine)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    per_batch = max(1, calls // batches)
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / per_batch * 1e6)
    return Cell(statistics.median(times))


def wall_median_ms(fn: Callable[[], object], reps: int, slow_s: float = 2.0) -> float:
    """Median wall time in ms of `reps` calls after one warm-up (CPU work); a warm-up slower than slow_s is followed
    by one timed call only."""
    start = time.perf_counter()
    fn()
    if time.perf_counter() - start > slow_s:
        reps = 1
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


# ---------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------

DISTRIBUTIONS = ("uniform", "normal", "one_hot", "zipf", "sorted")


def make_values(
    distribution: str, n: int, bins: int, dtype: torch.dtype, gen: torch.Generator, device: str = "cuda"
) -> torch.Tensor:
    """n integer values in [0, bins) of `distribution`, as `dtype` (exact in float32 below 2^24 bins)."""
    if distribution == "uniform":
        v = torch.randint(0, bins, (n,), generator=gen, device=device)
    elif distribution == "normal":  # a bell over the middle of the bins, sigma = bins / 8
        v = (torch.randn(n, generator=gen, device=device) * (bins / 8) + bins / 2).round_().clamp_(0, bins - 1).long()
    elif distribution == "one_hot":
        v = torch.full((n,), 7 % bins, device=device, dtype=torch.int64)
    elif distribution == "zipf":  # log-uniform ranks: P(k) proportional to 1 / (k + 1), Zipf with s = 1
        u = torch.rand(n, generator=gen, device=device, dtype=torch.float64)
        v = torch.exp(u * math.log(bins + 1)).floor_().sub_(1).clamp_(0, bins - 1).long()
    elif distribution == "sorted":
        v = torch.randint(0, bins, (n,), generator=gen, device=device).sort().values
    else:
        raise ValueError(distribution)
    return v.to(dtype)


def rotation(x: torch.Tensor, l2_bytes: int) -> List[torch.Tensor]:
    """x and copies of it, enough that cycling through them reads more than twice the L2 cache between reuses."""
    copies = max(1, min(256, math.ceil(2 * l2_bytes / max(1, x.numel() * x.element_size()))))
    return [x] + [x.clone() for _ in range(copies - 1)]


def device_boundaries() -> Tuple[int, int]:
    """One block's shared-memory bins and the largest cluster's, on this device (the tier boundaries). Tier cluster
    keeps counts as 16-bit halves of 32-bit words (8 a 16-byte vector), so its blocks hold twice tier shared's."""
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    shared = optin // 4
    cluster = torch_dsmhist.plan(shared + 1)
    largest = shared
    if cluster.tier == "cluster":
        for size in range(16, 1, -1):
            try:
                with torch_dsmhist.force_tier("cluster", cluster_size=size):
                    largest = torch_dsmhist.plan(optin // 16 * 8 * size).bins_per_block * size
                break
            except ValueError:
                continue
    return shared, largest


# ---------------------------------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------------------------------


def contender_labels(tiers: Sequence[str], histc_label: str = "torch.histc", **others: str) -> Dict[str, str]:
    """Column labels of the histogram contenders: the planner's choice ("auto"), each of `tiers` forced,
    torch.bincount, torch.histc (labelled `histc_label`), any `others` (name=label) and the empty kernel (the launch
    cost)."""
    return {
        "auto": "dsmhist auto",
        **{tier: f"tier {tier}" for tier in tiers},
        "bincount": "torch.bincount",
        "histc": histc_label,
        **others,
        "empty": "empty kernel",
    }


def bincount(x: torch.Tensor, bins: int) -> torch.Tensor:
    return torch.bincount(x, minlength=bins)


def histc(x_float: torch.Tensor, bins: int) -> torch.Tensor:
    """torch.histc over [0, bins): the histogram of x's integer values when x is floating."""
    return torch.histc(x_float, bins, 0, bins)


def forced(
    tier: str,
    x: torch.Tensor,
    bins: int,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    cluster_size: Optional[int] = None,
) -> Callable[[], torch.Tensor]:
    """A no-argument call of torch_dsmhist.histogram on x with `tier` forced ("auto": the planner's choice)."""

    def call() -> torch.Tensor:
        with torch_dsmhist.force_tier(tier, cluster_size):
            return torch_dsmhist.histogram(x, bins, lo, hi)

    return call


def cuda_library(source_name: str) -> Tuple[ctypes.CDLL, str]:
    """benchmarks/<source_name> (a plain C ABI, no torch header) built once with nvcc for this device into build/bench,
    keyed by the source's digest, and loaded with ctypes. Returns the library and its file name. Raises OSError or
    subprocess.CalledProcessError when it cannot be built or loaded."""
    source = HERE / source_name
    digest = hashlib.sha1(source.read_bytes()).hexdigest()[:12]
    major, minor = torch.cuda.get_device_capability()
    target = HERE.parent / "build" / "bench" / f"{source.stem}_{digest}_sm{major}{minor}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        nvcc = os.environ.get("NVCC", "nvcc")
        log(f"building {source.name} with {nvcc} (once) ...")
        subprocess.run(
            [
                nvcc,
                "-O3",
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-std=c++17",
                f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}",
                "-o",
                str(target),
                str(source),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    return ctypes.CDLL(str(target)), target.name


class Cub:
    """CUB HistogramEven through benchmarks/cub_harness.cu (built once with nvcc, loaded with ctypes), or CuPy's
    histogram, or nothing."""

    def __init__(self, enabled: bool):
        self.library = None
        self.cupy = None
        self.source = "disabled (--no-cub)"
        if enabled:
            self._load()

    def _load(self) -> None:
        try:
            self.library, name = cuda_library("cub_harness.cu")
            self.source = f"CUB HistogramEven ({name}, built with nvcc)"
            return
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", "") or str(error)
            log(f"CUB harness unavailable ({detail.strip().splitlines()[-1] if detail.strip() else error})")
        if importlib.util.find_spec("cupy") is not None:
            os.environ.setdefault("CUPY_ACCELERATORS", "cub")
            import cupy

            self.cupy = cupy
            self.source = "CuPy cupy.histogram (CUB HistogramRange via CUPY_ACCELERATORS=cub)"
        else:
            self.source = "unavailable (no nvcc build, no CuPy)"

    def available(self) -> bool:
        return self.library is not None or self.cupy is not None

    def prepare(self, x: torch.Tensor, bins: int) -> Callable[[], torch.Tensor]:
        """A call computing x's histogram over [0, bins) with bins + 1 even levels (int32 counts)."""
        if self.library is None:
            cupy = self.cupy
            samples = cupy.from_dlpack(x)
            edges = cupy.arange(bins + 1, dtype=cupy.float64 if x.dtype == torch.int64 else cupy.float32)
            return lambda: torch.from_dlpack(cupy.histogram(samples, edges)[0])
        name = {torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64", torch.float32: "float32"}[x.dtype]
        entry = getattr(self.library, f"cub_histogram_even_{name}")
        level = {"int64": ctypes.c_longlong, "float32": ctypes.c_float}.get(name, ctypes.c_int)
        entry.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            level,
            level,
            ctypes.c_longlong,
            ctypes.c_void_p,
        ]
        temp_bytes = ctypes.c_size_t(0)
        out = torch.empty(bins, dtype=torch.int32, device=x.device)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        _cub_check(
            entry(None, ctypes.byref(temp_bytes), x.data_ptr(), out.data_ptr(), bins, 0, bins, x.numel(), stream)
        )
        temp = torch.empty(max(1, temp_bytes.value), dtype=torch.uint8, device=x.device)

        def call() -> torch.Tensor:
            _cub_check(
                entry(
                    temp.data_ptr(),
                    ctypes.byref(temp_bytes),
                    x.data_ptr(),
                    out.data_ptr(),
                    bins,
                    0,
                    bins,
                    x.numel(),
                    stream,
                )
            )
            return out

        return call


def _cub_check(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"CUB returned cudaError {status}")


# ---------------------------------------------------------------------------------------------------------------
# Results: cells, tables, RESULTS.md sections, plots
# ---------------------------------------------------------------------------------------------------------------


def fmt(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.3g}"


@dataclass
class Cell:
    value: Optional[float] = None  # ms (GPU-timed sections) or µs per call (host-timed ones)
    status: str = "ok"  # ok | FAIL | ERROR | n/a | skip
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("FAIL", "ERROR")

    @property
    def measured(self) -> Optional[float]:
        """The timing, where the contender ran and was timed (a ratio or a plot may use it); else None."""
        return self.value if self.status == "ok" and self.value else None

    def text(self) -> str:
        value = "" if self.value is None else fmt(self.value)
        if self.status == "ok":
            return value + ("*" if self.note else "")
        return f"**{self.status}** {value}".strip() if self.failed else self.status


def timings_text(times: Dict[str, Optional[float]]) -> str:
    """A progress line's timings: "name ms" for each contender, FAIL for one that gave a wrong result (None)."""
    return ", ".join(f"{name} {fmt(ms) if ms else 'FAIL'}" for name, ms in times.items())


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows] + [""]


def section_markers(name: str) -> Tuple[str, str]:
    """The markers around the section of RESULTS.md that the script `name` owns."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_results_section(name: str, body: str, out_dir: Optional[Path] = None) -> str:
    """Put `body` between the markers of section `name` in RESULTS.md, in place of that section's previous text (or
    appended when the file has none); every other section stays as it is, so the order the scripts run in does not
    matter. Copies the file into out_dir when given. Returns the section as written."""
    begin, end = section_markers(name)
    section = f"{begin}\n{body.strip(chr(10))}\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section + "\n"
    RESULTS.write_text(text)
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(RESULTS, out_dir / RESULTS.name)
    return section


def copy_into(out_dir: Optional[Path], paths: Iterable[Path]) -> None:
    """Copy each of `paths` (results, plots) into out_dir, created if need be; nothing when out_dir is None."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copy2(path, out_dir / path.name)


def throughput_plot(
    path: Path,
    series: Dict[str, Sequence[Tuple[float, float]]],
    title: str,
    xlabel: str,
    ylabel: str = "elements / s",
    floor: Optional[Tuple[float, str]] = None,
    styles: Optional[Dict[str, Dict[str, Any]]] = None,
    figsize: Tuple[float, float] = (8, 5),
    dpi: int = 110,
    fontsize: int = 8,
) -> bool:
    """A log-log plot of (x, throughput) points per label (x in powers of 2), with an optional horizontal floor
    (value, label), saved as PNG at `path`. False when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    for label, points in series.items():
        if points:
            ax.plot(*zip(*points), **{"marker": "o", "label": label, **(styles or {}).get(label, {})})
    if floor is not None:
        ax.axhline(floor[0], linestyle="--", color="black", label=floor[1])
    ax.set(yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=fontsize)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return True
