"""Has a change made any tier slower? Times the suite's reference rows again and compares them with the figures
recorded in benchmarks/RESULTS.md ("Benchmark suite": its uniform and dtypes tables, and the large-bin rows of its
normal, one hot, Zipf and sorted tables, where the partition and the exchange tiers run), cell by cell.

    python benchmarks/bench_regression.py [--threshold 1.02]

Each cell: median ms of 15 back-to-back CUDA-event timings (benchlib.event_ms), after one call whose result is
checked against torch.bincount and at least 100 ms of warm-up calls. Prints one line per cell (recorded, now,
now / recorded) and exits non-zero when a cell is slower than `threshold` times its record. It writes nothing: the
suite (bench_suite.py) owns the recorded figures.
"""

import argparse
import re
import statistics
import sys
from typing import Dict, List, Optional, Tuple

import torch

from benchlib import RESULTS, event_ms, make_values, torch_dsmhist

# The suite's skewed tables, whose data benchlib.make_values draws as the suite does.
DISTRIBUTIONS = ("normal", "one_hot", "zipf", "sorted")

# (table heading's start, row label, dtype, n, bins): rows of the suite whose figures this re-measures.
CASES = [
    ("## uniform", "256", torch.int32, 1 << 28, 256),
    ("## uniform", "4096", torch.int32, 1 << 28, 4096),
    ("## uniform", "32768", torch.int32, 1 << 28, 32768),
    ("## uniform", "58112", torch.int32, 1 << 28, 58112),
    ("## uniform", "65536", torch.int32, 1 << 28, 65536),
    ("## uniform", "131072", torch.int32, 1 << 28, 131072),
    ("## uniform", "262144", torch.int32, 1 << 28, 262144),
    ("## uniform", "1048576", torch.int32, 1 << 28, 1048576),
    ("## uniform", "4194304", torch.int32, 1 << 28, 4194304),
    ("## uniform", "16777216", torch.int32, 1 << 28, 16777216),
    ("## dtypes", "uint8, 2^30, 256 bins", torch.uint8, 1 << 30, 256),
    ("## dtypes", "int64, 4096 bins", torch.int64, 1 << 28, 4096),
]
# Skewed data past 128K bins: a change to the partition's or the exchange's kernels moved these and not the uniform
# rows (tier partition's Zipf, one hot and sorted rows 2.6-4.4% slower on 2026-11-28, uniform within 1%).
CASES += [
    ("## " + distribution, str(bins), torch.int32, 1 << 28, bins)
    for distribution in DISTRIBUTIONS
    for bins in (131072, 262144, 1048576, 16777216)
]
COLUMNS = {
    "dsmhist auto": None,
    "tier shared": "shared",
    "tier cluster": "cluster",
    "tier exchange": "exchange",
    "tier partition": "partition",
    "tier global": "global",
}


def recorded(text: str, heading: str, label: str) -> Dict[str, float]:
    """The cells of row `label` in the first table under a heading starting with `heading`."""
    section = text[text.index("\n" + heading) :]
    lines = [line for line in section.splitlines()[1:] if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == label:
            return {
                name: float(re.sub(r"[^0-9.]", "", value))
                for name, value in zip(header, cells)
                if re.fullmatch(r"[0-9.]+\*?", value)
            }
    raise KeyError(f"row {label!r} under {heading!r} not found in {RESULTS}")


def measure(x: torch.Tensor, bins: int, tier: Optional[str], expected: torch.Tensor) -> Optional[float]:
    try:
        with torch_dsmhist.force_tier(tier or "auto"):
            out = torch_dsmhist.histogram(x, bins)
            if not torch.equal(out, expected):
                raise AssertionError(f"tier {tier}: wrong counts")
            # A freshly allocated input's first passes ran slower for longer than 3 warm-up calls: 0.83 against
            # 0.70 ms over 15 timings after them (int64, 2 GiB, H100), whichever column came first. Warm up for
            # at least 100 ms of calls instead.
            first = statistics.median(event_ms(lambda: torch_dsmhist.histogram(x, bins), 3))
            event_ms(lambda: torch_dsmhist.histogram(x, bins), max(3, int(100 / max(first, 1e-3))))
            return statistics.median(event_ms(lambda: torch_dsmhist.histogram(x, bins), 15))
    except ValueError:  # the tier cannot hold these bins
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=1.02)
    args = parser.parse_args()
    text = RESULTS.read_text()
    gen = torch.Generator(device="cuda").manual_seed(0)
    slower: List[Tuple[str, float]] = []
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{'case':<28} {'column':<14} {'recorded':>9} {'now':>9} {'ratio':>7}")
    for heading, label, dtype, n, bins in CASES:
        record = recorded(text, heading, label)
        high = min(bins, 256) if dtype == torch.uint8 else bins
        table = heading[3:]
        if table in DISTRIBUTIONS:
            x = make_values(table, n, high, dtype, gen)
        else:
            x = torch.randint(0, high, (n,), device="cuda", generator=gen).to(dtype)
        expected = torch.bincount(x.long() if dtype != torch.int64 else x, minlength=bins)
        for column, tier in COLUMNS.items():
            if column not in record:
                continue
            now = measure(x, bins, tier, expected)
            if now is None:
                continue
            ratio = now / record[column]
            print(f"{heading[3:] + ' ' + label:<28} {column:<14} {record[column]:>9.3f} {now:>9.3f} {ratio:>7.3f}")
            if ratio > args.threshold:
                slower.append((f"{label} {column}", ratio))
        del x, expected
        torch.cuda.empty_cache()
    print(f"{len(slower)} cells slower than {args.threshold}x their record" + (f": {slower}" if slower else ""))
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
