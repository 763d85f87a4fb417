"""histogram_add_, batched_histogram, histogram(out=, accumulate=) and deterministic weighted sums, on every device,
against the independent reference in helpers.py."""

import pytest
import torch

import torch_dsmhist

from conftest import DEVICES
from helpers import (
    FLOAT_DTYPES,
    WEIGHT_DTYPES,
    deterministic_algorithms,
    make_index_values,
    make_range_values,
    reference_histogram,
    sprinkle_specials,
)


def reference_batched(x: torch.Tensor, bins: int, min=None, max=None, weight=None, out_of_range="ignore", dtype=None):
    """Row by row with the 1-D reference; a range from the data is taken once, from the whole input."""
    if min is None and x.dtype.is_floating_point:
        xc = x.detach().cpu().double()
        finite = xc[torch.isfinite(xc)]
        lo, hi = (finite.min().item(), finite.max().item()) if finite.numel() else (0.0, 0.0)
        min, max = (lo - 1.0, hi + 1.0) if lo == hi else (lo, hi)
    lead = x.shape[:-1]
    n_rows = lead.numel()
    rows = x.reshape(n_rows, x.shape[-1])
    ws = None if weight is None else weight.reshape(n_rows, x.shape[-1])
    out = [
        reference_histogram(rows[i], bins, min, max, None if ws is None else ws[i], out_of_range, dtype)
        for i in range(rows.shape[0])
    ]
    if out:
        return torch.stack(out).reshape(*lead, bins)
    empty = reference_histogram(
        x.reshape(-1)[:0], bins, min, max, None if weight is None else weight.reshape(-1)[:0], out_of_range, dtype
    )
    return empty.new_zeros((*lead, bins))


def check_equal(got: torch.Tensor, expected: torch.Tensor):
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert torch.equal(got.cpu(), expected.cpu())


# ------------------------------------------------------------------------------------------------------------------
# histogram_add_ and histogram(out=, accumulate=)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("count_dtype", [torch.int64, torch.int32])
def test_histogram_add_counts_over_batches(device, count_dtype, gen):
    bins = 1013
    batches = [make_index_values(n, bins, torch.int32, "uniform", gen).to(device) for n in (1, 4097, 100003, 0, 777)]
    hist = torch.zeros(bins, dtype=count_dtype, device=device)
    start = torch.randint(0, 1000, (bins,), generator=gen).to(count_dtype).to(device)
    hist += start
    for batch in batches:
        returned = torch_dsmhist.histogram_add_(hist, batch)
        assert returned is hist
    expected = start.cpu().long() + reference_histogram(torch.cat([b.cpu() for b in batches]), bins)
    check_equal(hist, expected.to(count_dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", WEIGHT_DTYPES)
@pytest.mark.parametrize("hist_dtype", [torch.float32, torch.float64])
def test_histogram_add_weighted_any_weight_into_float32_or_float64(device, weight_dtype, hist_dtype, gen):
    bins = 257
    x = make_range_values(50001, -2.0, 2.0, torch.float32, "uniform", gen).to(device)
    w = torch.rand(50001, generator=gen).to(weight_dtype).to(device)
    hist = torch.full((bins,), 0.5, dtype=hist_dtype, device=device)
    torch_dsmhist.histogram_add_(hist, x[:25000], -2.0, 2.0, weight=w[:25000])
    torch_dsmhist.histogram_add_(hist, x[25000:], -2.0, 2.0, weight=w[25000:])
    expected = 0.5 + reference_histogram(x, bins, -2.0, 2.0, weight=w.double()).double()
    tol = dict(rtol=1e-5, atol=1e-3) if hist_dtype == torch.float32 else dict(rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(hist.cpu().double(), expected, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hist_dtype", [torch.float32, torch.float64])
def test_histogram_add_counts_into_a_float_hist(device, hist_dtype, gen):
    """A float buffer of tokens per expert (torchtitan keeps one): counts add exactly, as histogram(out=) copies."""
    bins = 129
    batches = [make_index_values(n, bins, torch.int64, "zipf", gen).to(device) for n in (4099, 1, 0, 65537)]
    start = torch.randint(0, 1000, (bins,), generator=gen).to(hist_dtype).to(device)
    hist = start.clone()
    strided = torch.zeros(bins, 3, dtype=hist_dtype, device=device)[:, 2]
    for batch in batches:
        assert torch_dsmhist.histogram_add_(hist, batch) is hist
        torch_dsmhist.histogram_add_(strided, batch, out_of_range="clamp")
    counts = reference_histogram(torch.cat([b.cpu() for b in batches]), bins)
    check_equal(hist, start.cpu() + counts.to(hist_dtype))
    out = torch.full((bins,), 7.0, dtype=hist_dtype, device=device)
    assert torch_dsmhist.histogram(batches[0], bins, out=out) is out
    check_equal(out, reference_histogram(batches[0].cpu(), bins).to(hist_dtype))
    clamped = reference_histogram(torch.cat([b.cpu() for b in batches]), bins, out_of_range="clamp")
    check_equal(strided, clamped.to(hist_dtype))


def test_histogram_add_refuses_a_float32_hist_past_exact_counts():
    hist = torch.zeros(4, dtype=torch.float32)
    x = torch.zeros(2**24 + 1, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"float32 hist holds counts exactly up to 2\^24"):
        torch_dsmhist.histogram_add_(hist, x)
    assert torch.count_nonzero(hist) == 0
    torch_dsmhist.histogram_add_(hist, x[1:])  # 2^24 elements: every count still exact
    assert hist[0].item() == 2**24
    torch_dsmhist.histogram_add_(hist.double(), x)  # float64 holds it


@pytest.mark.parametrize("device", DEVICES)
def test_histogram_add_into_a_non_contiguous_hist(device, gen):
    storage = torch.zeros(300, 2, dtype=torch.int64, device=device)
    hist = storage[:, 1]  # stride 2
    x = make_index_values(20011, 300, torch.int16, "sorted", gen).to(device)
    torch_dsmhist.histogram_add_(hist, x, out_of_range="clamp")
    torch_dsmhist.histogram_add_(hist, x[::3], out_of_range="clamp")
    expected = reference_histogram(x, 300, out_of_range="clamp") + reference_histogram(
        x[::3], 300, out_of_range="clamp"
    )
    check_equal(hist, expected)
    assert torch.count_nonzero(storage[:, 0]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_histogram_out_and_accumulate(device, gen):
    x = make_range_values(9999, 0.0, 1.0, torch.float64, "uniform", gen).to(device)
    out = torch.full((64,), 7, dtype=torch.int64, device=device)
    assert torch_dsmhist.histogram(x, 64, 0.0, 1.0, out=out) is out
    check_equal(out, reference_histogram(x, 64, 0.0, 1.0))
    torch_dsmhist.histogram(x, 64, 0.0, 1.0, out=out, accumulate=True)
    check_equal(out, 2 * reference_histogram(x, 64, 0.0, 1.0))
    with pytest.raises(ValueError, match="accumulate"):
        torch_dsmhist.histogram(x, 64, 0.0, 1.0, accumulate=True)
    with pytest.raises(ValueError, match="out must have shape"):
        torch_dsmhist.histogram(x, 65, 0.0, 1.0, out=out)
    with pytest.raises(ValueError, match="dtype"):
        torch_dsmhist.histogram(x, 64, 0.0, 1.0, out=out, dtype=torch.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda h, x, f: torch_dsmhist.histogram_add_(h.reshape(2, -1), x), "hist must be a non-empty 1-D"),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h[:0], x), "hist must be a non-empty 1-D"),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h.short(), x), "hist must hold counts"),
        (
            lambda h, x, f: torch_dsmhist.histogram_add_(h, x, weight=x.float()),
            "with weight, hist must be torch.float32",
        ),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h, f), "floating input needs min and max"),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h, x, 0.0), "give both min and max"),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h, x, out_of_range="wrap"), "out_of_range"),
        (lambda h, x, f: torch_dsmhist.histogram_add_(h, x.bool()), "input has dtype"),
        (
            lambda h, x, f: torch_dsmhist.histogram_add_(h.float(), x, weight=x[:-1].float()),
            "weight must have the shape",
        ),
    ],
)
def test_histogram_add_bad_arguments(device, call, match):
    hist = torch.zeros(10, dtype=torch.int64, device=device)
    x = torch.arange(10, device=device)
    before = hist.clone()
    with pytest.raises(ValueError, match=match):
        call(hist, x, x.float())
    check_equal(hist, before)  # nothing was written


def test_histogram_add_rejects_hist_on_another_device():
    with pytest.raises(ValueError, match="hist is on"):
        torch_dsmhist.histogram_add_(torch.zeros(4, dtype=torch.int64, device="meta"), torch.arange(4))


# ------------------------------------------------------------------------------------------------------------------
# batched_histogram
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape, bins",
    [
        ((1, 1), 1),
        ((7, 13), 5),
        ((3001, 31), 16),
        ((65, 257), 256),
        ((2, 3, 1001), 97),
        ((3, 100003), 4099),
        ((0, 5), 3),
        ((4, 0), 3),
        ((5,), 7),
    ],
)
def test_batched_matches_rows(device, shape, bins, gen):
    x = make_index_values(int(torch.Size(shape).numel()), bins, torch.int32, "uniform", gen).reshape(shape).to(device)
    check_equal(
        torch_dsmhist.batched_histogram(x, bins, out_of_range="clamp"), reference_batched(x, bins, out_of_range="clamp")
    )
    check_equal(
        torch_dsmhist.batched_histogram(x, bins, dtype=torch.int32), reference_batched(x, bins, dtype=torch.int32)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64] + FLOAT_DTYPES)
def test_batched_range_mode_every_dtype(device, dtype, gen):
    x = make_range_values(37 * 211, -3.0, 3.0, dtype, "uniform", gen).reshape(37, 211)
    x = (sprinkle_specials(x, gen) if dtype.is_floating_point else x).to(device)
    if dtype.is_floating_point:
        check_equal(torch_dsmhist.batched_histogram(x, 50), reference_batched(x, 50))
    check_equal(torch_dsmhist.batched_histogram(x, 50, -3.0, 3.0), reference_batched(x, 50, -3.0, 3.0))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_strided_and_offset_views(device, gen):
    base = make_index_values(6 * 9 * 40 + 3, 50, torch.int64, "uniform", gen).to(device)
    views = {
        "offset": base[3:].reshape(6, 9, 40),
        "last-dim stride 2": base[3:].reshape(6, 9, 40)[..., ::2],
        "transposed": base[3:].reshape(6, 9, 40).transpose(-1, -2),
        "leading dims permuted": base[3:].reshape(6, 9, 40).permute(1, 0, 2),
        "expanded": base[:40].expand(5, 40),
        "misaligned rows": base[1:].reshape(-1)[: 7 * 33].reshape(7, 33),
    }
    for name, v in views.items():
        check_equal(torch_dsmhist.batched_histogram(v, 50), reference_batched(v.contiguous(), 50))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.float64])
def test_batched_weights(device, weight_dtype, gen):
    x = make_range_values(129 * 301, 0.0, 1.0, torch.float32, "uniform", gen).reshape(129, 301).to(device)
    w = torch.rand(301, 129, generator=gen, dtype=weight_dtype).to(device).t()  # a transposed weight
    got = torch_dsmhist.batched_histogram(x, 64, 0.0, 1.0, weight=w)
    expected = reference_batched(x, 64, 0.0, 1.0, weight=w)
    tol = dict(rtol=1e-5, atol=1e-4) if weight_dtype == torch.float32 else dict(rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(got.cpu(), expected, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_bad_arguments(device):
    with pytest.raises(ValueError, match="at least 1 dim"):
        torch_dsmhist.batched_histogram(torch.tensor(3, device=device), 4)
    with pytest.raises(ValueError, match="bins must be > 0"):
        torch_dsmhist.batched_histogram(torch.zeros(2, 3, device=device, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="weight must have the shape"):
        x = torch.zeros(2, 3, device=device)
        torch_dsmhist.batched_histogram(x, 4, 0.0, 1.0, weight=torch.ones(3, 2, device=device))


# ------------------------------------------------------------------------------------------------------------------
# Deterministic weighted sums
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def deterministic():
    with deterministic_algorithms():
        yield


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float32, torch.float64])
def test_deterministic_weighted_sums_are_accurate_and_repeatable(device, weight_dtype, deterministic, gen):
    bins = 1000
    x = make_range_values(300007, 0.0, 1.0, torch.float32, "sorted", gen).to(device)
    # Weights of mixed signs and magnitudes, so a different order of additions would round differently.
    w = torch.randn(300007, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(-3, 4, (300007,), generator=gen)
    w = w.to(weight_dtype).to(device)
    runs = [torch_dsmhist.histogram(x, bins, 0.0, 1.0, weight=w) for _ in range(3)]
    for run in runs[1:]:
        assert torch.equal(run.cpu(), runs[0].cpu()), "deterministic weighted sums differ between runs"
    expected = reference_histogram(x, bins, 0.0, 1.0, weight=w.double()).double()
    scale = reference_histogram(x, bins, 0.0, 1.0, weight=w.double().abs()).double()  # sum |w| per bin
    err = (runs[0].cpu().double() - expected).abs()
    rel = 1e-6 if weight_dtype != torch.float64 else 1e-9
    assert bool((err <= rel * scale + 1e-12).all()), f"largest error {(err - rel * scale).max().item()}"


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_non_finite_weights(device, deterministic):
    x = torch.tensor([0, 0, 1, 1, 2, 3, 3, 4], device=device)
    inf, nan = float("inf"), float("nan")
    w = torch.tensor([1.0, inf, -inf, inf, nan, 2.0, -3.5, 0.0], device=device)
    got = torch_dsmhist.histogram(x, 5, weight=w).cpu()
    expected = torch.tensor([inf, nan, nan, -1.5, 0.0])
    torch.testing.assert_close(got, expected, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_add_and_batched(device, deterministic, gen):
    x = make_range_values(64 * 513, 0.0, 1.0, torch.float32, "uniform", gen).reshape(64, 513).to(device)
    w = torch.randn(64, 513, generator=gen).to(device)
    b = [torch_dsmhist.batched_histogram(x, 33, 0.0, 1.0, weight=w) for _ in range(2)]
    assert torch.equal(b[0].cpu(), b[1].cpu())
    torch.testing.assert_close(b[0].cpu(), reference_batched(x, 33, 0.0, 1.0, weight=w), rtol=1e-5, atol=1e-5)
    hist = torch.full((33,), 0.25, dtype=torch.float64, device=device)
    torch_dsmhist.histogram_add_(hist, x, 0.0, 1.0, weight=w)
    expected = 0.25 + reference_histogram(x, 33, 0.0, 1.0, weight=w.double()).double()
    torch.testing.assert_close(hist.cpu(), expected, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------------------------------------
# Registration: opcheck and torch.compile for the new ops
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_new_ops(device, gen):
    x = make_index_values(1000, 20, torch.int64, "uniform", gen).to(device)
    f = torch.randn(40, 25, generator=gen).to(device)
    w = torch.rand(40, 25, generator=gen).to(device)
    for args in [
        (torch.zeros(20, dtype=torch.int64, device=device), x),
        (torch.zeros(20, dtype=torch.int32, device=device), x, None, None, None, "clamp"),
        (torch.ones(30, dtype=torch.float64, device=device), f, -1.0, 1.0, w),
    ]:
        torch.library.opcheck(torch.ops.dsmhist.histogram_add_.default, args)
    for args in [
        (x.reshape(50, 20), 20),
        (f, 30),
        (f.t(), 30, -1.0, 1.0, w.t(), "clamp"),
        (x.reshape(10, 100)[:, ::3], 20, None, None, None, "ignore", torch.int32),
    ]:
        torch.library.opcheck(torch.ops.dsmhist.batched_histogram.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_new_ops(device, gen):
    def step(hist: torch.Tensor, tokens: torch.Tensor, pixels: torch.Tensor):
        torch_dsmhist.histogram_add_(hist, tokens)
        per_row = torch_dsmhist.batched_histogram(pixels, 16, 0.0, 256.0)
        return hist * 1, per_row

    compiled = torch.compile(step, fullgraph=True)
    tokens = torch.randint(0, 64, (4096,), generator=gen).to(device)
    pixels = torch.randint(0, 256, (3, 1000), generator=gen, dtype=torch.uint8).to(device)
    h1 = torch.zeros(64, dtype=torch.int64, device=device)
    h2 = torch.zeros(64, dtype=torch.int64, device=device)
    for _ in range(2):
        got = compiled(h1, tokens, pixels)
        expected = step(h2, tokens, pixels)
    check_equal(h1, h2)
    check_equal(h1, 2 * torch.bincount(tokens.cpu(), minlength=64))
    check_equal(got[1], expected[1])
