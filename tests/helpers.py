"""Test data, device capacities, a reference histogram written with plain torch ops (independent of the op), and
measurements and checks that several test files make."""

import contextlib
import functools
import math
from typing import Callable, Iterator, Optional, Tuple, TypeVar

import torch

import torch_dsmhist
from torch_dsmhist._api import tier_table

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ALL_DTYPES = INTEGER_DTYPES + FLOAT_DTYPES
WEIGHT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DISTRIBUTIONS = ["uniform", "one_hot", "sorted", "two_edges"]
# The extension's CUDA tiers (its tier table), what tests iterate instead of naming tiers: every forced tier, and
# those that run as clusters (a cluster size may be forced; they need sm_90 code).
TIERS = tier_table()
TIER_NAMES = tuple(tier.name for tier in TIERS)
CLUSTER_TIERS = tuple(tier.name for tier in TIERS if tier.cluster)
# The ways a weighted sum is added on CUDA: float atomics in the weight's dtype, or the fixed-point sum that
# torch.use_deterministic_algorithms(True) selects (float64 weights).
SUM_KINDS = ("float32", "float64", "deterministic")


def shared_capacity() -> int:
    """32-bit counters one block can hold on the current CUDA device: its opt-in shared memory per block / 4."""
    return torch.cuda.get_device_properties().shared_memory_per_block_optin // 4


def cluster_available() -> bool:
    """Whether the op can use the cluster tier here (an sm_90+ device and a build with sm_90 code)."""
    return torch_dsmhist.plan(shared_capacity() + 1).tier == "cluster"


def cluster_block_capacity() -> int:
    """Count bins one block of tier cluster holds: 16-bit counts, 8 a 16-byte vector of shared memory (116224 on an
    H100, twice shared_capacity())."""
    return torch.cuda.get_device_properties().shared_memory_per_block_optin // 16 * 8


def block_capacity(tier: str) -> int:
    """Count bins one block of a cluster tier holds: tier cluster packs them (cluster_block_capacity), tier
    cluster_dsmem keeps 32-bit counts (shared_capacity)."""
    return cluster_block_capacity() if tier == "cluster" else shared_capacity()


@functools.lru_cache(maxsize=None)
def max_cluster_size() -> int:
    """The largest cluster the cluster tier can launch here with full shared memory per block (0: no cluster tier)."""
    if not cluster_available():
        return 0
    for size in range(16, 1, -1):
        try:
            with torch_dsmhist.force_tier("cluster", cluster_size=size):
                torch_dsmhist.plan(cluster_block_capacity() * size)
            return size
        except ValueError:
            continue
    return 0


def plannable(tier: str, cluster_size: Optional[int], bins: int, weight_dtype: Optional[torch.dtype] = None) -> bool:
    """Whether the op can run `bins` bins in `tier` (forced, with that cluster size) on the current CUDA device
    (counts, or sums of `weight_dtype` weights: float64 plans 8-byte sums)."""
    try:
        with torch_dsmhist.force_tier(tier, cluster_size):
            torch_dsmhist.plan(bins, weight_dtype=weight_dtype)
        return True
    except ValueError:
        return False


def adds_sums(tier: str, cluster_size: Optional[int], bins: int) -> bool:
    """Whether `tier` (forced, with that cluster size) adds weighted sums of `bins` bins here, where it holds their
    counts: false for a counts-only tier ("exchange")."""
    return plannable(tier, cluster_size, bins, torch.float32)


def tier_variants(bins: int, cluster_sizes=(1, 2, 3, 4, 8, 16)):
    """(name, tier, cluster size) for every CUDA tier of the extension's tier table that can hold `bins` on this
    device: each tier forced, and each cluster tier with each of `cluster_sizes` it launches ("<tier><size>") and
    with the planner's size ("<tier>-auto"). A new tier is picked up here without a change."""
    variants = []
    for tier in TIERS:
        for size in (*cluster_sizes, None) if tier.cluster else (None,):
            if plannable(tier.name, size, bins):
                name = f"{tier.name}{size or '-auto'}" if tier.cluster else tier.name
                variants.append((name, tier.name, size))
    return variants


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision the op bins in: float64 for int32/int64/float64, float32 otherwise."""
    return torch.float64 if dtype in (torch.int32, torch.int64, torch.float64) else torch.float32


def reference_histogram(
    x: torch.Tensor, bins: int, min=None, max=None, weight=None, out_of_range="ignore", dtype=None
) -> torch.Tensor:
    """The contract's histogram, on the CPU, in int64 counts or float64 sums, then cast to the op's output dtype.
    The arguments are torch_dsmhist.histogram's, ``x`` its input."""
    x = x.detach().cpu().reshape(-1)
    w = None if weight is None else weight.detach().cpu().reshape(-1).double()
    clamp = out_of_range == "clamp"
    if min is None and not x.dtype.is_floating_point:
        v = x.long()
        keep = torch.ones_like(v, dtype=torch.bool) if clamp else (v >= 0) & (v < bins)
        v = v.clamp(0, bins - 1)
    else:
        cdt = compute_dtype(x.dtype)
        xc = x.to(cdt)
        if min is None:
            finite = xc[torch.isfinite(xc)]
            lo, hi = (finite.min().item(), finite.max().item()) if finite.numel() else (0.0, 0.0)
            if lo == hi:
                lo, hi = lo - 1.0, hi + 1.0
        else:
            lo, hi = min, max
        lo_t, hi_t = torch.tensor(lo, dtype=cdt), torch.tensor(hi, dtype=cdt)
        inside = (xc >= lo_t) & (xc <= hi_t)
        fbins = torch.tensor(bins, dtype=cdt)
        # torch.histc's arithmetic; where (hi - lo) * bins overflows, every operand is scaled by 2^-64 first; where
        # min < max round to one value, the value inside goes to the middle bin.
        if lo_t == hi_t:
            scaled = torch.full_like(xc, 0.5) * fbins
        else:
            scale = torch.tensor(1.0 if torch.isfinite((hi_t - lo_t) * fbins) else 2.0**-64, dtype=cdt)
            scaled = (xc * scale - lo_t * scale) * fbins / (hi_t * scale - lo_t * scale)
        v = torch.where(inside & (scaled < fbins), scaled, torch.zeros_like(scaled)).long()
        v = torch.where(inside & ~(scaled < fbins), torch.full_like(v, bins - 1), v)
        keep = inside
        if clamp:
            v = torch.where(xc < lo_t, torch.zeros_like(v), v)
            v = torch.where(xc > hi_t, torch.full_like(v, bins - 1), v)
            keep = ~torch.isnan(xc)
    counts = torch.bincount(v[keep], weights=None if w is None else w[keep], minlength=bins)
    if w is not None:
        return counts.to(torch.float64 if weight.dtype == torch.float64 else torch.float32)
    return counts.to(dtype or torch.int64)


def _int_limits(dtype: torch.dtype):
    info = torch.iinfo(dtype)
    return info.min, info.max


def make_index_values(n: int, bins: int, dtype: torch.dtype, distribution: str, gen: torch.Generator) -> torch.Tensor:
    """Integer values for bin-by-value mode, including a few just outside [0, bins) where the dtype allows (not with
    "zipf", whose ranks are all bins)."""
    low, high = _int_limits(dtype)
    lo, hi = builtin_max(low, -3), builtin_min(high, bins + 2)
    if distribution == "uniform":
        v = torch.randint(lo, hi + 1, (n,), generator=gen)
    elif distribution == "one_hot":
        v = torch.full((n,), int(torch.randint(0, builtin_min(bins, high + 1), (1,), generator=gen)))
    elif distribution == "sorted":
        v = torch.randint(lo, hi + 1, (n,), generator=gen).sort().values
    elif distribution == "two_edges":
        edges = torch.tensor([0, builtin_min(bins - 1, high)])
        v = edges[torch.randint(0, 2, (n,), generator=gen)]
    elif distribution == "zipf":  # log-uniform ranks in [0, bins): P(k) proportional to 1 / (k + 1)
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        v = torch.exp(u * math.log(bins + 1)).floor().long() - 1
    else:
        raise ValueError(distribution)
    return v.to(dtype)


def global_tier_elements(per_thread: int) -> int:
    """Elements of a 1-D call that give every thread of tier global's full grid `per_thread` of them on the current
    CUDA device (2048 threads an SM, in blocks of kGlobalThreads: shape_stateless, csrc/kernels/tier_host.h)."""
    return torch.cuda.get_device_properties().multi_processor_count * 2048 * per_thread


def make_range_values(
    n: int, lo: float, hi: float, dtype: torch.dtype, distribution: str, gen: torch.Generator
) -> torch.Tensor:
    """Values for range mode spread over [lo, hi] and 10% beyond each side; two_edges puts them exactly on lo / hi."""
    span = hi - lo
    if distribution == "uniform":
        v = torch.rand(n, generator=gen, dtype=torch.float64) * 1.2 * span + lo - 0.1 * span
    elif distribution == "one_hot":
        v = torch.full((n,), lo + span * float(torch.rand(1, generator=gen)), dtype=torch.float64)
    elif distribution == "sorted":
        v = (torch.rand(n, generator=gen, dtype=torch.float64) * 1.2 * span + lo - 0.1 * span).sort().values
    elif distribution == "two_edges":
        v = torch.tensor([lo, hi], dtype=torch.float64)[torch.randint(0, 2, (n,), generator=gen)]
    else:
        raise ValueError(distribution)
    if not dtype.is_floating_point:
        low, high = _int_limits(dtype)
        v = v.round().clamp(low, high)
    return v.to(dtype)


def sprinkle_specials(x: torch.Tensor, gen: torch.Generator, fraction: float = 0.01) -> torch.Tensor:
    """Replace a random few values of a floating tensor with NaN, +inf and -inf."""
    x = x.clone()
    n = x.numel()
    if n == 0:
        return x
    count = builtin_max(1, int(n * fraction))
    idx = torch.randint(0, n, (count,), generator=gen)
    specials = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=x.dtype)
    x.view(-1)[idx] = specials[torch.randint(0, 3, (count,), generator=gen)]
    return x


builtin_min, builtin_max = min, max


Setting = TypeVar("Setting")


@contextlib.contextmanager
def torch_setting(read: Callable[[], Setting], write: Callable[[Setting], object], value: Setting) -> Iterator[None]:
    """write(value) for the block, then write back what read() gave before it: one of torch's global switches."""
    previous = read()
    write(value)
    try:
        yield
    finally:
        write(previous)


def deterministic_algorithms(on: bool = True) -> contextlib.AbstractContextManager:
    """torch.use_deterministic_algorithms(on) for the block, the previous setting restored after it."""
    return torch_setting(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, on)


def host_sync_raises() -> contextlib.AbstractContextManager:
    """torch.cuda.set_sync_debug_mode("error") for the block: any host synchronisation in it raises."""
    return torch_setting(torch.cuda.get_sync_debug_mode, torch.cuda.set_sync_debug_mode, "error")


Result = TypeVar("Result")


def cuda_memory_growth(call: Callable[[], Result]) -> Tuple[Result, int]:
    """call()'s result, and the most CUDA memory allocated during it beyond what was allocated before it (bytes, the
    caching allocator's peak; the device synchronised before and after)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = call()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


def check_row_weight_gradient(histogram: Callable, values, edges, weight: torch.Tensor, bin_indices: Callable) -> None:
    """The weight gradient of an op that gives one histogram a row, histogram(values, edges, weight[, out_of_range])
    with rows over weight's leading dims: gradcheck with either rule, then the gradient itself, where a kept point's
    weight gets its row's bin's gradient and a dropped point's (bin -1 in bin_indices(values, edges, "ignore"))
    none."""
    torch.autograd.gradcheck(lambda w: histogram(values, edges, w), (weight,))
    torch.autograd.gradcheck(lambda w: histogram(values, edges, w, "clamp"), (weight,))
    out = histogram(values, edges, weight)
    grad_out = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, weight, grad_out)
    bins = bin_indices(values, edges, "ignore").long()
    assert bins.shape == weight.shape, (bins.shape, weight.shape)
    rows = math.prod(weight.shape[:-1])
    picked = grad_out.reshape(rows, -1).gather(1, bins.reshape(rows, -1).clamp_min(0)).reshape(weight.shape)
    assert torch.equal(grad, torch.where(bins >= 0, picked, torch.zeros_like(picked)))


def exact_weights(n: int, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """n float64 weights twice: integers in [-3, 4], and the same integers times 2^k (k in [-8, 8]). Any sum of
    either is exact in float64 and in the deterministic fixed-point sum, and sums of the integers are exact in float32
    while the totals stay below 2^24, so a test compares with torch.equal against a float64 reference. Zeros add
    nothing; the exponents make a wrong largest exponent (the deterministic sum's scale) overflow or lose bits."""
    integers = torch.randint(-3, 5, (n,), generator=gen).double()
    scaled = integers * torch.pow(2.0, torch.randint(-8, 9, (n,), generator=gen).double())
    return integers, scaled


def sum_weights(kind: str, integers: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
    """The weights of exact_weights that a sum of `kind` (SUM_KINDS) adds exactly: float32 integers, else scaled."""
    return integers.float() if kind == "float32" else scaled
