"""The fused CUDA path of the bin-edges ops (edge_histogram.cu: bin and count in one pass, in each of its modes: shared,
owned, global; counts packed two to a word past one block's 32-bit counts) against the two-stage path (a forced tier takes it) and against numpy, on the same data: adversarial
distributions, odd sizes, strided and misaligned views, weights, clamping, every mode's bin counts. The launch log
proves which path ran. CUDA only."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_edges import reference_nd, values_on_and_beside_edges

import torch_dsmhist

from conftest import cuda_only
from helpers import cuda_memory_growth

pytestmark = cuda_only

# (label, bins per dim, the mode the planner must pick for int64 counts on an H100 / H200; "two stages": the fused
# path declines, as for edges that do not fit in shared memory beside the bins)
SHAPES = [
    ("1-D, 10 bins", (10,), "shared"),
    ("1-D, 5000 bins", (5000,), "shared"),
    ("2-D, 64x64", (64, 64), "shared"),
    ("3-D, 16x16x16", (16, 16, 16), "shared"),
    ("2-D, 256x256", (256, 256), "shared"),
    ("2-D, 300x200", (300, 200), "shared"),
    ("2-D, 400x400", (400, 400), "owned"),
    ("1-D, 30000 bins", (30000,), "two stages"),
    ("2-D, 1024x1024", (1024, 1024), "global"),
]
# Edges a cell's table entry holds where the planner must pick it (H100 / H200): two for 1-D float edges while the
# whole table fits at four cells an edge, one beyond and in N-D (the tests above run both kernels).
ENTRY_EDGES = {"1-D, 10 bins": 2, "2-D, 64x64": 1, "1-D, 5000 bins": 1}
# Shapes whose counts the planner must pack two to a 32-bit word (16-bit halves): past one block's 32-bit counts, in
# one block (shared) or in a group of 2 (owned).
PACKED = {"2-D, 256x256", "2-D, 300x200", "2-D, 400x400"}
DISTRIBUTIONS = ["uniform", "one_hot", "sorted", "zipf", "two_edge_bins"]


def edges_for(bins: int, gen: torch.Generator) -> torch.Tensor:
    """bins + 1 sorted, distinct, non-uniform edges over about [-3, 3]."""
    steps = torch.rand(bins, generator=gen, dtype=torch.float64) + 0.05
    e = torch.cat([torch.zeros(1, dtype=torch.float64), steps.cumsum(0)])
    return (e / e[-1] * 6 - 3).float()


def points_for(kind: str, n: int, edges, gen: torch.Generator) -> torch.Tensor:
    """[n, D] float32 points of one adversarial kind, some outside the edges and some NaN."""
    dims = len(edges)
    if kind == "one_hot":
        centre = torch.stack([(e[len(e) // 2] + e[len(e) // 2 + 1]) / 2 for e in edges])
        pts = centre.expand(n, dims).clone()
    elif kind == "two_edge_bins":
        first = torch.stack([(e[0] + e[1]) / 2 for e in edges])
        last = torch.stack([(e[-2] + e[-1]) / 2 for e in edges])
        pts = torch.where(torch.rand(n, 1, generator=gen) < 0.5, first, last)
    elif kind == "zipf":
        ranks = torch.floor(torch.rand(n, dims, generator=gen).pow(-1.5)).clamp(max=1e6)
        pts = torch.stack([edges[d][(ranks[:, d].long() - 1) % (len(edges[d]) - 1)] for d in range(dims)], 1)
    else:
        pts = torch.randn(n, dims, generator=gen) * 1.4
        if kind == "sorted":
            pts = pts.sort(0).values
    pts = pts.float().contiguous()
    if n > 10:
        pts[:: max(n // 7, 1), 0] = float("nan")
        pts[3, -1] = edges[-1][-1]  # on the last edge: the last bin
        pts[4, 0] = edges[0][0]
    return pts


def two_stage(call):
    """The same call through the two-stage path (any forced tier takes it; global holds every bin count)."""
    with torch_dsmhist.force_tier("global"):
        return call()


def assert_fused_equals_two_stages_and_numpy(pts: torch.Tensor, edges, what) -> None:
    """pts [N, D] over `edges` (CPU tensors, one a dim) by the one pass on CUDA, coordinates outside dropped and then
    clamped: equal to the two stages and to numpy. `what` labels a failure."""
    cuda_edges = [e.cuda() for e in edges]
    for oor in ("ignore", "clamp"):
        if len(edges) == 1:
            x = pts[:, 0].cuda()

            def call():
                return torch_dsmhist.histogram_edges(x, cuda_edges[0], out_of_range=oor)
        else:
            p = pts.cuda()

            def call():
                return torch_dsmhist.histogramdd(p, cuda_edges, out_of_range=oor)

        fused = call()
        assert torch.equal(fused, two_stage(call)), (*what, oor)
        expected = reference_nd(pts, edges, clamp=oor == "clamp").reshape(-1)
        assert np.array_equal(fused.cpu().numpy().reshape(-1), expected), (*what, oor)


@pytest.mark.parametrize("label, shape, mode", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_fused_counts_match_two_stages_and_numpy(label, shape, mode, kind, gen):
    n = int(torch.randint(50_000, 400_000, (1,), generator=gen)) | 1  # odd
    edges = [edges_for(b, gen) for b in shape]
    assert_fused_equals_two_stages_and_numpy(points_for(kind, n, edges, gen), edges, (label, kind))


@pytest.mark.parametrize("label, shape, mode", SHAPES, ids=[s[0] for s in SHAPES])
def test_unsorted_edges_count_inside_the_output(label, shape, mode, gen):
    """Unsorted edges are not checked on CUDA (that would synchronise): their counts are unspecified, but every
    point stays inside the output. Clamped, each point without NaN lands in exactly one bin; dropped, at most one,
    whatever the edges' order, for points on each dim's last edge (not its largest) too. In every mode."""
    n = 100_003
    edges = [torch.rand(b + 1, generator=gen) * 6 - 3 for b in shape]
    for e in edges:
        e[len(e) // 2] = e[0]  # a repeated edge as well
    pts = points_for("uniform", n, edges, gen)
    pts[::11] = torch.stack([e[-1] for e in edges])
    pts[5::17, -1] = float("inf")
    pts[6::17, 0] = -float("inf")
    cuda_edges = [e.cuda() for e in edges]
    whole = int((~pts.isnan().any(1)).sum())
    for out_of_range in ("ignore", "clamp"):
        if len(shape) == 1:
            out = torch_dsmhist.histogram_edges(pts[:, 0].cuda(), cuda_edges[0], out_of_range=out_of_range)
        else:
            out = torch_dsmhist.histogramdd(pts.cuda(), cuda_edges, out_of_range=out_of_range)
        assert out.shape == shape and bool((out >= 0).all())
        total = int(out.sum())
        if out_of_range == "clamp":
            assert total == whole, (label, total, whole)
        else:
            assert total <= whole, (label, total, whole)


@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("label, shape, mode", SHAPES[1:], ids=[s[0] for s in SHAPES[1:]])
def test_fused_weighted_sums(label, shape, mode, weight_dtype, gen):
    n = 100_003
    edges = [edges_for(b, gen) for b in shape]
    pts = points_for("uniform", n, edges, gen)
    # Integer-valued weights: every order of float additions gives the same sum, so the paths must agree exactly.
    w = torch.randint(-3, 4, (n,), generator=gen).to(weight_dtype)
    p, cw = pts.cuda(), w.cuda()
    cuda_edges = [e.cuda() for e in edges]

    def call():
        return torch_dsmhist.histogramdd(p, cuda_edges, weight=cw)

    fused = call()
    assert fused.dtype == (torch.float64 if weight_dtype == torch.float64 else torch.float32)
    assert torch.equal(fused, two_stage(call))
    np.testing.assert_array_equal(fused.double().cpu().numpy(), reference_nd(pts, edges, w))


@pytest.mark.parametrize("edge_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_equal_width_edges_on_and_beside_every_edge(edge_dtype, dims, gen):
    """Edges of equal width (torch.linspace's, which stray from exact multiples by rounding: where any arithmetic
    shortcut would err): values on every edge and one step of the dtype to each side of it, NaN, +-inf and values past
    either end must land where the search (two stages) and numpy put them, counted and clamped."""
    n_bins = [1000, 37, 16][:dims]
    lo, hi = (-4.0, 4.0), (0.1, 7.3)
    edges = [torch.linspace(lo[d % 2], hi[d % 2], b + 1, dtype=edge_dtype) for d, b in enumerate(n_bins)]
    columns = [values_on_and_beside_edges(e, 90_001, gen) for e in edges]
    assert_fused_equals_two_stages_and_numpy(torch.stack(columns, 1), edges, (dims, edge_dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.uint8])
def test_fused_input_dtypes_and_int32_counts(dtype, gen):
    n = 70_001
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=gen) * 2).to(dtype)
        edges = edges_for(300, gen).to(dtype).unique()
    else:
        x = torch.randint(0, 200, (n,), generator=gen).to(dtype)
        edges = torch.sort(torch.rand(50, generator=gen, dtype=torch.float64) * 220 - 10).values
    cx, ce = x.cuda(), edges.cuda()
    for count_dtype in (torch.int64, torch.int32):
        fused = torch_dsmhist.histogram_edges(cx, ce, dtype=count_dtype)
        assert fused.dtype == count_dtype
        assert torch.equal(fused, two_stage(lambda: torch_dsmhist.histogram_edges(cx, ce, dtype=count_dtype)))
        assert np.array_equal(fused.cpu().numpy(), reference_nd(x.reshape(-1, 1), [edges]))


@pytest.mark.parametrize(
    "shape, owners, layout",
    [((256, 256), 1, "dense"), ((256, 256), 1, "strided"), ((400, 400), 2, "dense")],
    ids=["one block, dense", "one block, strided", "two owners, dense"],
)
def test_packed_counts_are_swept_before_a_half_wraps(shape, owners, layout, gen):
    """Packed counts with far more than 2^16 points a block in two bins of one word (local bins l and l + words, the
    low and high halves; PackedBins in packed_counts.cuh) of each owner: a half that wrapped would carry into its
    neighbour, so the sweeps must move the counts out in time."""
    bins = shape[0] * shape[1]
    per_block = -(-bins // owners)
    words = (per_block + 7) // 8 * 4
    flat = torch.tensor([o * per_block + b for o in range(owners) for b in (7, 7 + words)])
    edges = [edges_for(b, gen) for b in shape]
    centres = [(e[:-1] + e[1:]) / 2 for e in edges]
    n = (1 << 25) + 7
    pick = flat[torch.randint(0, len(flat), (n,), generator=gen)]
    pts = torch.stack([centres[0][pick // shape[1]], centres[1][pick % shape[1]]], 1)
    if layout == "strided":
        pts = torch.stack([pts, pts], 2).reshape(n, 4).cuda()[:, ::2]  # x, x, y, y: every other coordinate
    else:
        pts = pts.cuda()
    cuda_edges = [e.cuda() for e in edges]
    out = torch_dsmhist.histogramdd(pts, cuda_edges).reshape(-1).cpu()
    assert torch.equal(out, torch.bincount(pick, minlength=bins)), torch.nonzero(out).reshape(-1)[:8]


def test_fused_strided_and_misaligned_views(gen):
    base = torch.randn(60_001, 7, generator=gen).cuda()
    edges = [edges_for(b, gen).cuda() for b in (40, 30)]
    for pts in (base[1:, 2:6:3], base[::3, [4, 1]], base.t().contiguous().t()[:, 1:3]):
        out = torch_dsmhist.histogramdd(pts, edges)
        assert torch.equal(out, two_stage(lambda: torch_dsmhist.histogramdd(pts, edges)))
        assert np.array_equal(out.cpu().numpy(), reference_nd(pts.cpu(), [e.cpu() for e in edges]))
    x = base.view(-1)[1:100_000]  # misaligned by one element
    e = edges[0]
    assert torch.equal(torch_dsmhist.histogram_edges(x, e), two_stage(lambda: torch_dsmhist.histogram_edges(x, e)))


@pytest.mark.parametrize("dims", [3, 4])
def test_fused_dense_and_misaligned_points_of_more_dims(dims, gen):
    """3-D points (the compile-time 3-dim kernel, 16-byte vectors of 4 points where dense and aligned) and 4-D (the
    generic kernel): dense with a tail of points past the last whole vector, misaligned by one coordinate, strided."""
    flat = torch.randn(3 * 20_003 * dims + 1, generator=gen).cuda()
    dense = flat[: 20_003 * dims].view(-1, dims)
    misaligned = flat[1 : 1 + 20_003 * dims].view(-1, dims)
    strided = flat[: 20_003 * dims * 3].view(-1, dims * 3)[:, ::3]
    edges = [edges_for(b, gen).cuda() for b in (12, 9, 7, 5)[:dims]]
    for pts in (dense, misaligned, strided, dense[:5]):
        out = torch_dsmhist.histogramdd(pts, edges)
        assert torch.equal(out, two_stage(lambda: torch_dsmhist.histogramdd(pts, edges)))
        assert np.array_equal(out.cpu().numpy(), reference_nd(pts.cpu(), [e.cpu() for e in edges]))


def test_fused_small_and_empty_calls(gen):
    e = edges_for(20, gen).cuda()
    for n in (0, 1, 31, 33, 1025):
        x = torch.randn(n, generator=gen).cuda()
        out = torch_dsmhist.histogram_edges(x, e)
        assert np.array_equal(out.cpu().numpy(), reference_nd(x.cpu().reshape(-1, 1), [e.cpu()])), n


def test_fused_under_cuda_graph(gen):
    x = torch.randn(100_000, generator=gen).cuda()
    e = edges_for(100, gen).cuda()
    expected = torch_dsmhist.histogram_edges(x, e)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = torch_dsmhist.histogram_edges(x, e)
    x.copy_(torch.randn(100_000, generator=gen).cuda())
    graph.replay()
    assert torch.equal(captured, torch_dsmhist.histogram_edges(x, e)) and not torch.equal(captured, expected)


LOG_SCRIPT = """
import sys, torch, torch_dsmhist
shapes = eval(sys.argv[1])
for shape in shapes:
    edges = [torch.linspace(-3, 3, b + 1, device="cuda") for b in shape]
    pts = torch.randn(200_000, len(shape), device="cuda")
    torch_dsmhist.histogramdd(pts, edges)
    print("CALL", shape, file=sys.stderr, flush=True)
with torch_dsmhist.force_tier("global"):
    torch_dsmhist.histogramdd(pts, edges)
    print("CALL forced", file=sys.stderr, flush=True)
torch_dsmhist.histogramdd(pts, edges, weight=torch.rand(200_000, device="cuda", dtype=torch.float64))
print("CALL float64 weights", file=sys.stderr, flush=True)
torch.use_deterministic_algorithms(True)
torch_dsmhist.histogramdd(pts, edges, weight=torch.rand(200_000, device="cuda"))
print("CALL deterministic", file=sys.stderr, flush=True)
"""


def logged_launches_per_call(script: str, *args: str):
    """Runs `script` in a fresh process with the launch log on; the launch lines it printed before each "CALL" line
    (both on stderr), one list per call."""
    env = dict(os.environ, DSMHIST_LOG_LAUNCHES="1")
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    calls, current = [], []
    for line in result.stderr.splitlines():
        if line.startswith("torch_dsmhist launch:"):
            current.append(line)
        elif line.startswith("CALL"):
            calls.append(current)
            current = []
    return calls


def test_launch_log_names_the_fused_mode():
    """The planner's choice per shape (what the tests above rely on to cover every mode), the two stages under a
    forced tier and for deterministic sums."""
    shapes = [s[1] for s in SHAPES]
    calls = logged_launches_per_call(LOG_SCRIPT, repr(shapes))
    assert len(calls) == len(shapes) + 3, calls
    for (label, shape, mode), lines in zip(SHAPES, calls):
        if mode == "two stages":
            assert lines and not any("fused" in line for line in lines), (label, lines)
            continue
        assert len(lines) == 1 and "fused edges, mode " + mode + "," in lines[0], (label, lines)
        assert re.search(rf"dims {len(shape)}, bins {int(np.prod(shape))},", lines[0]), lines[0]
        if label in ENTRY_EDGES:
            assert f"edges a cell entry {ENTRY_EDGES[label]}" in lines[0], (label, lines[0])
        assert f"packed {int(label in PACKED)}," in lines[0], (label, lines[0])
    forced, doubles, deterministic = calls[len(shapes) :]
    # Two stages: the one pass's lookup writes the flat bins (the edges fit), then the forced tier counts them.
    assert forced and "edge bins on cuda:0: one-pass lookup" in forced[0], forced
    assert len(forced) > 1 and all("tier global" in line for line in forced[1:]), forced
    assert len(doubles) == 1 and "fused edges, mode global, float64 sums" in doubles[0], doubles
    assert deterministic and not any("fused" in line for line in deterministic), deterministic


# The planner's switch to the two stages for counts no one block holds (tuning.h kEdgeTwoStageMinPoints: 2^24).
TWO_STAGE_MIN_POINTS = 1 << 24
MANY_POINTS_LOG_SCRIPT = """
import sys, torch, torch_dsmhist
n = int(sys.argv[1])
for shape in ((1024, 1024), (400, 400), (256, 256)):
    edges = [torch.linspace(-3, 3, b + 1, device="cuda") for b in shape]
    for points in (n - 1, n):
        torch_dsmhist.histogramdd(torch.randn(points, 2, device="cuda"), edges)
        print("CALL", file=sys.stderr, flush=True)
torch_dsmhist.histogram_edges(torch.randn(1000, device="cuda"), torch.linspace(-3, 3, 60_001, device="cuda"))
print("CALL", file=sys.stderr, flush=True)
"""


def test_launch_log_many_points_past_one_block_take_the_lookup_and_a_tier():
    """From 2^24 points, counts that no one block holds (groups of blocks: 400x400; global atomics: 1024x1024) take the
    two stages: the one pass's lookup writes the flat bins, the planned tier counts them; one point fewer keeps the one
    pass, and bins one block holds (256x256, packed) keep it at any size. Edges that do not fit beside a table (60000
    in 1-D) take the search kernel."""
    calls = logged_launches_per_call(MANY_POINTS_LOG_SCRIPT, str(TWO_STAGE_MIN_POINTS))
    assert len(calls) == 7, calls
    wide_below, wide, owned_below, owned, packed_below, packed, many_edges = calls
    for below, mode in ((wide_below, "global"), (owned_below, "owned"), (packed_below, "shared"), (packed, "shared")):
        assert len(below) == 1 and f"fused edges, mode {mode}," in below[0], below
    for lines in (wide, owned):
        assert len(lines) >= 2 and not any("fused" in line for line in lines), lines
        assert f"edge bins on cuda:0: one-pass lookup, float32, dims 2, points {TWO_STAGE_MIN_POINTS}" in lines[0]
        assert all("torch_dsmhist.histogramdd" in line for line in lines[1:]), lines
    assert any("tier partition" in line for line in wide[1:]), wide
    assert many_edges and "edge bins on cuda:0: search kernel" in many_edges[0], many_edges


@pytest.mark.parametrize("shape", [(1024, 1024), (400, 400)], ids=["1024x1024 (global)", "400x400 (owned)"])
@pytest.mark.parametrize("kind", ["uniform", "zipf", "one_hot", "sorted"])
def test_many_points_past_one_block_equal_the_cpu(shape, kind, gen):
    """The two stages that take over from 2^24 points (lookup, then the planned tier) against the CPU op, on odd,
    misaligned and strided views of adversarial points, dropped and clamped."""
    n = TWO_STAGE_MIN_POINTS + int(torch.randint(1, 1000, (1,), generator=gen)) * 2 + 1
    edges = [edges_for(b, gen) for b in shape]
    base = points_for(kind, n + 1, edges, gen)
    cuda_edges = [e.cuda() for e in edges]
    views = {"dense": base[:n], "misaligned": base.view(-1)[1 : 1 + 2 * n].view(n, 2)}
    if kind == "uniform":
        views["strided"] = torch.cat([base, base], 1)[:n, 1:3]
    for layout, pts in views.items():
        for oor in ("ignore", "clamp"):
            out = torch_dsmhist.histogramdd(pts.cuda(), cuda_edges, out_of_range=oor)
            expected = torch_dsmhist.histogramdd(pts, edges, out_of_range=oor)
            assert torch.equal(out.cpu(), expected), (shape, kind, layout, oor)


def test_many_points_past_one_block_memory(gen):
    """The two stages hold, beyond the output, one chunk's int32 flat bins (4 bytes a point, at most 2^26 points) and
    the counting tier's workspace (tier partition: at most 256 MiB) (docs/semantics.md#memory)."""
    n = TWO_STAGE_MIN_POINTS + 7
    pts = torch.randn(n, 2, generator=gen).cuda()
    edges = [edges_for(1024, gen).cuda() for _ in range(2)]
    torch_dsmhist.histogramdd(pts, edges)  # plans and configures the kernels first
    out, growth = cuda_memory_growth(lambda: torch_dsmhist.histogramdd(pts, edges))
    output_bytes = out.numel() * out.element_size()
    assert growth <= output_bytes + 4 * n + (256 << 20) + (4 << 20), (growth, output_bytes)
    assert growth >= output_bytes + 4 * n, "the two stages ran (their int32 flat bins were allocated)"


def test_two_stage_chunks_past_the_first_accumulate(gen):
    """A call of more points than one CUDA chunk (2^26, edge_binning.h) counts its second chunk into the first's
    output: dense (the second chunk's input at an aligned address) and misaligned by one element."""
    n = (1 << 26) + 5
    base = torch.rand(n + 1, generator=gen).cuda()
    edges = torch.tensor([0.0, 0.25, 0.5, 1.0]).cuda()
    for x in (base[:n], base[1:]):
        with torch_dsmhist.force_tier("global"):  # the two stages
            out = torch_dsmhist.histogram_edges(x, edges)
        expected = torch.bucketize(x, edges, right=True).clamp(max=3).bincount(minlength=4)[1:]
        assert torch.equal(out, expected)
        del out, expected


BATCHED_LOG_SCRIPT = """
import sys, torch, torch_dsmhist
edges = [torch.linspace(-2, 2, 17, device="cuda")] * 3
torch_dsmhist.histogramdd(torch.randn(5, 1001, 3, device="cuda"), edges)
print("CALL", file=sys.stderr, flush=True)
torch_dsmhist.histogramdd(torch.randn(3, 1001, 2, device="cuda"), [torch.linspace(-2, 2, 513, device="cuda")] * 2)
print("CALL", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize(
    "rows, points, bins",
    [(7, 50_001, (16, 16, 16)), (300, 37, (16, 16, 16)), (5, 20_000, (40, 30)), (3, 999, (9, 8, 7, 6))],
    ids=["rows split between blocks", "many rows a block", "2-D", "4-D"],
)
@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "float32 sums"])
def test_fused_batched_rows_equal_a_loop_of_calls(rows, points, bins, weighted, gen):
    """Batched histogramdd ([rows, N, D]) in the one pass (block shares cross rows; each row flushed into its own
    output row) against one unbatched call a row, dense and as a strided view."""
    edges = [edges_for(b, gen).cuda() for b in bins]
    dims = len(bins)
    base = torch.randn(rows, points, dims + 1, generator=gen).cuda()
    weight = torch.rand(rows, points, generator=gen).cuda() if weighted else None
    for pts in (base[..., :dims].contiguous(), base[..., 1:]):
        out = torch_dsmhist.histogramdd(pts, edges, weight=weight)
        for r in range(rows):
            row = torch_dsmhist.histogramdd(pts[r], edges, weight=None if weight is None else weight[r])
            if weighted:
                torch.testing.assert_close(out[r], row, rtol=1e-5, atol=1e-4, msg=f"row {r}")
            else:
                assert torch.equal(out[r], row), f"row {r}"


def test_launch_log_batched_rows_take_the_one_pass():
    """Batched histogramdd with bins that fit a block: one fused launch naming its rows; more bins: two stages."""
    shared, wide = logged_launches_per_call(BATCHED_LOG_SCRIPT)
    assert len(shared) == 1 and "fused edges, mode shared," in shared[0] and shared[0].endswith("rows 5"), shared
    assert wide and not any("fused" in line for line in wide), wide
