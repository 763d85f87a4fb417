#!/usr/bin/env python3
"""Per-channel histogram equalization of an image batch with torch_dsmhist.batched_histogram (uint8 in, uint8 out).

Each (image, channel) plane is one row of a [batch * channels, height * width] view: batched_histogram gives all the
256-bin histograms in one call, the cumulative histograms become lookup tables, and a gather maps every pixel.
Writes the images before and after, and their histograms, as two PNGs into one folder (--out-dir, or --out, the
same option; by default a folder under the system temp folder) and prints their paths.

    python examples/image_equalize.py [--device cuda] [--batch 4] [--size 256] [--image PATH]
                                     [--out /tmp/equalized]

Needs matplotlib (pip install -e ".[examples]").

Without --image a batch of synthetic low-contrast images is generated. Prints "image_equalize: ok" at the end.
"""

import argparse
import math
import os
import tempfile

import torch

import torch_dsmhist


def synthetic_batch(batch: int, size: int, seed: int = 0) -> torch.Tensor:
    """Smooth gradients, discs and noise squeezed into a narrow band of grey levels: low contrast on purpose."""
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    images = []
    for _ in range(batch):
        channels = []
        for _ in range(3):
            fx, fy, phase = (torch.rand(3, generator=g) * torch.tensor([6.0, 6.0, 2 * math.pi])).tolist()
            plane = 0.5 + 0.25 * torch.sin(fx * xs + phase) * torch.cos(fy * ys)
            cx, cy, r = torch.rand(3, generator=g).tolist()
            plane = plane + 0.2 * (((xs - cx) ** 2 + (ys - cy) ** 2) < (0.1 + 0.2 * r) ** 2).float()
            plane = plane + 0.03 * torch.randn(size, size, generator=g)
            low, high = 70 + 40 * torch.rand(1, generator=g).item(), 60.0
            channels.append((low + high * plane.clamp(0, 1)).round())
        images.append(torch.stack(channels))
    return torch.stack(images).clamp(0, 255).to(torch.uint8)  # [batch, 3, size, size]


def load_image(path: str) -> torch.Tensor:
    import matplotlib.image as mpimg

    array = torch.from_numpy(mpimg.imread(path).copy())
    if array.dtype != torch.uint8:  # PNGs load as float in [0, 1]
        array = (array.float() * 255).round().clamp(0, 255).to(torch.uint8)
    if array.dim() == 2:
        array = array.unsqueeze(-1).expand(-1, -1, 3)
    return array[..., :3].permute(2, 0, 1).unsqueeze(0).contiguous()  # [1, 3, H, W]


def equalize(images: torch.Tensor):
    """Per-channel equalization: returns (equalized uint8 images, histograms before [B, C, 256])."""
    b, c, h, w = images.shape
    planes = images.reshape(b * c, h * w)
    hist = torch_dsmhist.batched_histogram(planes, 256)  # uint8 bins by value: [b * c, 256]
    cdf = hist.cumsum(dim=1)
    # The classic mapping: the first occupied level goes to 0, the last to 255, evenly by rank in between.
    cdf_min = torch.where(hist > 0, cdf, torch.full_like(cdf, h * w)).min(dim=1, keepdim=True).values
    denominator = (h * w - cdf_min).clamp(min=1)
    lut = ((cdf - cdf_min).clamp(min=0).double() * 255 / denominator).round().to(torch.uint8)
    equalized = torch.gather(lut, 1, planes.long()).reshape(b, c, h, w)
    return equalized, hist.reshape(b, c, 256)


def save_pngs(
    before: torch.Tensor, after: torch.Tensor, hist_before: torch.Tensor, hist_after: torch.Tensor, out_dir: str
) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    n = before.shape[0]
    fig, axes = plt.subplots(2, n, figsize=(3 * n, 6), squeeze=False)
    for i in range(n):
        for row, (images, name) in enumerate(((before, "before"), (after, "after"))):
            axes[row][i].imshow(images[i].permute(1, 2, 0).cpu().numpy())
            axes[row][i].set_title(f"image {i} {name}")
            axes[row][i].axis("off")
    fig.tight_layout()
    images_path = os.path.join(out_dir, "equalize_images.png")
    fig.savefig(images_path, dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    levels = torch.arange(257).numpy()
    for ax, hist, name in ((axes[0], hist_before, "before"), (axes[1], hist_after, "after")):
        for channel, color in enumerate(("red", "green", "blue")):
            ax.stairs(hist[0, channel].cpu().numpy(), levels, color=color, label=color)
        ax.set_title(f"image 0 histograms, {name}")
        ax.set_xlabel("level")
        ax.legend()
    fig.tight_layout()
    hist_path = os.path.join(out_dir, "equalize_histograms.png")
    fig.savefig(hist_path, dpi=80)
    plt.close(fig)
    return [images_path, hist_path]


# Where the PNGs go by default: a folder under the system temp folder, so running the example writes nothing into the
# current folder or the repository.
OUT_DIR = os.path.join(tempfile.gettempdir(), "torch_dsmhist_examples")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--image", help="equalize this image (PNG/JPEG) instead of synthetic ones")
    parser.add_argument(
        "--out",
        "--out-dir",
        dest="out_dir",
        metavar="DIR",
        default=OUT_DIR,
        help="the folder the two PNGs go to (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.out_dir.lower().endswith(".png"):
        parser.error(
            "--out / --out-dir names a folder: two PNGs (equalize_images.png, equalize_histograms.png) "
            "are written into it"
        )
    try:  # checked before any work, so a missing optional dependency costs no time
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit('image_equalize: needs matplotlib to read and write images: pip install -e ".[examples]"')

    images = (load_image(args.image) if args.image else synthetic_batch(args.batch, args.size)).to(args.device)
    equalized, hist_before = equalize(images)
    b, c, h, w = images.shape
    hist_after = torch_dsmhist.batched_histogram(equalized.reshape(b, c, h * w), 256)  # [b, c, 256] directly

    # Checks: the histograms are torch.bincount's, the output is uint8 of the same shape, levels keep their order,
    # and every plane with more than one level now spans 0..255.
    planes = images.reshape(b * c, h * w).cpu()
    expected = torch.stack([torch.bincount(p.long(), minlength=256) for p in planes])
    if not torch.equal(hist_before.reshape(b * c, 256).cpu(), expected):
        raise SystemExit("image_equalize: batched_histogram differs from torch.bincount per plane")
    if equalized.dtype != torch.uint8 or equalized.shape != images.shape:
        raise SystemExit("image_equalize: the output must be uint8 of the input's shape")
    out_planes = equalized.reshape(b * c, h * w).cpu()
    for p_in, p_out in zip(planes, out_planes):
        order = p_in.argsort()
        if bool((p_out[order].diff() < 0).any()):
            raise SystemExit("image_equalize: the mapping is not monotonic")
        if p_in.unique().numel() > 1 and (int(p_out.min()) != 0 or int(p_out.max()) != 255):
            raise SystemExit("image_equalize: an equalized plane does not span 0..255")
    spread_before = float(planes.float().std(dim=1).mean())
    spread_after = float(out_planes.float().std(dim=1).mean())
    paths = save_pngs(images.cpu(), equalized.cpu(), hist_before, hist_after, args.out_dir)
    print(f"{b} images x {c} channels of {h}x{w}: mean per-channel std {spread_before:.1f} -> {spread_after:.1f}")
    print("wrote " + ", ".join(os.path.abspath(path) for path in paths))
    print("image_equalize: ok")


if __name__ == "__main__":
    main()
