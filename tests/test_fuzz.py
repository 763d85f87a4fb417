"""Property-based tests (hypothesis) of histogram, histogram_add_ and batched_histogram against a numpy reference.

Every example draws an op, an input dtype and shape, a layout (strided, permuted, misaligned or expanded views of a
bigger buffer), a bin count, a binning mode and range, a value distribution with NaN/inf sprinkled in, weights with
their own layout, the count / sum dtype and, on CUDA, a forced tier and the deterministic mode. Arrays are not drawn
element by element: hypothesis draws a seed and the parameters, and a numpy Generator makes the data.

The reference (`reference_bins`, `reference_sums`) is written here in numpy, independently of the op and of
helpers.reference_histogram. It follows the contract step by step in the compute precision (float32 for 8/16-bit
integer and 16/32-bit float input, float64 for int32/int64/float64): lo = C(min), hi = C(max), fbins = C(bins),
scale = 1 where (hi - lo) * fbins is finite in C, else 2^-64, scaled = ((x * scale - lo * scale) * fbins) /
(hi * scale - lo * scale), bin = trunc(scaled) where scaled < fbins, else the last bin.

Profiles (registered here; LIMITS sets the sizes and example counts per device): "ci", the default, arrays up to 20k
elements (a few up to 150k, where the CPU path splits its work), 500 examples per op on the CPU, under a minute on
two cores (and 150 per op on CUDA when a GPU is visible); "device" (DSMHIST_FUZZ_PROFILE=device), up to 2M elements
and 1500 examples per op on CUDA (about 4 minutes on an H100), for a GPU machine. Hypothesis is seeded with conftest's
SEED (printed in pytest's header; DSMHIST_TEST_SEED=... replays a run), and a failure prints the drawn case and a
reproduce_failure blob. Needs the hypothesis package.
"""

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

import torch_dsmhist

import helpers
from conftest import DEVICES, SEED

# ------------------------------------------------------------------------------------------------------------------
# Profiles
# ------------------------------------------------------------------------------------------------------------------

_COMMON = dict(
    deadline=None,
    derandomize=False,
    print_blob=True,
    database=None,  # a run is reproduced from SEED (or the printed blob); nothing is written into the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("ci", max_examples=500, **_COMMON)
settings.register_profile("device", max_examples=1500, **_COMMON)

PROFILE = os.environ.get("DSMHIST_FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "device"):
    raise ValueError(f"DSMHIST_FUZZ_PROFILE must be 'ci' or 'device', got {PROFILE!r}")
FUZZ = settings.get_profile(PROFILE)


@dataclass(frozen=True)
class Limits:
    max_elements: int  # elements of one example's input, usually
    big_elements: int  # ... for the occasional "big" shape (the CPU path splits work only past 65536 elements)
    max_outputs: int  # rows * bins of batched_histogram
    max_bins: int  # bins drawn outside the tier-boundary values
    examples: int  # examples per test (one test per op and device)


LIMITS = {
    ("ci", "cpu"): Limits(20_000, 150_000, 2_000_000, 70_000, 500),
    ("ci", "cuda"): Limits(20_000, 150_000, 4_000_000, 70_000, 150),
    ("device", "cpu"): Limits(100_000, 300_000, 4_000_000, 100_000, 300),
    ("device", "cuda"): Limits(2_000_000, 2_000_000, 4_000_000, 1_100_000, 1500),
}

INT_DTYPES, FLOAT_DTYPES, ALL_DTYPES = helpers.INTEGER_DTYPES, helpers.FLOAT_DTYPES, helpers.ALL_DTYPES
WEIGHT_DTYPES = helpers.WEIGHT_DTYPES
_DOUBLE_COMPUTE = (torch.int32, torch.int64, torch.float64)
F32_MAX = float(np.finfo(np.float32).max)
F64_MAX = float(np.finfo(np.float64).max)


def compute_np(dtype: torch.dtype):
    """The numpy type of the precision the op bins `dtype` input in."""
    return np.float64 if dtype in _DOUBLE_COMPUTE else np.float32


def range_is_valid(lo: float, hi: float, dtype: torch.dtype) -> bool:
    """The contract's condition on a given range: finite, min < max, and both ends finite in the compute precision
    (where they may round to one value: see reference_bins)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        return False
    c = compute_np(dtype)
    with np.errstate(all="ignore"):
        lo_c, hi_c = c(lo), c(hi)
    return bool(np.isfinite(lo_c) and np.isfinite(hi_c))


# ------------------------------------------------------------------------------------------------------------------
# The reference
# ------------------------------------------------------------------------------------------------------------------


def data_range(xc: np.ndarray) -> Tuple[float, float]:
    """The range of a floating input without min/max: finite min and max, [v-1, v+1] if equal, [-1, 1] if none."""
    finite = xc[np.isfinite(xc)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    return lo, hi


def reference_bins(
    x: np.ndarray, dtype: torch.dtype, bins: int, mode: str, lo: Optional[float], hi: Optional[float], clamp: bool
) -> np.ndarray:
    """The bin of every element of `x` (the input's values: int64 for integer input, float32/float64 for floating
    input), -1 where it is dropped. mode: "index" (bin = value), "range" ([lo, hi] given) or "data" (range from x)."""
    if mode == "index":
        v = x.astype(np.int64)
        if clamp:
            return np.clip(v, 0, bins - 1)
        return np.where((v >= 0) & (v < bins), v, -1)
    c = compute_np(dtype)
    xc = x.astype(c)  # int64 -> float64 rounds to nearest even, as the C++ conversion does
    if mode == "data":
        lo, hi = data_range(xc)
    with np.errstate(all="ignore"):
        lo_c, hi_c, fbins = c(lo), c(hi), c(bins)
        if lo_c == hi_c:  # min < max rounded to one value: the value inside lands in the middle bin
            scale, scaled_lo, scaled_span = c(0.0), c(-0.5), c(1.0)
        else:
            scale = c(1.0) if np.isfinite((hi_c - lo_c) * fbins) else c(2.0**-64)
            scaled_lo = lo_c * scale
            scaled_span = hi_c * scale - scaled_lo
        shifted = xc * scale - scaled_lo  # each step rounds in c: numpy keeps float32 arrays float32
        scaled = (shifted * fbins) / scaled_span
        inside = (xc >= lo_c) & (xc <= hi_c)
        below = scaled < fbins
    idx = np.full(xc.shape, -1, dtype=np.int64)
    take = inside & below
    idx[take] = np.trunc(scaled[take]).astype(np.int64)
    idx[inside & ~below] = bins - 1  # x == hi, or rounding up to fbins
    if clamp:
        idx[xc < lo_c] = 0
        idx[xc > hi_c] = bins - 1
    return idx


@dataclass
class Sums:
    """Reference weighted sums per output bin, with what the tolerance needs."""

    value: np.ndarray  # float64; NaN / +-inf by IEEE summation's rules
    count: np.ndarray  # elements in the bin
    abs_sum: np.ndarray  # sum of |w| over the finite weights
    max_abs: np.ndarray  # largest finite |w|


def reference_counts(idx: np.ndarray, bins: int) -> np.ndarray:
    """Counts per (row, bin) of idx [rows, n] (int64)."""
    rows = idx.shape[0]
    keep = idx >= 0
    flat = (np.arange(rows, dtype=np.int64)[:, None] * bins + idx)[keep]
    return np.bincount(flat, minlength=rows * bins).reshape(rows, bins)


def reference_sums(idx: np.ndarray, w: np.ndarray, bins: int) -> Sums:
    """Weighted sums per (row, bin) of idx [rows, n] with float64 weights w [rows, n]."""
    rows = idx.shape[0]
    size = rows * bins
    keep = idx >= 0
    flat = (np.arange(rows, dtype=np.int64)[:, None] * bins + idx)[keep]
    wk = w[keep]
    finite = np.isfinite(wk)
    value = np.bincount(flat[finite], weights=wk[finite], minlength=size).astype(np.float64)
    abs_sum = np.bincount(flat[finite], weights=np.abs(wk[finite]), minlength=size).astype(np.float64)
    max_abs = np.zeros(size)
    np.maximum.at(max_abs, flat[finite], np.abs(wk[finite]))
    nan = np.bincount(flat, weights=np.isnan(wk), minlength=size) > 0
    pos = np.bincount(flat, weights=wk == np.inf, minlength=size) > 0
    neg = np.bincount(flat, weights=wk == -np.inf, minlength=size) > 0
    value[pos] = np.inf
    value[neg] = -np.inf
    value[nan | (pos & neg)] = np.nan
    count = np.bincount(flat, minlength=size)
    shape = (rows, bins)
    return Sums(value.reshape(shape), count.reshape(shape), abs_sum.reshape(shape), max_abs.reshape(shape))


def wrap_int32(v: np.ndarray) -> np.ndarray:
    return ((v.astype(np.int64) + 2**31) % 2**32) - 2**31


def check_counts(got: torch.Tensor, expected: np.ndarray, what: str):
    g = got.cpu().numpy().astype(np.int64)
    if got.dtype == torch.int32:
        expected = wrap_int32(expected)
    if not np.array_equal(g, expected):
        bad = np.argwhere(g != expected)[:8]
        rows = [f"bin {tuple(int(i) for i in b)}: got {g[tuple(b)]}, expected {expected[tuple(b)]}" for b in bad]
        raise AssertionError(f"{what}: {int((g != expected).sum())} bins differ; " + "; ".join(rows))


def check_sums(got: torch.Tensor, ref: Sums, init, acc_eps: float, fixed_unit, integer_weights: bool, what: str):
    """got vs the reference sums (+ init for histogram_add_; init and fixed_unit: arrays, or None). Non-finite bins
    must match exactly (NaN, or the infinity's sign). Finite bins:
    - integer weights (and an integer init) whose sum of |w| fits the output's mantissa: exactly, in any summation
      order (every partial sum is an integer the format holds), so a weight in the wrong bin always shows;
    - otherwise within the bound on rounding that holds for any order of additions,
        |got - expected| <= acc_eps * (count + 1) * (sum |w| + |init|)   (the accumulation, acc_eps its precision's eps)
                            + eps(out) * (sum |w| + |init| + |expected|)  (conversions to the output and adding in)
                            + count * fixed_unit                          (CUDA's deterministic fixed point)
                            + tiny."""
    g = got.detach().cpu().double().numpy()
    out_eps = float(torch.finfo(got.dtype).eps)
    tiny = float(torch.finfo(got.dtype).tiny)
    expected = ref.value.reshape(g.shape)
    init_abs = np.zeros_like(expected)
    if init is not None:
        with np.errstate(all="ignore"):
            expected = expected + init.reshape(g.shape)
        init_abs = np.abs(init).reshape(g.shape)
    count = ref.count.reshape(g.shape)
    abs_sum = ref.abs_sum.reshape(g.shape)
    nan_e = np.isnan(expected)
    inf_e = np.isinf(expected)
    mism = (np.isnan(g) != nan_e) | (inf_e & (g != expected)) | (~inf_e & ~nan_e & ~np.isfinite(g))
    finite = np.isfinite(expected) & np.isfinite(g)
    magnitude = abs_sum + init_abs
    tol = acc_eps * (count + 1) * magnitude + out_eps * (magnitude + np.abs(np.where(finite, expected, 0.0)))
    tol = tol + 4 * tiny
    if fixed_unit is not None:
        tol = tol + count * fixed_unit.reshape(g.shape)
    if integer_weights:
        mantissa_limit = 2.0 ** (np.finfo(np.float32 if got.dtype == torch.float32 else np.float64).nmant + 1)
        tol = np.where(magnitude <= mantissa_limit, 0.0, tol)
    err = np.abs(np.where(finite, g - np.where(finite, expected, 0.0), 0.0))
    mism |= finite & (err > tol)
    if mism.any():
        bad = np.argwhere(mism)[:8]
        rows = [
            f"bin {tuple(int(i) for i in b)}: got {g[tuple(b)]!r}, expected {expected[tuple(b)]!r} "
            f"(tol {tol[tuple(b)]:.3g}, count {count[tuple(b)]})"
            for b in bad
        ]
        raise AssertionError(f"{what}: {int(mism.sum())} bins differ; " + "; ".join(rows))


def to_numpy_values(t: torch.Tensor) -> np.ndarray:
    """A tensor's values, exactly: int64 for integer dtypes, float32 for float16/bfloat16/float32, float64 else."""
    t = t.detach().cpu()
    if not t.dtype.is_floating_point:
        return t.to(torch.int64).contiguous().numpy()
    return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32).contiguous().numpy()


# ------------------------------------------------------------------------------------------------------------------
# Layouts: a view of the drawn shape inside a bigger buffer
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    perm: Tuple[int, ...]  # storage order of the dims (outermost first)
    steps: Tuple[int, ...]  # slicing step per storage dim
    starts: Tuple[int, ...]  # slicing start per storage dim
    offset: int  # storage offset of the buffer's first row (odd: misaligned for vector loads)
    expand_dim: Optional[int]  # this dim is size 1 in memory and expanded (stride 0)

    def storage_shape(self, shape: Tuple[int, ...]) -> list:
        s = list(shape)
        if self.expand_dim is not None:
            s[self.expand_dim] = 1
        q = [s[p] for p in self.perm]
        return [start + size * step for size, step, start in zip(q, self.steps, self.starts)]

    def buffer_elements(self, shape) -> int:
        return int(np.prod(self.storage_shape(shape), dtype=np.int64)) + self.offset


def contiguous_layout(ndim: int) -> Layout:
    return Layout(tuple(range(ndim)), (1,) * ndim, (0,) * ndim, 0, None)


@st.composite
def layouts(draw, shape: Tuple[int, ...]) -> Layout:
    ndim = len(shape)
    kind = draw(st.sampled_from(["contiguous", "contiguous", "offset", "strided", "permuted", "mixed", "expand"]))
    if kind == "contiguous" or (ndim == 0 and kind != "offset"):
        return contiguous_layout(ndim)
    perm, steps, starts, offset, expand_dim = tuple(range(ndim)), [1] * ndim, [0] * ndim, 0, None
    if kind in ("offset", "mixed"):
        offset = draw(st.sampled_from([1, 2, 3, 5, 7, 8]))
    if kind in ("strided", "mixed") and ndim:
        steps = [draw(st.sampled_from([1, 1, 2, 3])) for _ in range(ndim)]
        starts = [draw(st.integers(0, 2)) for _ in range(ndim)]
        if all(s == 1 for s in steps):
            steps[draw(st.integers(0, ndim - 1))] = 2
    if kind in ("permuted", "mixed") and ndim:
        perm = tuple(draw(st.permutations(range(ndim))))
    if (kind == "expand" or (kind == "mixed" and draw(st.booleans()))) and ndim:
        expand_dim = draw(st.integers(0, ndim - 1))
    layout = Layout(perm, tuple(steps), tuple(starts), offset, expand_dim)
    # Keep the buffer within a few times the view (steps of 2-3 on several dims multiply).
    numel = max(1, int(np.prod(shape, dtype=np.int64)))
    while layout.buffer_elements(shape) > 4 * numel + 4096 and any(s > 1 for s in layout.steps):
        steps = list(layout.steps)
        steps[max(range(ndim), key=lambda d: steps[d])] = 1
        layout = Layout(layout.perm, tuple(steps), layout.starts, layout.offset, layout.expand_dim)
    return layout


def materialize(shape: Tuple[int, ...], layout: Layout, buffer: torch.Tensor) -> torch.Tensor:
    """The view of `shape` that `layout` describes, inside `buffer` (1-D, layout.buffer_elements(shape) long)."""
    ndim = len(shape)
    storage = layout.storage_shape(shape)
    base = buffer[layout.offset : layout.offset + int(np.prod(storage, dtype=np.int64))].view(storage)
    small = list(shape)
    if layout.expand_dim is not None:
        small[layout.expand_dim] = 1
    q = [small[p] for p in layout.perm]
    view = base[tuple(slice(st_, st_ + n * sp, sp) for n, sp, st_ in zip(q, layout.steps, layout.starts))]
    inverse = [0] * ndim
    for i, p in enumerate(layout.perm):
        inverse[p] = i
    if ndim:
        view = view.permute(inverse)
    assert list(view.shape) == small, (view.shape, small, layout)
    if layout.expand_dim is not None:
        view = view.expand(shape)
    return view


# ------------------------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    op: str  # "histogram" | "add" | "batched"
    device: str
    dtype: torch.dtype
    shape: Tuple[int, ...]
    layout: Layout
    bins: int
    mode: str  # "index" | "range" | "data"
    lo: Optional[float]
    hi: Optional[float]
    out_of_range: str
    values: str  # value distribution
    specials: float  # fraction of NaN / +inf / -inf in a floating input
    weight_dtype: Optional[torch.dtype]
    weight_layout: Optional[Layout]
    weights: str  # weight distribution
    weight_specials: float
    dtype_arg: Optional[torch.dtype]  # histogram / batched: the dtype argument
    hist_dtype: Optional[torch.dtype]  # histogram_add_: hist's dtype
    hist_init: str  # histogram_add_: "zeros" | "small" | "large"
    hist_step: int  # histogram_add_: hist is buffer[hist_start::hist_step][:bins]
    hist_start: int
    tier: Optional[str]  # CUDA: forced tier, None for no force_tier block
    cluster_size: Optional[int]
    deterministic: bool  # torch.use_deterministic_algorithms(True) around the call
    via_ops: bool  # call torch.ops.dsmhist.* instead of the Python wrapper
    seed: int

    @property
    def weighted(self) -> bool:
        return self.weight_dtype is not None

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _log_int(draw, lo: int, hi: int) -> int:
    """An integer in [lo, hi], log-uniform-ish."""
    if hi <= lo:
        return lo
    top = max(0, int(math.log2(hi)))
    e = draw(st.integers(int(math.log2(max(lo, 1))), top))
    return draw(st.integers(max(lo, 2**e), min(hi, 2 ** (e + 1) - 1)))


def _log_ints(lo: int, hi: int):
    """Integers in [lo, hi], log-uniform."""
    return st.floats(math.log(lo), math.log(hi + 1)).map(lambda e: min(hi, max(lo, int(math.exp(e)))))


@st.composite
def shapes(draw, min_dims: int, limits: Limits) -> Tuple[int, ...]:
    ndim = draw(st.sampled_from([d for d in (0, 1, 1, 1, 2, 2, 3, 4) if d >= min_dims]))
    kind = draw(st.sampled_from(["tiny", "random", "random", "long_last", "many_rows", "big"]))
    cap = limits.big_elements if kind == "big" else limits.max_elements
    if ndim == 0:
        return ()
    if kind == "tiny":
        dims = [draw(st.sampled_from([0, 1, 1, 2, 3, 5, 7])) for _ in range(ndim)]
    elif kind == "random":
        dims = [draw(st.sampled_from([0, 1]) | st.integers(1, 64)) for _ in range(ndim)]
        dims[-1] = _log_int(draw, 1, cap) if draw(st.booleans()) else dims[-1]
    elif kind == "long_last":
        dims = [draw(st.sampled_from([1, 2, 3])) for _ in range(ndim - 1)] + [_log_int(draw, 1, cap)]
    elif kind == "many_rows":
        dims = [_log_int(draw, 1, 4096) for _ in range(ndim - 1)] + [draw(st.sampled_from([1, 2, 3, 7, 16, 33, 100]))]
    else:
        dims = [draw(st.sampled_from([1, 2, 3])) for _ in range(ndim)]
        dims[draw(st.integers(0, ndim - 1))] = _log_int(draw, cap // 4, cap)
    while int(np.prod(dims, dtype=np.int64)) > cap:
        d = max(range(ndim), key=lambda i: dims[i])
        dims[d] = (dims[d] + 1) // 2
    return tuple(dims)


# Ranges near the top of the compute precision: (hi - lo) * bins (or hi - lo itself) overflows, the 2^-64 rule applies.
HUGE_RANGES_FLOAT = [(-3e38, 3e38), (0.0, 1e38), (-1e38, 0.0), (-F32_MAX, F32_MAX), (1e30, 3e38), (-1e37, 2e37)]
HUGE_RANGES_DOUBLE = [
    (-1e300, 1e300),
    (-1.7e308, 1.7e308),
    (0.0, 1e308),
    (-F64_MAX, F64_MAX),
    (1e300, 1e308),
    (-1e307, 5e307),
]
HUGE_RANGES = HUGE_RANGES_FLOAT + HUGE_RANGES_DOUBLE


@st.composite
def ranges(draw, dtype: torch.dtype, bins: int) -> Tuple[str, float, float]:
    kinds = ["ordinary", "ordinary", "tiny", "negative", "unit", "huge", "huge", "dtype_span", "invalid"]
    if not dtype.is_floating_point:
        kinds += ["int_aligned", "int_aligned"]
    kind = draw(st.sampled_from(kinds))
    if kind == "ordinary":
        lo = draw(st.floats(-1e3, 1e3))
        return kind, lo, lo + 10 ** draw(st.floats(-2, 4))
    if kind == "tiny":
        lo = draw(st.floats(-1e4, 1e4))
        return kind, lo, lo + max(abs(lo), 1.0) * 10 ** draw(st.floats(-9, -4))
    if kind == "negative":
        hi = -(10 ** draw(st.floats(-3, 4)))
        return kind, hi - 10 ** draw(st.floats(-3, 4)), hi
    if kind == "unit":
        return (kind,) + draw(st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (0.0, float(bins)), (-0.5, bins - 0.5)]))
    if kind == "huge":  # mostly ranges the compute precision holds, sometimes one it does not (a ValueError)
        own = HUGE_RANGES_DOUBLE if compute_np(dtype) == np.float64 else HUGE_RANGES_FLOAT
        return (kind,) + draw(st.sampled_from(own * 4 + HUGE_RANGES))
    if kind == "dtype_span":
        if dtype.is_floating_point:
            m = float(torch.finfo(dtype).max)
            return kind, -m, m
        info = torch.iinfo(dtype)
        return kind, float(info.min), float(info.max)
    if kind == "int_aligned":
        lo = draw(st.integers(-5, 5))
        return kind, float(lo), float(lo + draw(st.sampled_from([bins, 2 * bins, max(1, bins // 2), 1, 255])))
    pair = draw(
        st.sampled_from(
            [
                (1.0, 1.0),
                (2.0, -2.0),
                (0.0, math.nan),
                (-math.inf, 0.0),
                (0.0, math.inf),
                (1.0, 1.0 + 1e-12),
                (0.0, 1e39),
                (-1e39, 0.0),
            ]
        )
    )
    return (kind,) + pair


INDEX_VALUES = ["uniform", "uniform", "sorted", "one_hot", "two_edges", "extremes", "wide"]
RANGE_VALUES = ["uniform", "uniform", "sorted", "one_hot", "two_edges", "edges", "edges", "extremes"]
DATA_VALUES = ["uniform", "uniform", "sorted", "constant", "few", "huge", "extremes", "no_finite"]
WEIGHT_VALUES = ["ones", "small_ints", "unit", "signed", "mixed"]


def _tier_choices(case_bins: int, acc_bytes: int, weighted: bool) -> list:
    """(tier, cluster size) a case may force: none, "auto", and every tier of the extension's table (helpers.TIERS)
    with every cluster size that can hold the bins here (8-byte sums plan as float64 weights do, 4-byte sums as
    float32; a counts-only tier holds no sums)."""
    weight_dtype = torch.float64 if acc_bytes == 8 else (torch.float32 if weighted else None)
    choices = [(None, None), ("auto", None)]
    for tier in helpers.TIERS:
        for size in (None, *range(1, 17)) if tier.cluster else (None,):
            if helpers.plannable(tier.name, size, case_bins, weight_dtype):
                choices.append((tier.name, size))
    return choices


@st.composite
def cases(draw, op: str, device: str) -> Case:
    limits = LIMITS[(PROFILE, device)]
    dtype = draw(st.sampled_from(ALL_DTYPES))
    if dtype.is_floating_point:
        modes = ["range", "range", "data"] if op != "add" else ["range"] * 9 + ["data"]
    else:
        modes = ["index", "range"]
    mode = draw(st.sampled_from(modes))
    shape = draw(shapes(1 if op == "batched" else 0, limits))
    layout = draw(layouts(shape))

    weight_dtype = draw(st.sampled_from([None, None] + WEIGHT_DTYPES))
    weight_layout = draw(layouts(shape)) if weight_dtype is not None else None
    weights = draw(st.sampled_from(WEIGHT_VALUES)) if weight_dtype is not None else "none"
    weight_specials = draw(st.sampled_from([0.0] * 6 + [0.001, 0.02])) if weight_dtype is not None else 0.0
    deterministic = weight_dtype is not None and draw(st.booleans())

    # Bins: small, medium, larger, and on CUDA the tier boundaries of the accumulator drawn above.
    hist_dtype = None
    if op == "add":
        hist_dtypes = [torch.float32, torch.float64] if weight_dtype else [torch.int64, torch.int32]
        hist_dtype = draw(st.sampled_from(hist_dtypes))
    out_is_double = (hist_dtype == torch.float64) if op == "add" else (weight_dtype == torch.float64)
    acc_bytes = 8 if weight_dtype is not None and (out_is_double or deterministic) else 4
    bin_choices = [
        st.integers(1, 70),
        st.integers(1, 70),
        st.integers(71, 5000),
        st.sampled_from([1, 2, 3, 255, 256, 257, 1000, 1023, 1024, 4096, 65535, 65536]),
        _log_ints(5001, limits.max_bins),
    ]
    if device == "cuda":
        cap = helpers.shared_capacity() * 4 // acc_bytes
        boundaries = [
            cap - 1,
            cap,
            cap + 1,
            2 * cap,
            2 * cap + 1,
            8 * cap + 1,
            16 * cap - 1,
            16 * cap,
            16 * cap + 1,
            131071,
            131072,
            131073,
            300_000,
        ]
        bin_choices.append(st.sampled_from([b for b in boundaries if b <= limits.max_bins]))
    bins = draw(st.one_of(*bin_choices))
    if op == "batched":
        rows = max(1, int(np.prod(shape[:-1], dtype=np.int64)))
        bins = max(1, min(bins, limits.max_outputs // rows))

    lo = hi = None
    if mode == "range":
        _, lo, hi = draw(ranges(dtype, bins))
    if mode == "index":
        values = draw(st.sampled_from(INDEX_VALUES))
    elif mode == "range":
        values = draw(st.sampled_from(RANGE_VALUES))
    else:
        values = draw(st.sampled_from(DATA_VALUES))
    specials = draw(st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.01, 0.2])) if dtype.is_floating_point else 0.0

    dtype_arg = None
    if op != "add":
        if weight_dtype is None:
            dtype_arg = draw(st.sampled_from([None, torch.int64, torch.int32]))
        else:
            dtype_arg = draw(st.sampled_from([None, torch.float64 if weight_dtype == torch.float64 else torch.float32]))

    hist_init, hist_step, hist_start = "zeros", 1, 0
    if op == "add":
        hist_init = draw(st.sampled_from(["zeros", "small", "large"]))
        hist_step, hist_start = draw(st.sampled_from([(1, 0), (1, 0), (1, 1), (2, 0), (3, 1)]))

    tier = cluster_size = None
    if device == "cuda":
        tier, cluster_size = draw(st.sampled_from(_tier_choices(bins, acc_bytes, weight_dtype is not None)))

    return Case(
        op=op, device=device, dtype=dtype, shape=shape, layout=layout, bins=bins, mode=mode, lo=lo, hi=hi,
        out_of_range=draw(st.sampled_from(["ignore", "clamp"])), values=values, specials=specials,
        weight_dtype=weight_dtype, weight_layout=weight_layout, weights=weights, weight_specials=weight_specials,
        dtype_arg=dtype_arg, hist_dtype=hist_dtype, hist_init=hist_init, hist_step=hist_step, hist_start=hist_start,
        tier=tier, cluster_size=cluster_size, deterministic=deterministic, via_ops=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------------------------
# Data from a case's seed
# ------------------------------------------------------------------------------------------------------------------


def _sprinkle(v: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    if fraction <= 0 or v.size == 0:
        return v
    count = max(1, int(v.size * fraction))
    idx = rng.integers(0, v.size, size=count)
    v[idx] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=count)
    return v


def _float_extremes(dtype: torch.dtype) -> np.ndarray:
    info = torch.finfo(dtype)
    sub = info.smallest_normal * info.eps
    return np.array([info.max, -info.max, info.tiny, -info.tiny, sub, -sub, 0.0, -0.0, 1.0, -1.0])


def input_values(case: Case, n: int, rng: np.random.Generator) -> torch.Tensor:
    """n values of case.dtype (a whole buffer: the view reads part of it, the rest must not be read)."""
    dtype, bins = case.dtype, case.bins
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        dmin, dmax = int(info.min), int(info.max)
    if case.mode == "index":
        a, b = max(dmin, -3), min(dmax, bins + 2)
        if case.values in ("uniform", "sorted"):
            v = rng.integers(a, b, size=n, endpoint=True, dtype=np.int64)
            v = np.sort(v) if case.values == "sorted" else v
        elif case.values == "one_hot":
            v = np.full(n, int(rng.integers(max(dmin, -1), min(dmax, bins), endpoint=True)), dtype=np.int64)
        elif case.values == "two_edges":
            v = rng.choice(np.array([0, min(bins - 1, dmax)], dtype=np.int64), size=n)
        elif case.values == "extremes":
            picks = np.clip(np.array([dmin, dmax, -1, 0, 1, bins - 1, bins, bins + 1], dtype=np.int64), dmin, dmax)
            v = np.where(rng.random(n) < 0.5, rng.choice(picks, size=n), rng.integers(a, b, size=n, endpoint=True))
        else:  # wide
            v = rng.integers(dmin, dmax, size=n, endpoint=True, dtype=np.int64)
        return torch.from_numpy(v.astype(np.int64)).to(dtype)

    with np.errstate(all="ignore"):
        if case.mode == "range":
            lo, hi = case.lo, case.hi
            if case.values in ("uniform", "sorted", "extremes"):
                t = rng.uniform(-0.1, 1.1, size=n)
            elif case.values == "one_hot":
                t = np.full(n, rng.uniform(0.0, 1.0))
            elif case.values == "two_edges":
                t = rng.choice(np.array([0.0, 1.0]), size=n)
            else:  # edges: exactly on (the float64 value of) bin edges
                t = rng.integers(0, bins, size=n, endpoint=True) / bins
            v = (1.0 - t) * lo + t * hi
            if case.values == "two_edges":
                v = np.where(t == 0.0, lo, hi)
            if case.values == "sorted":
                v = np.sort(v)
        else:  # data-derived range: values of very different scales
            e = {torch.float16: 4.0, torch.bfloat16: 37.0, torch.float32: 37.0, torch.float64: 300.0}[dtype]
            if case.values in ("uniform", "sorted"):
                width = 10 ** rng.uniform(-3, e)
                # Mostly a centre within a few widths; sometimes a narrow band far from 0 (a few ulps wide).
                narrow = rng.random() < 0.25
                center = width * (rng.uniform(1, 1e4) if narrow else rng.uniform(-3, 3)) * rng.choice([-1.0, 1.0])
                v = center + width * rng.uniform(-1, 1, size=n)
                v = np.sort(v) if case.values == "sorted" else v
            elif case.values == "constant":
                v = np.full(n, rng.choice([-1.0, 1.0, 0.0]) * 10 ** rng.uniform(-3, e))
            elif case.values == "few":
                v = rng.choice(rng.uniform(-1, 1, size=3) * 10 ** rng.uniform(-3, e, size=3), size=n)
            elif case.values == "huge":
                m = float(torch.finfo(dtype).max)
                v = rng.uniform(-1.0, 1.0, size=n) * m
                v[rng.integers(0, n, size=min(n, 2))] = rng.choice([-m, m], size=min(n, 2))
            elif case.values == "no_finite":
                v = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=n)
            else:
                v = rng.uniform(-1e3, 1e3, size=n)
        if case.values == "extremes":
            if dtype.is_floating_point:
                picks = _float_extremes(dtype)
            else:
                picks = np.array([dmin, dmax, 0, -1, 1], dtype=np.float64)
            mask = rng.random(n) < 0.3
            v = np.where(mask, rng.choice(picks, size=n), v)
        if dtype.is_floating_point:
            v = _sprinkle(v, case.specials, rng)
            return torch.from_numpy(v).to(dtype)
        # Integer input in range mode: round, clip into the dtype, put its exact extremes back.
        top = float(np.nextafter(float(dmax), 0.0)) if dtype == torch.int64 else float(dmax)
        iv = np.rint(np.clip(np.nan_to_num(v, nan=0.0, posinf=top, neginf=float(dmin)), float(dmin), top))
        iv = iv.astype(np.int64)
        if case.values == "extremes":
            ext = rng.random(n) < 0.1
            iv = np.where(ext, rng.choice(np.array([dmin, dmax], dtype=np.int64), size=n), iv)
        return torch.from_numpy(iv).to(dtype)


def weight_values(case: Case, n: int, rng: np.random.Generator) -> torch.Tensor:
    if case.weights == "ones":
        w = np.ones(n)
    elif case.weights == "small_ints":
        w = rng.integers(-8, 8, size=n, endpoint=True).astype(np.float64)
    elif case.weights == "unit":
        w = rng.random(n)
    elif case.weights == "signed":
        w = rng.uniform(-1e3, 1e3, size=n)
    else:  # mixed magnitudes
        w = rng.choice([-1.0, 1.0], size=n) * 10 ** rng.uniform(-6, 4, size=n)
    return torch.from_numpy(_sprinkle(w, case.weight_specials, rng)).to(case.weight_dtype)


def bit_view(t: torch.Tensor) -> torch.Tensor:
    """Bits of a contiguous 1-D tensor, for bitwise comparison (NaN included)."""
    same_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().cpu().contiguous().view(same_size).clone()


@contextlib.contextmanager
def op_context(case: Case, tier: Optional[Tuple[str, Optional[int]]] = None):
    """force_tier (the case's, or `tier`) and use_deterministic_algorithms around a call, as the case asks."""
    tier = tier or ((case.tier, case.cluster_size) if case.tier is not None else None)
    with contextlib.ExitStack() as stack:
        if tier is not None:
            stack.enter_context(torch_dsmhist.force_tier(*tier))
        if case.deterministic:
            stack.enter_context(helpers.deterministic_algorithms())
        yield


def call_op(case: Case, x: torch.Tensor, w: Optional[torch.Tensor], hist: Optional[torch.Tensor] = None):
    lo, hi = (case.lo, case.hi) if case.mode == "range" else (None, None)
    if case.op == "add":
        if case.via_ops:
            assert torch.ops.dsmhist.histogram_add_(hist, x, lo, hi, w, case.out_of_range) is None
            return hist
        return torch_dsmhist.histogram_add_(hist, x, lo, hi, weight=w, out_of_range=case.out_of_range)
    if case.via_ops:
        fn = torch.ops.dsmhist.histogram if case.op == "histogram" else torch.ops.dsmhist.batched_histogram
        return fn(x, case.bins, lo, hi, w, case.out_of_range, case.dtype_arg)
    fn = torch_dsmhist.histogram if case.op == "histogram" else torch_dsmhist.batched_histogram
    return fn(x, case.bins, lo, hi, weight=w, out_of_range=case.out_of_range, dtype=case.dtype_arg)


def make_hist(case: Case, rng: np.random.Generator, device: torch.device):
    """histogram_add_'s starting hist: (the buffer it lives in, the hist view)."""
    bins, dtype = case.bins, case.hist_dtype
    total = case.hist_start + bins * case.hist_step
    if dtype.is_floating_point:
        init = rng.uniform(-1e6, 1e6, size=total)  # "large": fractions; "small": integers
        init = {"zeros": 0 * init, "small": np.round(init / 1e3), "large": init}[case.hist_init]
    elif dtype == torch.int32 and case.hist_init == "large":  # near the wrap-around
        init = rng.choice(np.array([2**31 - 1, -(2**31), 2**31 - 5, 0]), size=total)
    else:
        scale = {"zeros": 0, "small": 1000, "large": 2**40}[case.hist_init]
        init = rng.integers(-scale, scale, size=total, endpoint=True)
    buffer = torch.from_numpy(np.asarray(init)).to(dtype).to(device)
    return buffer, buffer[case.hist_start :: case.hist_step][:bins]


def run_case(case: Case):
    device = torch.device(case.device)
    rng = np.random.default_rng(case.seed)
    x_buf = input_values(case, case.layout.buffer_elements(case.shape), rng).to(device)
    x = materialize(case.shape, case.layout, x_buf)
    w = w_buf = None
    if case.weighted:
        w_buf = weight_values(case, case.weight_layout.buffer_elements(case.shape), rng).to(device)
        w = materialize(case.shape, case.weight_layout, w_buf)
    x_bits = bit_view(x_buf)
    w_bits = None if w_buf is None else bit_view(w_buf)
    hist_buf = hist = None
    if case.op == "add":
        hist_buf, hist = make_hist(case, rng, device)
    hist_bits = None if hist_buf is None else bit_view(hist_buf)
    hist_before = None if hist_buf is None else hist_buf.cpu().clone()  # the values before the call

    expect_error = (case.mode == "range" and not range_is_valid(case.lo, case.hi, case.dtype)) or (
        case.op == "add" and case.mode == "data"
    )
    if expect_error:
        with pytest.raises(ValueError):
            with op_context(case):
                call_op(case, x, w, hist)
        if hist_buf is not None:
            assert torch.equal(bit_view(hist_buf), hist_bits), "a rejected histogram_add_ wrote into hist"
        return

    try:
        with op_context(case):
            result = call_op(case, x, w, hist)
        again = None
        if case.weighted and (case.deterministic or case.device == "cpu"):
            # Deterministic sums (CPU always, CUDA under use_deterministic_algorithms) give the same bits run to run
            # and, on CUDA, from tier to tier: the second run takes another tier.
            again_hist = None
            if case.op == "add":
                again_hist = hist_before.clone().to(device)[case.hist_start :: case.hist_step][: case.bins]
            other = None
            if case.device == "cuda":
                other = ("global", None) if case.tier != "global" else ("auto", None)
            with op_context(case, other):
                again = call_op(case, x, w, again_hist)
    except ValueError as e:
        # A forced cluster size that cannot be resident here: not applicable (the planner's own tests cover it).
        if case.tier in helpers.CLUSTER_TIERS and "cluster" in str(e):
            assume(False)
        raise

    # Inputs are read only; histogram_add_ writes only hist's elements, in place.
    assert torch.equal(bit_view(x_buf), x_bits), "the op wrote into its input"
    if w_buf is not None:
        assert torch.equal(bit_view(w_buf), w_bits), "the op wrote into its weight"

    # The reference, on the values as the view shows them (torch's own strided copy, not the op).
    xv = to_numpy_values(x)
    if case.op == "batched":
        lead = case.shape[:-1]
        rows, n = int(np.prod(lead, dtype=np.int64)), case.shape[-1]
    else:
        lead = ()
        rows, n = 1, case.elements
    xv = xv.reshape(rows, n)
    # A data-derived range is the whole input's (all of xv), shared by every row.
    idx = reference_bins(xv, case.dtype, case.bins, case.mode, case.lo, case.hi, case.out_of_range == "clamp")

    # dtype, shape and device of the result
    if case.op == "add":
        assert result is hist
        assert hist.dtype == case.hist_dtype and tuple(hist.shape) == (case.bins,)
        expected_dtype = case.hist_dtype
    else:
        if case.weighted:
            expected_dtype = torch.float64 if case.weight_dtype == torch.float64 else torch.float32
        else:
            expected_dtype = case.dtype_arg or torch.int64
        assert result.dtype == expected_dtype, (result.dtype, expected_dtype)
        assert tuple(result.shape) == tuple(lead) + (case.bins,), (tuple(result.shape), lead, case.bins)
        assert result.device == x.device, (result.device, x.device)
    what = f"{case.op} on {case.device}"

    if not case.weighted:
        counts = reference_counts(idx, case.bins).reshape(tuple(lead) + (case.bins,))
        if case.op == "add":
            counts = counts.reshape(-1) + to_numpy_values(hist_before)[case.hist_start :: case.hist_step][: case.bins]
        check_counts(result, counts, what)
    else:
        wv = w.detach().cpu().double().contiguous().numpy().reshape(rows, n)
        ref = reference_sums(idx, wv, case.bins)
        init = None
        if case.op == "add":
            init = hist_before.double().numpy()[case.hist_start :: case.hist_step][: case.bins]
        out_dtype = result.dtype
        # Accumulation: CPU in float64 (then one rounding); CUDA atomics in the output dtype; CUDA deterministic in
        # exact fixed point (its quantisation is fixed_unit).
        cuda_float32 = case.device == "cuda" and out_dtype == torch.float32 and not case.deterministic
        acc_eps = float(np.finfo(np.float32).eps) if cuda_float32 else 2 * float(np.finfo(np.float64).eps)
        fixed_unit = None
        if case.device == "cuda" and case.deterministic:
            # Each weight is rounded to a multiple of 2^(E + ceil(log2 terms) - 62), |w| < 2^E the bin's largest.
            terms = n if case.op == "batched" else case.elements
            count_bits = max(0, math.ceil(math.log2(max(terms, 1))))
            _, exponent = np.frexp(ref.max_abs)
            fixed_unit = np.ldexp(1.0, exponent.astype(np.int64) + count_bits - 62) * (ref.max_abs > 0)
        integer_init = init is None or bool(np.all(init == np.round(init)))
        integer_weights = case.weights in ("ones", "small_ints") and integer_init
        check_sums(result, ref, init, acc_eps, fixed_unit, integer_weights, what)
        if again is not None:
            assert torch.equal(bit_view(again.reshape(-1)), bit_view(result.reshape(-1))), (
                "two runs of a deterministic weighted sum differ (on CUDA the second one in another tier)"
            )

    if case.op == "add":
        # Elements of the buffer around a strided hist are untouched.
        after, before = bit_view(hist_buf), hist_bits
        mask = torch.ones(hist_buf.numel(), dtype=torch.bool)
        mask[case.hist_start :: case.hist_step][: case.bins] = False
        assert torch.equal(after[mask], before[mask]), "histogram_add_ wrote outside hist"


def _fuzz_settings(device: str):
    return settings(FUZZ, max_examples=LIMITS[(PROFILE, device)].examples)


# ------------------------------------------------------------------------------------------------------------------
# The property tests: one per op and device
# ------------------------------------------------------------------------------------------------------------------


def _run_fuzz(op: str, device: str):
    @seed(SEED)
    @_fuzz_settings(device)
    @given(data=st.data())
    def inner(data):
        run_case(data.draw(cases(op, device), label="case"))

    inner()


@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_histogram(device):
    _run_fuzz("histogram", device)


@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_histogram_add_(device):
    _run_fuzz("add", device)


@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_batched_histogram(device):
    _run_fuzz("batched", device)


# ------------------------------------------------------------------------------------------------------------------
# Focused regression tests: huge ranges, where (hi - lo) * bins overflows the compute precision (the 2^-64 rule)
# ------------------------------------------------------------------------------------------------------------------


def _centred_values(lo: float, hi: float, bins: int, n: int, rng: np.random.Generator, np_dtype) -> np.ndarray:
    """n values of np_dtype, each within the middle 40% of a bin of [lo, hi] (computed in float64, on quarters so
    that spans near the float64 maximum do not overflow), plus lo and hi themselves: far from every edge, so any
    reasonable binning agrees on them."""
    quarter_width = (hi / 4 - lo / 4) / bins
    k = rng.integers(0, bins, size=n)
    v = (lo / 4 + (k + 0.5 + rng.uniform(-0.2, 0.2, size=n)) * quarter_width) * 4
    return np.concatenate([[lo, hi], v]).astype(np_dtype)


def _float64_counts(v: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Independent count in float64 (numpy.histogram's rule, on quarters) of the values inside [lo, hi]."""
    x = v.astype(np.float64)
    inside = (x >= lo) & (x <= hi)
    b = np.floor((x[inside] / 4 - lo / 4) / ((hi / 4 - lo / 4) / bins))
    return np.bincount(np.clip(b.astype(np.int64), 0, bins - 1), minlength=bins)


HUGE_CASES = [
    # (numpy dtype, torch dtype, lo, hi, given range?)
    (np.float32, torch.float32, -3e38, 3e38, False),
    (np.float32, torch.float32, -3e38, 3e38, True),
    (np.float32, torch.float32, 0.0, 1e38, True),
    (np.float32, torch.float32, -F32_MAX, F32_MAX, False),
    (np.float64, torch.float64, -1.7e308, 1.7e308, False),
    (np.float64, torch.float64, -1e308, 1e308, True),
    (np.float64, torch.float64, 0.0, 1e308, True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype,dtype,lo,hi,given", HUGE_CASES)
def test_huge_range_bins_correctly(device, np_dtype, dtype, lo, hi, given):
    bins = 1000
    rng = np.random.default_rng(SEED)
    lo, hi = float(np_dtype(lo)), float(np_dtype(hi))  # the ends as the input dtype holds them
    v = _centred_values(lo, hi, bins, 20_000, rng, np_dtype)
    x = torch.from_numpy(v).to(device)
    if given:
        got = torch_dsmhist.histogram(x, bins, lo, hi)
    else:
        got = torch_dsmhist.histogram(x, bins)  # the data's min and max are lo and hi
    independent = _float64_counts(v, lo, hi, bins)
    assert independent.sum() == v.size
    ours = reference_counts(reference_bins(v[None, :], dtype, bins, "range", lo, hi, False), bins)[0]
    check_counts(got, ours, "vs the numpy reference")
    check_counts(got, independent, "vs a float64 count")


@pytest.mark.parametrize("device", DEVICES)
def test_huge_range_other_ops(device):
    """The same rule in histogram_add_ (given range) and batched_histogram (data range shared by the rows), with
    weights and clamping."""
    bins = 777
    rng = np.random.default_rng(SEED + 1)
    lo, hi = float(np.float32(-3e38)), float(np.float32(3e38))
    v = _centred_values(lo, hi, bins, 3 * 4096 - 2, rng, np.float32).reshape(3, 4096)
    x = torch.from_numpy(v).to(device)
    w = torch.from_numpy(rng.integers(1, 5, size=v.shape).astype(np.float64)).to(device)
    batched = torch_dsmhist.batched_histogram(x, bins, weight=w)
    for r in range(3):
        v64 = v[r].astype(np.float64)
        b = np.clip(np.floor((v64 / 4 - lo / 4) / ((hi / 4 - lo / 4) / bins)).astype(np.int64), 0, bins - 1)
        expected = np.bincount(b, weights=w[r].cpu().numpy(), minlength=bins)
        assert np.array_equal(batched[r].cpu().numpy(), expected), f"row {r}"

    hist = torch.full((bins,), 5, dtype=torch.int64, device=device)
    lo_r, hi_r = 0.0, 1e38  # (hi - lo) finite in float32, (hi - lo) * bins not
    y = torch.from_numpy(_centred_values(lo_r, hi_r, bins, 10_000, rng, np.float32)).to(device)
    y = torch.cat([y, torch.tensor([-1.0, 3e38, float("nan")], device=device)])
    torch_dsmhist.histogram_add_(hist, y, lo_r, hi_r, out_of_range="clamp")
    yv = y.cpu().numpy()
    independent = _float64_counts(yv[:-3], lo_r, hi_r, bins)
    independent[0] += 1  # -1.0 clamps into the first bin
    independent[-1] += 1  # 3e38 clamps into the last; NaN is dropped
    check_counts(hist, independent + 5, "histogram_add_ vs a float64 count")


def test_reference_agrees_with_numpy_histogram():
    """The reference itself, on ordinary float64 data away from bin edges, against numpy.histogram."""
    rng = np.random.default_rng(SEED)
    for bins, lo, hi in [(1, 0.0, 1.0), (10, -5.0, 5.0), (997, -1e-3, 3e-3), (4096, 0.0, 1e6)]:
        v = _centred_values(lo, hi, bins, 5000, rng, np.float64)
        v = np.concatenate([v, [lo - 1.0, hi + 1.0, np.nan, np.inf]])
        ours = reference_counts(reference_bins(v[None, :], torch.float64, bins, "range", lo, hi, False), bins)[0]
        theirs, _ = np.histogram(v[np.isfinite(v)], bins=bins, range=(lo, hi))
        assert np.array_equal(ours, theirs)
        clamped = reference_counts(reference_bins(v[None, :], torch.float64, bins, "range", lo, hi, True), bins)[0]
        theirs[0] += 1
        theirs[-1] += 2  # hi + 1 and +inf
        assert np.array_equal(clamped, theirs)
