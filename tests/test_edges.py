"""The bin-edges ops (dsmhist::histogram_edges, dsmhist::histogramdd) against an independent reference (numpy's
searchsorted rule), with opcheck, torch.compile, gradients and the checks."""

import numpy as np
import pytest
import torch

import torch_dsmhist

from conftest import DEVICES
from helpers import ALL_DTYPES, cuda_memory_growth

EDGE_DTYPE = {torch.float64: torch.float64}


def edge_dtype_for(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float64


def reference_nd(points: torch.Tensor, edges, weight=None, clamp=False) -> np.ndarray:
    """numpy: searchsorted(side='right') - 1 per dim, last edge in the last bin, outside dropped or clamped."""
    pts = points.double().cpu().numpy()
    shape = tuple(len(e) - 1 for e in edges)
    out = np.zeros(shape, dtype=np.float64)
    w = np.ones(len(pts)) if weight is None else weight.double().cpu().numpy()
    bins = []
    keep = np.ones(len(pts), dtype=bool)
    for d, e in enumerate(edges):
        ev = e.double().cpu().numpy()
        x = pts[:, d]
        b = np.searchsorted(ev, x, side="right") - 1
        b = np.where(x == ev[-1], len(ev) - 2, b)
        outside = (x < ev[0]) | (x > ev[-1])
        if clamp:
            b = np.where(x < ev[0], 0, np.where(x > ev[-1], len(ev) - 2, b))
            keep &= ~np.isnan(x)
        else:
            keep &= ~outside & ~np.isnan(x)
        bins.append(np.clip(b, 0, len(ev) - 2))
    np.add.at(out, tuple(b[keep] for b in bins), w[keep])
    return out


def values_on_and_beside_edges(edges: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """n values in edges' dtype, drawn from every edge and one step of the dtype to each side of it, a uniform spread
    over the edges' span widened by a tenth each way, NaN and +-inf: where a binning shortcut past the search would
    err."""
    near = torch.cat([edges, torch.nextafter(edges, edges - 1), torch.nextafter(edges, edges + 1)]).double()
    lo, hi = float(edges[0]), float(edges[-1])
    spread = lo + (hi - lo) * (torch.rand(40_000, generator=gen, dtype=torch.float64) * 1.2 - 0.1)
    special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=torch.float64)
    pool = torch.cat([near, spread, special])
    return pool[torch.randint(0, len(pool), (n,), generator=gen)].to(edges.dtype)


def random_edges(count: int, dtype, gen, lo=-2.0, hi=2.0) -> torch.Tensor:
    e = torch.sort(torch.rand(count, generator=gen, dtype=torch.float64) * (hi - lo) + lo).values
    return e.to(edge_dtype_for(dtype))


def random_values(n, dtype, gen):
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * 1.5).to(dtype)
        x[:: max(n // 17, 1)] = float("nan") if n > 3 else x[:: max(n // 17, 1)]
        return x
    return torch.randint(-3, 4, (n,), generator=gen).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("clamp", [False, True])
def test_histogram_edges_matches_reference(device, dtype, clamp, gen):
    n = int(torch.randint(1, 5000, (1,), generator=gen))
    x = random_values(n, dtype, gen)
    edges = random_edges(int(torch.randint(2, 40, (1,), generator=gen)), dtype, gen)
    if n > 4:
        x[1] = edges[0].to(dtype)  # exactly on edges: first, an inner one, the last
        x[2] = edges[len(edges) // 2].to(dtype)
        x[3] = edges[-1].to(dtype)
    out = torch_dsmhist.histogram_edges(x.to(device), edges.to(device), out_of_range="clamp" if clamp else "ignore")
    ref = reference_nd(x.reshape(-1, 1), [edges], clamp=clamp)
    assert out.dtype == torch.int64 and out.shape == (len(edges) - 1,)
    assert np.array_equal(out.cpu().numpy(), ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
@pytest.mark.parametrize("weight_dtype", [None, torch.float32, torch.float64])
def test_histogramdd_matches_reference(device, dtype, weight_dtype, gen):
    n, dims = int(torch.randint(0, 3000, (1,), generator=gen)), 3
    points = (
        torch.stack([random_values(n, dtype, gen) for _ in range(dims)], 1) if n else torch.empty(0, dims, dtype=dtype)
    )
    edges = [random_edges(c, dtype, gen) for c in (2, 7, 13)]
    weight = None if weight_dtype is None else torch.rand(n, generator=gen, dtype=weight_dtype)
    out = torch_dsmhist.histogramdd(
        points.to(device), [e.to(device) for e in edges], None if weight is None else weight.to(device)
    )
    ref = reference_nd(points, edges, weight)
    assert out.shape == (1, 6, 12)
    if weight is None:
        assert np.array_equal(out.cpu().numpy(), ref)
    else:
        assert out.dtype == weight_dtype
        np.testing.assert_allclose(out.double().cpu().numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_and_many_edges(device, gen):
    base = torch.randn(4000, 5, generator=gen)
    points = base[::2, 1:4:2]  # [2000, 2], strided both ways
    edges = [random_edges(3000, torch.float32, gen), random_edges(5, torch.float32, gen)]
    out = torch_dsmhist.histogramdd(points.to(device), [e.to(device) for e in edges])
    assert np.array_equal(out.cpu().numpy(), reference_nd(points, edges))
    x = base.t()[1:3]  # non-contiguous, any shape for histogram_edges
    e = random_edges(20000, torch.float32, gen)  # more edges than shared memory holds on CUDA
    out = torch_dsmhist.histogram_edges(x.to(device), e.to(device))
    assert np.array_equal(out.cpu().numpy(), reference_nd(x.reshape(-1, 1), [e]))


@pytest.mark.parametrize("device", DEVICES)
def test_chunks_accumulate(device, monkeypatch, gen):
    n = (1 << 23) + 5  # two chunks
    x = torch.rand(n, generator=gen)
    edges = torch.tensor([0.0, 0.25, 0.5, 1.0])
    out = torch_dsmhist.histogram_edges(x.to(device), edges.to(device))
    assert np.array_equal(out.cpu().numpy(), reference_nd(x.reshape(-1, 1), [edges]))


@pytest.mark.parametrize("device", DEVICES)
def test_zero_bins_and_int32_counts(device):
    x = torch.rand(10, device=device)
    assert torch_dsmhist.histogram_edges(x, torch.tensor([0.5], device=device)).shape == (0,)
    out = torch_dsmhist.histogram_edges(x, torch.tensor([0.0, 1.0], device=device), dtype=torch.int32)
    assert out.dtype == torch.int32 and out.tolist() == [10]


def test_errors_name_the_argument():
    x = torch.rand(10)
    with pytest.raises(ValueError, match="sorted"):
        torch_dsmhist.histogram_edges(x, torch.tensor([0.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        torch_dsmhist.histogram_edges(x, torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="edges must have input's dtype"):
        torch_dsmhist.histogram_edges(x, torch.tensor([0.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"edges\[1\]"):
        torch_dsmhist.histogramdd(torch.rand(5, 2), [torch.tensor([0.0, 1.0]), torch.tensor([[0.0, 1.0]])])
    with pytest.raises(ValueError, match="coordinates per point"):
        torch_dsmhist.histogramdd(torch.rand(5, 3), [torch.tensor([0.0, 1.0])] * 2)
    with pytest.raises(ValueError, match="weight"):
        torch_dsmhist.histogramdd(torch.rand(5, 1), [torch.tensor([0.0, 1.0])], weight=torch.rand(4))
    with pytest.raises(ValueError, match="out_of_range"):
        torch_dsmhist.histogram_edges(x, torch.tensor([0.0, 1.0]), out_of_range="wrap")
    with pytest.raises(ValueError, match="2\\^31"):
        torch_dsmhist.histogramdd(torch.rand(5, 2), [torch.linspace(0, 1, 70000)] * 2)
    with pytest.raises(TypeError, match="edges"):
        torch_dsmhist.histogramdd(torch.rand(5, 1), torch.tensor([0.0, 1.0]))
    before = x.clone()
    with pytest.raises(ValueError):
        torch_dsmhist.histogram_edges(x, torch.tensor([1.0, 0.0]))
    assert torch.equal(x, before)  # nothing written


@pytest.mark.parametrize("device", DEVICES)
def test_weight_gradient(device, gen):
    points = torch.randn(40, 2, generator=gen, dtype=torch.float64).to(device)
    edges = [torch.linspace(-1, 1, 5, dtype=torch.float64, device=device)] * 2
    w = torch.rand(40, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    torch.autograd.gradcheck(lambda w: torch_dsmhist.histogramdd(points, edges, w), (w,))
    x = torch.randn(6, 7, generator=gen, dtype=torch.float64).to(device)
    w2 = torch.rand(6, 7, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    torch.autograd.gradcheck(lambda w: torch_dsmhist.histogram_edges(x, edges[0], w, "clamp"), (w2,))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device, gen):
    points = torch.randn(50, 2, generator=gen).to(device)
    edges = [torch.linspace(-1, 1, 5, device=device), torch.linspace(-2, 2, 4, device=device)]
    w = torch.rand(50, generator=gen).to(device)
    torch.library.opcheck(torch.ops.dsmhist.histogramdd.default, (points, edges, w, "clamp", None))
    torch.library.opcheck(torch.ops.dsmhist.histogram_edges.default, (points, edges[0], None, "ignore", torch.int32))
    torch.library.opcheck(torch.ops.dsmhist._edge_bin_indices.default, (points, edges, "ignore"))
    compiled = torch.compile(lambda p, e0, e1: torch_dsmhist.histogramdd(p, [e0, e1]), fullgraph=True)
    assert torch.equal(compiled(points, *edges), torch_dsmhist.histogramdd(points, edges))


def test_readme_example():
    out = torch_dsmhist.histogram_edges(torch.tensor([0.5, 1.0, 3.0]), torch.tensor([0.0, 1.0, 3.0]))
    assert out.tolist() == [1, 2]
    points = torch.tensor([[0.5, 0.5], [1.5, 0.5], [1.5, 1.5]])
    edges = [torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 1.0, 2.0])]
    assert torch_dsmhist.histogramdd(points, edges).tolist() == [[1, 0], [1, 1]]
    assert torch_dsmhist.histogramdd(torch.stack([points, points]), edges).shape == torch.Size([2, 2, 2])
    rows = torch_dsmhist.histogram_edges(torch.tensor([[0.5], [2.5]]), torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    assert rows.tolist() == [[1], [1]]


# ----- issue 48: gradients over changed edges, memory, allocation failures --------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["histogram_edges", "histogramdd"])
def test_edges_changed_after_forward_make_backward_raise(device, op, gen):
    """The edges are saved for backward with their version: changing them in place after the forward must raise,
    never return the gradient of other edges (it gave w.grad = [1, 1, 1, 1] for [1, 10, 10, 10])."""
    x = torch.tensor([0.1, 0.6, 0.7, 0.9], device=device)
    e = torch.tensor([0.0, 0.5, 1.0], device=device)
    w = torch.ones(4, device=device, requires_grad=True)
    if op == "histogram_edges":
        h = torch_dsmhist.histogram_edges(x, e, weight=w)
    else:
        h = torch_dsmhist.histogramdd(x[:, None], [e], weight=w)
    e[1] = 0.95
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (h * torch.tensor([1.0, 10.0], device=device)).sum().backward()
    # Unchanged edges: the forward's gradient.
    e[1] = 0.5
    w.grad = None
    h = torch_dsmhist.histogram_edges(x, e, weight=w)
    (h * torch.tensor([1.0, 10.0], device=device)).sum().backward()
    assert torch.equal(w.grad.cpu(), torch.tensor([1.0, 10.0, 10.0, 10.0]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted 3-D", "strided slice"])
@pytest.mark.parametrize("weight_layout", ["same", "contiguous"])
def test_histogram_edges_non_contiguous_input_and_weight(device, layout, weight_layout, gen):
    """Counts and gradients over inputs read in their memory order (a transpose is not copied) equal those of the
    contiguous input."""
    base = torch.randn(6, 10, 7, generator=gen, dtype=torch.float64).to(device)
    x = {"transposed": base[0].t(), "permuted 3-D": base.permute(2, 0, 1), "strided slice": base[:, ::3, 1:]}[layout]
    wbase = torch.rand(base.shape, generator=gen, dtype=torch.float64).to(device)
    w_same = {"transposed": wbase[0].t(), "permuted 3-D": wbase.permute(2, 0, 1), "strided slice": wbase[:, ::3, 1:]}[
        layout
    ]
    w = (w_same if weight_layout == "same" else w_same.contiguous()).detach().requires_grad_()
    edges = torch.sort(torch.randn(9, generator=gen, dtype=torch.float64)).values.to(device)
    grad = torch.randn(8, generator=gen, dtype=torch.float64).to(device)
    h = torch_dsmhist.histogram_edges(x, edges, weight=w)
    (h * grad).sum().backward()
    wc = w.detach().contiguous().requires_grad_()
    hc = torch_dsmhist.histogram_edges(x.contiguous(), edges, weight=wc)
    (hc * grad).sum().backward()
    torch.testing.assert_close(h, hc, rtol=1e-12, atol=1e-12)
    assert w.grad.shape == x.shape and torch.equal(w.grad, wc.grad)
    assert torch.equal(torch_dsmhist.histogram_edges(x, edges), torch_dsmhist.histogram_edges(x.contiguous(), edges))


# README "Histograms over bin edges": beyond the output, histogram_edges allocates one chunk's int32 indices (at most
# 2^23 on the CPU; on CUDA this call takes the one pass, which holds none) and the edges, a transposed input included;
# its backward holds 5 bytes per element beyond the gradient it returns (9 for 16-bit weights). Measured as the growth
# of the peak resident set, as test_limits does.
EDGES_MEMORY_SCRIPT = """
import json, sys, torch, torch_dsmhist
torch.set_num_threads(2)

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

def peak_growth(call):
    call()  # warm
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    result = call()
    return status("VmHWM") - before, result

g = torch.Generator().manual_seed(int(sys.argv[1]))
x = torch.rand(4096, 4096, generator=g).t()
edges = torch.sort(torch.rand(1001, generator=g)).values
forward, _ = peak_growth(lambda: torch_dsmhist.histogram_edges(x, edges))
out = {"forward": forward}
for name, dtype in (("float32", torch.float32), ("float16", torch.float16)):
    w = torch.rand(4096, 4096, generator=g).t().to(dtype).requires_grad_()
    h = torch_dsmhist.histogram_edges(x, edges, weight=w)
    grad = torch.randn(1000, generator=g)
    growth, (gw,) = peak_growth(lambda: torch.autograd.grad(h, w, grad, retain_graph=True))
    out[name] = [growth, gw.numel() * gw.element_size()]
print(json.dumps(out))
"""


def test_edges_memory_bounds_on_the_cpu():
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    result = subprocess.run(
        [sys.executable, "-c", EDGES_MEMORY_SCRIPT, "1"], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout)
    n, MiB = 4096 * 4096, 2**20
    slack = 8 * MiB
    assert measured["forward"] <= 4 * 2**23 + 8 * 1001 + slack, measured  # no copy of the 64 MiB input
    for name, per_element in (("float32", 5), ("float16", 9)):
        growth, gradient_bytes = measured[name]
        assert growth - gradient_bytes <= per_element * n + slack, (name, growth / MiB, gradient_bytes / MiB)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float32])
def test_edges_memory_bounds_on_cuda(weight_dtype, gen):
    if not torch_dsmhist.built_with_cuda():
        pytest.skip("built without CUDA")
    n = 4096 * 4096
    x = torch.rand(4096, 4096, generator=gen).cuda().t()
    edges = torch.sort(torch.rand(1001, generator=gen)).values.cuda()
    h, growth = cuda_memory_growth(lambda: torch_dsmhist.histogram_edges(x, edges))
    assert growth <= 4 * 2**23 + 8 * 1001 + 8 * 1000 + (1 << 20)
    del h
    w = torch.rand(4096, 4096, generator=gen).cuda().t().to(weight_dtype).requires_grad_()
    h = torch_dsmhist.histogram_edges(x, edges, weight=w)
    grad = torch.randn(1000, generator=gen).cuda()
    (gw,), growth = cuda_memory_growth(lambda: torch.autograd.grad(h, w, grad))
    extra = growth - gw.numel() * gw.element_size()
    per_element = 9 if weight_dtype.itemsize == 2 else 5
    assert extra <= per_element * n + (4 << 20), (extra, per_element * n)


EDGES_ALLOCATION_SCRIPT = """
import resource, torch, torch_dsmhist
x = torch.arange(10.0)
edges = torch.zeros(1).expand((1 << 28) + 1)  # 2^28 bins: a 2 GiB int64 output
def vm_size():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (256 << 20), resource.RLIM_INFINITY))
for name, call in (("histogram_edges", lambda: torch_dsmhist.histogram_edges(x, edges)),
                   ("histogramdd", lambda: torch_dsmhist.histogramdd(x[:, None], [edges]))):
    try:
        call()
        print(name, "no error")
    except RuntimeError as e:
        print(name, type(e).__name__, str(e).splitlines()[0])
"""


def test_edges_allocation_failure_names_the_op_and_size():
    """An allocation that fails names the op, what it allocated and how large (not the allocator's bare message)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", EDGES_ALLOCATION_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout
    for op, line in zip(("histogram_edges", "histogramdd"), lines):
        assert f"torch_dsmhist.{op}: the output (shape [268435456], torch.int64, 2147483648 bytes" in line, line
        assert "could not be allocated on cpu" in line, line


# ----- near-uniform edges: the CPU's guessed search (common/edge_binning.h, edge_bin_guessed) -------------------


def _uniform_like_edges(kind: str, count: int, dtype, gen) -> torch.Tensor:
    """Edges the equal-width guess is tried on: torch's linspace (float rounding puts values a hair off the grid),
    linspace with a few edges nudged by one ulp or by a whole bin (the guess then misses and the search decides),
    repeated edges (empty bins), and a grid shifted far from 0 (large x - e_0 rounding)."""
    edge_dtype = edge_dtype_for(dtype)
    lo = float(torch.empty(1).uniform_(-3, 0, generator=gen))
    hi = lo + float(torch.empty(1).uniform_(0.5, 5, generator=gen))
    # torch's own linspace in a 16-bit dtype is not always monotone: round a float64 one instead.
    e = torch.linspace(lo, hi, count, dtype=torch.float64).to(edge_dtype)
    if kind == "nudged":
        picks = torch.randint(1, count - 1, (max(count // 50, 1),), generator=gen)
        e[picks] = torch.nextafter(e[picks], torch.full_like(e[picks], float("inf")))
    elif kind == "one bin off":
        # one interior edge moved to its neighbour's place: two edges equal, positions still sorted
        i = int(torch.randint(1, count - 2, (1,), generator=gen))
        e[i] = e[i + 1]
    elif kind == "repeated":
        e = torch.repeat_interleave(e[: count // 2 + 1], 2)[:count]
    elif kind == "far from zero":
        e = torch.linspace(1000.0 + lo, 1000.0 + hi, count, dtype=torch.float64).to(edge_dtype)
    return e.sort().values  # a nudge can pass a neighbour that rounding had made equal


def _irregular_edges(kind: str, dtype, gen) -> torch.Tensor:
    """Edges the CPU searches through its cell table (not near-uniform): random, most of them crowded into one cell,
    repeated in runs, skewed like quantiles of a heavy tail, infinite at both ends, or more than the table has cells
    (70001 edges: 65536 cells)."""
    count = 70001 if kind == "more edges than cells" else int(torch.randint(3, 600, (1,), generator=gen))
    if kind == "crowded":  # all but three edges within 1e-3 of 0.5; the cells there hold hundreds
        e = torch.cat([torch.tensor([-2.0, 2.0, 1.0]), 0.5 + torch.rand(count - 3, generator=gen) * 1e-3])
    elif kind == "repeated runs":
        e = torch.repeat_interleave(torch.rand(count // 3 + 1, generator=gen) * 4 - 2, 3)[:count]
    elif kind == "skewed":
        e = torch.exp(torch.randn(count, generator=gen, dtype=torch.float64) * 2) - 1.5
    elif kind == "infinite ends":
        e = torch.cat([torch.tensor([-float("inf"), float("inf")]), torch.rand(count - 2, generator=gen) * 4 - 2])
    else:  # random, more edges than cells
        e = torch.rand(count, generator=gen, dtype=torch.float64) * 4 - 2
    e = e.to(edge_dtype_for(dtype)).sort().values
    if not dtype.is_floating_point:
        e = e[torch.isfinite(e)] if e.dtype.is_floating_point else e
    return e


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.int16])
@pytest.mark.parametrize(
    "kind", ["random", "crowded", "repeated runs", "skewed", "infinite ends", "more edges than cells"]
)
@pytest.mark.parametrize("clamp", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_irregular_edges_bin_exactly(device, dtype, kind, clamp, gen):
    """Values on every edge, one ulp either side of it, and random ones, over edges the table-narrowed search takes
    (on CUDA, the one pass's cell entries: crowded and saturated cells, repeated and infinite edges): the bins of a
    binary search (numpy's searchsorted), exactly, in 1-D, 2-D and per-row calls."""
    edges = _irregular_edges(kind, dtype, gen)
    on = edges[torch.isfinite(edges)].to(dtype) if dtype.is_floating_point else edges.round().to(dtype)
    if dtype.is_floating_point:
        around = torch.cat([on, torch.nextafter(on, torch.full_like(on, float("inf"))),
                            torch.nextafter(on, torch.full_like(on, -float("inf")))])  # fmt: skip
    else:
        around = torch.cat([on, on + 1, on - 1])
    x = torch.cat([around[:30000], random_values(5001, dtype, gen)])
    x = x[torch.randperm(x.numel(), generator=gen)]
    out_of_range = "clamp" if clamp else "ignore"
    ours = torch_dsmhist.histogram_edges(x.to(device), edges.to(device), out_of_range=out_of_range).cpu()
    assert np.array_equal(ours.numpy(), reference_nd(x.reshape(-1, 1), [edges], clamp=clamp).astype(np.int64)), kind
    other = random_edges(9, dtype, gen)
    pts = torch.stack([x, x.flip(0)], dim=1)
    ours2 = torch_dsmhist.histogramdd(pts.to(device), [other.to(device), edges.to(device)], out_of_range=out_of_range)
    assert np.array_equal(ours2.cpu().numpy(), reference_nd(pts, [other, edges], clamp=clamp).astype(np.int64)), kind
    rows = torch_dsmhist.histogram_edges(torch.stack([x, x.flip(0)]).to(device), torch.stack([edges, edges]).to(device))
    whole = torch_dsmhist.histogram_edges(x.to(device), edges.to(device))
    assert torch.equal(rows[0], rows[1]) and torch.equal(rows[0], whole), kind


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int16])
@pytest.mark.parametrize("kind", ["linspace", "nudged", "one bin off", "repeated", "far from zero"])
@pytest.mark.parametrize("clamp", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_near_uniform_edges_bin_exactly(device, dtype, kind, clamp, gen):
    """Values on every edge, one ulp either side of it, and random ones, over edges the guessed search takes (or
    falls back from): the bins of a binary search (numpy's searchsorted), exactly."""
    count = int(torch.randint(4, 400, (1,), generator=gen))  # "one bin off" needs an interior edge below the last two
    edges = _uniform_like_edges(kind, count, dtype, gen)
    on = edges.to(dtype) if dtype.is_floating_point else edges.round().to(dtype)
    if dtype.is_floating_point:
        around = torch.cat([on, torch.nextafter(on, torch.full_like(on, float("inf"))),
                            torch.nextafter(on, torch.full_like(on, -float("inf")))])  # fmt: skip
    else:
        around = torch.cat([on, on + 1, on - 1])
    x = torch.cat([around, random_values(5001, dtype, gen)])
    x = x[torch.randperm(x.numel(), generator=gen)]
    out_of_range = "clamp" if clamp else "ignore"
    ours = torch_dsmhist.histogram_edges(x.to(device), edges.to(device), out_of_range=out_of_range).cpu()
    expected = reference_nd(x.reshape(-1, 1), [edges], clamp=clamp)
    assert np.array_equal(ours.numpy(), expected.astype(np.int64)), (kind, dtype, count)
    # 2-D: one near-uniform dim beside a random one.
    other = random_edges(9, dtype, gen)
    pts = torch.stack([x, x.flip(0)], dim=1)
    ours2 = torch_dsmhist.histogramdd(pts.to(device), [edges.to(device), other.to(device)], out_of_range=out_of_range)
    assert np.array_equal(ours2.cpu().numpy(), reference_nd(pts, [edges, other], clamp=clamp).astype(np.int64))
