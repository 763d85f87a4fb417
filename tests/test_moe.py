"""moe_align_block_size and moe_routing against an independent reference (the semantics of vLLM's
torch_moe_align_block_size with the expert map applied and a stable order): many sizes and adversarial ids, expert
maps, empty and tiny inputs, views, determinism, opcheck, torch.compile, CUDA graphs, no host sync, and the checks."""

import doctest
import itertools

import pytest
import torch
import torch._dynamo.testing
from torch._subclasses.fake_tensor import FakeTensorMode

import torch_dsmhist
import torch_dsmhist._moe

from conftest import CUDA_OK, DEVICES, cuda_only
from helpers import host_sync_raises, make_index_values

ID_DTYPES = [torch.int32, torch.int64]
KINDS = ["vllm", "one_expert", "zipf", "sorted", "two_experts", "invalid"]
TOKENS, TOP_K, EXPERTS = (0, 1, 3, 16, 255, 2256, 4096, 40000), (1, 2, 8), (1, 8, 64, 160, 256, 257)
LAYOUTS = list(itertools.product((1, 16, 64, 128), (False, True)))  # (block_size, pad_sorted_ids)
CPU_SHAPES, CPU_LAYOUTS = 8, 2  # the CPU draws this many (tokens, top_k, experts) and layouts each; CUDA runs all
NAMES = ("sorted_token_ids", "expert_ids", "num_tokens_post_pad")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def reference(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    """(sorted_token_ids, expert_ids, num_tokens_post_pad, counts, offsets) from the contract, on the CPU."""
    ids = topk_ids.detach().cpu().reshape(-1).long()
    n = ids.numel()
    valid = (ids >= 0) & (ids < num_experts)
    local = torch.arange(num_experts) if expert_map is None else expert_map.cpu().long()
    kept = (local >= 0) & (local < 2**31)  # an int64 entry past 2**31 - 1 drops its expert too (docstring)
    valid &= kept[ids.clamp(0, num_experts - 1)]
    key = torch.where(valid, ids, num_experts)
    order = torch.argsort(key, stable=True)  # flat indices by expert, increasing within one
    counts = torch.bincount(key, minlength=num_experts + 1)[:num_experts]
    base = n + num_experts * (block_size - 1)
    size = min(n * block_size, ceil_div(base, block_size) * block_size if pad_sorted_ids else base)
    sorted_ids = torch.full((size,), n, dtype=torch.int64)
    expert_ids = torch.full((ceil_div(size, block_size),), -1, dtype=torch.int64)
    offsets, taken = [0], 0
    for e in range(num_experts):
        count, start = int(counts[e]), offsets[-1]
        sorted_ids[start : start + count] = order[taken : taken + count]
        padded = ceil_div(count, block_size) * block_size
        expert_ids[start // block_size : (start + padded) // block_size] = local[e]
        offsets.append(start + padded)
        taken += count
    i32 = torch.int32
    total = torch.tensor([offsets[-1]], dtype=i32)
    return sorted_ids.to(i32), expert_ids.to(i32), total, counts.to(i32), torch.tensor(offsets, dtype=i32)


def make_topk_ids(tokens, top_k, experts, dtype, kind, gen):
    """[tokens, top_k] ids: vLLM's (distinct experts per token) or adversarial ones."""
    n = tokens * top_k
    if kind == "vllm" and top_k <= experts:
        ids = torch.rand(tokens, experts, generator=gen).topk(top_k, dim=1).indices
    elif kind == "vllm":  # more picks than experts: they cannot be distinct
        ids = torch.randint(0, experts, (n,), generator=gen)
    elif kind == "one_expert":
        ids = torch.full((n,), int(torch.randint(0, experts, (1,), generator=gen)))
    elif kind == "zipf":  # skewed, the hot experts anywhere
        ids = torch.randperm(experts, generator=gen)[make_index_values(n, experts, torch.int64, "zipf", gen)]
    elif kind in ("sorted", "two_experts"):  # ids in [-3, experts + 2]; two: the first and the last expert
        ids = make_index_values(n, experts, torch.int64, "sorted" if kind == "sorted" else "two_edges", gen)
    else:  # valid ids with a third replaced by ids of no expert (2^32 + 1 would wrap to 1 as an int32)
        ids = torch.randint(0, experts, (n,), generator=gen)
        info = torch.iinfo(dtype)
        bad = [-1, experts, experts + 1000, info.max, info.min] + (
            [2**32 + 1, -(2**32)] if dtype == torch.int64 else []
        )
        pick = torch.rand(n, generator=gen) < 1 / 3
        ids[pick] = torch.tensor(bad)[torch.randint(0, len(bad), (int(pick.sum()),), generator=gen)]
    return ids.reshape(tokens, top_k).to(dtype)


def make_expert_map(experts, dtype, gen, keep=0.5):
    """Global -> local ids of an EP rank: a random `keep` share of the experts numbered 0.. in a random order, the
    others -1 (every fifth -7 where some are kept: any negative id drops the expert)."""
    perm = torch.randperm(experts, generator=gen)
    kept = int(experts * keep)
    expert_map = torch.full((experts,), -1)
    expert_map[perm[:kept]] = torch.randperm(kept, generator=gen)
    if kept:
        expert_map[perm[kept::5]] = -7
    return expert_map.to(dtype)


def first_difference(got, expected):
    if got.shape != expected.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    i = int((got != expected).nonzero()[0])
    return f"[{i}] = {int(got[i])}, expected {int(expected[i])}; near it {got[max(i - 3, 0) : i + 4].tolist()}"


def check_align(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    got = torch_dsmhist.moe_align_block_size(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids)
    expected = reference(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids)
    case = f"shape {tuple(topk_ids.shape)}, block_size {block_size}, experts {num_experts}, pad {pad_sorted_ids}"
    for name, g, e in zip(NAMES, got, expected):
        assert g.dtype == torch.int32 and g.device == topk_ids.device, (name, g.dtype, g.device, case)
        assert torch.equal(g.cpu(), e), f"{name} differs ({case}): {first_difference(g.cpu(), e)}"
    return got


def check_routing(topk_ids, num_experts, block_size=1):
    got = torch_dsmhist.moe_routing(topk_ids, num_experts, block_size)
    assert isinstance(got, torch_dsmhist.MoeRouting)
    expected = reference(topk_ids, block_size, num_experts)
    for name, g, e in zip(("counts", "offsets", "permutation"), got, (expected[3], expected[4], expected[0])):
        assert g.dtype == torch.int32 and g.device == topk_ids.device, (name, g.dtype, g.device)
        assert torch.equal(g.cpu(), e), f"{name} differs (experts {num_experts}, block_size {block_size})"
    return got


def sample(items, count, device, gen):
    """All of `items` on CUDA; `count` of them drawn with `gen` on the CPU."""
    return items if device == "cuda" else [items[i] for i in torch.randperm(len(items), generator=gen)[:count].tolist()]


# ---------------------------------------------------------------------------------------------------------------
# 1-3. The golden reference: sizes, adversarial ids, expert maps, tiny and empty inputs
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ID_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_golden_reference(device, dtype, kind, gen):
    for tokens, top_k, experts in sample(list(itertools.product(TOKENS, TOP_K, EXPERTS)), CPU_SHAPES, device, gen):
        ids = make_topk_ids(tokens, top_k, experts, dtype, kind, gen).to(device)
        for block_size, pad in sample(LAYOUTS, CPU_LAYOUTS, device, gen):
            check_align(ids, block_size, experts, None, pad)


@pytest.mark.parametrize("map_dtype", ID_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_expert_map(device, map_dtype, gen):
    for experts, kind, keep in itertools.product((1, 8, 64, 160, 256, 257), ("vllm", "invalid", "zipf"), (0.5, 0.0)):
        tokens = int(torch.randint(0, 3000, (1,), generator=gen))
        ids = make_topk_ids(tokens, 8, experts, torch.int64, kind, gen).to(device)
        expert_map = make_expert_map(experts, map_dtype, gen, keep).to(device)
        for block_size, pad in sample(LAYOUTS, 2, device, gen):
            _, expert_ids, total = check_align(ids, block_size, experts, expert_map, pad)
            if keep == 0.0:  # every expert another rank's: nothing kept
                assert int(total) == 0 and bool((expert_ids == -1).all())
    # EP's contiguous slice of experts, the map a strided view
    ids = make_topk_ids(4096, 8, 256, torch.int32, "vllm", gen).to(device)
    wide = torch.full((512,), -1, dtype=map_dtype, device=device)
    wide[128:256:2] = torch.arange(64, dtype=map_dtype, device=device)  # experts 64..127: this rank's
    check_align(ids, 64, 256, wide[::2], True)


@pytest.mark.parametrize("device", DEVICES)
def test_expert_map_entries_past_int32(device, gen):
    """An int64 map entry no int32 expert_ids can hold drops its expert, as a negative one does (2**32 + 5 must
    not wrap to local id 5, nor 2**31 to a negative one)."""
    ids = make_topk_ids(500, 4, 16, torch.int64, "vllm", gen).to(device)
    expert_map = make_expert_map(16, torch.int64, gen, keep=1.0)
    big = torch.tensor([2**31, 2**31 + 1, 2**32, 2**32 + 5, 2**62, 2**63 - 1])
    expert_map[torch.randperm(16, generator=gen)[:6]] = big[torch.randperm(6, generator=gen)]
    for block_size, pad in sample(LAYOUTS, 2, device, gen):
        check_align(ids, block_size, 16, expert_map.to(device), pad)


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_tiny_and_empty(device, pad, gen):
    for shape in [(0,), (0, 8), (3, 0)]:  # n = 0: every output empty but the total, 0
        ids = torch.randint(0, 8, shape, generator=gen).to(device)
        for block_size in (1, 16):
            sorted_ids, expert_ids, total = check_align(ids, block_size, 8, None, pad)
            assert sorted_ids.numel() == expert_ids.numel() == 0 and total.tolist() == [0]
        check_routing(ids, 8, 16)
    for experts, block_size in [(1, 1), (1, 128), (300, 1), (8, 1)]:  # E = 1, block_size = 1
        check_align(make_topk_ids(100, 2, experts, torch.int64, "invalid", gen).to(device), block_size, experts)
    for tokens, experts in [(1, 256), (3, 257), (2, 8192)]:  # n < E: n * block_size is the smaller size
        ids = make_topk_ids(tokens, 1, experts, torch.int32, "vllm", gen).to(device)
        for block_size in (2, 16, 128):
            check_align(ids, block_size, experts, None, pad)
            check_align(ids, block_size, experts, make_expert_map(experts, torch.int32, gen).to(device), pad)


# ---------------------------------------------------------------------------------------------------------------
# 4-6. Determinism, views, moe_routing
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_over_calls(device, gen):
    tokens = 40000 if device == "cuda" else 4096
    for kind in ("zipf", "one_expert", "invalid"):
        ids = make_topk_ids(tokens, 8, 256, torch.int64, kind, gen).to(device)
        expert_map = make_expert_map(256, torch.int64, gen, 0.75).to(device)
        first = check_align(ids, 16, 256, expert_map, True)
        first_routing = check_routing(ids, 256, 16)
        for _ in range(4):
            assert all(map(torch.equal, first, torch_dsmhist.moe_align_block_size(ids, 16, 256, expert_map, True)))
            assert all(map(torch.equal, first_routing, torch_dsmhist.moe_routing(ids, 256, 16)))


@cuda_only
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_equals_cuda(kind, gen):
    ids = make_topk_ids(20000, 8, 160, torch.int32, kind, gen)
    expert_map = make_expert_map(160, torch.int32, gen)
    for args in [(64, 160, None, False), (16, 160, expert_map, True), (1, 160, None, True)]:
        cpu = torch_dsmhist.moe_align_block_size(ids, *args)
        cuda = torch_dsmhist.moe_align_block_size(ids.cuda(), *[a.cuda() if torch.is_tensor(a) else a for a in args])
        assert all(torch.equal(a, b.cpu()) for a, b in zip(cpu, cuda))
    assert all(
        torch.equal(a, b.cpu()) for a, b in zip(*(torch_dsmhist.moe_routing(x, 160, 8) for x in (ids, ids.cuda())))
    )


@pytest.mark.parametrize("dtype", ID_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_views(device, dtype, gen):
    base = make_topk_ids(600, 8, 64, dtype, "invalid", gen).to(device)
    expert_map = make_expert_map(64, torch.int64, gen).to(device)
    views = [
        base.t(),
        base[::3],
        base[:, ::2],
        base[1:, 3:],
        base.t()[::2, 5:],
        base[:1].expand(600, 8),
        base.reshape(20, 30, 8),
        base.reshape(20, 30, 8).transpose(0, 2),
        base.reshape(10, 60, 8)[:, ::7, 1:],
    ]
    for view in views:
        for args in [(16, 64, None, False), (1, 64, expert_map, True)]:
            got = check_align(view, *args)
            assert all(map(torch.equal, got, torch_dsmhist.moe_align_block_size(view.contiguous(), *args)))
        check_routing(view, 64, 4)


@pytest.mark.parametrize("dtype", ID_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_moe_routing(device, dtype, gen):
    shapes = list(itertools.product(TOKENS, TOP_K, EXPERTS))
    for (tokens, top_k, experts), kind in zip(sample(shapes, 12, device, gen), itertools.cycle(KINDS)):
        ids = make_topk_ids(tokens, top_k, experts, dtype, kind, gen).to(device)
        for block_size in (1, int(torch.randint(2, 129, (1,), generator=gen))):
            check_routing(ids, experts, block_size)
        valid = ids.clamp(0, experts - 1)  # block_size 1, every id valid: the stable argsort
        permutation = check_routing(valid, experts).permutation
        assert torch.equal(permutation.cpu(), torch.argsort(valid.cpu().reshape(-1), stable=True).int())


# ---------------------------------------------------------------------------------------------------------------
# 7-8. opcheck, torch.compile, CUDA graphs, no host sync
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, gen):
    ids = make_topk_ids(300, 8, 64, torch.int64, "invalid", gen).to(device)
    expert_map = make_expert_map(64, torch.int32, gen).to(device)
    for args in [
        (ids, 16, 64, None, False),
        (ids.int(), 1, 64, expert_map, True),
        (ids.t()[:, ::3], 128, 257, None, True),
        (ids[:0], 16, 8, None, False),
    ]:
        torch.library.opcheck(torch.ops.dsmhist.moe_align_block_size.default, args)
    for args in [(ids, 64, 1), (ids.int().t(), 8, 16)]:
        torch.library.opcheck(torch.ops.dsmhist.moe_routing.default, args)


def route(ids, expert_map):
    sorted_ids, expert_ids, total = torch_dsmhist.moe_align_block_size(ids, 16, 64, expert_map, True)
    counts, offsets, permutation = torch_dsmhist.moe_routing(ids, 64, 16)
    return sorted_ids, expert_ids, total, counts, offsets, permutation


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile(device, dynamic, gen):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor" if device == "cuda" else "aot_eager")
    compiled = torch.compile(route, fullgraph=True, dynamic=dynamic, backend=counter)
    expert_map = make_expert_map(64, torch.int64, gen).to(device)
    for tokens in (300, 77, 1000):
        ids = make_topk_ids(tokens, 8, 64, torch.int32, "invalid", gen).to(device)
        got = compiled(ids, expert_map)
        assert all(map(torch.equal, got, route(ids, expert_map)))
        check_align(ids, 16, 64, expert_map, True)
    assert counter.frame_count == (1 if dynamic else 3)  # dynamic: the sizes stay symbolic, one graph


@cuda_only
def test_cuda_graph_and_no_host_sync(gen):
    static = make_topk_ids(2048, 8, 64, torch.int64, "vllm", gen).cuda()
    expert_map = make_expert_map(64, torch.int64, gen).cuda()
    empty = static[:0]
    torch.cuda.synchronize()
    with host_sync_raises():
        for ids in (static, static.int(), static.t(), empty):
            route(ids, expert_map)
            torch_dsmhist.moe_align_block_size(ids, 1, 257)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        route(static, expert_map)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = route(static, expert_map)
    for kind in ("vllm", "one_expert", "invalid", "zipf"):
        ids = make_topk_ids(2048, 8, 64, torch.int64, kind, gen)
        static.copy_(ids)
        graph.replay()
        torch.cuda.synchronize()
        expected, plain = reference(ids, 16, 64, expert_map, True), reference(ids, 16, 64)
        for got, want in zip(outputs, (*expected[:3], plain[3], plain[4], plain[0])):
            assert torch.equal(got.cpu(), want), kind


# ---------------------------------------------------------------------------------------------------------------
# 9-10. The checks (eager and fake), the docstring examples
# ---------------------------------------------------------------------------------------------------------------

align, routing = torch_dsmhist.moe_align_block_size, torch_dsmhist.moe_routing
ERRORS = [  # (exception, the argument its message names, call(ids, expert_map))
    (TypeError, "topk_ids", lambda i, m: align(i.tolist(), 16, 8)),
    (TypeError, "topk_ids", lambda i, m: routing(i.cpu().numpy(), 8)),
    (TypeError, "block_size", lambda i, m: align(i, 16.0, 8)),
    (TypeError, "block_size", lambda i, m: align(i, True, 8)),
    (TypeError, "block_size", lambda i, m: routing(i, 8, "16")),
    (TypeError, "num_experts", lambda i, m: align(i, 16, 8.0)),
    (TypeError, "num_experts", lambda i, m: routing(i, False)),
    (TypeError, "expert_map", lambda i, m: align(i, 16, 8, m.tolist())),
    (TypeError, "pad_sorted_ids", lambda i, m: align(i, 16, 8, m, 1)),
    (TypeError, "pad_sorted_ids", lambda i, m: align(i, 16, 8, None, None)),
    (ValueError, "topk_ids", lambda i, m: align(i.float(), 16, 8)),
    (ValueError, "topk_ids", lambda i, m: align(i.to(torch.int16), 16, 8, m)),
    (ValueError, "topk_ids", lambda i, m: routing(i.to(torch.uint8), 8)),
    (ValueError, "topk_ids", lambda i, m: align(i.reshape(-1)[:1].expand(2**31), 1, 8)),  # past int32 indices
    (ValueError, "block_size", lambda i, m: align(i, 0, 8)),
    (ValueError, "block_size", lambda i, m: routing(i, 8, -3)),
    (ValueError, "block_size", lambda i, m: torch.ops.dsmhist.moe_routing(i, 8, 0)),
    (ValueError, "block_size", lambda i, m: align(i, 2**30, 8)),  # the sorted ids past int32 indices
    (ValueError, "num_experts", lambda i, m: align(i, 16, 0)),
    (ValueError, "num_experts", lambda i, m: routing(i, 8193)),
    (ValueError, "expert_map", lambda i, m: align(i, 16, 9, m)),
    (ValueError, "expert_map", lambda i, m: align(i, 16, 8, m.reshape(2, 4))),
    (ValueError, "expert_map", lambda i, m: align(i, 16, 8, m[0])),
    (ValueError, "expert_map", lambda i, m: align(i, 16, 8, m.float())),
    (ValueError, "expert_map", lambda i, m: torch.ops.dsmhist.moe_align_block_size(i, 16, 8, m.bool())),
]


def error_inputs(gen, device="cpu"):
    ids = torch.randint(-2, 10, (6, 2), generator=gen).to(device)
    return ids, make_expert_map(8, torch.int64, gen).to(device)


@pytest.mark.parametrize("error, name, call", ERRORS, ids=[f"{e.__name__}-{n}" for e, n, _ in ERRORS])
@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device, error, name, call, gen):
    ids, expert_map = error_inputs(gen, device)
    kept = ids.clone(), expert_map.clone()
    with pytest.raises(error, match=rf"\b{name}\b") as real:
        call(ids, expert_map)
    assert torch.equal(ids, kept[0]) and torch.equal(expert_map, kept[1])
    if error is ValueError:  # the fake kernels refuse the same call with the same message
        with FakeTensorMode() as mode, pytest.raises(ValueError) as fake:
            call(mode.from_tensor(ids), mode.from_tensor(expert_map))
        assert str(fake.value) == str(real.value)


def test_expert_map_on_another_device(gen):
    ids, expert_map = error_inputs(gen)
    with FakeTensorMode() as mode, pytest.raises(ValueError, match=r"\bexpert_map\b"):
        align(mode.from_tensor(ids), 16, 8, torch.empty(8, dtype=torch.int64, device="cuda"))
    if CUDA_OK:  # eager: ids and map on different devices, either way round
        for a, b in [(ids.cuda(), expert_map), (ids, expert_map.cuda())]:
            kept = a.clone(), b.clone()
            with pytest.raises(ValueError, match=r"\bexpert_map\b"):
                align(a, 16, 8, b)
            assert torch.equal(a, kept[0]) and torch.equal(b, kept[1])


def test_docstring_examples_and_exports():
    assert {"MoeRouting", "moe_align_block_size", "moe_routing"} <= set(torch_dsmhist.__all__)
    runner, report = doctest.DocTestRunner(), []
    for test in doctest.DocTestFinder().find(
        torch_dsmhist._moe, globs={"torch": torch, "torch_dsmhist": torch_dsmhist}
    ):
        runner.run(test, out=report.append)
    assert runner.tries == 3 and runner.failures == 0, "".join(report)


def test_readme_example():
    """README.md's MoE example shows these values."""
    ids = torch.tensor([[2, 0], [0, 1]])
    sorted_ids, expert_ids, total = torch_dsmhist.moe_align_block_size(ids, block_size=2, num_experts=3)
    assert (sorted_ids.tolist(), expert_ids.tolist(), total.tolist()) == ([1, 2, 3, 4, 0, 4, 4], [0, 1, 2, -1], [6])
    routing = torch_dsmhist.moe_routing(ids, num_experts=3)
    assert (routing.counts.tolist(), routing.offsets.tolist(), routing.permutation.tolist()) == (
        [2, 1, 1],
        [0, 2, 3, 4],
        [1, 2, 3, 0],
    )
