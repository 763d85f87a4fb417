"""Demo: ``python -m torch_dsmhist [--n N] [--bins B] [--device cpu|cuda]``.

Counts Zipf-distributed "token ids" over a vocabulary with :func:`torch_dsmhist.histogram` on the best device present
(CUDA when a GPU is visible and the extension was built with CUDA, else the CPU), checks the counts against
``torch.bincount``, prints the histogram folded into groups of ids, the strategy tier the op used, and the time of
both next to each other, their ratio beside the CPU thread count it was measured with (``torch.get_num_threads()``).
Exits 1 if the counts differ from ``torch.bincount``'s.
"""

import argparse
import math
import statistics
import sys
import time
from typing import Callable, List, Optional

import torch

import torch_dsmhist

ZIPF_EXPONENT = 1.1  # p(id) proportional to (id + 1) ** -1.1
SEED = 0
BAR_WIDTH = 40


def zipf_tokens(n: int, vocab: int, device: torch.device, seed: int = SEED) -> torch.Tensor:
    """``n`` int64 ids in ``[0, vocab)``, Zipf-like: the inverse CDF of a continuous power law on ``[1, vocab + 1)``."""
    generator = torch.Generator(device=device).manual_seed(seed)
    u = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
    a = 1.0 - ZIPF_EXPONENT
    x = (1.0 + u * ((vocab + 1.0) ** a - 1.0)) ** (1.0 / a)  # x in [1, vocab + 1)
    ids: torch.Tensor = (x.floor().long() - 1).clamp_(0, vocab - 1)
    return ids


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int = 2, runs: int = 10) -> float:
    """Median milliseconds of ``fn()`` over ``runs`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times: List[float] = []
    for _ in range(runs):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def groups(bins: int) -> List[range]:
    """Id groups for printing: one per id up to 16 bins, else power-of-two ranges [0], [1], [2, 4), [4, 8), ..."""
    if bins <= 16:
        return [range(b, b + 1) for b in range(bins)]
    edges = [0] + [1 << k for k in range(int(math.log2(bins - 1)) + 1)] + [bins]
    return [range(lo, hi) for lo, hi in zip(edges, edges[1:]) if lo < hi]


def print_histogram(hist: torch.Tensor) -> None:
    hist = hist.cpu()
    folded = [(g, int(hist[g.start : g.stop].sum())) for g in groups(hist.numel())]
    largest = max(count for _, count in folded) or 1
    print(f"{'ids':>15}  {'count':>12}")
    for g, count in folded:
        label = str(g.start) if len(g) == 1 else f"{g.start}-{g.stop - 1}"
        bar = "#" * round(BAR_WIDTH * count / largest)
        print(f"{label:>15}  {count:>12,}  {bar}")
    print(f"total count {int(hist.sum()):,}")
    top = torch.topk(hist, min(5, hist.numel()))
    print("top ids     " + ", ".join(f"{i}: {c:,}" for i, c in zip(top.indices.tolist(), top.values.tolist())))


def pick_device(requested: Optional[str]) -> torch.device:
    cuda_ok = torch.cuda.is_available() and torch_dsmhist.built_with_cuda()
    if requested == "cuda" and not cuda_ok:
        why = "no CUDA device is visible" if not torch.cuda.is_available() else "the extension was built CPU-only"
        sys.exit(f"--device cuda: {why}")
    if requested == "cpu" or not cuda_ok:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_dsmhist",
        description="Demo: count Zipf-distributed token ids with torch_dsmhist.histogram, check them against "
        "torch.bincount, and time both (the ratio is printed beside the CPU thread count).",
    )
    parser.add_argument("--n", type=positive, default=None, help="number of token ids (default 2^24 CUDA, 2^22 CPU)")
    parser.add_argument("--bins", type=positive, default=32000, help="vocabulary size = bins (default 32000)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if usable, else cpu")
    args = parser.parse_args(argv)

    device = pick_device(args.device)
    n = args.n or (1 << 24 if device.type == "cuda" else 1 << 22)
    vocab = args.bins
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch_dsmhist {torch_dsmhist.__version__} | torch {torch.__version__} | device {device} ({name})")
    print(f"data: {n:,} Zipf(s={ZIPF_EXPONENT}) token ids over a vocabulary of {vocab:,} (seed {SEED})\n")

    tokens = zipf_tokens(n, vocab, device)
    hist = torch_dsmhist.histogram(tokens, vocab)
    reference = torch.bincount(tokens, minlength=vocab)
    if not torch.equal(hist, reference):
        wrong = int((hist != reference).sum())
        print(f"MISMATCH: torch_dsmhist.histogram differs from torch.bincount in {wrong} of {vocab} bins")
        return 1
    print("check: torch_dsmhist.histogram == torch.bincount(tokens, minlength=bins): OK\n")
    print_histogram(hist)

    p = torch_dsmhist.plan(vocab, device, dtype=tokens.dtype)
    print(f"\ntier: {p.tier}", end="")
    if p.tier != "cpu":
        print(
            f" | cluster size {p.cluster_size} | {p.shared_bytes_per_block:,} shared bytes/block"
            f" | {p.threads_per_block} threads/block",
            end="",
        )
    print()

    ours = time_ms(lambda: torch_dsmhist.histogram(tokens, vocab), device)
    theirs = time_ms(lambda: torch.bincount(tokens, minlength=vocab), device)
    how = "CUDA events" if device.type == "cuda" else "perf_counter"
    threads = torch.get_num_threads()
    print(f"\ntime (median of 10 after 2 warm-ups, {how}):")
    print(f"  torch_dsmhist.histogram  {ours:9.3f} ms")
    print(f"  torch.bincount           {theirs:9.3f} ms")
    print(f"  ratio (bincount / dsmhist) {theirs / ours:7.2f}x  {threads_note(device, threads)}")
    return 0


def threads_note(device: torch.device, threads: int) -> str:
    """What the ratio was measured with: the CPU thread count (torch.get_num_threads()) both ops were given. On the
    CPU both run on torch's intra-op thread pool: another thread count or a loaded machine gives another ratio."""
    plural = "" if threads == 1 else "s"
    if device.type == "cuda":
        return f"(on the GPU; host: {threads} CPU thread{plural}, torch.get_num_threads())"
    return f"(CPU, {threads} thread{plural}: torch.get_num_threads(); a loaded machine shifts it)"


if __name__ == "__main__":
    sys.exit(main())
