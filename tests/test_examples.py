"""Smoke tests: every example in examples/ runs as its docstring says (small sizes), on every device, and writes
its PNG files where --out says (nothing into the repository), printing their paths. The examples check their own
results and print "<name>: ok". Also the demo, python -m torch_dsmhist: its speed ratio names the thread count."""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from conftest import DEVICES, MULTICAST_OFF, needs_two_gpus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROOT = EXAMPLES.parent

pytest.importorskip("matplotlib", reason="the examples write PNG plots with matplotlib")


def run_example(name: str, *args: str, cwd: Path, env=None) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip().endswith(f"{name[:-3]}: ok"), result.stdout[-2000:]
    return result.stdout


def repository_pngs() -> dict:
    """The PNG files in the repository's root and under examples/, with their modification times."""
    found = list(ROOT.glob("*.png")) + list(EXAMPLES.rglob("*.png"))
    return {path: path.stat().st_mtime_ns for path in found}


def run_in_repository_root(name: str, *args: str) -> str:
    """Run an example from the repository root, as the README shows, and check it wrote no PNG into the repository
    (its root or examples/): the files go where --out says."""
    before = repository_pngs()
    out = run_example(name, *args, cwd=ROOT)
    assert repository_pngs() == before, f"{name} wrote into the repository: {set(repository_pngs()) ^ set(before)}"
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_moe_router(device, tmp_path):
    out = run_example(
        "moe_router.py", "--device", device, "--tokens", "2048", "--experts", "16", "--steps", "2", cwd=tmp_path
    )
    if device == "cuda":
        assert "CUDA graph: 2 replays match torch.bincount" in out


@pytest.mark.parametrize("device", DEVICES)
def test_dataset_histogram(device, tmp_path):
    """The histogram calls' time and the data loading's time print apart, each labelled, and the plot lands at --out
    (run from the repository root, nothing is written there)."""
    png = tmp_path / "hist.png"
    out = run_in_repository_root(
        "dataset_histogram.py", "--device", device, "--samples", "200003", "--batch-size", "16384", "--out", str(png)
    )
    assert png.stat().st_size > 0
    assert f"wrote {png}" in out, out
    histogram = re.search(r"^histogram time \(histogram_add_ calls only, ([^)]*)\): ([\d.]+) ms$", out, re.M)
    loading = re.search(
        r"^data loading time \(DataLoader batches and the copy to \w+, host wall time\): ([\d.]+) s$", out, re.M
    )
    loop = re.search(r"^whole loop \(.*\): ([\d.]+) s$", out, re.M)
    assert histogram and loading and loop, out
    assert histogram.group(1) == ("GPU time, CUDA events" if device == "cuda" else "perf_counter around the calls")
    if device == "cpu":  # both read from one clock: the parts fit in the whole (each rounded to 0.01 s at most)
        assert float(histogram.group(2)) / 1e3 + float(loading.group(1)) <= float(loop.group(1)) + 0.02, out


@pytest.mark.parametrize("device", DEVICES)
def test_image_equalize(device, tmp_path):
    out = run_in_repository_root(
        "image_equalize.py", "--device", device, "--batch", "2", "--size", "97", "--out", str(tmp_path / "out")
    )
    for name in ("equalize_images.png", "equalize_histograms.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
        assert str(tmp_path / "out" / name) in out, out


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
    out = run_in_repository_root(
        "histogram2d.py",
        "--device",
        device,
        "--points",
        str(points),
        "--bins",
        str(bins),
        "--quantiles",
        str(quantiles),
        "--sample",
        str(sample),
        "--extent",
        "3",
        "--seed",
        str(seed),
        "--out",
        str(tmp_path / "grid.png"),
    )
    assert (tmp_path / "grid.png").stat().st_size > 0
    assert f"wrote {tmp_path / 'grid.png'}" in out, out

    xy, price = load_example("histogram2d.py").point_cloud(points, seed)
    hist = torch.histogramdd(xy, bins=[bins, bins], range=[-3.0, 3.0, -3.0, 3.0]).hist
    peak_x, peak_y = divmod(int(hist.argmax()), bins)
    assert (
        f"{int(hist.sum())} of {points} points inside; peak {int(hist.max())} points at bin ({peak_x}, {peak_y})" in out
    ), out
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
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(EXAMPLES / "distributed_histogram.py"),
            "--device",
            device,
            "--tokens",
            "200003",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, f"failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip().endswith("distributed_histogram: ok"), result.stdout[-2000:]


def test_histogram2d_quantile_bars_show_equal_count_bins_equal():
    """The quantile panel plots each bin's share of the rows, not a density: bins holding the same count draw
    equally tall however unequal their widths (a linear density on the log axis made the first bin look largest)."""
    example = load_example("histogram2d.py")
    _, price = example.point_cloud(1000, seed=0)
    edges = example.quantile_edges(price, 10, sample=1000)  # exact deciles of 1000 distinct values: 100 rows a bin
    counts = example.quantile_counts(price, edges)
    assert counts.tolist() == [100] * 10
    heights = example.quantile_bar_heights(counts)
    assert heights.tolist() == [10.0] * 10
    widths = edges.double().diff()
    assert float(widths.max() / widths.min()) > 2  # the bins differ in width: a density would differ in height
    assert example.quantile_bar_heights(torch.tensor([3, 1])).tolist() == [75.0, 25.0]


def test_default_output_is_the_temp_folder(tmp_path):
    """Without --out the PNGs go to a folder under the system temp folder (tempfile.gettempdir(), TMPDIR here):
    nothing lands in the current folder or the repository, and the paths written are printed."""
    temp, cwd = tmp_path / "temp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    before = repository_pngs()
    out = run_example(
        "image_equalize.py",
        "--device",
        "cpu",
        "--batch",
        "1",
        "--size",
        "33",
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    for name in ("equalize_images.png", "equalize_histograms.png"):
        path = temp / "torch_dsmhist_examples" / name
        assert path.stat().st_size > 0
        assert str(path) in out, out
    assert not list(cwd.iterdir()), "the example wrote into the current folder"
    assert repository_pngs() == before, "the example wrote into the repository"
    for name in ("dataset_histogram.py", "histogram2d.py", "image_equalize.py"):  # the default all three share
        assert load_example(name).OUT_DIR == os.path.join(tempfile.gettempdir(), "torch_dsmhist_examples"), name


def test_image_equalize_out_names_a_folder(tmp_path):
    """--out (as --out-dir) is the folder for two PNGs: a .png name is refused before any work."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "image_equalize.py"), "--out", "x.png"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "names a folder" in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("threads", [1, None])
def test_demo_prints_the_thread_count_beside_its_ratio(threads, capsys):
    """python -m torch_dsmhist: the speed-ratio line names torch.get_num_threads(), the count it was measured with
    (a ratio from 1 thread or a loaded machine is otherwise unexplained)."""
    from torch_dsmhist.__main__ import main

    saved = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        count = torch.get_num_threads()
        assert main(["--n", "20000", "--bins", "500", "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(saved)
    lines = [line for line in capsys.readouterr().out.splitlines() if "ratio (bincount / dsmhist)" in line]
    assert len(lines) == 1, lines
    plural = "" if count == 1 else "s"
    assert re.search(rf"\d\.\d\dx  \(CPU, {count} thread{plural}: torch\.get_num_threads\(\)", lines[0]), lines[0]


@pytest.mark.parametrize("name", ["dataset_histogram.py", "image_equalize.py", "histogram2d.py"])
def test_missing_matplotlib_is_reported_before_any_work(name, tmp_path):
    """With matplotlib unimportable the example stops at once, naming the extra that installs it."""
    script = (
        f"import sys, runpy; sys.modules['matplotlib'] = None; sys.argv = [{name!r}, '--device', 'cpu']; "
        f"runpy.run_path({str(EXAMPLES / name)!r}, run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert 'pip install -e ".[examples]"' in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.iterdir()), "the example wrote files before failing"


@pytest.mark.parametrize("device", DEVICES)
def test_moe_layer(device, tmp_path):
    """The MoE layer grouped by moe_routing (expert loop) and by moe_align_block_size (padded blocks) matches the
    pure-torch layer, eager and compiled, with the same bits on two runs (and in a CUDA graph on CUDA)."""
    out = run_example(
        "moe_layer.py", "--device", device, "--tokens", "300", "--experts", "6", "--top-k", "2", cwd=tmp_path
    )
    for start in ("eager, loop:", "eager, padded:", "torch.compile(fullgraph=True) routing + eager loop:",
                  "torch.compile(fullgraph=True) padded layer:"):  # fmt: skip
        line = next((line for line in out.splitlines() if line.startswith(start)), "")
        assert "match" in line and line.endswith("bitwise identical on two runs"), (start, out)
    if device == "cuda":
        assert "CUDA graph (padded layer): 2 replays match" in out, out
    else:
        assert "CUDA graph: skipped" in out, out


def documented_options() -> dict:
    """docs/examples.md's options of each example: every `--flag` in a code span of the example's entry."""
    text = (ROOT / "docs" / "examples.md").read_text()
    entries = re.findall(r"^- \*\*`(\w+\.py)`\*\*:(.*?)(?=^- \*\*`|^\S|\Z)", text, flags=re.M | re.S)
    return {
        name: set(re.findall(r"--[a-z][a-z-]*", " ".join(re.findall(r"`([^`]*)`", body)))) for name, body in entries
    }


def test_documented_options_exist():
    """Every option docs/examples.md names for an example is one its --help lists (an option removed from an example
    fails here until the page stops naming it)."""
    documented = documented_options()
    assert set(documented) == {path.name for path in EXAMPLES.glob("*.py")}, documented.keys()
    for name, flags in documented.items():
        result = subprocess.run([sys.executable, str(EXAMPLES / name), "--help"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]
        listed = set(re.findall(r"--[a-z][a-z-]*", result.stdout))
        assert flags <= listed, f"{name}: docs/examples.md names {sorted(flags - listed)}, not in its --help"
