#!/usr/bin/env python3
"""A streaming histogram of one feature over a whole dataset, batch by batch through a DataLoader.

torch_dsmhist.histogram_add_ adds each batch's counts into one running histogram on the device: nothing is zeroed
between batches and nothing waits for the GPU until the end, so the loop runs as fast as batches arrive. The result
is checked against one histogram of the whole feature column (exactly) and torch.histc (up to values on bin edges),
and saved as a PNG plot (by default under the system temp folder; the path written is printed).

The time of the histogram calls is printed apart from the time of the data loading: on CUDA, events around each
histogram_add_ call (GPU time, read once at the end, so the loop still never waits); on the CPU, perf_counter around
the calls only. The loading (DataLoader iteration and the copy to the device) is most of the loop's time.

    python examples/dataset_histogram.py [--device cuda] [--samples 2000000] [--batch-size 65536] [--bins 200]
                                         [--out /tmp/dataset_histogram.png]

Needs matplotlib for the plot (pip install -e ".[examples]", which also brings tqdm for the progress bar).

Prints "dataset_histogram: ok" at the end.
"""

import argparse
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

import torch_dsmhist

# Where the PNG goes by default: a folder under the system temp folder, so running the example writes nothing into
# the current folder or the repository.
OUT_DIR = os.path.join(tempfile.gettempdir(), "torch_dsmhist_examples")

# The histogram's range: the synthetic feature's bulk; the few values beyond go to the end bins (out_of_range="clamp").
LO, HI = -5.0, 6.0


def require_matplotlib() -> None:
    """Checked before any work, so a missing optional dependency costs no time."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit('dataset_histogram: needs matplotlib for its plot: pip install -e ".[examples]"')


class SyntheticFeatures(Dataset):
    """Rows of 4 features; feature 2 is a two-component Gaussian mixture (the one we histogram)."""

    def __init__(self, samples: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        component = torch.rand(samples, generator=g) < 0.3
        feature = torch.where(
            component, torch.randn(samples, generator=g) * 0.5 - 2.0, torch.randn(samples, generator=g) * 1.0 + 1.5
        )
        self.rows = torch.randn(samples, 4, generator=g)
        self.rows[:, 2] = feature

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, index):
        return self.rows[index]


def progress(iterable, total: int, desc: str):
    """tqdm when installed, else a one-line text bar."""
    try:
        from tqdm import tqdm

        yield from tqdm(iterable, total=total, desc=desc)
        return
    except ImportError:
        pass
    width = 30
    for i, item in enumerate(iterable, 1):
        done = width * i // total
        print(f"\r{desc} [{'#' * done}{'.' * (width - done)}] {i}/{total}", end="", flush=True)
        yield item
    print()


def stream_histogram(loader: DataLoader, device: torch.device, bins: int):
    """histogram_add_ of each batch's feature column into one running histogram on the device. Returns (the counts,
    read to the CPU at the end: the loop's only synchronisation, seconds in the histogram_add_ calls, seconds spent
    loading: fetching each batch from the DataLoader and its copy to the device)."""
    hist = torch.zeros(bins, dtype=torch.int64, device=device)
    cuda = device.type == "cuda"
    events = []  # CUDA: (start, end) around each histogram_add_, read after the final synchronisation
    histogram_s = loading_s = 0.0  # CPU: perf_counter around each histogram_add_; the rest of the loop is loading
    mark = time.perf_counter()
    for batch in progress(loader, total=len(loader), desc="histogram"):
        feature = batch[:, 2].to(device, non_blocking=True)  # a strided column: read in place
        before = time.perf_counter()
        loading_s += before - mark
        if cuda:
            events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            events[-1][0].record()
        torch_dsmhist.histogram_add_(hist, feature, LO, HI, out_of_range="clamp")
        if cuda:
            events[-1][1].record()
        mark = time.perf_counter()
        if not cuda:
            histogram_s += mark - before
    counts = hist.cpu()
    if cuda:
        torch.cuda.synchronize(device)  # every event has completed; elapsed_time may be read
        histogram_s = sum(a.elapsed_time(b) for a, b in events) / 1e3
    return counts, histogram_s, loading_s


def save_plot(hist: torch.Tensor, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = hist.cpu().double()
    edges = torch.linspace(LO, HI, counts.numel() + 1, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.stairs(counts.numpy(), edges.numpy(), fill=True, alpha=0.7)
    ax.set_xlabel("feature value")
    ax.set_ylabel("count")
    ax.set_title(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(device: torch.device, samples: int, batch_size: int, bins: int, out: str) -> None:
    """Streams feature 2 of `samples` rows through histogram_add_, checks the counts, plots them, prints the times."""
    dataset = SyntheticFeatures(samples)
    loader = DataLoader(dataset, batch_size=batch_size, pin_memory=device.type == "cuda")
    start = time.perf_counter()
    counts, histogram_s, loading_s = stream_histogram(loader, device, bins)
    elapsed = time.perf_counter() - start

    column = dataset.rows[:, 2]
    if not torch.equal(counts, torch_dsmhist.histogram(column, bins, LO, HI, out_of_range="clamp")):
        raise SystemExit("dataset_histogram: the streamed histogram differs from one histogram of the whole column")
    if int(counts.sum()) != samples:
        raise SystemExit("dataset_histogram: the histogram does not count every sample")
    # torch.histc on CPU computes bin positions in another order of operations, so a value within rounding of a bin
    # edge may land one bin over: allow a handful of such moves, nothing more.
    moved = int((counts - torch.histc(column.clamp(LO, HI), bins, LO, HI).long()).abs().sum())
    if moved > max(10, samples // 100_000):
        raise SystemExit(f"dataset_histogram: {moved} counts differ from torch.histc")

    save_plot(counts, out, f"feature 2 over {samples:,} samples ({len(loader)} batches, {bins} bins)")
    how = "GPU time, CUDA events" if device.type == "cuda" else "perf_counter around the calls"
    print(
        f"{samples:,} samples in {len(loader)} batches; matches the one-shot histogram "
        f"({moved} edge values binned differently by torch.histc)"
    )
    print(f"histogram time (histogram_add_ calls only, {how}): {histogram_s * 1e3:.2f} ms")
    print(f"data loading time (DataLoader batches and the copy to {device.type}, host wall time): {loading_s:.2f} s")
    print(f"whole loop (loading, histogram calls, the final copy of the counts): {elapsed:.2f} s")
    print(f"wrote {os.path.abspath(out)}")
    print("dataset_histogram: ok")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--batch-size", type=int, default=65536)
    parser.add_argument("--bins", type=int, default=200)
    parser.add_argument(
        "--out", default=os.path.join(OUT_DIR, "dataset_histogram.png"), help="the PNG to write (default: %(default)s)"
    )
    args = parser.parse_args()
    require_matplotlib()
    main(torch.device(args.device), args.samples, args.batch_size, args.bins, args.out)
