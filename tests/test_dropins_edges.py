"""torch_dsmhist.dropins.histogram / histogramdd against torch's CPU result: values, dtypes, edges, errors."""

import pytest
import torch

from torch_dsmhist import dropins

from conftest import DEVICES
from helpers import host_sync_raises


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
    assert_same(
        dropins.histogram(xs.to(device), bins, range=(-1.0, 2.5), density=density),
        torch.histogram(xs, bins, range=(-1.0, 2.5), density=density),
        exact=not density or device == "cpu",
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("density", [False, True])
def test_histogram_int_bins_data_range(device, dtype, density, gen):
    x = values(int(torch.randint(1, 3000, (1,), generator=gen)), dtype, gen, specials=False)
    bins = int(torch.randint(1, 300, (1,), generator=gen))
    assert_same(
        dropins.histogram(x.to(device), bins, density=density),
        torch.histogram(x, bins, density=density),
        exact=not density or device == "cpu",
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_histogram_tensor_bins_and_weight(device, dtype, gen):
    x = values(1001, dtype, gen)[::2]  # non-contiguous, with inf
    edges = torch.sort(torch.randn(17, generator=gen, dtype=torch.float64)).values.to(dtype).unique()
    x[3] = edges[4]  # exactly on an edge
    w = torch.rand(x.shape, generator=gen, dtype=torch.float64).to(dtype)
    assert_same(dropins.histogram(x.to(device), edges.to(device)), torch.histogram(x, edges))
    assert_same(
        dropins.histogram(x.to(device), edges.to(device), weight=w.to(device)),
        torch.histogram(x, edges, weight=w),
        exact=False,
        rtol=1e-5 if dtype in (torch.float32, torch.float64) else 2e-2,
    )  # torch sums 16-bit weights in 16 bits
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


@pytest.mark.parametrize("device", DEVICES)
def test_histogramdd_data_range_per_dim(device, gen):
    """The data range is taken a column at a time: each dim's own min and max (placed on different rows), from a
    strided view too, and a non-finite value in any one column raises as torch does."""
    x = torch.randn(3001, 6, generator=gen)[:, ::2]  # [3001, 3], strided
    x[17, 0], x[2900, 1], x[5, 2] = 9.0, -7.5, 4.25
    assert_same(dropins.histogramdd(x.to(device), [4, 5, 3]), torch.histogramdd(x, [4, 5, 3]))
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[1000, 2] = bad
        with pytest.raises(RuntimeError, match="dimension 2's range") as ours:
            dropins.histogramdd(y.to(device), 3)
        with pytest.raises(RuntimeError) as theirs:
            torch.histogramdd(y, 3)
        assert str(ours.value) == str(theirs.value)


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
    _raises_same(
        lambda: dropins.histogram(f.to(device), torch.tensor([0.0, 1.0], dtype=torch.float64, device=device)),
        lambda: torch.histogram(f, torch.tensor([0.0, 1.0], dtype=torch.float64)),
    )
    _raises_same(
        lambda: dropins.histogram(f.to(device), 3, range=(1.0, 0.0)), lambda: torch.histogram(f, 3, range=(1.0, 0.0))
    )
    _raises_same(
        lambda: dropins.histogram(f.to(device), 3, weight=torch.rand(5, dtype=torch.float64, device=device)),
        lambda: torch.histogram(f, 3, weight=torch.rand(5, dtype=torch.float64)),
    )
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
    expected = [
        torch.histogram(x.cpu(), 7, range=(-1.0, 1.0)),
        torch.histogram(x.cpu(), edges.cpu()),
        torch.histogramdd(points.cpu(), [3, 5], range=[-1.0, 1.0, 0.0, 2.0]),
    ]
    torch.cuda.synchronize()
    with host_sync_raises():
        ours = [
            dropins.histogram(x, 7, range=(-1.0, 1.0)),
            dropins.histogram(x, edges),
            dropins.histogramdd(points, [3, 5], range=[-1.0, 1.0, 0.0, 2.0]),
        ]
    for a, b in zip(ours, expected):
        assert_same(a, b)


# ----- argument handling against torch's CPU ops (issue 48, items 1-5) --------------------------------------------
# Each case runs once with torch's functions on the CPU and once with the drop-ins on `device`: both must return the
# same result (values, dtypes, edges) or raise the same exception class. The cases restate upstream's argument
# handling (PyTorch's test_histogram*/test_histogramdd* and OpInfo samples, NumPy's and CuPy's histogramdd tests).


def _outcome(call):
    try:
        return call(), None
    except Exception as error:  # noqa: BLE001 (the class is what is compared)
        return None, type(error)


def _points(gen, *shape, dtype=torch.float32):
    return torch.rand(*shape, generator=gen, dtype=torch.float64).to(dtype)


def _argument_cases(gen):
    """(name, call(histogram, histogramdd, device)) pairs; the data is drawn once, so both sides see the same."""
    p = _points(gen, 37, 2)
    e0 = torch.sort(_points(gen, 5)).values
    e1 = torch.sort(_points(gen, 7)).values
    ints = torch.randint(0, 5, (9, 2), generator=gen)
    x = _points(gen, 41)
    cases = [
        # 1. range= with edge tensors: histogramdd ignores it, whatever it holds; histogram refuses it (TypeError).
        ("dd edges and range", lambda h, dd, d: dd(p.to(d), [e0.to(d), e1.to(d)], range=[0.0, 1.0, 0.0, 1.0])),
        ("dd edges and a bad range", lambda h, dd, d: dd(p.to(d), [e0.to(d), e1.to(d)], range=[1.0, 0.0])),
        (
            "dd edges and a NaN range",
            lambda h, dd, d: dd(p.to(d), [e0.to(d), e1.to(d)], range=[float("nan"), 1.0, 0.0, 1.0]),
        ),
        ("histogram edges and range", lambda h, dd, d: h(x.to(d), e0.to(d), range=(0.0, 1.0))),
        (
            "dd int input, float edges, range",
            lambda h, dd, d: dd(ints.to(d), [e0.to(d), e1.to(d)], range=[0.0, 1.0, 0.0, 1.0]),
        ),
        (
            "dd int input, int edges, range",
            lambda h, dd, d: dd(ints.to(d), [torch.arange(3).to(d)] * 2, range=[0.0, 1.0, 0.0, 1.0]),
        ),
        ("histogram int input, int edges", lambda h, dd, d: h(ints[:, 0].to(d), torch.arange(3).to(d))),
        # 2. a 0-d input with a weight (of one element, any shape for histogram).
        (
            "0-d input, 0-d weight",
            lambda h, dd, d: h(torch.tensor(1.5, device=d), 2, range=(0.0, 2.0), weight=torch.tensor(3.0, device=d)),
        ),
        (
            "0-d input, [1] weight",
            lambda h, dd, d: h(torch.tensor(1.5, device=d), 2, range=(0.0, 2.0), weight=torch.tensor([3.0], device=d)),
        ),
        (
            "0-d input, [2] weight",
            lambda h, dd, d: h(
                torch.tensor(1.5, device=d), 2, range=(0.0, 2.0), weight=torch.tensor([3.0, 4.0], device=d)
            ),
        ),
        ("histogram weight of another shape", lambda h, dd, d: h(x[:40].to(d), 3, weight=x[:40].reshape(5, 8).to(d))),
        ("histogram weight of too few", lambda h, dd, d: h(x.to(d), 3, weight=x[:40].to(d))),
        (
            "0-d input, density",
            lambda h, dd, d: h(
                torch.tensor(1.5, device=d), 2, range=(0.0, 2.0), weight=torch.tensor(3.0, device=d), density=True
            ),
        ),
        ("dd [1, 1] input, 0-d weight", lambda h, dd, d: dd(p[:1, :1].to(d), 2, weight=torch.tensor(3.0, device=d))),
        ("dd weight [2, 3] for [6, 2]", lambda h, dd, d: dd(p[:6].to(d), 3, weight=x[:6].reshape(2, 3).to(d))),
        # 3. points with 0 dims.
        ("dd 0 dims", lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3)),
        ("dd 0 dims, [] bins", lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), [])),
        ("dd 0 dims, density", lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3, density=True)),
        (
            "dd 0 dims, weight",
            lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3, weight=torch.rand(5, generator=gen).to(d)),
        ),
        (
            "dd 0 dims, bad weight",
            lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3, weight=torch.rand(4, generator=gen).to(d)),
        ),
        ("dd 0 dims, range", lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3, range=[0.0, 1.0])),
        ("dd 0 dims, empty range", lambda h, dd, d: dd(torch.rand(5, 0, generator=gen).to(d), 3, range=[])),
        ("dd 0 dims, float64", lambda h, dd, d: dd(torch.rand(5, 0, dtype=torch.float64).to(d), 3)),
        ("dd 0 dims, float16", lambda h, dd, d: dd(torch.rand(5, 0).half().to(d), 3)),
        ("dd 0 dims, int32", lambda h, dd, d: dd(torch.ones(5, 0, dtype=torch.int32).to(d), 3)),
        ("dd 0 dims, 3-D", lambda h, dd, d: dd(torch.rand(2, 5, 0, generator=gen).to(d), 3)),
        ("dd 0 points, 0 dims", lambda h, dd, d: dd(torch.rand(0, 0).to(d), 3)),
        # 5. one edge, huge ranges, bins as a 0-d tensor, range element types, integer input with a bad range.
        ("histogram one edge", lambda h, dd, d: h(x.to(d), torch.tensor([0.5], device=d))),
        ("dd one edge", lambda h, dd, d: dd(p[:, :1].to(d), [torch.tensor([0.5], device=d)])),
        ("histogram no edge", lambda h, dd, d: h(x.to(d), torch.tensor([], device=d))),
        ("dd bins 0-d int tensor", lambda h, dd, d: dd(p.to(d), torch.tensor(3))),
        ("dd bins 0-d int tensors", lambda h, dd, d: dd(p.to(d), [torch.tensor(3), torch.tensor(2)])),
        ("dd bins 0-d float tensor", lambda h, dd, d: dd(p.to(d), torch.tensor(3.0))),
        ("dd bins 1-d int tensor", lambda h, dd, d: dd(p.to(d), torch.tensor([3, 4]))),
        ("dd bins mixed", lambda h, dd, d: dd(p.to(d), [3, e1.to(d)])),
        ("histogram bins 0-d int tensor", lambda h, dd, d: h(x.to(d), torch.tensor(3, device=d))),
        ("histogram bins float", lambda h, dd, d: h(x.to(d), 2.5)),
        ("range of str", lambda h, dd, d: h(x.to(d), 3, range=("a", 1))),
        ("dd range of str", lambda h, dd, d: dd(p.to(d), 3, range=("a", 1, 0, 1))),
        ("range with None", lambda h, dd, d: h(x.to(d), 3, range=(None, 1))),
        ("range a tensor", lambda h, dd, d: h(x.to(d), 3, range=torch.tensor([0.0, 1.0]))),
        ("range of 0-d tensors", lambda h, dd, d: h(x.to(d), 3, range=(torch.tensor(0.0), torch.tensor(1.0)))),
        ("range of ints", lambda h, dd, d: h(x.to(d), 3, range=(0, 1))),
        ("range of bools", lambda h, dd, d: h(x.to(d), 3, range=(False, True))),
        ("range a list", lambda h, dd, d: h(x.to(d), 3, range=[0.0, 1.0])),
        ("range of 3", lambda h, dd, d: h(x.to(d), 3, range=(0.0, 1.0, 2.0))),
        ("int input, bad range", lambda h, dd, d: h(ints[:, 0].to(d), 3, range=(1.0, 0.0))),
        ("int input, NaN range", lambda h, dd, d: h(ints[:, 0].to(d), 3, range=(float("nan"), 0.0))),
        ("int input, range", lambda h, dd, d: h(ints[:, 0].to(d), 3, range=(0.0, 1.0))),
        ("int input", lambda h, dd, d: h(ints[:, 0].to(d), 3)),
        ("float16, no range", lambda h, dd, d: h(x.half().to(d), 3)),
        ("float16, range", lambda h, dd, d: h(x.half().to(d), 3, range=(0.0, 1.0))),
    ]
    # 4. dtypes torch's histogram does not implement, each way of binning.
    for dtype in (
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    ):
        values = torch.ones(4, 2, dtype=dtype)
        cases += [
            (f"{dtype} int bins", lambda h, dd, d, v=values: h(v[:, 0].to(d), 3)),
            (f"{dtype} range", lambda h, dd, d, v=values: h(v[:, 0].to(d), 3, range=(0.0, 1.0))),
            (f"{dtype} float edges", lambda h, dd, d, v=values: h(v[:, 0].to(d), e0.to(d))),
            (f"{dtype} dd", lambda h, dd, d, v=values: dd(v.to(d), 3)),
            (
                f"{dtype} dd edges and range",
                lambda h, dd, d, v=values: dd(v.to(d), [e0.to(d), e1.to(d)], range=[0.0, 1.0, 0.0, 1.0]),
            ),
        ]
    return cases


def _assert_same_result(ours, theirs):
    assert type(ours) is type(theirs)
    ours_edges = ours.bin_edges if isinstance(ours.bin_edges, tuple) else (ours.bin_edges,)
    theirs_edges = theirs.bin_edges if isinstance(theirs.bin_edges, tuple) else (theirs.bin_edges,)
    assert len(ours_edges) == len(theirs_edges)
    for a, b in zip(ours_edges, theirs_edges):
        assert a.dtype == b.dtype and torch.equal(a.cpu(), b)
    assert ours.hist.dtype == theirs.hist.dtype
    torch.testing.assert_close(ours.hist.cpu(), theirs.hist, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_argument_handling_matches_torch(device, gen):
    """Every case returns torch's CPU result or raises torch's exception class (the README's table lists the rest)."""
    mismatches = []
    for name, case in _argument_cases(gen):
        theirs, theirs_error = _outcome(lambda: case(torch.histogram, torch.histogramdd, "cpu"))
        ours, ours_error = _outcome(lambda: case(dropins.histogram, dropins.histogramdd, device))
        if theirs_error is not None or ours_error is not None:
            if theirs_error is not ours_error:
                mismatches.append(f"{name}: torch {theirs_error}, drop-in {ours_error}")
            continue
        try:
            _assert_same_result(ours, theirs)
        except AssertionError as error:
            mismatches.append(f"{name}: {error}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_range_beyond_the_dtype_keeps_torchs_edges_and_counts_right(device, dtype, gen):
    """torch's linspace overflows for a range wider than the dtype's largest value and torch then counts nothing; the
    drop-in returns torch's (inf / NaN) edges and counts each value in its equal-width bin (README's table)."""
    big = torch.finfo(dtype).max * 0.9
    n = int(torch.randint(5, 300, (1,), generator=gen))
    bins = int(torch.randint(2, 40, (1,), generator=gen))
    fraction = torch.rand(n, generator=gen, dtype=torch.float64)  # of the way from -big to big
    x = (fraction * 2 - 1).to(dtype) * big
    x[0], x[1] = -big, big  # the data's min and max: torch's range when none is given
    theirs = torch.histogram(x, bins)
    ours = dropins.histogram(x.to(device), bins)
    assert not torch.isfinite(theirs.bin_edges).all()
    assert torch.equal(
        ours.bin_edges.cpu(),
        theirs.bin_edges,
    ) or torch.equal(ours.bin_edges.cpu().nan_to_num(), theirs.bin_edges.nan_to_num())
    # Each value's true bin, computed in exact rational arithmetic on the float64 values.
    from fractions import Fraction

    lo, hi = Fraction(float(x.min())), Fraction(float(x.max()))
    expected = torch.zeros(bins, dtype=torch.int64)
    for v in x.tolist():
        expected[min(int((Fraction(v) - lo) * bins / (hi - lo)), bins - 1)] += 1
    assert torch.equal(ours.hist.cpu().long(), expected), (ours.hist, expected)
    # N-D: the overflowing dim counts right, the other dim is torch's own.
    points = torch.stack([x, torch.rand(n, generator=gen, dtype=torch.float64).to(dtype)], dim=1)
    dd = dropins.histogramdd(points.to(device), [bins, 3])
    assert torch.equal(dd.hist.sum(1).cpu().long(), expected)
    assert torch.equal(dd.hist.sum(0).cpu(), torch.histogram(points[:, 1].contiguous(), 3).hist)


def test_histogram_out_is_not_supported():
    """README's drop-in table: torch.histogram's out= is not supported (TypeError), nothing written."""
    out = (torch.full((3,), 7.0), torch.full((4,), 7.0))
    with pytest.raises(TypeError):
        dropins.histogram(torch.rand(5), 3, out=out)  # type: ignore[call-arg]
    assert all(bool((t == 7.0).all()) for t in out)
