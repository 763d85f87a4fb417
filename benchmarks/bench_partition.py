#!/usr/bin/env python3
"""Tier "partition" on the device: correctness against torch (every policy, strides, batched rows, histogram_add_,
the deterministic sum), then median ms on 2^28 int32 of each distribution beside the planner, tier global and
torch.histc, and a per-kernel profile. Prints only (figures copied into tuning.h and NOTES.md by hand).

    python benchmarks/bench_partition.py [BINS ...]
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import make_values, median_event_ms, torch_dsmhist  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_partition needs a CUDA device")
        return 0

    dev = "cuda"
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(time.time()) % 100000)

    def values(dist, n, bins, dtype=torch.int32):
        return make_values(dist, n, bins, dtype, gen)

    def forced(tier, fn):
        with torch_dsmhist.force_tier(tier):
            return fn()

    fails = 0

    def check(name, got, want, exact=True):
        nonlocal fails
        ok = torch.equal(got, want) if exact else torch.allclose(got, want, rtol=1e-4, atol=1e-3)
        if not ok:
            fails += 1
            diff = (got.double() - want.double()).abs()
            print(f"FAIL {name}: max diff {diff.max().item()} at {diff.argmax().item()}", flush=True)

    t0 = time.time()
    for bins in (65537, 262144, 1000003, 16777216, 33521664):
        for dist in ("uniform", "one_hot", "zipf", "sorted"):
            n = 3_000_017
            x = values(dist, n, bins, torch.int64)
            ref = torch.bincount(x, minlength=bins)
            check(f"count {bins} {dist}", forced("partition", lambda: torch_dsmhist.histogram(x, bins)), ref)
            if bins <= 4194304:
                x32 = x.to(torch.int32)[1:]  # misaligned
                check(
                    f"int32 {bins} {dist}",
                    forced("partition", lambda: torch_dsmhist.histogram(x32, bins, dtype=torch.int32)),
                    torch.bincount(x32, minlength=bins).int(),
                )
                xs = x[::3]
                check(
                    f"strided {bins} {dist}",
                    forced("partition", lambda: torch_dsmhist.histogram(xs, bins)),
                    torch.bincount(xs, minlength=bins),
                )
                w = torch.rand(n, generator=gen, device=dev, dtype=torch.float64)
                check(
                    f"w64 {bins} {dist}",
                    forced("partition", lambda: torch_dsmhist.histogram(x, bins, weight=w)),
                    torch.bincount(x, weights=w, minlength=bins),
                    exact=False,
                )
                w32 = w.float()
                check(
                    f"w32 {bins} {dist}",
                    forced("partition", lambda: torch_dsmhist.histogram(x, bins, weight=w32)),
                    torch.bincount(x, weights=w32.double(), minlength=bins).float(),
                    exact=False,
                )
                torch.use_deterministic_algorithms(True)
                try:
                    a = forced("partition", lambda: torch_dsmhist.histogram(x, bins, weight=w))
                    b = forced("global", lambda: torch_dsmhist.histogram(x, bins, weight=w))
                    check(f"det {bins} {dist}", a, b)
                finally:
                    torch.use_deterministic_algorithms(False)
                f = x.float() + 0.5
                check(
                    f"range {bins} {dist}",
                    forced("partition", lambda: torch_dsmhist.histogram(f, bins, min=0.0, max=float(bins))),
                    forced("global", lambda: torch_dsmhist.histogram(f, bins, min=0.0, max=float(bins))),
                )
                h = torch.bincount(x, minlength=bins)
                h2 = h.clone()
                forced("partition", lambda: torch_dsmhist.histogram_add_(h2, x))
                check(f"add_ {bins} {dist}", h2, 2 * h)
        rows = 5
        xb = values("uniform", rows * 700_001, bins, torch.int64).view(rows, -1)
        if bins <= 4194304:
            refb = torch.stack([torch.bincount(r, minlength=bins) for r in xb])
            check(f"batched {bins}", forced("partition", lambda: torch_dsmhist.batched_histogram(xb, bins)), refb)
    print(f"correctness: {fails} failures ({time.time() - t0:.0f} s)", flush=True)

    def event_ms(fn, runs):
        return median_event_ms(fn, 1, runs)

    n = 2**28
    print("bins dist | partition auto global histc  (ms, 2^28 int32)", flush=True)
    for bins in map(int, sys.argv[1:]) if len(sys.argv) > 1 else (65536, 131072, 262144, 1048576, 4194304, 16777216):
        for dist in ("uniform", "normal", "one_hot", "zipf", "sorted"):
            x = values(dist, n, bins)
            ref = torch.bincount(x, minlength=bins)
            got = forced("partition", lambda: torch_dsmhist.histogram(x, bins))
            ok = torch.equal(got, ref)
            del ref, got
            tp = event_ms(lambda: forced("partition", lambda: torch_dsmhist.histogram(x, bins)), 7)
            ta = event_ms(lambda: torch_dsmhist.histogram(x, bins), 5)
            tg = (
                event_ms(lambda: forced("global", lambda: torch_dsmhist.histogram(x, bins)), 3)
                if dist != "one_hot" or True
                else 0
            )
            xf = x.float() if dist in ("uniform", "one_hot") else None
            th = event_ms(lambda: torch.histc(xf, bins, 0, bins), 3) if xf is not None else float("nan")
            print(f"{bins} {dist} | {tp:.3f} {ta:.3f} {tg:.3f} {th:.3f} {'ok' if ok else 'WRONG'}", flush=True)
            del x, xf
            torch.cuda.empty_cache()

    from torch.profiler import ProfilerActivity, profile

    for bins, dist in ((131072, "uniform"), (1048576, "uniform"), (1048576, "one_hot"), (16777216, "uniform")):
        x = values(dist, n, bins)
        forced("partition", lambda: torch_dsmhist.histogram(x, bins))
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            forced("partition", lambda: torch_dsmhist.histogram(x, bins))
            torch.cuda.synchronize()
        print(bins, dist)
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:4]:
            print(f"   {e.key[:70]:70s} {e.device_time_total / 1000:.3f} ms x{e.count}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
