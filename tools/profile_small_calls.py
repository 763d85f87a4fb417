#!/usr/bin/env python3
"""Where the host time of a small call goes (issue 51): host µs per call of the op through each layer (torch.ops,
its overload, the eager entry torch_dsmhist._C, the wrappers), beside torch.histc and an empty kernel launch, the
layers interleaved over --rounds rounds (the least and the median; the host drifts); then a torch.profiler table of one
layer and the compiled routing step with each counting op (per-step device time), unless --host-only.

    python tools/profile_small_calls.py [--out DIR] [--calls 2000] [--rounds 5] [--host-only]
"""

import argparse
import os
import statistics
import time

import torch

import torch_dsmhist
from torch_dsmhist import _C


def host_us(fn, calls: int, repeats: int = 5) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def step_ms(fn, reps: int = 200) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--host-only", action="store_true", help="only the host time per call of each layer")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__)
    experts, tokens, top_k = 256, 64, 8
    ids = torch.randint(0, experts, (tokens, top_k), device=dev)
    ids_f = ids.float()
    small = torch.zeros(16, device=dev)
    hist = torch.zeros(experts, dtype=torch.int64, device=dev)
    op = torch.ops.dsmhist.histogram
    default = op.default
    layers = {
        "empty kernel (small.zero_())": lambda: small.zero_(),
        "torch.empty(256, int64)": lambda: torch.empty(experts, dtype=torch.int64, device=dev),
        "torch.histc(float ids)": lambda: torch.histc(ids_f, experts, 0, experts),
        "torch.bincount (syncs)": lambda: torch.bincount(ids.view(-1), minlength=experts),
        "torch.ops.dsmhist.histogram": lambda: op(ids, experts),
        "torch.ops.dsmhist.histogram.default": lambda: default(ids, experts),
        "torch.ops.dsmhist.histogram.default, no_grad": None,
        "torch_dsmhist._C.histogram (the eager entry)": lambda: _C.histogram(
            ids, experts, None, None, None, "ignore", None
        ),
        "torch_dsmhist.histogram": lambda: torch_dsmhist.histogram(ids, experts),
        "torch.ops.dsmhist.histogram_add_.default": lambda: torch.ops.dsmhist.histogram_add_.default(hist, ids),
        "torch_dsmhist.histogram_add_": lambda: torch_dsmhist.histogram_add_(hist, ids),
        "torch.ops.dsmhist.moe_routing.default": lambda: torch.ops.dsmhist.moe_routing.default(ids, experts),
        "torch_dsmhist.moe_routing": lambda: torch_dsmhist.moe_routing(ids, experts),
        "torch.ops.dsmhist.moe_align_block_size.default": (
            lambda: torch.ops.dsmhist.moe_align_block_size.default(ids, 64, experts)
        ),
        "torch_dsmhist.moe_align_block_size(64)": lambda: torch_dsmhist.moe_align_block_size(ids, 64, experts),
    }

    def no_grad_default() -> None:
        with torch.no_grad():
            default(ids, experts)

    times: dict = {name: [] for name in layers}
    for _ in range(args.rounds):
        for name, fn in layers.items():
            times[name].append(host_us(fn or no_grad_default, args.calls))
    print(
        f"host us per call, {tokens}x{top_k} int64 ids, {experts} experts ({args.calls} calls, median of 5 batches;"
        f" {args.rounds} rounds interleaved): least, median"
    )
    for name, us in times.items():
        print(f"  {name:48s} {min(us):7.2f} {statistics.median(us):7.2f}")
    if args.host_only:
        return

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(200):
            default(ids, experts)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=15))

    def router(logits: torch.Tensor, count) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        _, chosen = probs.topk(top_k, dim=-1)
        counts = count(chosen)
        return torch.cumsum(counts, 0) - counts

    counters = {
        "histc": lambda chosen: torch.histc(chosen.float(), experts, 0, experts).to(torch.int64),
        "dsmhist op": lambda chosen: torch.ops.dsmhist.histogram(chosen, experts),
        "dsmhist op .default": lambda chosen: torch.ops.dsmhist.histogram.default(chosen, experts),
        "torch_dsmhist.histogram": lambda chosen: torch_dsmhist.histogram(chosen, experts),
    }
    for n_tokens in (64, 4096):
        logits = torch.randn(n_tokens, experts, device=dev)
        print(f"compiled routing step, {n_tokens} tokens, {experts} experts, top-{top_k}: ms per step (host loop)")
        for name, count in counters.items():
            torch._dynamo.reset()
            compiled = torch.compile(lambda x, c=count: router(x, c), fullgraph=True)
            eager_ms = step_ms(lambda: router(logits, count))
            ms = step_ms(lambda: compiled(logits))
            print(f"  {name:28s} compiled {ms:.4f}  eager {eager_ms:.4f}")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                compiled(logits)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
