"""The contract's promises about failing calls, autograd and fake kernels (issue 13, items 1-6), on every device.

- A call that raises leaves every tensor it was given (out=, hist, input, weight) bitwise unchanged.
- histogram(out=) accepts what histogram() accepts, and its messages speak of `out`.
- In-place ops bump the version counter of what they write and refuse tensors that autograd needs.
- Weights are differentiable (gradcheck in float64; eager, compiled, deterministic, batched), in reverse and forward
  mode; input never gets a gradient.
- Fake (meta) kernels refuse what the real op refuses, with the same message.
- A wrong Python type raises TypeError, a bad value ValueError, each naming the argument.
"""

import re

import pytest
import torch

import torch_dsmhist

from conftest import DEVICES, cuda_only
from helpers import (
    cuda_memory_growth,
    deterministic_algorithms,
    make_index_values,
    make_range_values,
    reference_histogram,
)

# ---------------------------------------------------------------------------------------------------------------
# 1-2. Nothing written by a call that raises; out= accepts what histogram accepts
# ---------------------------------------------------------------------------------------------------------------

# (name, call, error type, message pattern). x: int64 ids in [0, 10); f: float64 values; o: int64 out [10];
# w: float32 weights of x's shape.
OUT_ERRORS = [
    (
        "weight shape",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, weight=w[:-1], out=o.double()),
        ValueError,
        "weight must have the shape",
    ),
    (
        "out_of_range",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, out_of_range="bogus", out=o),
        ValueError,
        "out_of_range",
    ),
    ("bool input", lambda x, f, o, w: torch_dsmhist.histogram(x.bool(), 10, out=o), ValueError, "input has dtype"),
    (
        "complex input",
        lambda x, f, o, w: torch_dsmhist.histogram(f.to(torch.complex64), 10, out=o),
        ValueError,
        "input has dtype",
    ),
    ("min > max", lambda x, f, o, w: torch_dsmhist.histogram(f, 10, 2.0, 1.0, out=o), ValueError, "less than max"),
    ("NaN min", lambda x, f, o, w: torch_dsmhist.histogram(f, 10, float("nan"), 1.0, out=o), ValueError, "finite"),
    ("inf max", lambda x, f, o, w: torch_dsmhist.histogram(f, 10, 0.0, float("inf"), out=o), ValueError, "finite"),
    ("only min", lambda x, f, o, w: torch_dsmhist.histogram(f, 10, 0.0, out=o), ValueError, "both min and max"),
    (
        "integer weight",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, weight=x, out=o.double()),
        ValueError,
        "weight must be floating",
    ),
    (
        "counts into int16 out",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, out=o.short()),
        ValueError,
        "out must hold counts",
    ),
    (
        "weights into int out",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, weight=w, out=o),
        ValueError,
        "out must be torch.float32 or torch.float64",
    ),
    (
        "dtype != out.dtype",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, dtype=torch.int32, out=o),
        ValueError,
        "out has dtype",
    ),
    ("float dtype", lambda x, f, o, w: torch_dsmhist.histogram(x, 10, dtype=torch.float32, out=o), ValueError, "dtype"),
    ("out shape", lambda x, f, o, w: torch_dsmhist.histogram(x, 9, out=o), ValueError, "out must have shape"),
    ("out 2-D", lambda x, f, o, w: torch_dsmhist.histogram(x, 10, out=o.view(2, 5)), ValueError, "out must have shape"),
    ("out over input", lambda x, f, o, w: torch_dsmhist.histogram(o, 10, out=o), ValueError, "share memory"),
    (
        "out over weight",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, weight=w, out=w[:10]),
        ValueError,
        "share memory",
    ),
    (
        "out expanded",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, out=o[:1].expand(10)),
        ValueError,
        "share memory",
    ),
    (
        "weight on another dtype path",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, weight=w, dtype=torch.int64, out=o.double()),
        ValueError,
        "dtype",
    ),
    (
        "accumulate with data range",
        lambda x, f, o, w: torch_dsmhist.histogram(f, 10, out=o, accumulate=True),
        ValueError,
        "needs min and max",
    ),
    ("bins=0", lambda x, f, o, w: torch_dsmhist.histogram(x, 0, out=o[:0]), ValueError, "bins must be > 0"),
    (
        "out wrong type",
        lambda x, f, o, w: torch_dsmhist.histogram(x, 10, out=o.tolist()),
        TypeError,
        "out must be a torch.Tensor",
    ),
]


def _arguments(device, gen):
    x = torch.randint(0, 10, (1001,), generator=gen).to(device)
    f = torch.rand(1001, generator=gen, dtype=torch.float64).to(device)
    o = torch.randint(-5, 5, (10,), generator=gen).to(device)
    w = torch.rand(1001, generator=gen).to(device)
    return x, f, o, w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, call, error, match", OUT_ERRORS, ids=[case[0] for case in OUT_ERRORS])
def test_out_error_writes_nothing(device, name, call, error, match, gen):
    x, f, o, w = _arguments(device, gen)
    saved = [t.clone() for t in (x, f, o, w)]
    with pytest.raises(error, match=match):
        call(x, f, o, w)
    for before, after in zip(saved, (x, f, o, w)):
        assert torch.equal(before, after), f"{name}: a tensor changed although the call raised"


HIST_ERRORS = [
    ("hist over input", lambda h, x, w: torch_dsmhist.histogram_add_(h, h), "share memory"),
    ("hist over weight", lambda h, x, w: torch_dsmhist.histogram_add_(w[:10], x, weight=w), "share memory"),
    ("bogus out_of_range", lambda h, x, w: torch_dsmhist.histogram_add_(h, x, out_of_range="x"), "out_of_range"),
    ("weight shape", lambda h, x, w: torch_dsmhist.histogram_add_(h.double(), x, weight=w[1:]), "weight must have"),
    ("min only", lambda h, x, w: torch_dsmhist.histogram_add_(h, x, 0.0), "both min and max"),
    ("hist wrong type", lambda h, x, w: torch_dsmhist.histogram_add_(h.tolist(), x), "hist must be a torch.Tensor"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, call, match", HIST_ERRORS, ids=[case[0] for case in HIST_ERRORS])
def test_histogram_add_error_writes_nothing(device, name, call, match, gen):
    x, _, h, w = _arguments(device, gen)
    saved = [t.clone() for t in (h, x, w)]
    with pytest.raises((ValueError, TypeError), match=match):
        call(h, x, w)
    for before, after in zip(saved, (h, x, w)):
        assert torch.equal(before, after), f"{name}: a tensor changed although the call raised"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_out_accepts_a_data_range(device, dtype, gen):
    """histogram(x_float, bins) works, so histogram(x_float, bins, out=out) works and gives the same counts."""
    x = make_range_values(4099, -3.0, 5.0, dtype, "uniform", gen).to(device)
    out = torch.full((37,), -1, dtype=torch.int64, device=device)
    assert torch_dsmhist.histogram(x, 37, out=out) is out
    assert torch.equal(out, torch_dsmhist.histogram(x, 37))
    sums = torch.full((37,), float("nan"), dtype=torch.float64, device=device)
    weight = torch.rand(x.shape, generator=gen, dtype=torch.float64).to(device)
    torch_dsmhist.histogram(x, 37, weight=weight, out=sums)
    torch.testing.assert_close(sums, torch_dsmhist.histogram(x, 37, weight=weight))


@pytest.mark.parametrize("device", DEVICES)
def test_out_messages_name_out(device):
    x = torch.arange(10, device=device)
    out = torch.zeros(10, device=device, dtype=torch.int16)
    with pytest.raises(ValueError) as info:
        torch_dsmhist.histogram(x, 10, out=out)
    assert "out must hold counts" in str(info.value)
    assert not re.search(r"\bhist\b", str(info.value)) and "histogram_add_" not in str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# 3. In-place ops and autograd
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_histogram_add_bumps_version_so_backward_raises(device):
    w = torch.ones(4, requires_grad=True, device=device)
    h = torch.zeros(4, device=device)
    loss = (w * h).sum()
    version = h._version
    torch_dsmhist.histogram_add_(
        h, torch.tensor([0, 1, 1], device=device), 0.0, 4.0, weight=torch.ones(3, device=device)
    )
    assert h._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_out_bumps_version(device):
    out = torch.zeros(4, dtype=torch.int64, device=device)
    view = out[1:]
    version = out._version
    torch_dsmhist.histogram(torch.tensor([0, 1, 1], device=device), 4, out=out)
    assert out._version > version and view._version == out._version


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_refuses_tensors_autograd_needs(device):
    x = torch.tensor([0, 1, 1], device=device)
    leaf = torch.zeros(4, requires_grad=True, device=device)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        torch_dsmhist.histogram_add_(leaf, x, 0.0, 4.0, weight=torch.ones(3, device=device))
    assert torch.count_nonzero(leaf.detach()) == 0
    non_leaf = leaf * 2
    with pytest.raises(RuntimeError, match="requires grad"):
        torch_dsmhist.histogram_add_(non_leaf, x, 0.0, 4.0, weight=torch.ones(3, device=device))
    weight = torch.ones(3, requires_grad=True, device=device)
    hist = torch.zeros(4, device=device)
    with pytest.raises(RuntimeError, match="weight requires grad"):
        torch_dsmhist.histogram_add_(hist, x, 0.0, 4.0, weight=weight)
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        torch_dsmhist.histogram(x, 4, 0.0, 4.0, weight=weight, out=hist)
    assert torch.count_nonzero(hist) == 0
    with torch.no_grad():  # what an optimizer does: allowed, as for torch's in-place ops
        torch_dsmhist.histogram_add_(leaf, x, 0.0, 4.0, weight=torch.ones(3, device=device))
    assert leaf.detach().tolist() == [1.0, 2.0, 0.0, 0.0]


# ---------------------------------------------------------------------------------------------------------------
# 4. Weights are differentiable; input is not
# ---------------------------------------------------------------------------------------------------------------


def _expected_grad_weight(bins_of_values: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    kept = bins_of_values >= 0
    return torch.where(kept, grad[bins_of_values.clamp(min=0)], torch.zeros((), dtype=grad.dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_of_range", ["ignore", "clamp"])
@pytest.mark.parametrize("case", ["index", "range", "data_range"])
def test_gradcheck_histogram(device, out_of_range, case, gen):
    n, bins = 61, 7
    if case == "index":
        x, lo, hi = torch.randint(-3, bins + 3, (n,), generator=gen), None, None
    else:
        x = torch.randn(n, generator=gen, dtype=torch.float64) * 2
        lo, hi = (-1.5, 1.25) if case == "range" else (None, None)
    x = x.to(device)
    w = torch.randn(n, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda w: torch_dsmhist.histogram(x, bins, lo, hi, weight=w, out_of_range=out_of_range), (w,)
    )
    # The gradient is grad_out at each value's bin, 0 for dropped values: checked against an independent binning.
    grad = torch.randn(bins, generator=gen, dtype=torch.float64).to(device)
    (g,) = torch.autograd.grad(torch_dsmhist.histogram(x, bins, lo, hi, weight=w, out_of_range=out_of_range), w, grad)
    if case == "data_range":  # the range the op takes from the data (x is float64 and has no constant run)
        lo, hi = x.min().item(), x.max().item()
    one_hot = torch.stack(
        [reference_histogram(x[i : i + 1], bins, lo, hi, out_of_range=out_of_range) for i in range(n)]
    )
    expected = (one_hot.to(torch.float64) @ grad.cpu()).to(device)
    torch.testing.assert_close(g, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_batched_histogram(device, gen):
    x = make_index_values(3 * 5 * 17, 9, torch.int32, "uniform", gen).view(3, 5, 17).to(device)
    w = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda w: torch_dsmhist.batched_histogram(x, 9, weight=w), (w,))
    # Non-contiguous weights and input: a transposed view.
    wt = torch.randn(17, 5, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda wt: torch_dsmhist.batched_histogram(x[0].t(), 9, -1.0, 9.5, weight=wt, out_of_range="clamp"), (wt,)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_grad_dtype_follows_weight(device, weight_dtype, gen):
    x = torch.randint(0, 5, (100,), generator=gen).to(device)
    w = torch.rand(100, generator=gen).to(device=device, dtype=weight_dtype).requires_grad_()
    torch_dsmhist.histogram(x, 5, weight=w).sum().backward()
    assert w.grad.dtype == weight_dtype
    assert torch.equal(w.grad, torch.ones_like(w))


@pytest.mark.parametrize("device", DEVICES)
def test_input_never_gets_a_gradient(device, gen):
    x = torch.randn(50, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.rand(50, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    torch_dsmhist.histogram(x, 4, -1.0, 1.0, weight=w).sum().backward()
    assert x.grad is None and w.grad is not None
    counts = torch_dsmhist.histogram(x, 4, -1.0, 1.0)
    assert not counts.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_input_changed_after_forward_makes_backward_raise(device, gen):
    x = torch.randint(0, 5, (20,), generator=gen).to(device)
    w = torch.rand(20, generator=gen).to(device).requires_grad_()
    hist = torch_dsmhist.histogram(x, 5, weight=w)
    x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        hist.sum().backward()


def test_grad_under_torch_compile(gen):
    x = torch.randint(-2, 12, (333,), generator=gen)
    w = torch.rand(333, generator=gen).requires_grad_()

    def loss(x, w):
        return (torch_dsmhist.histogram(x, 10, weight=w, out_of_range="clamp") ** 2).sum()

    (eager,) = torch.autograd.grad(loss(x, w), w)
    torch._dynamo.reset()
    (compiled,) = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x, w), w)
    assert torch.equal(eager, compiled)


@cuda_only
def test_grad_deterministic_path(gen):
    x = make_range_values(5000, 0.0, 1.0, torch.float32, "uniform", gen).cuda()
    w = torch.randn(5000, generator=gen, dtype=torch.float64).cuda().requires_grad_()
    grad = torch.randn(16, generator=gen, dtype=torch.float64).cuda()
    with deterministic_algorithms():
        assert torch.autograd.gradcheck(
            lambda w: torch_dsmhist.histogram(x[:40], 16, 0.0, 1.0, weight=w[:40]), (w[:40].detach().requires_grad_(),)
        )
        (first,) = torch.autograd.grad(torch_dsmhist.histogram(x, 16, 0.0, 1.0, weight=w), w, grad)
        (second,) = torch.autograd.grad(torch_dsmhist.histogram(x, 16, 0.0, 1.0, weight=w), w, grad)
    assert torch.equal(first, second)
    (atomic,) = torch.autograd.grad(torch_dsmhist.histogram(x, 16, 0.0, 1.0, weight=w), w, grad)
    assert torch.equal(first, atomic)


@cuda_only
def test_grad_matches_across_devices_and_tiers(gen):
    x = make_range_values(70001, -1.0, 1.0, torch.float32, "uniform", gen)
    w = torch.randn(70001, generator=gen, dtype=torch.float64)
    grad = torch.randn(100000, generator=gen, dtype=torch.float64)
    results = []
    for device in ("cpu", "cuda"):
        wd = w.to(device).requires_grad_()
        out = torch_dsmhist.histogram(x.to(device), 100000, weight=wd)
        results.append(torch.autograd.grad(out, wd, grad.to(device))[0].cpu())
    assert torch.equal(results[0], results[1])


@cuda_only
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float32, torch.float64])
def test_backward_memory_bound(weight_dtype, gen):
    """The README's bound: backward holds at most 9 bytes per element beyond the gradient it returns (13 for 16-bit
    weights)."""
    n = (1 << 22) + 3
    x = torch.randint(0, 1000, (n,), generator=gen).cuda()
    w = torch.rand(n, generator=gen).to(device="cuda", dtype=weight_dtype).requires_grad_()
    out = torch_dsmhist.histogram(x, 1000, weight=w)
    grad = torch.randn(1000, generator=gen).cuda()
    (gw,), growth = cuda_memory_growth(lambda: torch.autograd.grad(out, w, grad))
    extra = growth - gw.numel() * gw.element_size()
    per_element = 13 if weight_dtype.itemsize == 2 else 9
    assert extra <= per_element * n + (4 << 20), (extra, per_element * n)
    expected = grad[x].to(weight_dtype)
    assert torch.equal(gw, expected)


# Forward mode (torch.autograd.forward_ad, torch.func.jvp / jacfwd): the output's tangent is the histogram of the
# weights' tangent. Each case: (name, call(values, weights) with values float64 in [0, 1) of shape [4, 60]).
EDGES9 = torch.linspace(0, 1, 9, dtype=torch.float64)
FORWARD_CASES = [
    ("histogram, ids", lambda v, w: torch_dsmhist.histogram((v * 10 - 1).long(), 8, weight=w)),
    ("histogram, range", lambda v, w: torch_dsmhist.histogram(v, 8, 0.1, 0.9, weight=w, out_of_range="clamp")),
    ("histogram, data range", lambda v, w: torch_dsmhist.histogram(v, 8, weight=w)),
    ("batched_histogram", lambda v, w: torch_dsmhist.batched_histogram(v, 8, 0.0, 1.0, weight=w)),
    ("batched_histogram, data range", lambda v, w: torch_dsmhist.batched_histogram(v, 8, weight=w)),
    ("histogram_edges", lambda v, w: torch_dsmhist.histogram_edges(v, EDGES9.to(v.device), weight=w)),
    (
        "histogram_edges, per-row edges",
        lambda v, w: torch_dsmhist.histogram_edges(v, EDGES9.to(v.device).expand(4, 9).contiguous(), weight=w),
    ),
    (
        "histogramdd",  # one weight a point: a strided view
        lambda v, w: torch_dsmhist.histogramdd(
            v.reshape(-1, 2), [EDGES9.to(v.device)] * 2, weight=w.reshape(-1, 2)[:, 0]
        ),
    ),
    (
        "histogramdd, batched",
        lambda v, w: torch_dsmhist.histogramdd(v.reshape(4, -1, 2), [EDGES9.to(v.device)] * 2, weight=w[:, :30]),
    ),
    ("dropins.bincount", lambda v, w: torch_dsmhist.dropins.bincount((v[0] * 10).long(), w[0], minlength=10)),
    ("dropins.histogram", lambda v, w: torch_dsmhist.dropins.histogram(v, 8, range=(0.0, 1.0), weight=w).hist),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, call", FORWARD_CASES, ids=[c[0] for c in FORWARD_CASES])
def test_forward_mode_tangent_is_the_jacobian_times_the_tangent(device, name, call, gen):
    """A weighted call's forward-mode tangent (forward_ad and torch.func.jvp) equals the reverse-mode Jacobian times
    the tangent, and gradcheck's finite differences agree in both modes. Before, the output had no tangent: jvp
    returned zeros."""
    import torch.autograd.forward_ad as fwAD

    values = torch.rand(4, 60, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(4, 60, generator=gen, dtype=torch.float64).to(device)
    tangent = torch.randn(4, 60, generator=gen, dtype=torch.float64).to(device)
    jacobian = torch.autograd.functional.jacobian(lambda w: call(values, w), w)
    expected = (jacobian.reshape(-1, w.numel()) @ tangent.reshape(-1)).reshape(jacobian.shape[: -w.dim()])
    with fwAD.dual_level():
        primal, got = fwAD.unpack_dual(call(values, fwAD.make_dual(w, tangent)))
    assert got is not None, "the output carries no tangent"
    torch.testing.assert_close(primal, call(values, w), rtol=1e-12, atol=1e-12)  # CUDA's sums: any order
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    _, jvp = torch.func.jvp(lambda w: call(values, w), (w,), (tangent,))
    torch.testing.assert_close(jvp, expected, rtol=1e-12, atol=1e-12)
    small = w[:, :12].clone().requires_grad_()  # gradcheck's finite differences: one evaluation per weight
    assert torch.autograd.gradcheck(
        lambda s: call(values, torch.cat([s, w[:, 12:]], dim=1)), (small,), check_forward_ad=True
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float32, torch.float64])
def test_forward_mode_tangent_dtype_follows_the_output(device, weight_dtype, gen):
    import torch.autograd.forward_ad as fwAD

    ids = torch.randint(0, 5, (100,), generator=gen).to(device)
    w = torch.rand(100, generator=gen).to(device=device, dtype=weight_dtype)
    tangent = torch.ones(100, dtype=weight_dtype, device=device)
    with fwAD.dual_level():
        primal, got = fwAD.unpack_dual(torch_dsmhist.histogram(ids, 5, weight=fwAD.make_dual(w, tangent)))
    assert got.dtype == primal.dtype
    assert torch.equal(got.cpu(), torch.bincount(ids.cpu(), minlength=5).to(got.dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_jacfwd_matches_the_reverse_jacobian(device, gen):
    ids = torch.randint(-2, 9, (40,), generator=gen).to(device)
    w = torch.randn(40, generator=gen, dtype=torch.float64).to(device)
    forward = torch.func.jacfwd(lambda w: torch_dsmhist.histogram(ids, 7, weight=w))(w)
    reverse = torch.autograd.functional.jacobian(lambda w: torch_dsmhist.histogram(ids, 7, weight=w), w)
    assert torch.equal(forward, reverse)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_refused_by_out_and_in_place_forms(device, gen):
    """out= and histogram_add_ refuse a weight tangent (NotImplementedError, as torch's out= functions) and write
    nothing; a tangent on hist itself survives an add of weights without one (the add's derivative in hist is 1)."""
    import torch.autograd.forward_ad as fwAD

    ids = torch.randint(0, 6, (50,), generator=gen).to(device)
    w = torch.rand(50, generator=gen, dtype=torch.float64).to(device)
    hist = torch.rand(6, generator=gen, dtype=torch.float64).to(device)
    before = hist.clone()
    with fwAD.dual_level():
        dual_w = fwAD.make_dual(w, torch.ones_like(w))
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            torch_dsmhist.histogram_add_(hist, ids, weight=dual_w)
        with pytest.raises(NotImplementedError, match="out=.*forward-mode AD"):
            torch_dsmhist.histogram(ids, 6, weight=dual_w, out=hist)
        assert torch.equal(hist, before)
        hist_tangent = torch.rand(6, generator=gen, dtype=torch.float64).to(device)
        dual_hist = fwAD.make_dual(hist.clone(), hist_tangent)
        with pytest.raises(NotImplementedError, match="out=.*forward-mode AD"):
            torch_dsmhist.histogram(ids, 6, weight=w, out=dual_hist)
        torch_dsmhist.histogram_add_(dual_hist, ids, weight=w)
        primal, tangent = fwAD.unpack_dual(dual_hist)
        assert torch.equal(tangent, hist_tangent)
        torch.testing.assert_close(primal, before + torch_dsmhist.histogram(ids, 6, weight=w))


def test_torch_func_reverse_transforms_raise(gen):
    """What docs/semantics.md says of torch.func's reverse transforms: grad / vjp / jacrev raise (the backward is a
    C++ torch::autograd::Function, which they refuse: an error, never a wrong gradient). vmap and jacfwd work:
    tests/test_vmap.py."""
    ids = torch.randint(0, 5, (40,), generator=gen)
    w = torch.rand(40, generator=gen, dtype=torch.float64)
    weighted = lambda w: torch_dsmhist.histogram(ids, 5, weight=w)  # noqa: E731
    for transform in (lambda: torch.func.grad(lambda w: weighted(w).sum())(w), lambda: torch.func.vjp(weighted, w),
                      lambda: torch.func.jacrev(weighted)(w)):  # fmt: skip
        with pytest.raises(RuntimeError, match="functorch"):
            transform()


# ---------------------------------------------------------------------------------------------------------------
# 5. Fake (meta) kernels run the real op's checks
# ---------------------------------------------------------------------------------------------------------------

META_CASES = [
    ("bool input", lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, dtype=torch.bool, device=d), 4)),
    (
        "float count dtype",
        lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, dtype=torch.int64, device=d), 4, dtype=torch.float32),
    ),
    ("bogus out_of_range", lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, device=d), 4, 0.0, 1.0, None, "bogus")),
    ("bins=0", lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, device=d), 0)),
    ("min > max", lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, device=d), 4, 2.0, 1.0)),
    (
        "weight shape",
        lambda d: torch.ops.dsmhist.histogram(torch.zeros(5, device=d), 4, 0.0, 1.0, torch.zeros(4, device=d)),
    ),
    (
        "int weight",
        lambda d: torch.ops.dsmhist.histogram(
            torch.zeros(5, device=d), 4, 0.0, 1.0, torch.zeros(5, dtype=torch.int64, device=d)
        ),
    ),
    ("batched 0-d", lambda d: torch.ops.dsmhist.batched_histogram(torch.zeros((), device=d), 4)),
    (
        "add_ float input no range",
        lambda d: torch.ops.dsmhist.histogram_add_(
            torch.zeros(4, dtype=torch.int64, device=d), torch.zeros(5, device=d)
        ),
    ),
    (
        "add_ counts into int16",
        lambda d: torch.ops.dsmhist.histogram_add_(
            torch.zeros(4, device=d, dtype=torch.int16), torch.zeros(5, dtype=torch.int64, device=d)
        ),
    ),
    (
        "int32 past 2^31",
        lambda d: torch.ops.dsmhist.histogram(
            torch.zeros(1, dtype=torch.uint8, device=d).expand(1 << 31), 4, dtype=torch.int32
        ),
    ),
]


@pytest.mark.parametrize("name, call", META_CASES, ids=[case[0] for case in META_CASES])
def test_meta_refuses_what_the_real_op_refuses(name, call):
    with pytest.raises(ValueError) as real:
        call("cpu")
    with pytest.raises(ValueError) as fake:
        call("meta")
    # One rule set: the same message, but for the device named in it.
    assert str(fake.value).replace("meta", "cpu") == str(real.value)


def test_compile_refuses_at_trace_time():
    compiled_graphs = []

    def backend(graph_module, example_inputs):
        compiled_graphs.append(graph_module)
        return graph_module.forward

    @torch.compile(fullgraph=True, backend=backend)
    def bad(x):
        return torch.ops.dsmhist.histogram(x, 4, None, None, None, "bogus")

    torch._dynamo.reset()
    with pytest.raises(Exception, match="out_of_range"):
        bad(torch.zeros(5, dtype=torch.int64))
    assert not compiled_graphs, "the bad call was traced and compiled; it should have failed while tracing"


def test_opcheck_out_and_bin_indices(gen):
    x = torch.randint(-1, 9, (77,), generator=gen)
    w = torch.rand(77, generator=gen)
    f = torch.randn(77, generator=gen)
    for args in [
        (torch.zeros(8, dtype=torch.int64), x),
        (torch.zeros(8), x, None, None, w),
        (torch.zeros(8, dtype=torch.int64), f, None, None, None, "clamp", None, False),
    ]:
        torch.library.opcheck(torch.ops.dsmhist._histogram_out.default, args)
    for args in [(x, 8), (f, 8, -1.0, 1.0, "clamp"), (f, 8)]:
        torch.library.opcheck(torch.ops.dsmhist._bin_indices.default, args)


# ---------------------------------------------------------------------------------------------------------------
# 6. TypeError for a wrong Python type, ValueError for a bad value, naming the argument
# ---------------------------------------------------------------------------------------------------------------

x_ = torch.arange(4)
TYPE_ERRORS = [
    (lambda: torch_dsmhist.histogram([1, 2], 4), TypeError, "input must be a torch.Tensor"),
    (lambda: torch_dsmhist.histogram("ab", 4), TypeError, "input must be a torch.Tensor"),
    (lambda: torch_dsmhist.histogram(x_.numpy(), 4), TypeError, "input must be a torch.Tensor"),
    (lambda: torch_dsmhist.histogram(x_, 4.5), TypeError, "bins must be an int"),
    (lambda: torch_dsmhist.histogram(x_, None), TypeError, "bins must be an int"),
    (lambda: torch_dsmhist.histogram(x_, True), TypeError, "bins must be an int"),
    (lambda: torch_dsmhist.histogram(x_, 2**63), ValueError, "bins must be > 0 and at most 2\\*\\*63 - 1"),
    (lambda: torch_dsmhist.histogram(x_, -1), ValueError, "bins must be > 0"),
    (lambda: torch_dsmhist.histogram(x_, 4, "abc", 3.0), TypeError, "min must be a real number"),
    (lambda: torch_dsmhist.histogram(x_, 4, 0.0, 10**400), ValueError, "max .* too large"),
    (lambda: torch_dsmhist.histogram(x_, 4, dtype="int32"), TypeError, "dtype must be a torch.dtype"),
    (lambda: torch_dsmhist.histogram(x_, 4, out=[0, 0, 0, 0]), TypeError, "out must be a torch.Tensor"),
    (lambda: torch_dsmhist.histogram(x_, 4, weight=[1.0] * 4), TypeError, "weight must be a torch.Tensor"),
    (lambda: torch_dsmhist.histogram(x_, 4, out_of_range=1), TypeError, "out_of_range must be a str"),
    (
        lambda: torch_dsmhist.histogram(x_, 4, out=torch.zeros(4, dtype=torch.int64), accumulate=1),
        TypeError,
        "accumulate must be a bool",
    ),
    (lambda: torch_dsmhist.histogram_add_([0] * 4, x_), TypeError, "hist must be a torch.Tensor"),
    (
        lambda: torch_dsmhist.histogram_add_(torch.zeros(4, dtype=torch.int64), None),
        TypeError,
        "input must be a torch.Tensor",
    ),
    (lambda: torch_dsmhist.batched_histogram(x_.tolist(), 4), TypeError, "input must be a torch.Tensor"),
    (lambda: torch_dsmhist.batched_histogram(x_, "4"), TypeError, "bins must be an int"),
    (lambda: torch_dsmhist.plan("4"), TypeError, "bins must be an int"),
]


@pytest.mark.parametrize("call, error, match", TYPE_ERRORS, ids=[f"case{i}" for i in range(len(TYPE_ERRORS))])
def test_wrong_types_and_values(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert type(info.value) is error  # not a subclass standing in for it (torch's binding raises RuntimeError)


def test_numpy_integers_and_floats_are_accepted():
    np = pytest.importorskip("numpy")
    out = torch_dsmhist.histogram(torch.tensor([0.1, 0.6]), np.int64(2), np.float64(0.0), np.float32(1.0))
    assert out.tolist() == [1, 1]
    assert re.search("int64", str(out.dtype))


def test_readme_gradient_example():
    ids = torch.tensor([0, 1, 1, 3, 7])
    w = torch.tensor([0.5, 1.0, 1.0, 2.0, 4.0], requires_grad=True)
    h = torch_dsmhist.histogram(ids, 4, weight=w)
    (h * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert w.grad.tolist() == [1.0, 2.0, 2.0, 4.0, 0.0]


# ---------------------------------------------------------------------------------------------------------------
# Issue 48: aliasing under torch.compile, force_tier's types, one message style
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("case", ["out is input", "out overlaps input", "hist is weight"])
def test_compile_refuses_writing_over_the_input_on_every_backend(backend, case, gen):
    """Compiled, the write into out / hist is functionalized, so the real kernel never sees the overlap eager refuses:
    the fake kernel refuses it while tracing, on every backend, and nothing is written."""
    torch._dynamo.reset()
    ids = torch.randint(0, 10, (40,), generator=gen)
    if case == "out is input":
        fn, args = (lambda b, o: torch_dsmhist.histogram(b, 10, out=o)), (ids[:10].clone(),) * 2
    elif case == "out overlaps input":
        buf = ids.clone()
        fn, args = (lambda b, o: torch_dsmhist.histogram(b, 10, out=o)), (buf, buf[5:15])
    else:
        hist = torch.rand(10, generator=gen)
        fn, args = (lambda h, w: torch_dsmhist.histogram_add_(h, ids[:10], weight=w)), (hist, hist)
    saved = [a.clone() for a in args]
    with pytest.raises(Exception, match="share memory"):  # dynamo wraps the fake kernel's ValueError
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    for a, s in zip(args, saved):
        assert torch.equal(a, s)
    # Disjoint views of one buffer are fine, compiled as in eager.
    torch._dynamo.reset()
    buf = torch.zeros(20, dtype=torch.int64)
    buf[:10] = ids[:10]
    torch.compile(lambda b, o: torch_dsmhist.histogram(b, 10, out=o), backend=backend)(buf[:10], buf[10:])
    assert torch.equal(buf[10:], torch.bincount(ids[:10], minlength=10))


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("cluster", "2"), {}),
        (("cluster", 2.5), {}),
        (("cluster", True), {}),
        ((3,), {}),
        (("auto",), {"max_cluster_size": "4"}),
    ],
)
def test_force_tier_wrong_types_raise_type_error(args, kwargs):
    before = torch.ops.dsmhist._get_tier_override()
    with pytest.raises(TypeError, match="force_tier"):
        with torch_dsmhist.force_tier(*args, **kwargs):
            pass
    assert torch.ops.dsmhist._get_tier_override() == before
    with torch_dsmhist.force_tier("cluster", None):  # None: the planner's cluster size
        pass


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch_dsmhist.histogram(torch.arange(4), 4, dtype=torch.float32),
        lambda: torch_dsmhist.histogram(torch.arange(4), 4, weight=torch.ones(4, dtype=torch.int64)),
        lambda: torch_dsmhist.histogram(torch.arange(4).bool(), 4),
        lambda: torch_dsmhist.histogram_add_(torch.zeros(4, dtype=torch.int16), torch.arange(4)),
        lambda: torch_dsmhist.histogram_edges(torch.rand(4), torch.tensor([0.0, 1.0], dtype=torch.float64)),
        lambda: torch_dsmhist.histogram(torch.rand(4), 4, weight=torch.ones(4), dtype=torch.float64),
    ],
)
def test_messages_have_one_prefix_and_torch_dtype_names(call):
    """One prefix (torch_dsmhist.), and dtypes as Python spells them (torch.float32, never c10's Float)."""
    with pytest.raises(ValueError) as error:
        call()
    text = str(error.value).splitlines()[0]
    assert text.startswith("torch_dsmhist."), text
    assert "torch." in text
    for c10_name in ("Float", "Double", "Long", "Half", "Bool", "Int)", "Int "):
        assert c10_name not in text, text


def test_min_equal_max_hints_at_the_data_range():
    with pytest.raises(ValueError, match="pass neither min nor max"):
        torch_dsmhist.histogram(torch.rand(8), 4, min=0.5, max=0.5)
