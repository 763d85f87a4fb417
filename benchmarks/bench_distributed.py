#!/usr/bin/env python3
"""Scale-out benchmark: one global histogram of 2^30 values on 1 GPU against the same data sharded over 2 GPUs.

    python -m torch.distributed.run --standalone --nproc-per-node=2 benchmarks/bench_distributed.py [--out-dir DIR]

Every rank builds the same 2^30 uniform int32 values; rank r's shard is its half. Timed, as CUDA-event medians after
warm-up:
  * 1 GPU: torch_dsmhist.histogram of all 2^30 values on rank 0 (torch.bincount beside it for scale);
  * 2 GPUs: torch_dsmhist.distributed.histogram of each half, from the call to the global histogram being ready on
    the rank's stream; an iteration's time is the slower rank's. Three ways: check=False; check=True through the
    default group (gloo on the host does the agreement check, NCCL the sum); check=True through an NCCL-only group
    (the check goes through NCCL and reads back to the host);
  * the parts: the local histogram of one half, and the NCCL all-reduce of the histogram alone.
The 2-GPU result is checked against the 1-GPU one before timing. Rank 0 writes its section of
benchmarks/RESULTS.md (between the distributed-benchmark markers, appended if absent).
"""

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Callable, List

import torch
import torch.distributed as dist

import torch_dsmhist.distributed as dh  # noqa: E402  (after benchlib: it makes the package importable)

from benchlib import git_commit, today, torch_dsmhist, write_results_section

SECTION = "distributed-benchmark"  # this script's section of RESULTS.md
WARMUP, REPS = 3, 15


def timed_ms(fn: Callable[[], object], slowest_rank: bool) -> List[float]:
    """CUDA-event times of fn per repetition; with slowest_rank, every rank starts together (host barrier after a
    device sync) and each repetition counts as the slowest rank's time."""
    times = []
    for rep in range(WARMUP + REPS):
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
        if rep >= WARMUP:
            times.append(ms)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=30, help="total values, 2^log2n (default 30)")
    parser.add_argument("--bins", type=int, nargs="+", default=[4096, 262144])
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md into this directory")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl_only = dist.new_group(backend="nccl")
    total = 1 << args.log2n
    shard_size = total // world

    rows = []
    failed = False
    for bins in args.bins:
        gen = torch.Generator(device=device).manual_seed(bins)
        values = torch.randint(0, bins, (total,), generator=gen, device=device, dtype=torch.int32)
        shard = values[rank * shard_size : (rank + 1) * shard_size]
        single = torch_dsmhist.histogram(values, bins)
        for check, group in ((False, None), (True, None), (True, nccl_only)):
            got = dh.histogram(shard, bins, group=group, check=check)
            if not torch.equal(got, single):
                print(f"rank {rank}: bins={bins} check={check}: the 2-GPU histogram differs from the 1-GPU one")
                failed = True
        one_gpu = statistics.median(timed_ms(lambda: torch_dsmhist.histogram(values, bins), False))
        bincount = statistics.median(timed_ms(lambda: torch.bincount(values, minlength=bins), False))
        two_gpu = {
            name: statistics.median(timed_ms(lambda: dh.histogram(shard, bins, group=group, check=check), True))
            for name, check, group in (
                ("check=False", False, None),
                ("check=True (gloo check)", True, None),
                ("check=True (NCCL-only group)", True, nccl_only),
            )
        }
        local = statistics.median(timed_ms(lambda: torch_dsmhist.histogram(shard, bins), True))
        partial = torch_dsmhist.histogram(shard, bins)
        reduce_only = statistics.median(timed_ms(lambda: dist.all_reduce(partial), True))
        rows.append((bins, one_gpu, bincount, two_gpu, local, reduce_only))
        if rank == 0:
            print(
                f"bins={bins}: 1 GPU {one_gpu:.3f} ms, "
                + ", ".join(f"{k} {v:.3f} ms" for k, v in two_gpu.items())
                + f", half alone {local:.3f} ms, all-reduce alone {reduce_only:.3f} ms",
                flush=True,
            )
        del values, shard, single, partial
        torch.cuda.empty_cache()

    if rank == 0:
        write_section(rows, total, world, args.out_dir)
    dist.destroy_process_group()
    return 1 if failed else 0


def write_section(rows, total: int, world: int, out_dir) -> None:
    props = torch.cuda.get_device_properties(0)
    names = list(rows[0][3])
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    lines = [
        f"## Scale-out: 2^{total.bit_length() - 1} uniform int32 values, 1 GPU vs {world} GPUs (torch_dsmhist.distributed)",
        "",
        f"- Device: {world} x {props.name}; torch {torch.__version__}, NCCL {nccl}; "
        f"date {today()}; git commit: {git_commit()}",
        f"- Median ms of {REPS} (CUDA events, after {WARMUP} warm-ups). {world}-GPU times: from the call until the "
        "global histogram is ready on the rank's stream, the slower rank's per repetition, ranks started together.",
        "- NVLink multicast off (NCCL_NVLS_ENABLE=0). Speedup: 1-GPU time / 2-GPU time. A 2-GPU call is the local "
        "pass over half the data plus one all-reduce of the histogram (the last two columns, timed alone).",
        "",
        "| bins | 1 GPU dsmhist | 1 GPU torch.bincount | "
        + " | ".join(f"{world} GPUs, {n}" for n in names)
        + " | speedup (check=False) | speedup (gloo check) | half on one GPU | all-reduce alone |",
        "|---" * (3 + len(names) + 4) + "|",
    ]
    for bins, one_gpu, bincount, two_gpu, local, reduce_only in rows:
        lines.append(
            f"| {bins} | {one_gpu:.3f} | {bincount:.3f} | "
            + " | ".join(f"{two_gpu[n]:.3f}" for n in names)
            + f" | {one_gpu / two_gpu[names[0]]:.2f}x | {one_gpu / two_gpu[names[1]]:.2f}x | {local:.3f} | "
            f"{reduce_only:.3f} |"
        )
    lines += [
        "",
        "Reproduce: `python -m torch.distributed.run --standalone --nproc-per-node=2 "
        "benchmarks/bench_distributed.py` (on a 2-GPU machine).",
    ]
    section = "\n".join(lines) + "\n"
    write_results_section(SECTION, section, out_dir)
    print(section)


if __name__ == "__main__":
    sys.exit(main())
