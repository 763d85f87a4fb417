#!/usr/bin/env python3
"""GPU benchmark of the bin-edges ops' call-site shapes (issue 50): a batched histogramdd (one 16x16x16 colour
histogram per image of 256 RGB 224x224 images, as points [256, 50176, 3]) and histogram_edges with per-row edges (a
GBDT sketch: 2^22 rows of 32 float32 features, each feature over its own 256 quantile edges), against the idioms a
user writes without them.

Colour histograms, uint8 images (edges 0, 16, ..., 256 per channel) and float32 images in [0, 1)
(torch.linspace(0, 1, 17) per channel):
  * batched: torch_dsmhist.histogramdd(images, edges) -> [256, 16, 16, 16] (one binning pass, one batched count);
  * offset bincount: each pixel's bin by arithmetic (uint8: value // 16; float32: (value * 16) floored, exact for
    these edges), linearised with the image's offset (image * 4096 + r * 256 + g * 16 + b) into one torch.bincount;
  * loop: one unbatched torch_dsmhist.histogramdd call per image (what the package offered before).
GBDT sketch, data [2^22, 32] (feature f: randn * (f + 1) + f), edges [32, 256] (each feature's quantiles of a 2^16-row
sample, widened to cover the data):
  * per-row edges: torch_dsmhist.histogram_edges(data.t(), edges) -> [32, 255] (the transposed view read in place);
  * bucketize + scatter_add_: per feature, torch.bucketize(right=True) - 1 (the last edge into the last bin, outside
    values into a spare bin) and scatter_add_ of ones (the issue's contender);
  * searchsorted + bincount: torch.searchsorted of all features at once against edges [32, 256], offset by feature,
    one torch.bincount (the strongest torch idiom).
Each contender's result must equal ours before it is timed (exit 1 otherwise). Median ms of CUDA events after
warm-up; read floor: the input's bytes at the measured copy bandwidth. Targets (issue 50): batched >= 2.5x the offset
bincount; the GBDT sketch in one call, >= 15x bucketize + scatter_add_. Writes its section of benchmarks/RESULTS.md.

Usage: python benchmarks/bench_batched_edges.py [--out-dir DIR] [--quick]
"""

import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch

import benchlib as bl
from benchlib import torch_dsmhist

SECTION = "batched-edges"  # this script's section of RESULTS.md
WARMUP, REPS = 3, 15
IMAGES, PIXELS, CHANNELS, BINS = 256, 224 * 224, 3, 16
TARGET = 2.5  # batched >= 2.5x the offset bincount (issue 50)


def offset_bincount(images: torch.Tensor) -> torch.Tensor:
    """The idiom without the package: every pixel's flat bin plus its image's offset, one bincount."""
    if images.dtype == torch.uint8:
        idx = (images // (256 // BINS)).long()
    else:
        idx = (images * BINS).long().clamp_(0, BINS - 1)
    flat = (idx[..., 0] * BINS + idx[..., 1]) * BINS + idx[..., 2]
    flat += torch.arange(images.shape[0], device=images.device).unsqueeze(1) * BINS**3
    counts = torch.bincount(flat.reshape(-1), minlength=images.shape[0] * BINS**3)
    return counts.view(images.shape[0], BINS, BINS, BINS)


def make_images(dtype: torch.dtype, images: int, gen: torch.Generator) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    if dtype == torch.uint8:
        data = torch.randint(0, 256, (images, PIXELS, CHANNELS), generator=gen, device="cuda", dtype=torch.uint8)
        edges = torch.linspace(0, 256, BINS + 1, dtype=torch.float64, device="cuda")
    else:
        data = torch.rand(images, PIXELS, CHANNELS, generator=gen, device="cuda")
        edges = torch.linspace(0, 1, BINS + 1, device="cuda")
    return data, [edges] * CHANNELS


def run_case(dtype: torch.dtype, images: int, copy_bw: float, gen: torch.Generator) -> Dict[str, Optional[float]]:
    data, edges = make_images(dtype, images, gen)
    calls: Dict[str, Callable[[], torch.Tensor]] = {
        "batched": lambda: torch_dsmhist.histogramdd(data, edges),
        "offset bincount": lambda: offset_bincount(data),
        "loop": lambda: torch.stack([torch_dsmhist.histogramdd(img, edges) for img in data]),
    }
    expected = calls["batched"]()
    times: Dict[str, Optional[float]] = {"floor": data.numel() * data.element_size() / copy_bw * 1e3}
    for name, call in calls.items():
        times[name] = bl.median_event_ms(call, WARMUP, REPS) if torch.equal(call(), expected) else None
    return times


FEATURES, SKETCH_EDGES = 32, 256
SKETCH_TARGET = 15.0  # per-row edges >= 15x bucketize + scatter_add_ (issue 50)


def bucketize_scatter_add(data: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Per feature: torch.histogram's bin by bucketize, outside values into a spare bin, scatter_add_ of ones."""
    bins = edges.shape[1] - 1
    out = torch.zeros(edges.shape[0], bins + 1, dtype=torch.int64, device=data.device)
    for f in range(edges.shape[0]):
        col, e = data[:, f], edges[f]
        idx = torch.bucketize(col, e, right=True) - 1
        idx = torch.where(col == e[-1], bins - 1, idx)
        idx = torch.where((col >= e[0]) & (col <= e[-1]), idx, bins)
        out[f].scatter_add_(0, idx, torch.ones_like(idx))
    return out[:, :bins]


def searchsorted_bincount(data: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """All features at once: searchsorted against each feature's edges, offset by feature, one bincount."""
    features, bins = edges.shape[0], edges.shape[1] - 1
    cols = data.t().contiguous()
    idx = torch.searchsorted(edges, cols, right=True) - 1
    idx = torch.where(cols == edges[:, -1:], bins - 1, idx)
    idx = torch.where((cols >= edges[:, :1]) & (cols <= edges[:, -1:]), idx, bins)
    idx += torch.arange(features, device=data.device).unsqueeze(1) * (bins + 1)
    counts = torch.bincount(idx.reshape(-1), minlength=features * (bins + 1))
    return counts.view(features, bins + 1)[:, :bins]


def run_sketch(rows: int, copy_bw: float, gen: torch.Generator) -> Dict[str, Optional[float]]:
    scale = torch.arange(1, FEATURES + 1, device="cuda", dtype=torch.float32)
    data = torch.randn(rows, FEATURES, generator=gen, device="cuda") * scale + (scale - 1)
    sample = data[torch.randint(0, rows, (1 << 16,), generator=gen, device="cuda")]
    edges = torch.quantile(sample, torch.linspace(0, 1, SKETCH_EDGES, device="cuda"), dim=0).t().contiguous()
    edges[:, 0], edges[:, -1] = data.min(0).values, data.max(0).values  # every value inside: the same counts
    calls: Dict[str, Callable[[], torch.Tensor]] = {
        "per-row edges": lambda: torch_dsmhist.histogram_edges(data.t(), edges),
        "bucketize + scatter_add_": lambda: bucketize_scatter_add(data, edges),
        "searchsorted + bincount": lambda: searchsorted_bincount(data, edges),
    }
    expected = calls["per-row edges"]()
    times: Dict[str, Optional[float]] = {"floor": data.numel() * 4 / copy_bw * 1e3}
    for name, call in calls.items():
        times[name] = bl.median_event_ms(call, WARMUP, REPS) if torch.equal(call(), expected) else None
    return times


def render_sketch(t: Dict[str, Optional[float]], rows: int) -> List[str]:
    columns = ["per-row edges", "bucketize + scatter_add_", "searchsorted + bincount", "floor"]
    ours, loop, batched = t.get("per-row edges"), t.get("bucketize + scatter_add_"), t.get("searchsorted + bincount")
    ratio = loop / ours if ours and loop else None
    verdict = "n/a" if ratio is None else f"{'met' if ratio >= SKETCH_TARGET else 'missed'}: {ratio:.1f}x"
    best = f"{batched / ours:.1f}x" if ours and batched else "n/a"
    lines = [
        "",
        f"GBDT sketch: {rows} rows x {FEATURES} float32 features, {SKETCH_EDGES} quantile edges a feature "
        f"(histogram_edges(data.t(), edges [{FEATURES}, {SKETCH_EDGES}]) -> [{FEATURES}, {SKETCH_EDGES - 1}]); floor: "
        "the data's bytes. Target (issue 50): one call, >= 15x bucketize + scatter_add_.",
        "",
    ]
    header = [*columns, "searchsorted + bincount / ours", "bucketize + scatter_add_ / ours (target >= 15x)"]
    cells = [bl.fmt(t[c]) if t.get(c) else "**FAIL**" for c in columns]
    return lines + bl.md_table(header, [cells + [best, verdict]])


def render(results: List[Tuple[str, Dict[str, Optional[float]]]], images: int) -> str:
    columns = ["batched", "offset bincount", "loop", "floor"]
    rows = []
    for label, t in results:
        ours, idiom = t.get("batched"), t.get("offset bincount")
        ratio = idiom / ours if ours and idiom else None
        verdict = "n/a" if ratio is None else f"{'met' if ratio >= TARGET else 'missed'}: {ratio:.2f}x"
        loop = f"{t['loop'] / ours:.1f}x" if ours and t.get("loop") else "n/a"
        rows.append([label] + [bl.fmt(t[c]) if t.get(c) else "**FAIL**" for c in columns] + [loop, verdict])
    lines = [
        "# Batched histogramdd and per-row edges (benchmarks/bench_batched_edges.py)",
        "",
        f"{bl.run_facts()} {images} RGB 224x224 images as points [{images}, 50176, 3], 16 bins a channel ([{images}, "
        f"16, 16, 16]); median ms of {REPS} CUDA-event timings after {WARMUP} warm-ups. loop: one unbatched "
        "histogramdd call per image. floor: the images' bytes at the measured copy bandwidth. Target (issue 50): "
        "batched >= 2.5x one offset bincount.",
        "",
    ]
    header = ["images", *columns, "loop / batched", "offset bincount / batched (target >= 2.5x)"]
    lines += bl.md_table(header, rows)
    return "\n".join(lines)


def main() -> int:
    args = bl.gpu_benchmark_args("bench_batched_edges", __doc__, quick="16 images; RESULTS.md is left as it is")
    if args is None:
        return 2
    images = 16 if args.quick else IMAGES
    copy_bw = bl.copy_bandwidth(images * PIXELS * CHANNELS * 4)
    gen = torch.Generator(device="cuda").manual_seed(50)
    results = []
    for dtype in (torch.uint8, torch.float32):
        times = run_case(dtype, images, copy_bw, gen)
        torch.cuda.empty_cache()
        label = str(dtype).replace("torch.", "")
        print(f"{label}: {bl.timings_text(times)}", flush=True)
        results.append((label, times))
    rows = (1 << 16) if args.quick else (1 << 22)
    sketch = run_sketch(rows, copy_bw, gen)
    print(f"sketch: {bl.timings_text(sketch)}", flush=True)
    section = render(results, images) + "\n" + "\n".join(render_sketch(sketch, rows))
    if not args.quick:
        bl.write_results_section(SECTION, section, args.out_dir)
    print(section, flush=True)
    failed = any(v is None for _, t in results for v in t.values()) or any(v is None for v in sketch.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
