"""The eager entry (csrc/eager_entry.cpp): a plain call of torch_dsmhist.histogram, histogram_add_,
moe_align_block_size or moe_routing reaches its op through the dispatcher's typed handle instead of torch.ops. It must be the same call: the
same results and errors, autograd, a TorchDispatchMode and the profiler seeing the op; and where torch.ops does more
(a tensor subclass's or a torch-function mode's __torch_function__, tracing under torch.compile) the wrapper must
take torch.ops."""

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import torch_dsmhist
from torch_dsmhist import _C, _rules

from conftest import DEVICES

HISTOGRAM = torch.ops.dsmhist.histogram.default
ADD = torch.ops.dsmhist.histogram_add_.default
ALIGN = torch.ops.dsmhist.moe_align_block_size.default
ROUTING = torch.ops.dsmhist.moe_routing.default


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


class FunctionRecorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


class Tagged(torch.Tensor):
    """A subclass whose __torch_function__ notes every call it sees."""

    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def ids(gen, device, n=1000, high=64, dtype=torch.int64):
    return torch.randint(-2, high + 2, (n,), generator=gen, dtype=dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_same_results_as_torch_ops(device, dtype, gen):
    x = ids(gen, device, 1001).to(dtype)
    # Small whole weights: their float32 sums are exact in any order (the CUDA atomic adds' order varies run to run).
    w = torch.randint(0, 4, (1001,), generator=gen).float().to(device)
    assert _rules.eager_entry_applies(x, w)
    for args in [
        (x, 64, None, None, None, "ignore", None),
        (x, 61, -1.0, 70.0, None, "clamp", None),
        (x, 64, 0.0, 64.0, w, "ignore", None),
        (x, 64, 0.0, 64.0, None, "ignore", torch.int32),
    ]:
        got, expected = torch_dsmhist.histogram(*args), HISTOGRAM(*args)
        assert got.dtype == expected.dtype and torch.equal(got, expected), args[1:4]
    for hist_dtype in (torch.int64, torch.int32, torch.float32):
        start = torch.randint(0, 100, (64,), generator=gen).to(device, hist_dtype)
        got, expected = start.clone(), start.clone()
        assert torch_dsmhist.histogram_add_(got, x, 0.0, 64.0) is got
        ADD(expected, x, 0.0, 64.0, None, "ignore")
        assert torch.equal(got, expected), hist_dtype
    if dtype != torch.float32:
        topk = x.view(-1)[:1000].view(125, 8).clamp(0, 63)
        for got, expected in zip(torch_dsmhist.moe_align_block_size(topk, 16, 64), ALIGN(topk, 16, 64)):
            assert torch.equal(got, expected)
        for got, expected in zip(torch_dsmhist.moe_routing(topk, 64, 4), ROUTING(topk, 64, 4)):
            assert torch.equal(got, expected)


def test_errors_as_torch_ops(gen):
    """The C++ checks raise through the entry as through torch.ops: the same type and message, nothing returned."""
    x = ids(gen, "cpu", 50)
    for args in [
        (x, 8, None, None, None, "bogus", None),
        (x, 8, 3.0, 1.0, None, "ignore", None),
        (x, 8, None, None, None, "ignore", torch.int8),
        (x.bool(), 8, None, None, None, "ignore", None),
        (x, 8, None, None, torch.ones(3), "ignore", None),
    ]:
        with pytest.raises(Exception) as via_ops:
            HISTOGRAM(*args)
        with pytest.raises(Exception) as via_entry:
            torch_dsmhist.histogram(*args)
        assert type(via_entry.value) is type(via_ops.value), args[1:]
        assert str(via_entry.value) == str(via_ops.value)
    for hist, kwargs in [
        (torch.zeros(8, dtype=torch.int16), {}),
        (torch.zeros(8), {"out_of_range": "bogus"}),
        (torch.zeros(8, requires_grad=True), {}),
        (torch.zeros(8, dtype=torch.int64), {"weight": torch.ones(3)}),
    ]:
        before = hist.detach().clone()
        with pytest.raises(Exception) as via_ops:
            ADD(hist, x, 0.0, 8.0, kwargs.get("weight"), kwargs.get("out_of_range", "ignore"))
        with pytest.raises(Exception) as via_entry:
            torch_dsmhist.histogram_add_(hist, x, 0.0, 8.0, **kwargs)
        assert type(via_entry.value) is type(via_ops.value) and str(via_entry.value) == str(via_ops.value), kwargs
        assert torch.equal(hist.detach(), before), "a call that raises wrote into hist"
    with pytest.raises(ValueError, match="block_size"):
        torch_dsmhist.moe_align_block_size(x.view(5, 10).clamp(0, 7), 0, 8)
    with pytest.raises(ValueError, match="num_experts"):
        torch_dsmhist.moe_routing(x.view(5, 10).clamp(0, 7), 0)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_through_the_entry(device, gen):
    x = ids(gen, device, 777).float()
    w = torch.rand(777, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    grad_out = torch.rand(64, generator=gen, dtype=torch.float64).to(device)
    (got,) = torch.autograd.grad(torch_dsmhist.histogram(x, 64, 0.0, 64.0, weight=w), w, grad_out)
    (expected,) = torch.autograd.grad(HISTOGRAM(x, 64, 0.0, 64.0, w, "ignore", None), w, grad_out)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_dispatch_mode_and_profiler_see_the_op(device, gen):
    x = ids(gen, device)
    topk = x.clamp(0, 63).view(125, 8)
    with Recorder() as recorder:
        torch_dsmhist.histogram(x, 64)
        torch_dsmhist.histogram_add_(torch.zeros(64, dtype=torch.int64, device=device), x)
        torch_dsmhist.moe_align_block_size(topk, 16, 64)
        torch_dsmhist.moe_routing(topk, 64)
    assert {HISTOGRAM, ADD, ALIGN, ROUTING} <= set(recorder.ops), recorder.ops
    with Recorder() as recorder:  # the drop-ins' plain calls take the entry too
        torch_dsmhist.histc(x.float(), 64, 0, 64)
        torch_dsmhist.bincount(x.clamp(0))
    assert recorder.ops.count(HISTOGRAM) == 2, recorder.ops
    with torch.profiler.profile() as profile:
        torch_dsmhist.histogram(x, 64)
    assert any(event.key == "dsmhist::histogram" for event in profile.key_averages())


def test_torch_function_mode_and_subclasses_take_torch_ops(gen):
    x = ids(gen, "cpu")
    topk = x.clamp(0, 63).view(125, 8)
    with FunctionRecorder() as recorder:
        assert not _rules.eager_entry_applies(x)
        counts = torch_dsmhist.histogram(x, 64)
        torch_dsmhist.histogram_add_(torch.zeros(64, dtype=torch.int64), x)
        torch_dsmhist.moe_align_block_size(topk, 16, 64)
        torch_dsmhist.moe_routing(topk, 64)
    assert torch.equal(counts, HISTOGRAM(x, 64))
    for packet in (torch.ops.dsmhist.histogram, torch.ops.dsmhist.histogram_add_, torch.ops.dsmhist.moe_align_block_size,
                   torch.ops.dsmhist.moe_routing):  # fmt: skip
        assert packet in recorder.funcs or packet.default in recorder.funcs, (packet, recorder.funcs)
    with FunctionRecorder() as recorder:  # the drop-ins too
        torch_dsmhist.histc(x.float(), 64, 0, 64)
        torch_dsmhist.bincount(x.clamp(0))
    assert recorder.funcs.count(HISTOGRAM) == 2, recorder.funcs
    tagged = x.as_subclass(Tagged)
    Tagged.seen = []
    assert not _rules.eager_entry_applies(tagged) and not _rules.eager_entry_applies(
        x, torch.ones(1000).as_subclass(Tagged)
    )
    torch_dsmhist.histogram(tagged, 64)
    assert HISTOGRAM in Tagged.seen


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_calls_trace_torch_ops(device, gen):
    """Under torch.compile(fullgraph=True) the wrappers' plain calls are traced as the ops (no graph break at the
    entry, which dynamo cannot trace), and give the eager results."""
    torch._dynamo.reset()
    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    def step(x, topk):
        hist = torch_dsmhist.histogram_add_(torch.zeros(64, dtype=torch.int64, device=x.device), x)
        return (torch_dsmhist.histogram(x, 64), hist, *torch_dsmhist.moe_align_block_size(topk, 16, 64),
                *torch_dsmhist.moe_routing(topk, 64), torch_dsmhist.histc(topk.float(), 64, 0, 64))  # fmt: skip

    x = ids(gen, device)
    topk = x.clamp(0, 63).view(125, 8)
    got = torch.compile(step, fullgraph=True, backend=backend)(x, topk)
    assert all(torch.equal(a, b) for a, b in zip(got, step(x, topk)))
    assert len(graphs) == 1
    targets = {node.target for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert {HISTOGRAM, ALIGN, ROUTING} <= targets and {ADD, torch.ops.dsmhist.histogram_add_} & targets, targets
    assert not {_C.histogram, _C.histogram_add_, _C.moe_align_block_size, _C.moe_routing} & targets


def test_jit_trace_records_the_ops(gen):
    """TorchScript's tracer works in the dispatcher (its Tracer key), so a trace through the entry records the ops."""
    x = ids(gen, "cpu", 100).clamp(0, 7)
    traced = torch.jit.trace(lambda t: torch_dsmhist.histogram(t, 8), (x,))
    assert "dsmhist::histogram" in [node.kind() for node in traced.graph.nodes()]
    y = ids(gen, "cpu", 51).clamp(0, 7)
    assert torch.equal(traced(y), torch.bincount(y, minlength=8))
    traced = torch.jit.trace(lambda t: torch_dsmhist.moe_routing(t.view(10, 10), 8)[0], (x,))
    assert "dsmhist::moe_routing" in [node.kind() for node in traced.graph.nodes()]
