"""Batched histogramdd: an input [..., N, D] gives one histogram per leading index over the same edges, each equal to
the independent numpy reference of its row; weights, gradients, layouts, empty shapes, the checks, opcheck and
torch.compile, on every device."""

import doctest

import numpy as np
import pytest
import torch
from test_edges import random_edges, random_values, reference_nd

import torch_dsmhist

from conftest import DEVICES
from helpers import check_row_weight_gradient, deterministic_algorithms


def batched_reference(points: torch.Tensor, edges, weight=None, clamp=False) -> np.ndarray:
    """The numpy reference of every [N, D] slice of points [..., N, D], stacked into [..., bins...]."""
    rows = points.reshape(-1, *points.shape[-2:])
    weights = None if weight is None else weight.reshape(-1, points.shape[-2])
    per_row = [reference_nd(r, edges, None if weights is None else weights[i], clamp) for i, r in enumerate(rows)]
    shape = tuple(points.shape[:-2]) + tuple(len(e) - 1 for e in edges)
    return np.stack(per_row).reshape(shape) if per_row else np.zeros(shape)


def make_points(batch, n, dims, dtype, gen) -> torch.Tensor:
    count = int(np.prod(batch)) * n
    return torch.stack([random_values(count, dtype, gen) for _ in range(dims)], 1).view(*batch, n, dims)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.uint8])
@pytest.mark.parametrize("weight_dtype", [None, torch.float32, torch.float64])
@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])
def test_batched_histogramdd_matches_each_row(device, dtype, weight_dtype, out_of_range, gen):
    n = int(torch.randint(1, 2500, (1,), generator=gen))  # odd sizes, fresh each run
    points = make_points((2, 3), n, 3, dtype, gen)
    edges = [random_edges(c, dtype, gen) for c in (2, 7, 13)]
    weight = None if weight_dtype is None else torch.rand(2, 3, n, generator=gen, dtype=weight_dtype)
    out = torch_dsmhist.histogramdd(
        points.to(device),
        [e.to(device) for e in edges],
        None if weight is None else weight.to(device),
        out_of_range,
    )
    ref = batched_reference(points, edges, weight, clamp=out_of_range == "clamp")
    assert out.shape == (2, 3, 1, 6, 12), n
    if weight is None:
        assert out.dtype == torch.int64 and np.array_equal(out.cpu().numpy(), ref), n
    else:
        assert out.dtype == weight_dtype
        np.testing.assert_allclose(out.double().cpu().numpy(), ref, rtol=1e-5, atol=1e-5, err_msg=f"n={n}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["permuted", "strided slice", "misaligned", "one row"])
def test_batched_histogramdd_layouts(device, layout, gen):
    """Rows read from a permuted view (points of a row not adjacent), a strided slice (leading dims that do not
    flatten as a view: copied), a misaligned view and a single leading index, with weights laid out likewise; counts
    in int32 as asked."""
    base = torch.randn(5, 4, 301, 2, generator=gen)
    weight = torch.rand(5, 4, 301, generator=gen, dtype=torch.float64)
    if layout == "permuted":
        points, w = base.permute(1, 0, 2, 3), weight.permute(1, 0, 2)
    elif layout == "strided slice":
        points, w = base[::2, :, ::3], weight[::2, :, ::3]
    elif layout == "misaligned":
        points = base.reshape(-1)[1 : 1 + 5 * 4 * 300 * 2].view(5, 4, 300, 2)
        w = weight.reshape(-1)[1 : 1 + 5 * 4 * 300].view(5, 4, 300)
    else:
        points, w = base[:1, :1], weight[:1, :1]
    edges = [random_edges(9, torch.float32, gen), random_edges(4, torch.float32, gen)]
    on = [e.to(device) for e in edges]
    counts = torch_dsmhist.histogramdd(points.to(device), on, dtype=torch.int32)
    assert counts.dtype == torch.int32
    assert np.array_equal(counts.cpu().numpy(), batched_reference(points, edges)), layout
    sums = torch_dsmhist.histogramdd(points.to(device), on, w.to(device))
    np.testing.assert_allclose(sums.cpu().numpy(), batched_reference(points, edges, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_histogramdd_equals_one_call_per_row_and_the_cpu(device, gen):
    """Colour histograms of a small batch of images ([B, pixels, 3] uint8 over 16 bins a channel): equal to one
    unbatched call per image, and on CUDA to the CPU's result, bit for bit."""
    images = torch.randint(0, 256, (6, 777, 3), generator=gen, dtype=torch.uint8)
    edges = [torch.linspace(0, 256, 17, dtype=torch.float64)] * 3
    on = [e.to(device) for e in edges]
    batched = torch_dsmhist.histogramdd(images.to(device), on)
    one_by_one = torch.stack([torch_dsmhist.histogramdd(img.to(device), on) for img in images])
    assert torch.equal(batched, one_by_one)
    assert torch.equal(batched.cpu(), torch_dsmhist.histogramdd(images, edges))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_histogramdd_weight_gradient(device, gen):
    points = torch.randn(2, 3, 20, 2, generator=gen, dtype=torch.float64).to(device)
    edges = [torch.linspace(-1, 1, 5, dtype=torch.float64, device=device)] * 2
    w = torch.rand(2, 3, 20, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    check_row_weight_gradient(torch_dsmhist.histogramdd, points, edges, w, torch.ops.dsmhist._edge_bin_indices)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_histogramdd_empty_shapes(device):
    edges = [torch.linspace(0, 1, 5, device=device), torch.linspace(0, 1, 3, device=device)]
    assert torch_dsmhist.histogramdd(torch.rand(0, 7, 2, device=device), edges).shape == (0, 4, 2)
    empty_rows = torch_dsmhist.histogramdd(torch.rand(3, 0, 2, device=device), edges)
    assert empty_rows.shape == (3, 4, 2) and int(empty_rows.abs().sum()) == 0
    no_bins = torch_dsmhist.histogramdd(torch.rand(3, 5, 2, device=device), [edges[0], edges[0][:1]])
    assert no_bins.shape == (3, 4, 0)
    w = torch.rand(3, 5, device=device, requires_grad=True)
    torch_dsmhist.histogramdd(torch.rand(3, 5, 2, device=device), [edges[0], edges[0][:1]], w).sum().backward()
    assert w.grad is not None and int((w.grad != 0).sum()) == 0


def test_batched_histogramdd_checks_name_the_argument():
    edges = [torch.tensor([0.0, 1.0])] * 2
    with pytest.raises(ValueError, match=r"weight must have shape \[\.\.\., N\]"):
        torch_dsmhist.histogramdd(torch.rand(2, 5, 2), edges, weight=torch.rand(2, 4))
    with pytest.raises(ValueError, match=r"weight must have shape \[\.\.\., N\]"):
        torch_dsmhist.histogramdd(torch.rand(2, 5, 2), edges, weight=torch.rand(10))
    with pytest.raises(ValueError, match="coordinates per point"):
        torch_dsmhist.histogramdd(torch.rand(2, 5, 3), edges)
    with pytest.raises(ValueError, match="at least 2 dims"):
        torch_dsmhist.histogramdd(torch.rand(5), edges[:1])
    # Nothing written: a refused call (an unsorted edges tensor, found after the shapes passed) leaves every tensor.
    points, weight, bad = torch.rand(2, 5, 2), torch.rand(2, 5), torch.tensor([1.0, 0.0])
    kept = [t.clone() for t in (points, weight, bad)]
    with pytest.raises(ValueError, match="sorted"):
        torch_dsmhist.histogramdd(points, [edges[0], bad], weight)
    assert all(torch.equal(a, b) for a, b in zip((points, weight, bad), kept))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_histogramdd_opcheck_and_compile(device, gen):
    points = torch.randn(2, 3, 50, 2, generator=gen).to(device)
    edges = [torch.linspace(-1, 1, 5, device=device), torch.linspace(-2, 2, 4, device=device)]
    w = torch.rand(2, 3, 50, generator=gen).to(device)
    torch.library.opcheck(torch.ops.dsmhist.histogramdd.default, (points, edges, w, "clamp", None))
    torch.library.opcheck(torch.ops.dsmhist.histogramdd.default, (points, edges, None, "ignore", torch.int32))
    torch.library.opcheck(torch.ops.dsmhist._edge_bin_indices.default, (points, edges, "ignore"))
    compiled = torch.compile(lambda p, e0, e1: torch_dsmhist.histogramdd(p, [e0, e1]), fullgraph=True)
    assert torch.equal(compiled(points, *edges), torch_dsmhist.histogramdd(points, edges))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batched_histogramdd_deterministic_sums_on_cuda(gen):
    """Under torch.use_deterministic_algorithms the batched weighted sums are the same bits on every run."""
    points = torch.rand(16, 4099, 3, generator=gen).cuda()
    weight = (torch.randn(16, 4099, generator=gen) * 1000).cuda()
    edges = [torch.linspace(0, 1, 9, device="cuda")] * 3
    with deterministic_algorithms():
        first = torch_dsmhist.histogramdd(points, edges, weight)
        assert all(torch.equal(first, torch_dsmhist.histogramdd(points, edges, weight)) for _ in range(3))
    ref = batched_reference(points.cpu(), [e.cpu() for e in edges], weight.cpu())
    np.testing.assert_allclose(first.double().cpu().numpy(), ref, rtol=1e-4, atol=1e-2)


def test_docstring_example_runs():
    """histogramdd's docstring example (a batch of images) prints what the docstring says."""
    runner, report = doctest.DocTestRunner(), []
    finder = doctest.DocTestFinder()
    for test in finder.find(torch_dsmhist.histogramdd, globs={"torch": torch, "torch_dsmhist": torch_dsmhist}):
        runner.run(test, out=report.append)
    assert runner.tries == 2 and runner.failures == 0, "".join(report)
