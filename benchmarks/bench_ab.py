#!/usr/bin/env python3
"""Did a change move any tier? Times one fixed set of calls, a case for every tier and kernel body (counts by value
and by range, dropped and clamped, sorted, one hot bin and Zipf data at 131072, 262144 (the exchange), 1M and 16M
bins, 1-byte tallies, stored rows, the small-call cluster, weighted and deterministic sums, and each mode of the fused
bin-edges path), so that two builds can be compared in one device session:

    python benchmarks/bench_ab.py --tag base --out ab.jsonl      # with the base build importable
    python benchmarks/bench_ab.py --tag new --out ab.jsonl       # with the new one (alternate the two, 2-3 rounds)
    python benchmarks/bench_ab.py --compare ab.jsonl [--threshold 1.02]
    python benchmarks/bench_ab.py --tag new --cases edges    # only the cases whose name matches a regex

Each case: median ms of 15 CUDA-event timings after 100 ms of warm-up, checked first against torch (bincount, histc
or index_add_ in float64). --compare prints per case the best (least) time of each tag over its rounds and the
ratio of the last tag to the first, and exits 1 when a ratio passes the threshold. bench_regression.py compares against
the figures recorded in RESULTS.md instead (across sessions and machines, so with their drift).
"""

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from typing import Callable, Dict, List, Tuple

import torch

from benchlib import event_ms, make_values, torch_dsmhist

N = 1 << 28


def cases() -> List[Tuple[str, Callable[[], Tuple[Callable[[], torch.Tensor], torch.Tensor]]]]:
    """(name, setup): setup returns the timed call and the answer it must give."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)  # the same inputs for every build

    def values(n: int, bins: int, dtype=torch.int32, distribution: str = "uniform") -> torch.Tensor:
        return make_values(distribution, n, bins, dtype, gen)

    def by_value(
        bins: int, tier: str = "auto", dtype=torch.int32, n: int = N, clamp: bool = False, distribution: str = "uniform"
    ):
        def setup():
            x = values(n, bins, dtype, distribution)
            if clamp:  # a few values either side of the bins, which clamping counts in the edge bins
                x[:: 1 << 12] = -3
                x[1 :: 1 << 12] = bins + 5
            expected = torch.bincount(x.long().clamp(0, bins - 1) if clamp else x.long(), minlength=bins)
            out_of_range = "clamp" if clamp else "ignore"

            def call():
                with torch_dsmhist.force_tier(tier):
                    return torch_dsmhist.histogram(x, bins, out_of_range=out_of_range)

            return call, expected

        return setup

    def by_range(bins: int):
        def setup():
            x = torch.rand(N, device="cuda", generator=gen) * bins
            return (
                lambda: torch_dsmhist.histogram(x, bins, min=0.0, max=float(bins)),
                torch.histc(x, bins, 0, bins).long(),
            )

        return setup

    def by_range_centres(bins: int, clamp: bool = False):
        """float32 bin centres over [0, bins) (every value's bin exact), a few outside when clamped."""

        def setup():
            ints = torch.randint(0, bins, (N,), device="cuda", generator=gen)
            x = ints.float() + 0.5
            if clamp:
                x[:: 1 << 12] = -3.0
                x[1 :: 1 << 12] = bins + 5.0
                ints = (x.floor().long()).clamp(0, bins - 1)
            out_of_range = "clamp" if clamp else "ignore"
            return (
                lambda: torch_dsmhist.histogram(x, bins, min=0.0, max=float(bins), out_of_range=out_of_range),
                torch.bincount(ints, minlength=bins),
            )

        return setup

    def weighted(bins: int, deterministic: bool = False):
        def setup():
            x = values(N // 2, bins)
            w = torch.randn(N // 2, device="cuda", generator=gen)
            expected = torch.zeros(bins, dtype=torch.float64, device="cuda").index_add_(0, x.long(), w.double())

            def call():
                torch.use_deterministic_algorithms(deterministic)
                try:
                    return torch_dsmhist.histogram(x, bins, weight=w)
                finally:
                    torch.use_deterministic_algorithms(False)

            return call, expected

        return setup

    def batched(rows: int, length: int, bins: int):
        def setup():
            x = values(rows * length, bins).view(rows, length)
            expected = torch.stack([torch.bincount(r.long(), minlength=bins) for r in x[:64]])
            return (lambda: torch_dsmhist.batched_histogram(x, bins)), expected

        return setup

    def small(n: int, bins: int):
        def setup():
            x = values(n, bins)
            return (lambda: torch_dsmhist.histogram(x, bins)), torch.bincount(x.long(), minlength=bins)

        return setup

    def edges(n: int, sizes: Tuple[int, ...], linspace: bool = False, tier: str = "auto"):
        """n points of len(sizes) dims (float32, randn, correlated coordinates as bench_edges.py's) over sorted
        edges (a randn sample of each size, or linspace over [-4, 4]); counted against bucketize + bincount. A forced
        tier: the two stages, counted by that tier."""

        def setup():
            coords = [torch.randn(n, device="cuda", generator=gen)]
            while len(coords) < len(sizes):
                coords.append(0.6 * coords[-1] + 0.8 * torch.randn(n, device="cuda", generator=gen))
            points = torch.stack(coords, 1).contiguous()
            dim_edges = [
                torch.linspace(-4.0, 4.0, s, device="cuda")
                if linspace
                else torch.randn(s, device="cuda", generator=gen).sort().values
                for s in sizes
            ]
            flat = torch.zeros(n, dtype=torch.int64, device="cuda")
            kept = torch.ones(n, dtype=torch.bool, device="cuda")
            for d, e in enumerate(dim_edges):
                b = torch.bucketize(points[:, d], e, right=True) - 1
                b = torch.where(points[:, d] == e[-1], len(e) - 2, b)
                kept &= (b >= 0) & (b <= len(e) - 2)
                flat = flat * (len(e) - 1) + b.clamp(min=0)
            expected = torch.bincount(flat[kept], minlength=int(torch.tensor(sizes).sub(1).prod()))

            def call():
                with torch_dsmhist.force_tier(tier):
                    if len(sizes) == 1:
                        return torch_dsmhist.histogram_edges(points[:, 0], dim_edges[0])
                    return torch_dsmhist.histogramdd(points, dim_edges).flatten()

            return call, expected

        return setup

    return [
        *[(f"counts {b}", by_value(b)) for b in (256, 4096, 32768, 58112, 65536, 131072, 262144, 1 << 20)],
        *[
            (f"counts {label} {d}", by_value(b, distribution=d))
            for label, b in (("131072", 131072), ("262144", 262144), ("1M", 1 << 20), ("16M", 1 << 24))
            for d in ("sorted", "one_hot", "zipf")
        ],
        ("counts 4096 shared", by_value(4096, "shared")),
        ("counts 65536 cluster", by_value(65536, "cluster")),
        ("counts 65536 cluster clamped", by_value(65536, "cluster", clamp=True)),
        ("counts 65536 global", by_value(65536, "global")),
        ("counts 65536 cluster_dsmem", by_value(65536, "cluster_dsmem")),
        ("counts 262144 exchange clamped", by_value(262144, "exchange", clamp=True)),
        ("counts 1M partition", by_value(1 << 20, "partition")),
        ("uint8 2^30 256 bins", by_value(256, dtype=torch.uint8, n=1 << 30)),
        ("int64 4096", by_value(4096, dtype=torch.int64)),
        ("range float32 4096", by_range(4096)),
        ("range float32 1M", by_range(1 << 20)),
        ("weighted 4096", weighted(4096)),
        ("weighted 65536", weighted(65536)),
        ("weighted 1M", weighted(1 << 20)),
        ("deterministic 4096", weighted(4096, True)),
        ("deterministic 1M", weighted(1 << 20, True)),
        ("batched 4096 x 65536, 256 bins", batched(4096, 65536, 256)),
        ("small 16384 ids, 256 bins", small(16384, 256)),
        *[(f"edges 1-D {s}", edges(1 << 26, (s,))) for s in (101, 1001, 10001)],
        ("edges 1-D 1001 linspace", edges(1 << 26, (1001,), linspace=True)),
        *[(f"edges 2-D {s - 1}^2", edges(1 << 26, (s, s))) for s in (65, 257, 1025)],
        ("edges 3-D 16^3", edges(1 << 25, (17, 17, 17))),
        *[(f"edges 2-D {s - 1}^2", edges(1 << 26, (s, s))) for s in (401, 513)],
        *[(f"edges 2-D {s - 1}^2, 2^23 points", edges(1 << 23, (s, s))) for s in (401, 1025)],
        *[(f"edges 2-D {s - 1}^2, 2^22 points", edges(1 << 22, (s, s))) for s in (401, 1025)],
        *[(f"edges 2-D {s - 1}^2, 2^24 points", edges(1 << 24, (s, s))) for s in (401, 1025)],
        ("edges 3-D 64^3", edges(1 << 25, (65, 65, 65))),
        ("edges 2-D 1024^2 two stages, partition", edges(1 << 26, (1025, 1025), tier="partition")),
        ("edges 1-D 1001 two stages, shared", edges(1 << 26, (1001,), tier="shared")),
        *[
            (f"range float32 {b} centres", by_range_centres(b))
            for b in (65536, 131072, 232448, 262144, 1 << 20, 1 << 22)
        ],
        ("range float32 131072 centres clamped", by_range_centres(131072, clamp=True)),
    ]


def measure(tag: str, out: str, selected: str) -> int:
    failures = 0
    with open(out, "a") as f:
        for name, setup in cases():
            if not re.search(selected, name):
                continue
            call, expected = setup()
            got = call()
            ok = got.shape[-1] == expected.shape[-1] and (
                torch.allclose(got.double(), expected.double(), rtol=1e-4, atol=1e-3)
                if got.is_floating_point()
                else torch.equal(got[: expected.shape[0]] if got.dim() == 2 else got, expected)
            )
            if not ok:
                failures += 1
                print(f"WRONG {name}", flush=True)
            start = time.perf_counter()
            while time.perf_counter() - start < 0.1:
                call()
            torch.cuda.synchronize()
            ms = sorted(event_ms(call, 15))[7]
            f.write(json.dumps({"tag": tag, "case": name, "ms": ms}) + "\n")
            print(f"{tag} {name}: {ms:.4f} ms", flush=True)
            del call, expected, got
            torch.cuda.empty_cache()
    return 1 if failures else 0


def compare(path: str, threshold: float) -> int:
    best: Dict[str, Dict[str, float]] = defaultdict(dict)
    tags: List[str] = []
    for line in open(path):
        row = json.loads(line)
        tags += [row["tag"]] if row["tag"] not in tags else []
        best[row["case"]][row["tag"]] = min(best[row["case"]].get(row["tag"], float("inf")), row["ms"])
    first, last = tags[0], tags[-1]
    worse = 0
    print(f"{'case':<36} {first:>9} {last:>9}  ratio")
    for case, by_tag in best.items():
        ratio = by_tag[last] / by_tag[first]
        worse += ratio > threshold
        print(
            f"{case:<36} {by_tag[first]:9.4f} {by_tag[last]:9.4f}  {ratio:.3f}{'  SLOWER' if ratio > threshold else ''}"
        )
    return 1 if worse else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag")
    parser.add_argument("--out", default="ab.jsonl")
    parser.add_argument("--compare")
    parser.add_argument("--threshold", type=float, default=1.02)
    parser.add_argument("--cases", default="", help="time only the cases whose name matches this regex")
    args = parser.parse_args()
    if args.compare:
        return compare(args.compare, args.threshold)
    return measure(args.tag, args.out, args.cases)


if __name__ == "__main__":
    sys.exit(main())
