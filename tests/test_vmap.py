"""Batching rules (torch_dsmhist/_vmap.py): torch.vmap of histogram, batched_histogram, histogram_edges and
histogramdd gives the same result as one call per slice, stacked, in one batched call where the op has a batched form
(a TorchDispatchMode records the ops that ran), and per slice where a batched call would change a slice's meaning (a
floating input's data range; vmapped histogramdd edges). jacfwd, which vmaps jvp, works for every op."""

import pytest
import torch
from test_eager_entry import Recorder

import torch_dsmhist

from conftest import DEVICES

H, B, HE, DD = (
    torch_dsmhist.histogram,
    torch_dsmhist.batched_histogram,
    torch_dsmhist.histogram_edges,
    torch_dsmhist.histogramdd,
)


def data(device, gen):
    """ids [3, 4, 10] in [-1, 9) (some out of range), values, weights [3, 4, 10] float64, 1-D edges [9] and per-slice
    sorted edges [3, 9]."""
    ids = torch.randint(-1, 9, (3, 4, 10), generator=gen)
    values = torch.rand(3, 4, 10, generator=gen, dtype=torch.float64) * 1.2 - 0.1
    weights = torch.randn(3, 4, 10, generator=gen, dtype=torch.float64)
    edges = torch.linspace(0, 1, 9, dtype=torch.float64)
    slice_edges = torch.sort(torch.rand(3, 9, generator=gen, dtype=torch.float64)).values
    return [t.to(device) for t in (ids, values, weights, edges, slice_edges)]


def cases(ids, x, w, e, E):
    """(name, vmapped call, per-slice loop, the ops the vmapped call runs)."""
    p, pw = x.reshape(3, 20, 2), w.reshape(3, 20, 2)[..., 0]  # 2-D points and a strided weight a point
    per_row_edges = E[:1].expand(4, 9).contiguous()
    return [
        ("histogram ids", lambda: torch.vmap(lambda r: H(r, 8))(ids), [H(r, 8) for r in ids], ["batched_histogram"]),
        (
            "histogram ids, in_dims=1, int32 counts",
            lambda: torch.vmap(lambda r: H(r, 8, dtype=torch.int32), in_dims=1)(ids),
            [H(ids[:, i], 8, dtype=torch.int32) for i in range(4)],
            ["batched_histogram"],
        ),
        (
            "histogram range, weights vmapped",
            lambda: torch.vmap(lambda r, v: H(r, 8, 0.0, 1.0, weight=v, out_of_range="clamp"))(x, w),
            [H(x[i], 8, 0.0, 1.0, weight=w[i], out_of_range="clamp") for i in range(3)],
            ["batched_histogram"],
        ),
        (
            "histogram range, weights not vmapped",
            lambda: torch.vmap(lambda r: H(r, 8, 0.0, 1.0, weight=w[0]))(x),
            [H(x[i], 8, 0.0, 1.0, weight=w[0]) for i in range(3)],
            ["batched_histogram"],
        ),
        (
            "histogram, only the weights vmapped",
            lambda: torch.vmap(lambda v: H(x[0], 8, 0.0, 1.0, weight=v))(w),
            [H(x[0], 8, 0.0, 1.0, weight=w[i]) for i in range(3)],
            ["batched_histogram"],
        ),
        (
            "histogram, the data's range: per slice",
            lambda: torch.vmap(lambda r: H(r, 8))(x),
            [H(x[i], 8) for i in range(3)],
            ["histogram"] * 3,
        ),
        (
            "torch.ops with keywords",
            lambda: torch.vmap(lambda r: torch.ops.dsmhist.histogram(r, 8, max=1.0, min=0.0, out_of_range="clamp"))(x),
            [torch.ops.dsmhist.histogram(x[i], 8, 0.0, 1.0, None, "clamp") for i in range(3)],
            ["batched_histogram"],
        ),
        (
            "batched_histogram",
            lambda: torch.vmap(lambda r: B(r, 8, 0.0, 1.0))(x),
            [B(x[i], 8, 0.0, 1.0) for i in range(3)],
            ["batched_histogram"],
        ),
        (
            "batched_histogram, the data's range: per slice",
            lambda: torch.vmap(lambda r: B(r, 8))(x),
            [B(x[i], 8) for i in range(3)],
            ["batched_histogram"] * 3,
        ),
        (
            "histogram_edges, 1-D edges",
            lambda: torch.vmap(lambda r, v: HE(r, e, weight=v))(x, w),
            [HE(x[i], e, weight=w[i]) for i in range(3)],
            ["histogram_edges"],
        ),
        (
            "histogram_edges, edges vmapped",
            lambda: torch.vmap(lambda r, s: HE(r, s))(x, E),
            [HE(x[i], E[i]) for i in range(3)],
            ["histogram_edges"],
        ),
        (
            "histogram_edges, only the edges vmapped",
            lambda: torch.vmap(lambda s: HE(x[0], s))(E),
            [HE(x[0], E[i]) for i in range(3)],
            ["histogram_edges"],
        ),
        (
            "histogram_edges, per-row edges in each slice",
            lambda: torch.vmap(lambda r: HE(r, per_row_edges))(x),
            [HE(x[i], per_row_edges) for i in range(3)],
            ["histogram_edges"],
        ),
        (
            "histogramdd",
            lambda: torch.vmap(lambda q, v: DD(q, [e, e], weight=v))(p, pw),
            [DD(p[i], [e, e], weight=pw[i]) for i in range(3)],
            ["histogramdd"],
        ),
        (
            "histogramdd, an edge tensor vmapped: per slice",
            lambda: torch.vmap(lambda q, s: DD(q, [s, e]))(p, E),
            [DD(p[i], [E[i], e]) for i in range(3)],
            ["histogramdd"] * 3,
        ),
        (
            "dropins.histogramdd, int bins",
            lambda: torch.vmap(lambda q: torch_dsmhist.dropins.histogramdd(q, [4, 4], range=[0.0, 1.0, 0.0, 1.0]).hist)(
                p
            ),
            [torch_dsmhist.dropins.histogramdd(p[i], [4, 4], range=[0.0, 1.0, 0.0, 1.0]).hist for i in range(3)],
            ["histogramdd"],
        ),
        (
            "nested vmap",
            lambda: torch.vmap(torch.vmap(lambda r: H(r, 8)))(ids),
            [torch.stack([H(r, 8) for r in s]) for s in ids],
            ["batched_histogram"],
        ),
    ]


CASE_NAMES = [c[0] for c in cases(*data("cpu", torch.Generator().manual_seed(0)))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", range(len(CASE_NAMES)), ids=CASE_NAMES)
def test_vmap_equals_one_call_per_slice(device, index, gen):
    name, vmapped, loop, ran = cases(*data(device, gen))[index]
    with Recorder() as recorder:
        got = vmapped()
    expected = torch.stack(loop)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.is_floating_point():  # CUDA's float sums: any order
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    else:
        assert torch.equal(got, expected)
    dsmhist_ops = [op.__name__.split(".")[0] for op in recorder.ops if op.namespace == "dsmhist"]
    assert dsmhist_ops == ran, f"{name}: ran {dsmhist_ops}"


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_of_an_empty_batch(device):
    e = torch.linspace(0, 1, 5, dtype=torch.float64, device=device)
    assert torch.vmap(lambda r: H(r, 4))(torch.zeros(0, 5, dtype=torch.long, device=device)).shape == (0, 4)
    assert torch.vmap(lambda r: H(r, 4))(torch.zeros(0, 5, device=device)).shape == (0, 4)  # the data's range
    points = torch.zeros(0, 5, 2, dtype=torch.float64, device=device)
    assert torch.vmap(lambda q: DD(q, [e, e]))(points).shape == (0, 4, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_jacfwd_of_every_op_matches_the_reverse_jacobian(device, gen):
    ids, x, w, e, E = data(device, gen)
    calls = [
        lambda v: H(ids[0, 0], 8, weight=v),
        lambda v: B(x[0, 0].reshape(2, 5), 8, 0.0, 1.0, weight=v.reshape(2, 5)),
        lambda v: HE(x[0, 0], E[0], weight=v),
        lambda v: DD(x[0].reshape(20, 2)[:10], [e, e], weight=v),
    ]
    for call in calls:
        v = w[0, 0].clone()
        forward = torch.func.jacfwd(call)(v)
        reverse = torch.autograd.functional.jacobian(call, v)
        assert torch.equal(forward, reverse)


def test_an_error_under_vmap_says_what_ran():
    with pytest.raises(ValueError, match="min .* must be less than max") as error:
        torch.vmap(lambda r: H(r, 4, 1.0, 0.0))(torch.rand(3, 10))
    notes = getattr(error.value, "__notes__", None)
    if notes is not None:  # Python 3.11+
        assert any("under torch.vmap, histogram ran as batched_histogram" in note for note in notes)


@pytest.mark.parametrize("device", DEVICES)
def test_what_one_slice_refuses_vmap_refuses_alike(device, gen):
    """Slices the op refuses (too few dims; a weight of another shape) raise the op's own error under vmap, as one
    call per slice would: a batched call would read the batch as the slice's rows, or flatten the mismatch away."""
    x = torch.rand(3, 4, 10, generator=gen).to(device)
    w = torch.rand(3, 10, 4, generator=gen).to(device)  # each slice's weight transposed: same numel, other shape
    e = torch.linspace(0, 1, 5, device=device)
    calls = [
        (lambda r: B(r, 4, 0.0, 1.0), (x[:, 0, 0],)),  # 0-d slices
        (lambda q: DD(q, [e, e]), (x[:, 0, :2],)),  # 1-D slices: no [N, D] points
        (lambda r, v: H(r, 4, 0.0, 1.0, weight=v), (x, w)),
        (lambda r, v: HE(r, e, weight=v), (x, w)),
        (lambda r, v: B(r, 4, 0.0, 1.0, weight=v), (x, w)),
        (lambda r, s: HE(r, s), (x[:, 0], e[:3])),  # 0-d edges a slice
        (lambda r: HE(r, torch.stack([e, e])), (x,)),  # per-row edges [2, 5] against rows [4, 10]
        (lambda r: HE(r, torch.stack([e, e]).expand(1, 2, 5)), (x,)),  # per-row edges with one dim more
    ]
    for call, args in calls:
        with pytest.raises(ValueError) as alone:
            call(*(a[0] for a in args))
        with pytest.raises(ValueError) as vmapped:
            torch.vmap(call)(*args)
        assert str(vmapped.value) == str(alone.value)
