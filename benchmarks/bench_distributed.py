#!/usr/bin/env python3
"""Scale-out benchmark of torch_dsmhist.distributed on N GPUs (any world size): weak and strong scaling.

    python -m torch.distributed.run --standalone --nproc-per-node=N benchmarks/bench_distributed.py [--out-dir DIR]
        [--modes weak strong] [--kinds counts weighted] [--bins 4096 262144 16777216] [--log2n 30]
        [--warmup 3] [--reps 15] [--rtol 1e-4]

Inputs are uniform int32 values in [0, bins); the weighted rows add float32 weights (torch.rand, the same length;
the sums are float32). Two modes, both by default:
  * strong: 2^log2n values in all (every rank builds the same ones); rank r's shard is its contiguous 1/N of them.
    Speedup = t_1GPU(2^log2n) / t_NGPU.
  * weak: 2^log2n values per rank (N * 2^log2n in all), each rank its own. The 1-GPU baseline is one rank's shard
    on one GPU. Speedup = N * t_1GPU(2^log2n) / t_NGPU: the ratio of the throughputs (N is ideal).
Timed per (mode, kind, bins), as CUDA-event medians of --reps after --warmup calls:
  * 1 GPU: torch_dsmhist.histogram of the 1-GPU input (every rank times its own at once; rank 0's median is
    reported);
  * N GPUs: torch_dsmhist.distributed.histogram of each rank's shard, from the call until the global histogram is
    ready on the rank's stream; a repetition's time is the slowest rank's (device sync, host barrier, then an
    all-reduce MAX of the times over gloo). check=False, and check=True through the default group (gloo on the
    host does the agreement check, NCCL the sum); strong mode also times check=True through an NCCL-only group
    (the check goes through NCCL and reads back to the host). torch.bincount is not timed here (see the suite);
  * the parts, with the same slowest-rank method: the local pass over one shard, and the NCCL all-reduce of the
    [bins] histogram alone; the all-reduce's share = all-reduce alone / N-GPU time (check=False).
Before timing, every N-GPU variant is checked against the 1-GPU histogram of the same data (weak: the sum of each
rank's shard's histogram, all made on one GPU): counts exactly, float32 sums with torch.allclose (--rtol; float
atomics add in a different order, ~1e-6 apart at 2^30 values, while a lost or doubled shard is off by >= 1/N). A
mismatch is printed and the script exits 1 (after writing its results). Rank 0 writes its section of
benchmarks/RESULTS.md (between the distributed-benchmark markers, appended if absent), with a verdict for issue
53's target (>= 3.6x on 4 GPUs, >= 7x on 8 GPUs: weak scaling, 2^30 ids per GPU, 262144 bins, counts).

This script only measures. A model of the N-GPU time (the local pass plus the all-reduce, extrapolated to other
world sizes or interconnects) is a separate section, not written by this script; the "local pass alone" and
"all-reduce alone" columns here are the measurements such a model starts from.

The default run (both modes, both kinds, 3 bin counts, 2^30 values) takes about a minute on 4 H100s after start-up;
each rank holds at most ~16 GiB of inputs (strong: the 2^30 values and weights; weak: its shard and another rank's
while it builds the reference).
"""

import argparse
import importlib
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# NVLink multicast stays off (it can put a shared host's GPUs out of service); NCCL reads these at its first use.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from benchlib import git_commit, today, torch_dsmhist, write_results_section  # noqa: E402

dh = importlib.import_module("torch_dsmhist.distributed")  # after benchlib, which makes the package importable

SECTION = "distributed-benchmark"  # this script's section of RESULTS.md
MODES = ("weak", "strong")
KINDS = ("counts", "weighted")
DEFAULT_BINS = (4096, 262144, 16777216)
TARGET_BINS = 262144  # issue 53: weak scaling, 2^30 ids per GPU, 256K bins, counts
TARGET_LOG2N = 30
TARGETS = {4: 3.6, 8: 7.0}  # world size -> the weak-scaling speedup issue 53 asks for
KIND_TEXT = {"counts": "counts", "weighted": "float32 sums"}

ONE_GPU = "1 GPU"
NO_CHECK = "check=False"
GLOO_CHECK = "check=True (gloo check)"
NCCL_CHECK = "check=True (NCCL-only group)"
LOCAL = "local pass alone"
ALLREDUCE = "all-reduce alone"


# ---------------------------------------------------------------------------------------------------------------
# Pure helpers (no device, no process group)
# ---------------------------------------------------------------------------------------------------------------


def shard_bounds(total: int, world: int, rank: int) -> Tuple[int, int]:
    """[lo, hi) of rank's contiguous shard of `total` values split over `world` ranks (sizes differ by at most 1)."""
    return total * rank // world, total * (rank + 1) // world


def speedup(mode: str, world: int, one_gpu_ms: float, n_gpu_ms: float) -> float:
    """Strong: the same data's 1-GPU time over its N-GPU time. Weak: N times one shard's 1-GPU time over the N-GPU
    time of N shards (the throughput ratio)."""
    return (world if mode == "weak" else 1) * one_gpu_ms / n_gpu_ms


def seed(mode: str, bins: int, rank: int) -> int:
    """The generator seed of the values (then weights) that `rank` holds: strong mode's are every rank's same."""
    return (bins << 16) + (0 if mode == "strong" else 1 + rank)


def verdict(world: int, value: float, log2n: int) -> str:
    """Issue 53's target line for the weak-scaling speedup (counts, 262144 bins, check=False)."""
    case = f"weak scaling, 2^{log2n} ids per GPU, {TARGET_BINS} bins, counts, check=False"
    if log2n != TARGET_LOG2N:
        case += f"; the target is for 2^{TARGET_LOG2N} ids per GPU"
    if world in TARGETS:
        met = "met" if value >= TARGETS[world] else "missed"
        return f"Issue 53: target >= 3.6x on 4 GPUs / >= 7x on 8 GPUs: {met} ({value:.2f}x on {world} GPUs; {case})"
    return f"Issue 53 (targets for 4 and 8 GPUs only): {value:.2f}x on {world} GPUs ({case})"


@dataclass
class Row:
    mode: str
    kind: str
    bins: int
    ms: Dict[str, float] = field(default_factory=dict)  # column name -> median ms
    max_rel_diff: float = 0.0  # of the float32 sums, N GPUs against 1 GPU (0 for counts: they are compared exactly)
    mismatch: bool = False


def table(rows: Sequence[Row], mode: str, world: int) -> List[str]:
    """The markdown table of one mode's rows."""
    variants = [NO_CHECK, GLOO_CHECK] + ([NCCL_CHECK] if mode == "strong" else [])
    head = (
        ["values", "bins", "1 GPU dsmhist"]
        + [f"{world} GPUs, {v}" for v in variants]
        + ["speedup (check=False)", "speedup (gloo check)", "local pass alone", "all-reduce alone"]
        + ["all-reduce share", f"max rel. diff {world} GPUs vs 1"]
    )
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in rows:
        cells = [KIND_TEXT[row.kind], str(row.bins), f"{row.ms[ONE_GPU]:.3f}"]
        cells += [f"{row.ms[v]:.3f}" for v in variants]
        cells += [f"{speedup(mode, world, row.ms[ONE_GPU], row.ms[v]):.2f}x" for v in (NO_CHECK, GLOO_CHECK)]
        cells += [
            f"{row.ms[LOCAL]:.3f}",
            f"{row.ms[ALLREDUCE]:.3f}",
            f"{100 * row.ms[ALLREDUCE] / row.ms[NO_CHECK]:.1f}%",
        ]
        diff = "exact" if row.kind == "counts" else f"{row.max_rel_diff:.1e}"
        cells.append(("MISMATCH " if row.mismatch else "") + diff)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Device work
# ---------------------------------------------------------------------------------------------------------------


def timed_ms(fn: Callable[[], object], slowest_rank: bool, warmup: int, reps: int) -> float:
    """Median CUDA-event time of fn over `reps` repetitions after `warmup`; with slowest_rank, every rank starts
    together (host barrier after a device sync) and each repetition counts as the slowest rank's time."""
    times = []
    for rep in range(warmup + reps):
        torch.cuda.synchronize()
        if slowest_rank:
            dist.barrier()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms = start.elapsed_time(stop)
        if slowest_rank:
            slowest = torch.tensor([ms], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # gloo, on the host
            ms = slowest.item()
        if rep >= warmup:
            times.append(ms)
    return statistics.median(times)


def make_data(
    n: int, bins: int, seed_: int, weighted: bool, device: torch.device
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """n uniform int32 values in [0, bins) and, when weighted, n float32 weights in [0, 1), from one seeded generator
    (values first, so the values do not depend on `weighted`)."""
    gen = torch.Generator(device=device).manual_seed(seed_)
    values = torch.randint(0, bins, (n,), generator=gen, device=device, dtype=torch.int32)
    weights = torch.rand(n, generator=gen, device=device, dtype=torch.float32) if weighted else None
    return values, weights


def compare(got: torch.Tensor, ref: torch.Tensor, kind: str, rtol: float) -> Tuple[bool, float, str]:
    """(agrees, max relative difference, what differs): counts exactly, sums with allclose(rtol, atol=0)."""
    if kind == "counts":
        same = torch.equal(got, ref)
        return same, 0.0, "" if same else f"{int((got != ref).sum())} bins differ"
    rel = float(((got - ref).abs() / ref.abs().clamp_min(torch.finfo(ref.dtype).tiny)).max())
    same = torch.allclose(got, ref, rtol=rtol, atol=0.0)
    return same, rel, "" if same else f"max relative difference {rel:.2e} > rtol {rtol:g}"


def run_bins(args, mode: str, bins: int, rank: int, world: int, device, nccl_only) -> List[Row]:
    """One (mode, bins): build the data, check every N-GPU variant against the 1-GPU histogram, time each kind."""
    n = 1 << args.log2n  # strong: in all; weak: per rank
    weighted = "weighted" in args.kinds
    if mode == "strong":
        values, weights = make_data(n, bins, seed(mode, bins, 0), weighted, device)
        lo, hi = shard_bounds(n, world, rank)
        shard, shard_weights = values[lo:hi], None if weights is None else weights[lo:hi]
        one_values, one_weights = values, weights  # the 1-GPU input: all of the data
    else:
        shard, shard_weights = make_data(n, bins, seed(mode, bins, rank), weighted, device)
        one_values, one_weights = shard, shard_weights  # the 1-GPU input: one rank's shard

    # The 1-GPU histograms of all the data (weak: each rank's shard's, rebuilt here and added up, on this GPU).
    references: Dict[str, torch.Tensor] = {}
    for r in range(world if mode == "weak" else 1):
        if mode == "strong" or r == rank:
            v, w = one_values, one_weights  # strong: all the data; weak: this rank's own shard
        else:
            v, w = make_data(n, bins, seed(mode, bins, r), weighted, device)
        for kind in args.kinds:
            h = torch_dsmhist.histogram(v, bins, weight=w if kind == "weighted" else None)
            references[kind] = h if kind not in references else references[kind].add_(h)
        del v, w
    torch.cuda.synchronize()

    variants = [(NO_CHECK, False, None), (GLOO_CHECK, True, None)]
    if mode == "strong":
        variants.append((NCCL_CHECK, True, nccl_only))
    rows = []
    for kind in args.kinds:
        ws = shard_weights if kind == "weighted" else None
        w1 = one_weights if kind == "weighted" else None
        row = Row(mode, kind, bins)
        for name, check, group in variants:
            got = dh.histogram(shard, bins, weight=ws, group=group, check=check)
            same, rel, what = compare(got, references[kind], kind, args.rtol)
            row.max_rel_diff = max(row.max_rel_diff, rel)
            if not same:
                row.mismatch = True
                print(
                    f"rank {rank}: {mode} {kind} bins={bins} {name}: the {world}-GPU histogram differs from the "
                    f"1-GPU one ({what})",
                    flush=True,
                )
        del got
        t = lambda fn, slowest: timed_ms(fn, slowest, args.warmup, args.reps)
        row.ms[ONE_GPU] = t(lambda: torch_dsmhist.histogram(one_values, bins, weight=w1), False)
        for name, check, group in variants:
            row.ms[name] = t(lambda: dh.histogram(shard, bins, weight=ws, group=group, check=check), True)
        row.ms[LOCAL] = t(lambda: torch_dsmhist.histogram(shard, bins, weight=ws), True)
        partial = torch_dsmhist.histogram(shard, bins, weight=ws)
        row.ms[ALLREDUCE] = t(lambda: dist.all_reduce(partial), True)
        del partial
        rows.append(row)
        if rank == 0:
            print(
                f"{mode} {kind} bins={bins}: "
                + ", ".join(f"{k} {v:.3f} ms" for k, v in row.ms.items())
                + f", speedup {speedup(mode, world, row.ms[ONE_GPU], row.ms[NO_CHECK]):.2f}x",
                flush=True,
            )
    del shard, shard_weights, one_values, one_weights, references
    if mode == "strong":
        del values, weights
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--bins", type=int, nargs="+", default=list(DEFAULT_BINS))
    parser.add_argument(
        "--log2n", type=int, default=30, help="2^log2n values: in all (strong), per rank (weak); default 30"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before each timing (default 3)")
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions, median reported (default 15)")
    parser.add_argument("--rtol", type=float, default=1e-4, help="float32 sums: allclose rtol (default 1e-4)")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md into this directory")
    args = parser.parse_args()
    args.modes = [m for m in MODES if m in args.modes]  # fixed order, no repeats
    args.kinds = [k for k in KINDS if k in args.kinds]

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl_only = dist.new_group(backend="nccl") if "strong" in args.modes else None

    rows: List[Row] = []
    for mode in args.modes:
        for bins in args.bins:
            rows += run_bins(args, mode, bins, rank, world, device, nccl_only)

    # Any rank's mismatch, known to rank 0 (for the section) and to every rank (for the exit status).
    failed = torch.tensor([sum(row.mismatch for row in rows)], dtype=torch.int64)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if rank == 0:
        write_section(args, rows, world, int(failed.item()) > 0)
    dist.destroy_process_group()
    return 1 if int(failed.item()) > 0 else 0


def reproduce(args, world: int) -> str:
    flags = []
    if args.modes != list(MODES):
        flags.append("--modes " + " ".join(args.modes))
    if args.kinds != list(KINDS):
        flags.append("--kinds " + " ".join(args.kinds))
    if args.bins != list(DEFAULT_BINS):
        flags.append("--bins " + " ".join(map(str, args.bins)))
    for name, default in (("log2n", 30), ("warmup", 3), ("reps", 15), ("rtol", 1e-4)):
        if getattr(args, name) != default:
            flags.append(f"--{name} {getattr(args, name):g}")
    return (
        f"python -m torch.distributed.run --standalone --nproc-per-node={world} benchmarks/bench_distributed.py"
        + "".join(" " + f for f in flags)
    )


def write_section(args, rows: Sequence[Row], world: int, failed: bool) -> None:
    props = torch.cuda.get_device_properties(0)
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    k = args.log2n
    lines = [
        f"## Scale-out on {world} GPUs: weak and strong scaling (torch_dsmhist.distributed)",
        "",
        f"- Device: {world} x {props.name}; torch {torch.__version__}, NCCL {nccl}; NCCL_NVLS_ENABLE="
        f"{os.environ.get('NCCL_NVLS_ENABLE', 'unset')} (NVLink multicast off); date {today()}; "
        f"git commit: {git_commit()}",
        f"- Inputs: uniform int32 values in [0, bins); the float32-sum rows add torch.rand float32 weights. Strong: "
        f"2^{k} values in all, each GPU a contiguous 1/{world} of them. Weak: 2^{k} values per GPU "
        f"({world} x 2^{k} in all); the 1-GPU baseline is one GPU's 2^{k}.",
        f"- Speedup, strong: t(1 GPU, 2^{k}) / t({world} GPUs). Speedup, weak: {world} x t(1 GPU, 2^{k}) / "
        f"t({world} GPUs, {world} x 2^{k}), the ratio of the throughputs ({world}.00x is ideal).",
        f"- Median ms of {args.reps} (CUDA events, after {args.warmup} warm-ups). {world}-GPU times: from the call "
        "until the global histogram is ready on the rank's stream, the slowest rank's per repetition, ranks started "
        f"together. 1-GPU times: rank 0's, all {world} GPUs timing their own 1-GPU calls at once.",
        f"- A {world}-GPU call is the local pass over the GPU's shard plus one NCCL all-reduce of the [bins] histogram "
        "(int64 counts or float32 sums), each timed alone (slowest rank); all-reduce share = all-reduce alone / "
        f"{world}-GPU time with check=False. check=True (gloo check): the agreement check on the host through the "
        "default group's gloo backend, the sum through NCCL; the strong table also has check=True through an "
        "NCCL-only group (the check through NCCL, read back to the host). torch.bincount is in the suite, not here.",
        f"- Checked before timing against the 1-GPU histogram of the same data: counts exactly, float32 sums with "
        f"torch.allclose(rtol={args.rtol:g}, atol=0) (float atomics add in another order); last column: the largest "
        "relative difference over the variants.",
    ]
    if failed:
        lines.append(f"- **MISMATCH**: a {world}-GPU histogram differed from the 1-GPU one (see the run's log).")
    target = [r for r in rows if r.mode == "weak" and r.kind == "counts" and r.bins == TARGET_BINS]
    if target:
        value = speedup("weak", world, target[0].ms[ONE_GPU], target[0].ms[NO_CHECK])
        lines.append(f"- {verdict(world, value, k)}")
    for mode in args.modes:
        mode_rows = [r for r in rows if r.mode == mode]
        title = f"2^{k} values per GPU" if mode == "weak" else f"2^{k} values in all"
        lines += ["", f"### {mode.capitalize()} scaling: {title}, median ms", ""] + table(mode_rows, mode, world)
    lines += ["", f"Reproduce: `{reproduce(args, world)}` (on a {world}-GPU machine)."]
    section = "\n".join(lines) + "\n"
    write_results_section(SECTION, section, args.out_dir)
    print(section, flush=True)


if __name__ == "__main__":
    sys.exit(main())
