"""torch_dsmhist.dropins.histogram / histogramdd against torch's CPU result: values, dtypes, edges, errors."""

import pytest
import torch

from conftest import DEVICES
from helpers import host_sync_raises
from torch_dsmhist import dropins


def assert_same(ours, theirs, exact=True, rtol=1e-5):
    assert type(ours) is type(theirs)
    theirs_edges = theirs.bin_edges if isinstance(theirs.bin_edges, (tuple, list)) else [theirs.bin_edges]
    ours_edges = ours.bin_edges if isinstance(ours.bin_edges, (tuple, list)) else [ours.bin_edges]
    for a, b in zip(ours_edges, theirs_edges):
        assert a.dtype == b.dtype and torch.equal(a.cpu(), b)
    assert ours.hist.dtype == theirs.hist.dtype and ours.hist.shape == theirs.hist.shape
    # NaN where torch has NaN: a density over no counted weight is 0 / 0 (random edges can leave every value out).
    if exact:
        torch.testing.assert_close(ours.hist.cpu(), theirs.hist, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(ours.hist.cpu(), theirs.hist, rtol=rtol, atol=1e-6, equal_nan=True)


def values(n, dtype, gen, specials=True):
    x = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    if specials and n > 3:
        x[0], x[1] = float("inf"), float("-inf")
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("density", [False, True])
def test_histogram_int_bins(device, dtype, density, gen):
    n = int(torch.randint(1, 3000, (1,), generator=gen))
    bins = int(torch.randint(1, 300, (1,), generator=gen))
    xs = values(n, dtype, gen)
    assert_same(dropins.histogram(xs.to(device), bins, range=(-1.0, 2.5), density=density),
                torch.histogram(xs, bins, range=(-1.0, 2.5), density=density), exact=not density or device == "cpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("density", [False, True])
def test_histogram_int_bins_data_range(device, dtype, density, gen):
    x = values(int(torch.randint(1, 3000, (1,), generator=gen)), dtype, gen, specials=False)
    bins = int(torch.randint(1, 300, (1,), generator=gen))
    assert_same(dropins.histogram(x.to(device), bins, density=density), torch.histogram(x, bins, density=density),
                exact=not density or device == "cpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_histogram_tensor_bins_and_weight(device, dtype, gen):
    x = values(1001, dtype, gen)[::2]  # non-contiguous, with inf
    edges = torch.sort(torch.randn(17, generator=gen, dtype=torch.float64)).values.to(dtype).unique()
    x[3] = edges[4]  # exactly on an edge
    w = torch.rand(x.shape, generator=gen, dtype=torch.float64).to(dtype)
    assert_same(dropins.histogram(x.to(device), edges.to(device)), torch.histogram(x, edges))
    assert_same(dropins.histogram(x.to(device), edges.to(device), weight=w.to(device)),
                torch.histogram(x, edges, weight=w), exact=False,
                rtol=1e-5 if dtype in (torch.float32, torch.float64) else 2e-2)  # torch sums 16-bit weights in 16 bits
    assert_same(dropins.histogram(x.to(device), 9, range=(-1.0, 1.0)), torch.histogram(x, 9, range=(-1.0, 1.0)))


@pytest.mark.parametrize("device", DEVICES)
def test_histogram_empty_and_constant(device):
    for x in (torch.tensor([]), torch.full((7,), 3.0)):
        assert_same(dropins.histogram(x.to(device), 4), torch.histogram(x, 4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bins", [5, (3, 4, 2), "tensors"])
@pytest.mark.parametrize("density", [False, True])
def test_histogramdd(device, bins, density, gen):
    x = torch.randn(4, 250, 3, generator=gen)
    w = torch.rand(4, 250, generator=gen)
    if bins == "tensors":
        bins = [torch.sort(torch.randn(c, generator=gen)).values for c in (2, 5, 9)]
        ours = dropins.histogramdd(x.to(device), [b.to(device) for b in bins], weight=w.to(device), density=density)
    else:
        ours = dropins.histogramdd(x.to(device), bins, weight=w.to(device), density=density)
    assert_same(ours, torch.histogramdd(x, bins, weight=w, density=density), exact=False)


@pytest.mark.parametrize("device", DEVICES)
def test_histogramdd_given_range(device, gen):
    x = torch.randn(4, 250, 3, generator=gen)
    r = [-1.0, 1.0, 0.0, 2.0, -3.0, 0.5]
    assert_same(dropins.histogramdd(x.to(device), 6, range=r), torch.histogramdd(x, 6, range=r))


def _raises_same(call_ours, call_torch):
    with pytest.raises(Exception) as theirs:
        call_torch()
    with pytest.raises(type(theirs.value)):
        call_ours()


@pytest.mark.parametrize("device", DEVICES)
def test_errors_match_torch(device):
    x = torch.tensor([1.0, float("nan")])
    _raises_same(lambda: dropins.histogram(x.to(device), 3), lambda: torch.histogram(x, 3))
    i = torch.arange(5)
    _raises_same(lambda: dropins.histogram(i.to(device), 3), lambda: torch.histogram(i, 3))
    h = torch.rand(5).half()
    _raises_same(lambda: dropins.histogram(h.to(device), 3), lambda: torch.histogram(h, 3))
    f = torch.rand(5)
    _raises_same(lambda: dropins.histogram(f.to(device), 0), lambda: torch.histogram(f, 0))
    _raises_same(lambda: dropins.histogram(f.to(device), torch.tensor([0.0, 1.0], dtype=torch.float64, device=device)),
                 lambda: torch.histogram(f, torch.tensor([0.0, 1.0], dtype=torch.float64)))
    _raises_same(lambda: dropins.histogram(f.to(device), 3, range=(1.0, 0.0)), lambda: torch.histogram(f, 3, range=(1.0, 0.0)))
    _raises_same(lambda: dropins.histogram(f.to(device), 3, weight=torch.rand(5, dtype=torch.float64, device=device)),
                 lambda: torch.histogram(f, 3, weight=torch.rand(5, dtype=torch.float64)))
    _raises_same(lambda: dropins.histogram(f.to(device), 2.5), lambda: torch.histogram(f, 2.5))
    _raises_same(lambda: dropins.histogramdd(f.to(device), 3), lambda: torch.histogramdd(f, 3))
    p = torch.rand(5, 2)
    _raises_same(lambda: dropins.histogramdd(p.to(device), [3, 3, 3]), lambda: torch.histogramdd(p, [3, 3, 3]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_host_sync_with_a_range_or_edge_tensors(gen):
    """Only a data-derived range reads anything back (README's drop-in table); a range or edge tensors do not."""
    x = torch.randn(10001, generator=gen).cuda()
    points = torch.randn(501, 2, generator=gen).cuda()
    edges = torch.sort(torch.randn(33, generator=gen)).values.cuda()
    expected = [torch.histogram(x.cpu(), 7, range=(-1.0, 1.0)), torch.histogram(x.cpu(), edges.cpu()),
                torch.histogramdd(points.cpu(), [3, 5], range=[-1.0, 1.0, 0.0, 2.0])]
    torch.cuda.synchronize()
    with host_sync_raises():
        ours = [dropins.histogram(x, 7, range=(-1.0, 1.0)), dropins.histogram(x, edges),
                dropins.histogramdd(points, [3, 5], range=[-1.0, 1.0, 0.0, 2.0])]
    for a, b in zip(ours, expected):
        assert_same(a, b)
