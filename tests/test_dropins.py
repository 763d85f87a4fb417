"""The drop-ins torch_dsmhist.bincount / torch_dsmhist.histc against torch's own results (torch's CPU result is the
ground truth on every device), and every row of the README's drop-in table. Also: the test seed is printed where a
failure shows it (conftest.py)."""

import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Callable

import pytest
import torch

import torch_dsmhist

from conftest import DEVICES, cuda_only
from helpers import INTEGER_DTYPES, deterministic_algorithms, reference_histogram

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def assert_same(out: torch.Tensor, expected: torch.Tensor) -> None:
    """Same dtype, shape and values, bit for bit (on the CPU)."""
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    out, expected = out.cpu(), expected.cpu()
    assert torch.equal(out, expected), f"got {out.tolist()}, expected {expected.tolist()}"


def outcome(fn: Callable[[], torch.Tensor]):
    """What a call does: ("ok", result on the CPU) or ("raises", exception class, message)."""
    try:
        return ("ok", fn().cpu())
    except Exception as error:  # noqa: BLE001  (the class is what is compared)
        return ("raises", type(error), str(error).split("\n")[0])


def assert_same_outcome(ours: Callable[[], torch.Tensor], theirs: Callable[[], torch.Tensor], same_message=True):
    """The drop-in returns what torch returns (dtype and bits) or raises what torch raises (class, and message)."""
    got, expected = outcome(ours), outcome(theirs)
    assert got[0] == expected[0], (got, expected)
    if got[0] == "ok":
        assert_same(got[1], expected[1])
    else:
        assert got[1] is expected[1], (got, expected)
        if same_message:
            # A NaN bound is printed with the sign bit the device's min/max reduction gave it (x86 CPU code yields
            # -nan, the GPU nan): IEEE leaves a NaN's sign unspecified, so only the sign of "nan" may differ.
            assert got[2].replace("-nan", "nan") == expected[2].replace("-nan", "nan"), (got, expected)


# ------------------------------------------------------------------------------------------------------------------
# bincount (moved from test_histogram.py, plus issue 13 items 6 and 9)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_bincount_drop_in(device, dtype, gen):
    x = torch.randint(0, 100, (5003,), generator=gen).to(dtype).to(device)
    for minlength in (0, 7, 150):
        assert_same(torch_dsmhist.bincount(x, minlength=minlength), torch.bincount(x.cpu(), minlength=minlength))
    # Integer-valued weights: every sum is exact, so every weight dtype gives torch's values bit for bit.
    for weight_dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.bool):
        w = torch.randint(0, 5, (5003,), generator=gen).to(weight_dtype)
        expected = torch.bincount(x.cpu(), weights=w, minlength=3)
        out = torch_dsmhist.bincount(x, weights=w.to(device), minlength=3)
        assert out.device == x.device
        assert_same(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_bincount_drop_in_edge_cases(device):
    empty = torch.empty(0, dtype=torch.long, device=device)
    for minlength in (0, 4):
        assert_same(
            torch_dsmhist.bincount(empty, minlength=minlength), torch.bincount(empty.cpu(), minlength=minlength)
        )
    bad_inputs = [
        torch.tensor([1, -1]),
        torch.zeros(2, 2, dtype=torch.long),
        torch.tensor(3),
        torch.empty(0, 2, dtype=torch.long),
        torch.tensor([1.0]),
        torch.empty(0),
        torch.tensor([True]),
        torch.tensor([1], dtype=torch.uint16),
    ]
    for bad in bad_inputs:
        assert_same_outcome(
            lambda: torch_dsmhist.bincount(bad.to(device)), lambda: torch.bincount(bad), same_message=False
        )
    x = torch.tensor([1, 2], device=device)
    for minlength in (-1, 0, 5):
        assert_same_outcome(
            lambda: torch_dsmhist.bincount(x, minlength=minlength),
            lambda: torch.bincount(x.cpu(), minlength=minlength),
            same_message=False,
        )
    for w in (torch.ones(3), torch.ones(2, 1), torch.ones(1)):
        assert_same_outcome(lambda: torch_dsmhist.bincount(x, w.to(device)), lambda: torch.bincount(x.cpu(), w))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
def test_bincount_empty_input_ignores_weights(device, weight_dtype, gen):
    """Issue 13 item 9: torch returns int64 zeros(minlength) for an empty input, whatever the weights' dtype and
    length (it does not look at them)."""
    empty = torch.empty(0, dtype=torch.int64, device=device)
    for length in (0, 5):
        w = torch.rand(length, generator=gen).to(weight_dtype).to(device)
        for minlength in (0, 3):
            expected = torch.bincount(empty.cpu(), weights=w.cpu(), minlength=minlength)
            assert expected.dtype == torch.int64
            assert_same(torch_dsmhist.bincount(empty, weights=w, minlength=minlength), expected)


def test_bincount_float32_weights_sum_in_float64_on_cpu(gen):
    """Issue 13 item 9, the README's bincount row: with float32 weights the drop-in's CPU bins are each bin's float64
    sum rounded once to float32, i.e. torch.bincount(x, w.double()).float() whenever the float64 sums are exact;
    torch's float32 running sum differs from that in the last bits."""
    # Weights k * 2^-20 with k < 2^24: exact in float32, and every partial sum of up to 2^29 of them is exact in
    # float64 whatever the order, so the relation is exact whatever order the op sums in.
    n, bins = 300_000, 50
    x = torch.randint(0, bins, (n,), generator=gen)
    w = (torch.randint(0, 2**24, (n,), generator=gen).double() * 2.0**-20).float()
    out = torch_dsmhist.bincount(x, weights=w)
    exact = torch.bincount(x, weights=w.double())
    assert_same(out, exact.float())
    # torch's float32 running sums lose the low bits once a bin passes 2^4 (about 6000 weights per bin here).
    assert not torch.equal(torch.bincount(x, weights=w), out)
    # The smallest case: 1 + 2^-24 + 2^-24. torch: (1 + 2^-24) rounds to 1, twice. The drop-in: 1 + 2^-23.
    small = torch_dsmhist.bincount(torch.zeros(3, dtype=torch.long), torch.tensor([1.0, 2.0**-24, 2.0**-24]))
    assert small.item() == 1.0 + 2.0**-23
    assert torch.bincount(torch.zeros(3, dtype=torch.long), torch.tensor([1.0, 2.0**-24, 2.0**-24])).item() == 1.0


# ------------------------------------------------------------------------------------------------------------------
# Wrong Python types: TypeError naming the argument, as torch (issue 13 item 6, drop-ins)
# ------------------------------------------------------------------------------------------------------------------

BINCOUNT_BAD_TYPES = [
    ("input", lambda f: f([1, 2])),
    ("input", lambda f: f("x")),
    ("input", lambda f: f(None)),
    ("minlength", lambda f: f(torch.tensor([1, 2]), minlength="3")),
    ("minlength", lambda f: f(torch.tensor([1, 2]), minlength=3.0)),
    ("minlength", lambda f: f(torch.tensor([1, 2]), minlength=True)),
    ("minlength", lambda f: f(torch.tensor([1, 2]), minlength=None)),
    ("weights", lambda f: f(torch.tensor([1, 2]), weights=[1.0, 2.0])),
    ("weights", lambda f: f(torch.tensor([1, 2]), weights="w")),
]
HISTC_BAD_TYPES = [
    ("input", lambda f: f("x")),
    ("input", lambda f: f([1.0, 2.0])),
    ("bins", lambda f: f(torch.ones(3), bins=4.5)),
    ("bins", lambda f: f(torch.ones(3), bins=4.0)),
    ("bins", lambda f: f(torch.ones(3), bins=None)),
    ("bins", lambda f: f(torch.ones(3), bins=True)),
    ("bins", lambda f: f(torch.ones(3), bins="4")),
    ("bins", lambda f: f(torch.ones(3), bins=torch.tensor(4.0))),
    ("min", lambda f: f(torch.ones(3), 4, min="0")),
    ("min", lambda f: f(torch.ones(3), 4, min=None)),
    ("min", lambda f: f(torch.ones(3), 4, min=torch.tensor([0.5]))),
    ("min", lambda f: f(torch.ones(3), 4, min=torch.tensor(0.5, requires_grad=True))),
    ("max", lambda f: f(torch.ones(3), 4, 0.0, max=[3.0])),
]


@pytest.mark.parametrize("name, call", BINCOUNT_BAD_TYPES + HISTC_BAD_TYPES)
def test_wrong_python_type_raises_type_error(name, call):
    fn = "bincount" if (name, call) in BINCOUNT_BAD_TYPES else "histc"
    with pytest.raises(TypeError):
        call(getattr(torch, fn))
    with pytest.raises(TypeError, match=f"argument '{name}'"):
        call(getattr(torch_dsmhist, fn))


def test_bad_values_raise_what_torch_raises():
    x, ints = torch.tensor([1.0, 2.0]), torch.tensor([1, 2])
    cases = [
        (torch.histc, (x,), dict(bins=-1)),
        (torch.histc, (x,), dict(bins=0)),
        (torch.histc, (x,), dict(bins=2**63)),
        (torch.histc, (x, 4), dict(min=2**70, max=2**71)),
        (torch.histc, (x, 4), dict(min=0, max=3 + 1j)),
        (torch.histc, (x, 4), dict(min=0, max=float("inf"))),
        (torch.histc, (x, 4), dict(min=float("nan"), max=3)),
        (torch.histc, (x, 4), dict(min=5, max=1)),
        (torch.histc, (x, 2**62), {}),
        (torch.bincount, (ints,), dict(minlength=-1)),
        (torch.bincount, (ints,), dict(minlength=2**63)),
    ]
    for fn, args, kwargs in cases:
        ours = getattr(torch_dsmhist, fn.__name__)
        assert_same_outcome(lambda: ours(*args, **kwargs), lambda: fn(*args, **kwargs), same_message=False)
    # Accepted like torch: numpy / 0-d tensor integers for int arguments, bools and 0-d tensors for numbers.
    np = pytest.importorskip("numpy")
    accepted = [
        (torch.histc, (x,), dict(bins=np.int64(4))),
        (torch.histc, (x,), dict(bins=torch.tensor(4))),
        (torch.histc, (x, 4), dict(min=True, max=3)),
        (torch.histc, (x, 4), dict(min=np.float32(0.5), max=torch.tensor(3))),
        (torch.histc, (x, 4), dict(min=0, max=3 + 0j)),
        (torch.bincount, (ints,), dict(minlength=np.int64(5))),
        (torch.bincount, (ints,), dict(minlength=torch.tensor(5))),
    ]
    for fn, args, kwargs in accepted:
        ours = getattr(torch_dsmhist, fn.__name__)
        assert_same(ours(*args, **kwargs), fn(*args, **kwargs))


# ------------------------------------------------------------------------------------------------------------------
# histc (moved from test_histogram.py)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_drop_in(device, dtype, gen):
    x = (torch.randn(20011, generator=gen, dtype=torch.float64) * 3).to(dtype)
    for args in [(), (50,), (50, -1.0, 1.0), (7, 2.0, 2.0), (13, -10, 10), (5, 0.1, 0.3)]:
        out = torch_dsmhist.histc(x.to(device), *args)
        assert out.device.type == device
        assert_same(out, torch.histc(x, *args))
    empty = torch.empty(0, dtype=dtype)
    assert_same(torch_dsmhist.histc(empty.to(device), 5), torch.histc(empty, 5))
    for args in [
        (torch.tensor([1.0, math.inf], dtype=dtype),),
        (x, 5, 3.0, 1.0),
        (x, 0),
        (torch.tensor([1.0, math.nan], dtype=dtype),),
    ]:
        assert_same_outcome(lambda: torch_dsmhist.histc(args[0].to(device), *args[1:]), lambda: torch.histc(*args))


@pytest.mark.parametrize("device", DEVICES)
def test_histc_range_overflow_bins_right_where_torch_returns_garbage(device, gen):
    """The README's float32/float64 row: where (max - min) * bins overflows the dtype torch computes inf / inf (all
    zeros for data spanning [-3e38, 3e38]); the drop-in's bins are the right ones."""
    x = torch.tensor([-3e38, -1e38, 0.0, 1e38, 3e38])
    assert torch.histc(x, 4).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert_same(torch_dsmhist.histc(x.to(device), 4), torch.tensor([1.0, 1.0, 2.0, 1.0]))
    y = torch.cat([x, (torch.rand(1000, generator=gen, dtype=torch.float64) * 6e38 - 3e38).float()])
    assert_same(torch_dsmhist.histc(y.to(device), 37), reference_histogram(y, 37, -3e38, 3e38).float())


@pytest.mark.parametrize("device", DEVICES)
def test_histc_drop_in_half_precision(device, gen):
    for dtype in (torch.float16, torch.bfloat16):
        x = (torch.randn(3001, generator=gen) * 3).to(dtype).to(device)
        out = torch_dsmhist.histc(x, 30, -4.0, 4.0)
        assert out.dtype == dtype
        assert_same(out, reference_histogram(x, 30, -4.0, 4.0).to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_histc_non_floating_input_raises_not_implemented(device, dtype):
    """The README's histc row: non-floating input raises NotImplementedError, as torch's CPU histc does (torch's CUDA
    histc accepts integer input; the drop-in refuses it on every device)."""
    x = torch.tensor([1, 2, 3]).to(dtype)
    with pytest.raises(NotImplementedError):
        torch.histc(x, 4, 0, 3)
    with pytest.raises(NotImplementedError, match="torch_dsmhist.histogram"):
        torch_dsmhist.histc(x.to(device), 4, 0, 3)


# ------------------------------------------------------------------------------------------------------------------
# histc on a constant input (issue 13 item 7)
# ------------------------------------------------------------------------------------------------------------------


def test_pytorch_histc_value_corner_cases():
    """PyTorch's own test_histc_value_corner_cases (test/test_reductions.py), re-expressed against the drop-in: 4 of
    4 cases (float32 and float64, finfo.min and finfo.max, 3 values in 4 bins)."""
    for dtype in (torch.float32, torch.float64):
        for value in (torch.finfo(dtype).min, torch.finfo(dtype).max):
            actual = torch_dsmhist.histc(torch.tensor([value, value, value], dtype=dtype), bins=4)
            assert actual.sum().item() == 3.0
            assert_same(actual, torch.histc(torch.tensor([value, value, value], dtype=dtype), bins=4))


def constant_values(dtype: torch.dtype):
    """Constants around every place torch's widening of [v, v] changes behaviour: where v +- 1 rounds to v in the
    dtype or in double, at ulp 2 with odd and even mantissas, the dtype's extremes, small and zero."""
    finfo = torch.finfo(dtype)
    values = [finfo.max, finfo.min, finfo.tiny, 0.0, 3.5, -7.25, 1e30, -1e30, 1e300, 65504.0, 65472.0]
    for p in (8, 9, 11, 12, 23, 24, 25, 26, 52, 53, 54, 100):
        for mantissa in (1.0, 1.0 + 2.0**-7, 1.0 + 2.0**-6):  # even / odd last bits for bfloat16's 8-bit mantissa
            values += [mantissa * 2.0**p, -mantissa * 2.0**p]
    # Only values the dtype holds exactly-ish: what torch.full would store.
    return sorted({v for v in values if abs(v) <= finfo.max})


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_histc_constant_input_matches_torch(dtype, gen):
    """Every constant value, in every dtype, with several bin counts: the drop-in returns torch's CPU histc result
    bit for bit, or raises its exception class and message (float16 at +-65504 overflows the edge v + 1;
    bfloat16 at |v| >= 2^53 collapses [v - 1, v + 1] in double)."""
    n = int(torch.randint(1, 40, (1,), generator=gen))
    for value in constant_values(dtype):
        x = torch.full((n,), value, dtype=dtype)
        for bins in (1, 4, 5, 100):
            assert_same_outcome(lambda: torch_dsmhist.histc(x, bins), lambda: torch.histc(x, bins))
        # min == max != 0 takes the data range too; a constant inside an explicit range is ordinary binning.
        assert_same_outcome(lambda: torch_dsmhist.histc(x, 7, 2.0, 2.0), lambda: torch.histc(x, 7, 2.0, 2.0))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_histc_edges_that_round_to_one_value_match_torch(dtype):
    """An explicit range whose edges round to one value in the input's dtype (only 16-bit dtypes here): every
    counted value equals that edge, and the drop-in gives torch's CPU bin for it; the rest is dropped."""
    x = torch.tensor([1000.0, 1000.0, 1000.25, 999.0, 1001.0, 1000.0]).to(dtype)
    for bins in (1, 4, 5):
        assert_same_outcome(
            lambda: torch_dsmhist.histc(x, bins, 1000.1, 1000.2), lambda: torch.histc(x, bins, 1000.1, 1000.2)
        )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_histc_empty_input_with_equal_bounds_matches_torch(dtype):
    """An empty input with min == max widens the bounds themselves: same range rule, same errors."""
    empty = torch.empty(0, dtype=dtype)
    for bound in (0.0, 5.0, 65504.0, 3e38, 1e300, 2.0**53):
        assert_same_outcome(
            lambda: torch_dsmhist.histc(empty, 4, bound, bound), lambda: torch.histc(empty, 4, bound, bound)
        )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_histc_bound_outside_dtype_raises_as_torch(dtype):
    """A bound the input's dtype cannot hold: torch raises when it builds the edges in that dtype."""
    x = torch.zeros(3, dtype=dtype)
    for lo, hi in [(0.0, 1e39), (-1e39, 0.0), (0.0, 70000.0), (65504.0, 65505.0), (-1e39, 1e39)]:
        assert_same_outcome(lambda: torch_dsmhist.histc(x, 4, lo, hi), lambda: torch.histc(x, 4, lo, hi))


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_histc_constant_input_on_cuda_returns_torch_cpu_result(dtype, gen):
    """CUDA: the drop-in returns torch's CPU result there too (the README's row: torch's CUDA histc widens in the
    input's dtype and raises "max must be larger than min" where v +- 1 rounds back to v)."""
    n = int(torch.randint(1, 40, (1,), generator=gen))
    for value in constant_values(dtype):
        x = torch.full((n,), value, dtype=dtype)
        for bins in (1, 4, 5):
            assert_same_outcome(lambda: torch_dsmhist.histc(x.cuda(), bins), lambda: torch.histc(x, bins))
    big = torch.full((3,), 2.0**25, device="cuda")
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(big, 4)
    assert_same(torch_dsmhist.histc(big, 4), torch.tensor([0.0, 3.0, 0.0, 0.0]))
    edge = torch.full((3,), 2.0**24, device="cuda")
    assert torch.histc(edge, 4).tolist() == [0.0, 0.0, 0.0, 3.0]
    assert_same(torch_dsmhist.histc(edge, 4), torch.tensor([0.0, 3.0, 0.0, 0.0]))
    # torch's CUDA histc accepts integer input; the drop-in refuses it as torch's CPU histc does.
    ints = torch.tensor([1, 2, 3], device="cuda")
    assert torch.histc(ints, 4, 0, 3).dtype == torch.int64
    with pytest.raises(NotImplementedError):
        torch_dsmhist.histc(ints, 4, 0, 3)


# ------------------------------------------------------------------------------------------------------------------
# The op's data-derived range for a constant input (issue 13 item 8)
# ------------------------------------------------------------------------------------------------------------------


def op_rule_bin(v: float, bins: int, compute: torch.dtype) -> int:
    """The README's rule for histogram(constant v, bins) with no range: the range [v - 1, v + 1], taken in double
    and rounded to the compute precision; where it collapses to one value, the middle bin bins // 2; else
    (v - lo) * bins / (hi - lo) truncated, the last bin for v == hi."""
    lo = torch.tensor(v - 1.0, dtype=torch.float64).to(compute)
    hi = torch.tensor(v + 1.0, dtype=torch.float64).to(compute)
    if lo == hi:
        return bins // 2
    x = torch.tensor(v, dtype=compute)
    return builtins_min(int((x - lo) * bins / (hi - lo)), bins - 1)


builtins_min = min


@pytest.mark.parametrize("device", DEVICES)
def test_op_constant_input_follows_the_range_rule(device, gen):
    n = int(torch.randint(1, 1000, (1,), generator=gen))
    cases = {
        # value, dtype: the bin of 4, as the README states it
        (2.0**24, torch.float32): 3,  # [2^24 - 1, 2^24 + 1] -> [2^24 - 1, 2^24]: v is the upper edge
        (-(2.0**24), torch.float32): 0,  # -> [-2^24, -2^24 + 1]: v is the lower edge
        (2.0**25, torch.float32): 2,  # -> [2^25, 2^25]: collapsed, the middle bin
        (2.0**53, torch.float64): 3,
        (-(2.0**53), torch.float64): 0,
        (2.0**54, torch.float64): 2,
        (3.5, torch.float32): 2,
        (2.0**25, torch.float64): 2,  # exact in float64: the midpoint of [v - 1, v + 1]
        (2.0**24, torch.bfloat16): 3,  # binned in float32, like float32
        (2.0**24 + 2.0, torch.float32): 2,  # ulp 2: [v - 2, v + 2], symmetric
        (2.0**24 + 4.0, torch.float32): 2,  # ulp 2, even mantissa: [v, v], collapsed
    }
    for (value, dtype), expected_bin in cases.items():
        x = torch.full((n,), value, dtype=dtype, device=device)
        for bins in (4, 5, 1):
            out = torch_dsmhist.histogram(x, bins)
            expected = torch.zeros(bins, dtype=torch.int64)
            rule = op_rule_bin(value, bins, torch.float64 if dtype == torch.float64 else torch.float32)
            expected[rule] = n
            assert_same(out, expected)
            assert torch.full((), value, dtype=dtype).item() == value
            if bins == 4:
                assert rule == expected_bin
    # An explicit min < max that round to one value in the compute precision: the values equal to it, middle bin.
    x = torch.tensor([2.0**25, 2.0**25, 2.0**25 + 4.0], device=device)
    assert_same(torch_dsmhist.histogram(x, 5, 2.0**25 - 1.0, 2.0**25 + 1.0), torch.tensor([0, 0, 2, 0, 0]))
    # torch.histc's CPU widening differs at exactly these values (the README says so): 2^24 in bin 1 of 4.
    assert torch.histc(torch.full((3,), 2.0**24), 4).tolist() == [0.0, 3.0, 0.0, 0.0]
    assert torch.histc(torch.full((3,), -(2.0**24)), 4).tolist() == [0.0, 0.0, 3.0, 0.0]
    assert torch.histc(torch.full((3,), 2.0**25), 4).tolist() == [0.0, 3.0, 0.0, 0.0]


# ------------------------------------------------------------------------------------------------------------------
# 16-bit input: binned in float32 (issue 13 item 10)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_histc_16_bit_bins_in_float32(device, gen):
    """The README's float16/bfloat16 row: the drop-in bins in float32 with torch's edges (the range rounded to the
    input's dtype), i.e. it equals torch.histc on the input converted to float32 with those edges; torch's CPU histc
    computes in 16 bits and can put a value near an edge one bin higher."""
    for dtype, value, torch_bin, our_bin in [
        (torch.float16, 0.0999755859375, 1, 0),
        (torch.bfloat16, 0.69921875, 7, 6),
    ]:
        x = torch.tensor([value, 0.5], dtype=dtype)
        theirs, ours = torch.histc(x, 10, 0.0, 1.0), torch_dsmhist.histc(x.to(device), 10, 0.0, 1.0)
        assert theirs[torch_bin] == 1 and ours[our_bin] == 1 and not torch.equal(ours.cpu(), theirs)
        assert_same(ours, torch.histc(x.float(), 10, 0.0, 1.0).to(dtype))
    for dtype in (torch.float16, torch.bfloat16):
        x = (torch.randn(20000, generator=gen) * 3).to(dtype)
        for bins, lo, hi in [(30, -4.0, 4.0), (7, -3.3, 2.9), (41, 0.0, 0.0)]:
            edge_lo, edge_hi = (lo, hi) if lo != hi else (x.min().item(), x.max().item())
            edge_lo = torch.tensor(edge_lo).to(dtype).item()
            edge_hi = torch.tensor(edge_hi).to(dtype).item()
            expected = torch.histc(x.float(), bins, edge_lo, edge_hi).to(dtype)
            assert_same(torch_dsmhist.histc(x.to(device), bins, lo, hi), expected)


def test_histc_16_bit_counts_are_exact_then_rounded_once():
    """The README's count row: torch keeps 16-bit running counts, which stop growing (2048 for float16, 256 for
    bfloat16, per thread); the drop-in counts exactly and rounds once to the dtype."""
    n = 1_000_000
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.cat([torch.full((n,), 0.25), torch.tensor([0.0, 1.0])]).to(dtype)
        ours = torch_dsmhist.histc(x, 4, 0.0, 1.0)
        assert ours[1] == torch.tensor(n).to(dtype)
        assert torch.histc(x, 4, 0.0, 1.0)[1] < ours[1]


@cuda_only
def test_cuda_superset_of_torch():
    """The README's superset rows, on CUDA: torch's CUDA histc refuses float16 and raises under
    torch.use_deterministic_algorithms(True), as does its bincount with weights; the drop-ins return their usual
    (deterministic) results."""
    x = torch.tensor([0.1, 0.5, 0.5, 0.9], device="cuda")
    with pytest.raises(RuntimeError):
        torch.histc(x.half(), 4, 0.0, 1.0)
    assert_same(torch_dsmhist.histc(x.half(), 4, 0.0, 1.0), torch_dsmhist.histc(x.half().cpu(), 4, 0.0, 1.0))
    ids, w = torch.tensor([0, 2, 2], device="cuda"), torch.tensor([0.5, 1.0, 2.0], device="cuda")
    expected_histc, expected_bincount = torch.histc(x.cpu(), 4, 0.0, 1.0), torch.bincount(ids.cpu(), w.cpu())
    with deterministic_algorithms():
        with pytest.raises(RuntimeError):
            torch.histc(x, 4, 0.0, 1.0)
        with pytest.raises(RuntimeError):
            torch.bincount(ids, w)
        assert_same(torch_dsmhist.histc(x, 4, 0.0, 1.0), expected_histc)
        assert_same(torch_dsmhist.bincount(ids, w), expected_bincount)


# ------------------------------------------------------------------------------------------------------------------
# Test infrastructure: the seed is printed where a failure shows it (issue 13 item 14)
# ------------------------------------------------------------------------------------------------------------------


def test_seed_is_printed_where_a_failure_shows_it_under_q(tmp_path):
    """A failing test run with -q shows the seed in the failure report and in the summary, so the data can be
    replayed from a CI log (pytest's header, where the seed also is, is hidden by -q)."""
    tests_dir = Path(__file__).parent
    (tmp_path / "conftest.py").write_text((tests_dir / "conftest.py").read_text())
    (tmp_path / "test_fails.py").write_text(
        textwrap.dedent("""
        def test_fails(gen):
            assert False

        def test_passes():
            pass
    """)
    )
    repo = str(tests_dir.parent)
    env = dict(
        os.environ,
        DSMHIST_TEST_SEED="987654321",
        PYTHONPATH=os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p),
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    line = "torch_dsmhist test seed: 987654321 (rerun with DSMHIST_TEST_SEED=987654321)"
    failures = result.stdout.split("= FAILURES =", 1)[1]
    # Once in the failing test's report, as a section of its own ...
    assert "- torch_dsmhist test seed -" in failures and failures.count(line) == 2, result.stdout
    # ... and once more among the last lines a CI log shows (just above pytest's short summary and counts).
    assert line in result.stdout.strip().splitlines()[-5:], result.stdout


# ----- issue 48, item 9: monkeypatching torch with the drop-ins; histc's out= ------------------------------------


@pytest.mark.parametrize("name", ["bincount", "histc", "histogram", "histogramdd"])
def test_every_drop_in_works_monkeypatched_into_torch(name, monkeypatch, gen):
    """Users write torch.histc = torch_dsmhist.histc; the drop-in must not reach itself through torch's name (histc of a
    constant input recursed forever)."""
    from torch_dsmhist import dropins

    x = torch.rand(50, generator=gen)
    ids = torch.randint(0, 7, (50,), generator=gen)
    calls = {
        "bincount": lambda: torch.bincount(ids, minlength=3),
        "histc": lambda: (torch.histc(torch.ones(10), 4), torch.histc(x, 5), torch.histc(x.double(), 3, 0.5, 0.5)),
        "histogram": lambda: (torch.histogram(x, 6), torch.histogram(torch.full((5,), 2.0), 3)),
        "histogramdd": lambda: torch.histogramdd(x.view(25, 2), [3, 4]),
    }
    expected = calls[name]()
    monkeypatch.setattr(torch, name, getattr(dropins, name))
    ours = calls[name]()

    def tensors(result):
        if isinstance(result, torch.Tensor):
            return [result]
        if hasattr(result, "hist"):  # torch.return_types: hist and one or several edge tensors
            edges = result.bin_edges if isinstance(result.bin_edges, tuple) else (result.bin_edges,)
            return [result.hist, *edges]
        return [t for item in result for t in tensors(item)]

    ours_tensors, expected_tensors = tensors(ours), tensors(expected)
    assert len(ours_tensors) == len(expected_tensors)
    for a, b in zip(ours_tensors, expected_tensors):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_histc_out(device, gen):
    x = torch.rand(100, generator=gen)
    expected = torch.histc(x, 7)
    for out in (torch.empty(7), torch.empty(0), torch.full((3,), 5.0)):
        out = out.to(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = torch_dsmhist.histc(x.to(device), 7, out=out)
        assert result is out and torch.equal(out.cpu(), expected)
        assert len(caught) == (1 if out.numel() == 3 else 0) or out.numel() == 7
    # Refused before anything is written: a wrong dtype, a wrong type, a bad range.
    out = torch.full((7,), 5.0, device=device)
    with pytest.raises(RuntimeError, match="dtype"):
        torch_dsmhist.histc(x.to(device), 7, out=out.double())
    with pytest.raises(TypeError, match="out"):
        torch_dsmhist.histc(x.to(device), 7, out=[1.0])
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch_dsmhist.histc(x.to(device), 7, 1.0, 0.0, out=out)
    assert torch.equal(out.cpu(), torch.full((7,), 5.0))
    # The input itself as out: the result is torch's counts of the input before it was overwritten.
    y = torch.rand(7, generator=gen)
    expected = torch.histc(y.clone(), 7)
    y = y.to(device)
    torch_dsmhist.histc(y, 7, out=y)
    assert torch.equal(y.cpu(), expected)


def test_bounds_round_to_float32_as_torch_does(gen):
    """histc's edges in float32 are rounded without a tensor (struct, for host time): the same value as torch's cast
    for random doubles, the midpoints between float32 neighbours (ties to even), subnormals and the largest floats."""
    from torch_dsmhist._dropins import _round_to

    f32 = torch.randn(2000, generator=gen).float()
    above = torch.nextafter(f32, torch.full_like(f32, math.inf))
    midpoints = (f32.double() + above.double()) / 2
    tiny = torch.finfo(torch.float32).tiny
    values = [*torch.randn(2000, generator=gen, dtype=torch.float64).mul(1e3).tolist(), *midpoints.tolist(),
              tiny / 3, -tiny / 7, 1e-45, 3.4028234663852886e38, -3.4028235e38, 0.0, -0.0]  # fmt: skip
    for value in values:
        expected = torch.tensor(value, dtype=torch.float64).to(torch.float32).item()
        got = _round_to(value, torch.float32)
        assert got == expected and math.copysign(1, got) == math.copysign(1, expected), (value, got, expected)
