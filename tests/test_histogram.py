"""dsmhist.histogram against torch.bincount / torch.histc and an independent reference, on every device."""

import math

import pytest
import torch

import torch_dsmhist

from conftest import DEVICES
from helpers import (
    ALL_DTYPES,
    DISTRIBUTIONS,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    WEIGHT_DTYPES,
    make_index_values,
    make_range_values,
    reference_histogram,
    sprinkle_specials,
)

SIZES = [0, 1, 7, 1000, 100003]
# Up to and past every tier boundary of an H100 (58112 counters per block, 131072 cluster auto limit, 16 x 58112).
BIN_COUNTS = [1, 2, 37, 256, 4099, 58112, 58113, 131073, 929793]


def check_equal(out: torch.Tensor, expected: torch.Tensor) -> None:
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    out = out.cpu()
    if not torch.equal(out, expected):
        diff = (out.double() - expected.double()).abs()
        bad = int((diff > 0).sum())
        first = int(diff.argmax())
        pytest.fail(f"{bad} bins differ; e.g. bin {first}: got {out[first].item()}, expected {expected[first].item()}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_index_mode_matches_bincount(device, dtype, n, gen):
    bins = 37
    x = make_index_values(n, bins, dtype, "uniform", gen).to(device)
    out = torch_dsmhist.histogram(x, bins)
    in_range = x[(x >= 0) & (x < bins)].long()
    check_equal(out, torch.bincount(in_range.cpu(), minlength=bins))
    assert out.device == x.device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bins", BIN_COUNTS)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_index_mode_bins_and_distributions(device, bins, distribution, gen):
    x = make_index_values(20011, bins, torch.int32, distribution, gen).to(device)
    for policy in ("ignore", "clamp"):
        check_equal(
            torch_dsmhist.histogram(x, bins, out_of_range=policy), reference_histogram(x, bins, out_of_range=policy)
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("bins", [1, 10, 1000, 65536])
def test_range_mode_matches_histc(device, dtype, n, bins, gen):
    x = make_range_values(n, -2.5, 3.0, dtype, "uniform", gen).to(device)
    out = torch_dsmhist.histogram(x, bins, -2.5, 3.0)
    expected = torch.histc(x, bins, -2.5, 3.0).cpu()
    check_equal(out.to(dtype), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("policy", ["ignore", "clamp"])
def test_range_mode_all_dtypes(device, dtype, distribution, policy, gen):
    lo, hi, bins = -20.0, 100.0, 53
    x = make_range_values(30011, lo, hi, dtype, distribution, gen)
    if dtype.is_floating_point:
        x = sprinkle_specials(x, gen)
    x = x.to(device)
    check_equal(
        torch_dsmhist.histogram(x, bins, lo, hi, out_of_range=policy),
        reference_histogram(x, bins, lo, hi, out_of_range=policy),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bins", BIN_COUNTS)
def test_range_mode_bin_counts(device, bins, gen):
    x = make_range_values(50021, 0.0, 1.0, torch.float32, "uniform", gen).to(device)
    check_equal(torch_dsmhist.histogram(x, bins, 0.0, 1.0), reference_histogram(x, bins, 0.0, 1.0))


@pytest.mark.parametrize("device", DEVICES)
def test_values_on_bin_edges(device):
    # Every representable float32 edge of 10 bins over [0, 1], and the max itself, which counts in the last bin.
    edges = torch.linspace(0, 1, 11, dtype=torch.float32)
    x = torch.cat([edges, torch.nextafter(edges, torch.tensor(2.0)), torch.nextafter(edges, torch.tensor(-1.0))])
    x = x.to(device)
    out = torch_dsmhist.histogram(x, 10, 0.0, 1.0)
    check_equal(out.float(), torch.histc(x.cpu(), 10, 0.0, 1.0))
    check_equal(out, reference_histogram(x, 10, 0.0, 1.0))


# Ranges whose spans run from 2^-110 to past 2^100: the device bins by a multiply and one correction where the span
# lies in [2^-100, 2^100] (binning.h, Binner::quotient) and divides outside it; the widest take the 2^-64 scale.
EDGE_RANGES = {
    torch.float32: [
        (0.0, 2.0**-110),
        (0.0, 2.0**-100),
        (-3.0, 7.1),
        (0.1, 0.3),
        (1e-3, 1.0003e-3),
        (-1e25, 5e27),
        (0.0, 2.0**100),
        (0.0, 2.0**101),
        (-3e38, 3e38),
    ],
    torch.float64: [
        (0.0, 2.0**-500),
        (0.0, 2.0**-100),
        (-3.0, 7.1),
        (0.1, 0.3),
        (1e-3, 1.0000000003e-3),
        (-1e200, 5e202),
        (0.0, 2.0**100),
        (0.0, 2.0**500),
        (-1e308, 1e308),
    ],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bins", [7, 1000, 65536])
def test_values_next_to_every_edge_over_any_span(device, dtype, bins, gen):
    # Where a value's bin is decided by the last bit of (x - lo) * bins / (hi - lo): every edge, its neighbours and
    # random values, against the reference's true division, bit for bit.
    for lo, hi in EDGE_RANGES[dtype]:
        # lo * (1 - u) + hi * u: no hi - lo, which overflows for the widest ranges.
        u = torch.cat(
            [torch.arange(bins + 1, dtype=torch.float64) / bins, torch.rand(3001, generator=gen, dtype=torch.float64)]
        )
        points = (lo * (1 - u) + hi * u).to(dtype)
        inf = torch.tensor(math.inf, dtype=dtype)
        x = torch.cat([points, torch.nextafter(points, inf), torch.nextafter(points, -inf)])
        assert bool(torch.isfinite(x).all())
        out = torch_dsmhist.histogram(x.to(device), bins, lo, hi)
        expected = reference_histogram(x, bins, lo, hi)
        assert torch.equal(out.cpu(), expected), (lo, hi, int((out.cpu() != expected).sum()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_data_range_matches_histc(device, dtype, n, gen):
    x = (torch.randn(n, generator=gen, dtype=torch.float64) * 5 + 1).to(dtype).to(device)
    out = torch_dsmhist.histogram(x, 41)
    check_equal(out, reference_histogram(x, 41))
    if dtype in (torch.float32, torch.float64):
        check_equal(out.to(dtype), torch.histc(x.cpu(), 41))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", ["ignore", "clamp"])
def test_data_range_skips_non_finite(device, policy, gen):
    x = sprinkle_specials(torch.randn(10007, generator=gen), gen, fraction=0.05).to(device)
    out = torch_dsmhist.histogram(x, 16, out_of_range=policy)
    check_equal(out, reference_histogram(x, 16, out_of_range=policy))
    finite = int(torch.isfinite(x).sum())
    infinite = int(torch.isinf(x).sum())
    assert int(out.sum()) == finite + (infinite if policy == "clamp" else 0)


@pytest.mark.parametrize("device", DEVICES)
def test_data_range_degenerate_inputs(device):
    constant = torch.full((100,), 3.5, device=device)
    check_equal(torch_dsmhist.histogram(constant, 4), torch.histc(constant.cpu(), 4).long())
    all_nan = torch.full((10,), float("nan"), device=device)
    check_equal(torch_dsmhist.histogram(all_nan, 4), torch.zeros(4, dtype=torch.long))
    only_inf = torch.tensor([float("inf"), float("-inf"), float("inf")], device=device)
    check_equal(torch_dsmhist.histogram(only_inf, 4, out_of_range="clamp"), torch.tensor([1, 0, 0, 2]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int64, torch.float16, torch.float32])
def test_non_contiguous_and_offset_views(device, dtype, gen):
    bins = 29
    if dtype.is_floating_point:
        base = make_range_values(64 * 67 * 3, 0.0, 29.0, dtype, "uniform", gen).reshape(64, 67, 3).to(device)
        kwargs = dict(min=0.0, max=29.0)
    else:
        base = make_index_values(64 * 67 * 3, bins, dtype, "uniform", gen).reshape(64, 67, 3).to(device)
        kwargs = {}
    views = {
        "transposed": base.transpose(0, 2),
        "step": base[:, ::3, 1:],
        "offset1": base.reshape(-1)[1:],
        "offset3_odd": base.reshape(-1)[3:-2],
        "offset_reshaped": base.reshape(-1)[5 : 5 + 61 * 67].reshape(61, 67),
        "expanded": base[0, 0, :1].expand(1000, 7),
        "scalar": base[1, 2, 0],
        # 8 dims that no merge can collapse: the strided kernel path at its limit.
        "eight_dims": base.reshape(-1)[: 2**7 * 3 * 2].reshape((2,) * 7 + (6,))[..., ::2].permute(*range(7, -1, -1)),
        # 11 such dims: more than the kernels take, so the op reads a contiguous copy.
        "eleven_dims": base.reshape(-1)[: 2**10 * 4].reshape((2,) * 10 + (4,))[..., ::2].permute(*range(10, -1, -1)),
    }
    for name, view in views.items():
        out = torch_dsmhist.histogram(view, bins, **kwargs)
        check_equal(out, reference_histogram(view.contiguous(), bins, **kwargs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", WEIGHT_DTYPES)
@pytest.mark.parametrize("input_dtype", [torch.int64, torch.float32])
def test_weights(device, weight_dtype, input_dtype, gen):
    bins, n = 300, 40009
    if input_dtype.is_floating_point:
        x = make_range_values(n, -1.0, 1.0, input_dtype, "uniform", gen)
        kwargs = dict(min=-1.0, max=1.0)
    else:
        x = make_index_values(n, bins, input_dtype, "uniform", gen)
        kwargs = {}
    w = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 0.5).to(weight_dtype)
    out = torch_dsmhist.histogram(x.to(device), bins, weight=w.to(device), **kwargs)
    expected = reference_histogram(x, bins, weight=w, **kwargs)
    assert out.dtype == (torch.float64 if weight_dtype == torch.float64 else torch.float32)
    tolerance = 1e-10 if weight_dtype == torch.float64 else 2e-5
    torch.testing.assert_close(out.cpu(), expected, rtol=tolerance, atol=tolerance * n / bins)


@pytest.mark.parametrize("device", DEVICES)
def test_weights_non_contiguous_and_clamped(device, gen):
    x = make_index_values(200 * 51, 17, torch.int32, "uniform", gen).reshape(200, 51).to(device)
    w = torch.rand(51, 200, generator=gen, dtype=torch.float64).to(device).t()  # strides differ from x's
    out = torch_dsmhist.histogram(x, 17, weight=w, out_of_range="clamp")
    expected = reference_histogram(x, 17, weight=w, out_of_range="clamp")
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("device", DEVICES)
def test_int32_counts(device, gen):
    x = make_index_values(10007, 100, torch.int64, "uniform", gen).to(device)
    out = torch_dsmhist.histogram(x, 100, dtype=torch.int32)
    check_equal(out, reference_histogram(x, 100, dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_clamp_puts_outliers_in_edge_bins(device):
    x = torch.tensor([-5, -1, 0, 3, 4, 9, 100], device=device)
    check_equal(torch_dsmhist.histogram(x, 5, out_of_range="clamp"), torch.tensor([3, 0, 0, 1, 3]))
    check_equal(torch_dsmhist.histogram(x, 5), torch.tensor([1, 0, 0, 1, 1]))
    f = torch.tensor([-math.inf, -2.0, 0.0, 0.5, 1.0, 7.0, math.inf, math.nan], device=device)
    check_equal(torch_dsmhist.histogram(f, 2, 0.0, 1.0, out_of_range="clamp"), torch.tensor([3, 4]))
    check_equal(torch_dsmhist.histogram(f, 2, 0.0, 1.0), torch.tensor([1, 2]))


# ------------------------------------------------------------------------------------------------------------------
# Errors: every bad argument raises before anything runs, naming the argument.
# ------------------------------------------------------------------------------------------------------------------

BAD_CALLS = [
    ("bins", lambda x, w: torch_dsmhist.histogram(x, 0)),
    ("bins", lambda x, w: torch_dsmhist.histogram(x, -3)),
    ("min", lambda x, w: torch_dsmhist.histogram(x, 4, 2.0, 1.0)),
    ("min", lambda x, w: torch_dsmhist.histogram(x, 4, 1.0, 1.0)),
    ("finite", lambda x, w: torch_dsmhist.histogram(x, 4, 0.0, math.inf)),
    ("finite", lambda x, w: torch_dsmhist.histogram(x, 4, math.nan, 1.0)),
    ("min and max", lambda x, w: torch_dsmhist.histogram(x, 4, min=0.0)),
    ("min and max", lambda x, w: torch_dsmhist.histogram(x, 4, max=1.0)),
    ("precision", lambda x, w: torch_dsmhist.histogram(x.float(), 4, 0.0, 1e39)),  # max is inf in float32
    ("out_of_range", lambda x, w: torch_dsmhist.histogram(x, 4, out_of_range="wrap")),
    ("dtype", lambda x, w: torch_dsmhist.histogram(x, 4, dtype=torch.float32)),
    ("dtype", lambda x, w: torch_dsmhist.histogram(x, 4, dtype=torch.int16)),
    ("dtype", lambda x, w: torch_dsmhist.histogram(x, 4, weight=w, dtype=torch.int64)),
    ("weight", lambda x, w: torch_dsmhist.histogram(x, 4, weight=w[:-1])),
    ("weight", lambda x, w: torch_dsmhist.histogram(x, 4, weight=w.int())),
    ("weight", lambda x, w: torch_dsmhist.histogram(x, 4, weight=w.reshape(2, -1))),
    ("input", lambda x, w: torch_dsmhist.histogram(x.bool(), 4)),
    ("input", lambda x, w: torch_dsmhist.histogram(x.to(torch.complex64), 4)),
    ("input", lambda x, w: torch_dsmhist.histogram(x.to(torch.uint16), 4)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("argument, call", BAD_CALLS, ids=[f"{i}-{a}" for i, (a, _) in enumerate(BAD_CALLS)])
def test_bad_arguments_raise_naming_the_argument(device, argument, call):
    x = torch.arange(10, device=device)
    w = torch.ones(10, device=device)
    with pytest.raises((ValueError, RuntimeError)) as info:
        call(x, w)
    assert argument in str(info.value)


def test_weight_on_another_device_raises():
    x = torch.arange(10)
    w = torch.ones(10, device="meta")
    with pytest.raises((ValueError, RuntimeError, NotImplementedError)):
        torch_dsmhist.histogram(x, 4, weight=w)


# ------------------------------------------------------------------------------------------------------------------
# Registration: opcheck, torch.compile, plan
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, gen):
    x = make_index_values(1000, 20, torch.int64, "uniform", gen).to(device)
    f = torch.randn(1001, generator=gen).to(device)
    cases = [
        (x, 20),
        (x, 20, None, None, None, "clamp", torch.int32),
        (f, 30),
        (f, 30, -1.0, 1.0, torch.rand(1001, generator=gen, dtype=torch.float64).to(device), "ignore", None),
        (x.reshape(20, 50).t(), 20, 0.0, 20.0),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.dsmhist.histogram.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device, gen):
    def step(tokens: torch.Tensor, scores: torch.Tensor):
        counts = torch.ops.dsmhist.histogram(tokens, 64)
        hist = torch_dsmhist.histogram(scores, 32, -3.0, 3.0, out_of_range="clamp")
        return counts * 2, hist.float() / scores.numel()

    compiled = torch.compile(step, fullgraph=True)
    tokens = torch.randint(0, 64, (4096,), generator=gen).to(device)
    scores = torch.randn(4096, generator=gen).to(device)
    got = compiled(tokens, scores)
    expected = step(tokens, scores)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    check_equal(got[0] // 2, torch.bincount(tokens.cpu(), minlength=64))


def test_plan_on_cpu():
    p = torch_dsmhist.plan(1000, "cpu")
    assert p.tier == "cpu" and p.device == torch.device("cpu") and p.grid_blocks is None
    with pytest.raises(ValueError, match="bins"):
        torch_dsmhist.plan(0, "cpu")
    # A call given on the CPU: nothing is launched there, so no launch shape.
    for call in ({"n": 1000}, {"rows": 7, "row_length": 33}, {"n": 0}):
        given = torch_dsmhist.plan(1000, "cpu", **call)
        assert (given.tier, given.cluster_size, given.threads_per_block, given.grid_blocks) == ("cpu", 0, 0, None)


@pytest.mark.parametrize(
    "call, error, message",
    [
        ({"n": -1}, ValueError, "n must be >= 0, got -1"),
        ({"n": 2.5}, TypeError, "n must be an int or None, got float"),
        ({"n": True}, TypeError, "n must be an int or None, got bool"),
        ({"rows": 3, "row_length": -2}, ValueError, "row_length must be >= 0"),
        ({"rows": 3}, ValueError, "rows and row_length go together"),
        ({"row_length": 3}, ValueError, "rows and row_length go together"),
        ({"n": 10, "rows": 2, "row_length": 5}, ValueError, "not both"),
    ],
)
def test_plan_refuses_a_bad_call(call, error, message):
    with pytest.raises(error, match=message):
        torch_dsmhist.plan(1000, "cpu", **call)


def test_force_tier_validates_and_restores():
    with pytest.raises(
        ValueError, match='tier must be one of "auto", "shared", "exchange", .*"cluster_dsmem", got "fastest"'
    ):
        with torch_dsmhist.force_tier("fastest"):
            pass
    for tier in ("cluster", "cluster_dsmem", "exchange"):
        with pytest.raises(ValueError, match="cluster_size"):
            with torch_dsmhist.force_tier(tier, cluster_size=17):
                pass
    with pytest.raises(
        ValueError, match='cluster_size applies only to tiers "exchange", "cluster" and "cluster_dsmem"'
    ):
        with torch_dsmhist.force_tier("shared", cluster_size=2):
            pass
    with torch_dsmhist.force_tier("cluster_dsmem", cluster_size=2):
        assert tuple(torch.ops.dsmhist._get_tier_override()) == ("cluster_dsmem", 2, 0)
    with torch_dsmhist.force_tier("global"):
        assert tuple(torch.ops.dsmhist._get_tier_override()) == ("global", 0, 0)
        # CPU calls ignore the forced CUDA tier.
        check_equal(torch_dsmhist.histogram(torch.tensor([1, 1, 2]), 3), torch.tensor([0, 2, 1]))
    assert tuple(torch.ops.dsmhist._get_tier_override()) == ("auto", 0, 0)
