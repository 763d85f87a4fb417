"""Smoke tests: every example in examples/ runs as its docstring says (small sizes), on every device, and writes
its PNG files. The examples check their own results and print "<name>: ok"."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import DEVICES, MULTICAST_OFF, needs_two_gpus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytest.importorskip("matplotlib", reason="the examples write PNG plots with matplotlib")


def run_example(name: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip().endswith(f"{name[:-3]}: ok"), result.stdout[-2000:]
    return result.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_moe_router(device, tmp_path):
    out = run_example("moe_router.py", "--device", device, "--tokens", "2048", "--experts", "16", "--steps", "2",
                      cwd=tmp_path)
    if device == "cuda":
        assert "CUDA graph: 2 replays match torch.bincount" in out


@pytest.mark.parametrize("device", DEVICES)
def test_dataset_histogram(device, tmp_path):
    run_example("dataset_histogram.py", "--device", device, "--samples", "200003", "--batch-size", "16384",
                "--out", "hist.png", cwd=tmp_path)
    assert (tmp_path / "hist.png").stat().st_size > 0


@pytest.mark.parametrize("device", DEVICES)
def test_image_equalize(device, tmp_path):
    run_example("image_equalize.py", "--device", device, "--batch", "2", "--size", "97", "--out-dir", "out",
                cwd=tmp_path)
    for name in ("equalize_images.png", "equalize_histograms.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name[:-3], EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("device", DEVICES)
def test_histogram2d(device, tmp_path, gen):
    """The printed figures are torch's: the 2-D histogram's inside count and peak from torch.histogramdd, the
    quantile bins' counts from torch.quantile and torch.histogram, all on the CPU over the example's own data."""
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    points, bins, quantiles, sample = 30011, 37, 7, 4001
    out = run_example("histogram2d.py", "--device", device, "--points", str(points), "--bins", str(bins),
                      "--quantiles", str(quantiles), "--sample", str(sample), "--extent", "3",
                      "--seed", str(seed), "--out", "grid.png", cwd=tmp_path)
    assert (tmp_path / "grid.png").stat().st_size > 0

    xy, price = load_example("histogram2d.py").point_cloud(points, seed)
    hist = torch.histogramdd(xy, bins=[bins, bins], range=[-3.0, 3.0, -3.0, 3.0]).hist
    peak_x, peak_y = divmod(int(hist.argmax()), bins)
    assert f"{int(hist.sum())} of {points} points inside; peak {int(hist.max())} points at bin ({peak_x}, {peak_y})" \
        in out, out
    stride = points // sample
    edges = torch.quantile(price[::stride][:sample], torch.linspace(0, 1, quantiles + 1))
    want = torch.histogram(price.clamp(edges[0], edges[-1]), edges).hist.long()
    got = torch.tensor([int(c) for c in re.search(r"quantile counts: ([\d ]+)", out).group(1).split()])
    assert int(got.sum()) == points
    if device == "cpu":
        assert torch.equal(got, want)
    else:  # torch.quantile's interpolation on the GPU may round an edge one float apart from the CPU's
        assert (got - want).abs().max() <= 2, (got, want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_two_gpus)])
def test_distributed_histogram(device, tmp_path):
    """The README's torchrun command (as `python -m torch.distributed.run`, the same launcher), 2 processes."""
    env = {**os.environ, **MULTICAST_OFF}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(EXAMPLES / "distributed_histogram.py"), "--device", device, "--tokens", "200003"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )
    assert result.returncode == 0, f"failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip().endswith("distributed_histogram: ok"), result.stdout[-2000:]


def test_default_output_folder_is_ignored_by_git(tmp_path):
    """Without --out / --out-dir the PNGs go to examples/out/, which .gitignore covers."""
    run_example("image_equalize.py", "--device", "cpu", "--batch", "1", "--size", "33", cwd=tmp_path)
    out = EXAMPLES / "out"
    for name in ("equalize_images.png", "equalize_histograms.png"):
        assert (out / name).stat().st_size > 0
    git = subprocess.run(["git", "check-ignore", "-q", str(out / "equalize_images.png")], cwd=EXAMPLES.parent)
    assert git.returncode == 0, "examples/out/ is not ignored by git"


@pytest.mark.parametrize("name", ["dataset_histogram.py", "image_equalize.py", "histogram2d.py"])
def test_missing_matplotlib_is_reported_before_any_work(name, tmp_path):
    """With matplotlib unimportable the example stops at once, naming the extra that installs it."""
    script = (f"import sys, runpy; sys.modules['matplotlib'] = None; sys.argv = [{name!r}, '--device', 'cpu']; "
              f"runpy.run_path({str(EXAMPLES / name)!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert 'pip install -e ".[examples]"' in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.iterdir()), "the example wrote files before failing"
