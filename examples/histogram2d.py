#!/usr/bin/env python3
"""A 2-D histogram of a point cloud drawn as an image, and a skewed feature binned by quantile edges.

The points are two correlated features (a mixture of three Gaussian clusters). torch_dsmhist.dropins.histogramdd,
torch.histogramdd's signature and result on the GPU too, counts them into a bins x bins grid over a fixed range
(no host sync). A third feature, log-normal like a price, gets --quantiles equal-count bins: torch.quantile on a
sample gives the edges, and torch_dsmhist.histogram_edges counts the whole column over them (out_of_range="clamp":
values beyond the sample's extremes go to the end bins, so every row is counted). Both results must equal torch's
CPU ones exactly. The grid and the feature's quantile bins are saved as one PNG (by default under the system temp
folder; the path written is printed). The quantile panel draws each bin's share of the rows as its bar height over
the bin's edges on a log price axis: equal-count bins come out equal in height, and where the distribution is dense
shows as narrow bins. (A linear density drawn on a log axis gave bars whose areas did not match their shares: the
first bin, wide on that axis, looked the largest, though every quantile bin holds the same share.)

    python examples/histogram2d.py [--device cuda] [--points 4000000] [--bins 256] [--extent 4]
                                   [--quantiles 10] [--sample 100000] [--seed 0] [--out /tmp/histogram2d.png]

Needs matplotlib for the image (pip install -e ".[examples]").

Prints "histogram2d: ok" at the end.
"""

import argparse
import os
import tempfile
from typing import List, Tuple

import torch

import torch_dsmhist
import torch_dsmhist.dropins

# Where the PNG goes by default: a folder under the system temp folder, so running the example writes nothing into
# the current folder or the repository.
OUT_DIR = os.path.join(tempfile.gettempdir(), "torch_dsmhist_examples")

# The clusters: (weight, centre, the matrix that shapes a standard normal into the cluster).
CLUSTERS = (
    (0.5, (-1.5, -1.0), ((0.8, 0.0), (0.5, 0.4))),
    (0.3, (1.2, 1.0), ((0.5, 0.0), (-0.3, 0.6))),
    (0.2, (0.8, -2.2), ((0.3, 0.0), (0.0, 0.9))),
)


def require_matplotlib() -> None:
    """Checked before any work, so a missing optional dependency costs no time."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit('histogram2d: needs matplotlib for its image: pip install -e ".[examples]"')


def point_cloud(points: int, seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(xy [points, 2], price [points]) float32 on the CPU: the same data whatever the device that counts it."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.tensor([w for w, _, _ in CLUSTERS])
    cluster = torch.multinomial(weights, points, replacement=True, generator=g)
    centres = torch.tensor([c for _, c, _ in CLUSTERS])[cluster]
    shapes = torch.tensor([m for _, _, m in CLUSTERS])[cluster]
    xy = centres + torch.einsum("nij,nj->ni", shapes, torch.randn(points, 2, generator=g))
    price = torch.exp(3.0 + 0.3 * xy[:, 0] + 0.6 * torch.randn(points, generator=g))
    return xy, price


def grid_histogram(xy: torch.Tensor, bins: int, extent: float):
    """The 2-D histogram of xy over [-extent, extent]^2 in bins x bins: (hist [bins, bins] float32, (x, y edges))."""
    return torch_dsmhist.dropins.histogramdd(xy, bins=[bins, bins], range=[-extent, extent, -extent, extent])


def quantile_edges(feature: torch.Tensor, quantiles: int, sample: int) -> torch.Tensor:
    """quantiles + 1 edges from an evenly strided sample of the feature (torch.quantile needs no more)."""
    stride = max(1, feature.numel() // sample)
    levels = torch.linspace(0, 1, quantiles + 1, device=feature.device, dtype=feature.dtype)
    return torch.quantile(feature[::stride][:sample], levels)


def quantile_counts(feature: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """int64 counts of the whole feature per quantile bin, the values beyond the end edges in the end bins."""
    return torch_dsmhist.histogram_edges(feature, edges, out_of_range="clamp")


def quantile_bar_heights(counts: torch.Tensor) -> torch.Tensor:
    """What the quantile panel plots: each bin's share of the rows in percent (float64, on the CPU), one bar per bin.

    Deliberately not divided by the bin widths: on the log price axis the bars of a linear density (count / width)
    have areas unlike their shares (the first bin, wide on that axis, looked the largest) although every quantile
    bin holds the same share. Equal counts give equal bars."""
    counts = counts.cpu().double()
    return 100.0 * counts / counts.sum()


def save_image(
    hist: torch.Tensor, grid_edges: List[torch.Tensor], counts: torch.Tensor, edges: torch.Tensor, path: str, title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    x_edges, y_edges = (e.cpu() for e in grid_edges)
    fig, (grid_ax, quantile_ax) = plt.subplots(1, 2, figsize=(12, 5))
    image = grid_ax.imshow(
        hist.cpu().T.numpy(),
        origin="lower",
        aspect="auto",
        norm=LogNorm(vmin=1),
        extent=(float(x_edges[0]), float(x_edges[-1]), float(y_edges[0]), float(y_edges[-1])),
    )
    fig.colorbar(image, ax=grid_ax, label="points per bin")
    grid_ax.set(xlabel="feature x", ylabel="feature y", title=title)
    edges, heights = edges.cpu().double(), quantile_bar_heights(counts)
    quantile_ax.bar(
        edges[:-1].numpy(),
        heights.numpy(),
        width=edges.diff().numpy(),
        align="edge",
        alpha=0.7,
        edgecolor="black",
        linewidth=0.8,
    )  # one bar per bin, spanning its edges
    quantile_ax.set_ylim(0, 1.25 * float(heights.max()))
    quantile_ax.set(
        xscale="log",
        xlabel="price (log scale; bars span the quantile bin edges)",
        ylabel="share of rows in the bin, % (not a density)",
        title=f"price, {counts.numel()} equal-count bins (narrow = dense)",
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--points", type=int, default=4_000_000)
    parser.add_argument("--bins", type=int, default=256, help="bins per feature of the 2-D histogram")
    parser.add_argument("--extent", type=float, default=4.0, help="the grid covers [-extent, extent] per feature")
    parser.add_argument("--quantiles", type=int, default=10)
    parser.add_argument("--sample", type=int, default=100_000, help="rows the quantile edges are computed from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=os.path.join(OUT_DIR, "histogram2d.png"), help="the PNG to write (default: %(default)s)"
    )
    args = parser.parse_args()
    require_matplotlib()
    device = torch.device(args.device)

    xy_cpu, price_cpu = point_cloud(args.points, args.seed)
    xy, price = xy_cpu.to(device), price_cpu.to(device)
    hist, grid_edges = grid_histogram(xy, args.bins, args.extent)
    edges = quantile_edges(price, args.quantiles, args.sample)
    counts = quantile_counts(price, edges)

    extent = [-args.extent, args.extent] * 2
    want = torch.histogramdd(xy_cpu, bins=[args.bins, args.bins], range=extent)
    if not (
        torch.equal(hist.cpu(), want.hist) and all(torch.equal(a.cpu(), b) for a, b in zip(grid_edges, want.bin_edges))
    ):
        raise SystemExit("histogram2d: the 2-D histogram differs from torch.histogramdd on the CPU")
    edges_cpu = edges.cpu()
    want_counts = torch.histogram(price_cpu.clamp(edges_cpu[0], edges_cpu[-1]), edges_cpu).hist.long()
    if not torch.equal(counts.cpu(), want_counts) or int(counts.sum()) != args.points:
        raise SystemExit("histogram2d: the quantile bins differ from torch.histogram on the CPU")

    inside = int(hist.sum())
    peak = int(hist.max())
    px, py = divmod(int(hist.argmax()), args.bins)
    x_centre = float(grid_edges[0][px] + grid_edges[0][px + 1]) / 2
    y_centre = float(grid_edges[1][py] + grid_edges[1][py + 1]) / 2
    share = counts.double() / args.points
    print(
        f"2-D histogram: {args.bins}x{args.bins} bins over [-{args.extent:g}, {args.extent:g}]^2; "
        f"{inside} of {args.points} points inside; peak {peak} points at bin ({px}, {py}), "
        f"centre ({x_centre:.3f}, {y_centre:.3f})"
    )
    print("quantile edges: " + " ".join(f"{e:.4g}" for e in edges_cpu.tolist()))
    print("quantile counts: " + " ".join(str(c) for c in counts.tolist()))
    print(
        f"each quantile bin holds {100 * float(share.min()):.2f}% to {100 * float(share.max()):.2f}% of the rows "
        f"(edges from a sample of {min(args.sample, args.points)})"
    )
    save_image(
        hist,
        list(grid_edges),
        counts,
        edges,
        args.out,
        f"{args.points:,} points, {args.bins}x{args.bins} bins (log colour)",
    )
    print("matches torch.histogramdd and torch.histogram on the CPU")
    print(f"wrote {os.path.abspath(args.out)}")
    print("histogram2d: ok")


if __name__ == "__main__":
    main()
