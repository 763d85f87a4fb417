#!/usr/bin/env python3
"""The agreement check's cost: torch_dsmhist.distributed.histogram with check=True against check=False, on gloo.

One world size, under torchrun (gloo, CPU processes):

    python -m torch.distributed.run --standalone --nproc-per-node=N benchmarks/bench_agreement.py
        [--values 4096] [--bins 64] [--warmup 20] [--reps 200] [--out-dir DIR] [--write-results]

A sweep over world sizes (this script launches torchrun once per size, OMP_NUM_THREADS=1, and collects rank 0's
line):

    python benchmarks/bench_agreement.py --sweep 2 4 8 [--values ...] [--bins ...] [--warmup ...] [--reps ...]
        [--out-dir DIR] [--write-results]

Each rank holds a small int64 input (--values values in [0, --bins), its own seed), so the local histogram is cheap and
the collectives dominate. Timed, per repetition and interleaved (so drift hits every variant alike), each after a
dist.barrier, with time.perf_counter around the call, the repetition's time being the slowest rank's (an all-reduce
MAX of the ranks' times):
  * dh.histogram(x, bins, check=False): the local histogram and one all-reduce of the [bins] int64 counts;
  * dh.histogram(x, bins, check=True): the same after the agreement check (one all-gather of a few int64 per rank,
    see torch_dsmhist/_collective.py `_agree`);
  * the bare dist.all_reduce of a [bins] int64 tensor;
  * the bare dist.all_gather of the check's message (its length of int64 per rank), for reference.
Medians of --reps after --warmup repetitions; the check's cost = median(check=True) - median(check=False). Before
timing, every rank checks both variants against the sum of all ranks' torch.bincount (exit 1 on a mismatch).
Rank 0 prints one human line and one JSON line (prefixed RESULT_PREFIX); with --write-results the section
"agreement-benchmark" of benchmarks/RESULTS.md is written (by rank 0, or by the sweep's driver for all sizes).
"""

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import torch
import torch.distributed as dist

from benchlib import cpu_name, git_commit, today, write_results_section

dh = importlib.import_module("torch_dsmhist.distributed")  # after benchlib, which makes the package importable
collective = importlib.import_module("torch_dsmhist._collective")

SECTION = "agreement-benchmark"  # this script's section of RESULTS.md
RESULT_PREFIX = "AGREEMENT_RESULT "  # rank 0's JSON line, read by the sweep's driver
NO_CHECK, CHECK, ALLREDUCE, ALLGATHER = "check=False", "check=True", "all-reduce alone", "all-gather alone"
DEFAULTS = {"values": 4096, "bins": 64, "warmup": 20, "reps": 200}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=int, nargs="+", metavar="N", help="launch torchrun for each world size N")
    parser.add_argument("--values", type=int, default=DEFAULTS["values"], help="int64 values per rank (default 4096)")
    parser.add_argument("--bins", type=int, default=DEFAULTS["bins"], help="bins (default 64)")
    parser.add_argument("--warmup", type=int, default=DEFAULTS["warmup"], help="untimed repetitions (default 20)")
    parser.add_argument("--reps", type=int, default=DEFAULTS["reps"], help="timed repetitions (default 200)")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md into this directory")
    parser.add_argument("--write-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    parser.add_argument("--timeout", type=float, default=900.0, help="sweep: seconds per world size (default 900)")
    return parser.parse_args()


# ---------------------------------------------------------------------------------------------------------------
# One rank (under torchrun)
# ---------------------------------------------------------------------------------------------------------------


def slowest_ms(fn: Callable[[], object]) -> float:
    """One repetition: all ranks start together (barrier), each times fn on the wall clock; the slowest rank's ms."""
    dist.barrier()
    start = time.perf_counter()
    fn()
    ms = torch.tensor([(time.perf_counter() - start) * 1e3], dtype=torch.float64)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return float(ms.item())


def rank_main(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randint(0, args.bins, (args.values,), generator=gen, dtype=torch.int64)

    # Both variants against the sum of every rank's bincount.
    expected = torch.bincount(x, minlength=args.bins)
    dist.all_reduce(expected)
    bad = [
        name
        for name, check in ((NO_CHECK, False), (CHECK, True))
        if not torch.equal(dh.histogram(x, args.bins, check=check), expected)
    ]
    failed = torch.tensor([len(bad)], dtype=torch.int64)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if bad:
        print(f"rank {rank}: {', '.join(bad)} differs from the sum of the ranks' bincounts", flush=True)
    if int(failed.item()):
        dist.destroy_process_group()
        return 1

    partial = torch.bincount(x, minlength=args.bins)
    message = torch.zeros(collective._MESSAGE_LENGTH, dtype=torch.int64)  # the check's message: same length
    gathered = [torch.empty_like(message) for _ in range(world)]
    variants: Dict[str, Callable[[], object]] = {
        NO_CHECK: lambda: dh.histogram(x, args.bins, check=False),
        CHECK: lambda: dh.histogram(x, args.bins, check=True),
        ALLREDUCE: lambda: dist.all_reduce(partial),
        ALLGATHER: lambda: dist.all_gather(gathered, message),
    }
    times: Dict[str, List[float]] = {name: [] for name in variants}
    for rep in range(args.warmup + args.reps):
        for name, fn in variants.items():
            ms = slowest_ms(fn)
            if rep >= args.warmup:
                times[name].append(ms)

    if rank == 0:
        ms = {name: statistics.median(values) for name, values in times.items()}
        paired = statistics.median(c - u for c, u in zip(times[CHECK], times[NO_CHECK]))
        result = {
            "world": world,
            "ms": ms,
            "check_cost_ms": ms[CHECK] - ms[NO_CHECK],
            "paired_check_cost_ms": paired,
            "values": args.values,
            "bins": args.bins,
            "warmup": args.warmup,
            "reps": args.reps,
            "message_int64": collective._MESSAGE_LENGTH,
        }
        print(
            f"world {world}: {NO_CHECK} {ms[NO_CHECK]:.3f} ms, {CHECK} {ms[CHECK]:.3f} ms, check's cost "
            f"{result['check_cost_ms']:.3f} ms (paired median {paired:.3f} ms), bare all-reduce "
            f"{ms[ALLREDUCE]:.3f} ms, bare all-gather {ms[ALLGATHER]:.3f} ms",
            flush=True,
        )
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        if args.write_results:
            write_section(args, [result])
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------------------------
# The sweep's driver (no torchrun)
# ---------------------------------------------------------------------------------------------------------------


def sweep_main(args: argparse.Namespace) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    flags = [f"--{name}={getattr(args, name)}" for name in DEFAULTS]
    results = []
    for world in args.sweep:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            str(Path(__file__).resolve()),
            *flags,
        ]
        print(f"world {world}: {' '.join(command[1:])}", flush=True)
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
        lines = [line for line in run.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if run.returncode != 0 or not lines:
            print(run.stdout + run.stderr, file=sys.stderr, flush=True)
            print(f"world {world}: torchrun exited {run.returncode} without a result", file=sys.stderr, flush=True)
            return 1
        result = json.loads(lines[-1][len(RESULT_PREFIX) :])
        results.append(result)
        print("  " + next(line for line in run.stdout.splitlines() if line.startswith("world ")), flush=True)
    if args.write_results:
        write_section(args, results)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------


def reproduce(args: argparse.Namespace, worlds: Sequence[int]) -> str:
    flags = "".join(f" --{name} {getattr(args, name)}" for name in DEFAULTS if getattr(args, name) != DEFAULTS[name])
    return f"python benchmarks/bench_agreement.py --sweep {' '.join(map(str, worlds))}{flags} --write-results"


def write_section(args: argparse.Namespace, results: Sequence[dict]) -> None:
    cores = os.cpu_count() or 1
    worlds = [r["world"] for r in results]
    first = results[0]
    over = [w for w in worlds if w > cores]
    machine = f"{cpu_name()}, {cores} logical cores ({platform.system()} {platform.machine()})"
    if over:
        machine += (
            f"; {' and '.join(map(str, over))} processes oversubscribe its {cores} cores, so those rows are an upper "
            "bound (a rank waits for the core as well as for the network)"
        )
    lines = [
        "## The agreement check's cost on gloo (torch_dsmhist.distributed.histogram, CPU processes)",
        "",
        f"- Machine: {machine}; torch {torch.__version__}, Python {platform.python_version()}, gloo over the "
        f"loopback (torchrun --standalone, one process per rank, OMP_NUM_THREADS=1); date {today()}; git commit: "
        f"{git_commit()}.",
        f"- Input per rank: {first['values']} int64 values in [0, {first['bins']}), {first['bins']} bins (int64 counts), "
        "so the local histogram is cheap and the collectives dominate.",
        f"- Method: median ms of {first['reps']} repetitions after {first['warmup']} warm-ups; in each repetition "
        "every variant in turn, each after a dist.barrier, timed with time.perf_counter, the repetition counting "
        "as the slowest rank's time (all-reduce MAX). check=False: the local histogram and one all-reduce of the "
        "[bins] counts; check=True: the same after the agreement check (one all-gather of "
        f"{first['message_int64']} int64 per rank: status, element count, the call's signature). The check's "
        "cost = check=True - check=False (medians). Bare all-reduce: dist.all_reduce of a [bins] int64 tensor; "
        f"bare all-gather: dist.all_gather of {first['message_int64']} int64 per rank (the check's collective "
        "alone). Both variants were checked against the sum of the ranks' torch.bincount first.",
        "",
        "| world size | check=False ms | check=True ms | check's cost ms | bare all-reduce ms | bare all-gather ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        ms = r["ms"]
        lines.append(
            f"| {r['world']} | {ms[NO_CHECK]:.3f} | {ms[CHECK]:.3f} | {r['check_cost_ms']:.3f} | "
            f"{ms[ALLREDUCE]:.3f} | {ms[ALLGATHER]:.3f} |"
        )
    lines += ["", f"Reproduce: `{reproduce(args, worlds)}`."]
    section = "\n".join(lines) + "\n"
    write_results_section(SECTION, section, args.out_dir)
    print(section, flush=True)


def main() -> int:
    """--sweep: launch each world size and write the section; else one rank of a torchrun launch."""
    arguments = parse_args()
    return sweep_main(arguments) if arguments.sweep else rank_main(arguments)


if __name__ == "__main__":
    sys.exit(main())
