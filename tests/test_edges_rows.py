"""histogram_edges with per-row edges: input [..., N] and edges [..., B + 1] give [..., B], row r of input over row r
of edges, each equal to the unbatched op and to the numpy reference of its row; weights, gradients, layouts (a GBDT
sketch's transposed features), more rows than one binning pass takes (32), empty shapes, the checks, opcheck and
torch.compile, on every device."""

import numpy as np
import pytest
import torch
from test_edges import random_values, reference_nd

import torch_dsmhist

from conftest import DEVICES
from helpers import check_row_weight_gradient, cuda_memory_growth, host_sync_raises


def sorted_rows(rows, count, dtype, gen) -> torch.Tensor:
    """Sorted random edges per row: [*rows, count], a different range in each row."""
    edge_dtype = dtype if dtype.is_floating_point else torch.float64
    e = torch.rand(*rows, count, generator=gen, dtype=torch.float64) * 4 - 2
    shift = torch.randn(*rows, 1, generator=gen, dtype=torch.float64) * 0.5
    return torch.sort(e + shift, dim=-1).values.to(edge_dtype)


def per_row_reference(x: torch.Tensor, edges: torch.Tensor, weight=None, clamp=False) -> np.ndarray:
    rows_x, rows_e = x.reshape(-1, x.shape[-1]), edges.reshape(-1, edges.shape[-1])
    rows_w = None if weight is None else weight.reshape(-1, x.shape[-1])
    per_row = [
        reference_nd(rows_x[r].reshape(-1, 1), [rows_e[r]], None if rows_w is None else rows_w[r], clamp)
        for r in range(rows_x.shape[0])
    ]
    shape = tuple(x.shape[:-1]) + (edges.shape[-1] - 1,)
    return np.stack(per_row).reshape(shape) if per_row else np.zeros(shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
@pytest.mark.parametrize("weight_dtype", [None, torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [(1,), (3,), (5, 7)])  # (5, 7): 35 rows, two binning passes
def test_per_row_edges_match_each_row(device, dtype, weight_dtype, rows, gen):
    n = int(torch.randint(1, 1500, (1,), generator=gen))  # odd sizes, fresh each run
    x = random_values(int(np.prod(rows)) * n, dtype, gen).view(*rows, n)
    edges = sorted_rows(rows, 13, dtype, gen)
    weight = None if weight_dtype is None else torch.rand(*rows, n, generator=gen, dtype=weight_dtype)
    for rule in ("ignore", "clamp"):
        out = torch_dsmhist.histogram_edges(
            x.to(device), edges.to(device), None if weight is None else weight.to(device), rule
        )
        ref = per_row_reference(x, edges, weight, clamp=rule == "clamp")
        assert out.shape == (*rows, 12), (n, rule)
        if weight is None:
            assert out.dtype == torch.int64 and np.array_equal(out.cpu().numpy(), ref), (n, rule)
        else:
            assert out.dtype == weight_dtype
            np.testing.assert_allclose(out.double().cpu().numpy(), ref, rtol=1e-5, atol=1e-5, err_msg=f"{n} {rule}")


@pytest.mark.parametrize("device", DEVICES)
def test_gbdt_sketch_of_transposed_features(device, gen):
    """A feature matrix [N, F] with per-feature quantile edges: pass data.t() ([F, N], read in place) and edges
    [F, B + 1]; NaN values are dropped. Equal to one call per feature and, on CUDA, to the CPU bit for bit."""
    data = torch.randn(3001, 37, generator=gen)
    data[::97, 5] = float("nan")
    edges = torch.quantile(data.nan_to_num(0.0), torch.linspace(0, 1, 33), dim=0).t().contiguous()  # [37, 33]
    on = edges.to(device)
    sketch = torch_dsmhist.histogram_edges(data.to(device).t(), on, dtype=torch.int32)
    one_by_one = torch.stack([torch_dsmhist.histogram_edges(data[:, f].to(device), on[f]) for f in range(37)])
    assert sketch.dtype == torch.int32 and torch.equal(sketch.long(), one_by_one)
    assert torch.equal(sketch.cpu(), torch_dsmhist.histogram_edges(data.t(), edges, dtype=torch.int32))
    grad = torch.rand(3001, 37, generator=gen, dtype=torch.float64)  # per-feature gradient sums, as a GBDT's
    sums = torch_dsmhist.histogram_edges(data.to(device).t(), on, grad.to(device).t())
    ref = per_row_reference(data.t(), edges, grad.t())
    np.testing.assert_allclose(sums.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_per_row_edges_weight_gradient(device, gen):
    x = torch.randn(3, 2, 25, generator=gen, dtype=torch.float64).to(device)
    edges = sorted_rows((3, 2), 6, torch.float64, gen).to(device)
    w = torch.rand(3, 2, 25, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    check_row_weight_gradient(torch_dsmhist.histogram_edges, x, edges, w, torch.ops.dsmhist._row_edge_bin_indices)


@pytest.mark.parametrize("device", DEVICES)
def test_per_row_edges_empty_shapes(device):
    edges = torch.tensor([[0.0, 0.5, 1.0]] * 3, device=device)
    assert torch_dsmhist.histogram_edges(torch.rand(0, 7, device=device), edges[:0]).shape == (0, 2)
    empty_rows = torch_dsmhist.histogram_edges(torch.rand(3, 0, device=device), edges)
    assert empty_rows.shape == (3, 2) and int(empty_rows.abs().sum()) == 0
    assert torch_dsmhist.histogram_edges(torch.rand(3, 5, device=device), edges[:, :1]).shape == (3, 0)


def test_per_row_edges_checks_name_the_argument():
    x = torch.rand(4, 10)
    edges = torch.tensor([[0.0, 0.5, 1.0]] * 4)
    with pytest.raises(ValueError, match="same leading dims"):
        torch_dsmhist.histogram_edges(x, edges[:3])
    with pytest.raises(ValueError, match="same leading dims"):
        torch_dsmhist.histogram_edges(x.reshape(-1), edges)
    with pytest.raises(ValueError, match=r"row 2, index 1 is below index 0"):
        bad = edges.clone()
        bad[2] = torch.tensor([0.5, 0.0, 1.0])
        torch_dsmhist.histogram_edges(x, bad)
    with pytest.raises(ValueError, match="NaN"):
        bad = edges.clone()
        bad[1, 1] = float("nan")
        torch_dsmhist.histogram_edges(x, bad)
    with pytest.raises(ValueError, match="weight must have shape"):
        torch_dsmhist.histogram_edges(x, edges, weight=torch.rand(4, 9))
    with pytest.raises(ValueError, match="at least one edge a row"):
        torch_dsmhist.histogram_edges(x, edges[:, :0])
    with pytest.raises(ValueError, match=r"\[\.\.\., B \+ 1\]"):
        torch.ops.dsmhist._row_edge_bin_indices(x, edges[0], "ignore")
    # Nothing written: a call refused after its tensors were read leaves them as they were.
    weight, bad = torch.rand(4, 10), edges.clone()
    bad[3] = torch.tensor([1.0, 0.5, 0.0])
    kept = [t.clone() for t in (x, bad, weight)]
    with pytest.raises(ValueError, match="row 3"):
        torch_dsmhist.histogram_edges(x, bad, weight)
    assert all(torch.equal(a, b) for a, b in zip((x, bad, weight), kept))


@pytest.mark.parametrize("device", DEVICES)
def test_per_row_edges_opcheck_and_compile(device, gen):
    x = torch.randn(3, 40, generator=gen).to(device)
    edges = sorted_rows((3,), 5, torch.float32, gen).to(device)
    w = torch.rand(3, 40, generator=gen).to(device)
    torch.library.opcheck(torch.ops.dsmhist.histogram_edges.default, (x, edges, w, "clamp", None))
    torch.library.opcheck(torch.ops.dsmhist.histogram_edges.default, (x, edges, None, "ignore", torch.int32))
    torch.library.opcheck(torch.ops.dsmhist._row_edge_bin_indices.default, (x, edges, "ignore"))
    compiled = torch.compile(lambda x, e: torch_dsmhist.histogram_edges(x, e), fullgraph=True)
    assert torch.equal(compiled(x, edges), torch_dsmhist.histogram_edges(x, edges))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_call_site_shapes_never_synchronise(gen):
    """Per-row edges and a batched histogramdd, counts and weighted sums with their backward, under
    torch.cuda.set_sync_debug_mode("error"): no host synchronisation (each shape is called once before, so lazy
    initialisation is not counted)."""
    x = torch.randn(37, 999, generator=gen).cuda()
    edges = sorted_rows((37,), 17, torch.float32, gen).cuda()
    points = torch.rand(4, 501, 3, generator=gen).cuda()
    grid = [torch.linspace(0, 1, 9, device="cuda")] * 3
    w_rows = torch.rand(37, 999, generator=gen).cuda().requires_grad_()
    w_points = torch.rand(4, 501, generator=gen).cuda().requires_grad_()

    def calls():
        torch_dsmhist.histogram_edges(x, edges, dtype=torch.int32)
        torch_dsmhist.histogram_edges(x, edges, w_rows, "clamp").sum().backward()
        torch_dsmhist.histogramdd(points, grid)
        torch_dsmhist.histogramdd(points, grid, w_points).sum().backward()

    calls()
    with host_sync_raises():
        calls()
    torch.cuda.synchronize()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_call_site_shapes_memory_on_cuda(gen):
    """What docs/semantics.md states: beyond the output and the edges, per-row edges and a batched histogramdd hold
    one int32 bin per element (per point), and read a transposed feature matrix in place (no copy of the input)."""
    if not torch_dsmhist.built_with_cuda():
        pytest.skip("built without CUDA")
    data = torch.randn(1 << 20, 37, generator=gen).cuda()  # 148 MiB, passed as its transpose [37, 2^20]
    edges = sorted_rows((37,), 256, torch.float32, gen).cuda()
    points = torch.rand(16, 1 << 20, 3, generator=gen).cuda()
    grid = [torch.linspace(0, 1, 17, device="cuda")] * 3
    slack = 4 << 20
    for name, call, elements, edge_bytes in (
        ("per-row", lambda: torch_dsmhist.histogram_edges(data.t(), edges), data.numel(), edges.numel() * 4),
        ("batched", lambda: torch_dsmhist.histogramdd(points, grid), 16 << 20, 3 * 17 * 4),
    ):
        out, growth = cuda_memory_growth(call)
        output_bytes = out.numel() * out.element_size()
        assert growth <= output_bytes + 4 * elements + edge_bytes + slack, (name, growth / 2**20)
        del out
