#!/usr/bin/env python3
"""A mixture-of-experts layer whose tokens are grouped by expert with torch_dsmhist's routing ops, against the same
layer written in pure torch; eager, under torch.compile(fullgraph=True) and in a CUDA graph.

The layer: router linear -> softmax -> top-k (weights renormalised) -> group the (token, k) pairs by expert -> each
expert's MLP (silu(x W1) W2) -> the outputs weighted and summed back per token. Two ways to group, both deterministic
(each expert's pairs in increasing flat index, on every run and device):

* loop: torch_dsmhist.moe_routing gives counts, offsets and the stable permutation; one counts.tolist() (a single
  synchronisation, for the per-expert slices) and a loop over the experts. The routing part compiles with
  fullgraph=True (no synchronisation in it); the loop stays eager.
* padded: torch_dsmhist.moe_align_block_size pads each expert's pairs to whole blocks, in buffers whose sizes are fixed
  by the shapes (never by the data); the blocks go through one batched matmul with each block's expert weights. No
  synchronisation anywhere: the whole layer compiles with fullgraph=True and captures into a CUDA graph.

The pure-torch layer finds each expert's tokens with torch.where(ids == e) (a synchronisation per expert) and adds its
outputs with index_add_. Outputs must match it (allclose: the sums run in another order), and each torch_dsmhist
version must give bitwise-identical outputs on two runs.

    python examples/moe_layer.py [--device cuda] [--tokens 256] [--hidden 64] [--ffn 128] [--experts 8]
                                 [--top-k 2] [--block-size 16] [--steps 2]

Prints what each check compared and "moe_layer: ok" at the end.
"""

import argparse
from typing import Tuple

import torch

import torch_dsmhist

# The layer's sizes and the number of steps, each also an integer option of the same name (--top-k for top_k).
SIZES = dict(tokens=256, hidden=64, ffn=128, experts=8, top_k=2, block_size=16, steps=2)


class MoeLayer(torch.nn.Module):
    """Top-k routing over `experts` two-layer MLPs (hidden -> ffn -> hidden)."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, block_size: int):
        super().__init__()
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(experts, hidden, ffn) / hidden**0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, ffn, hidden) / ffn**0.5)
        self.experts, self.top_k, self.block_size = experts, top_k, block_size

    def route(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(weights, ids), both [tokens, top_k]: each token's top-k experts, their gate probabilities renormalised."""
        probs = torch.softmax(self.gate(x), dim=-1)
        weights, ids = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), ids

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x @ self.w1[e]) @ self.w2[e]

    def combine(self, per_pair: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Each token's output: its top_k expert outputs ([tokens * top_k, hidden], in flat (token, k) order) weighted
        and summed in a fixed order (no atomics: the same bits on every run)."""
        tokens = weights.shape[0]
        return (per_pair.view(tokens, self.top_k, -1) * weights.unsqueeze(-1)).sum(dim=1)

    # --- torch_dsmhist, loop over experts ---------------------------------------------------------------------

    def route_grouped(self, x: torch.Tensor):
        """The sync-free half of the loop version (compiled with fullgraph=True): routing and its grouping."""
        weights, ids = self.route(x)
        return weights, torch_dsmhist.moe_routing(ids, self.experts)

    def forward_loop(self, x: torch.Tensor, routed=None) -> torch.Tensor:
        weights, (counts, offsets, permutation) = routed if routed is not None else self.route_grouped(x)
        starts = offsets.tolist()  # the one synchronisation: where each expert's slice starts and ends
        pair = permutation.long()  # flat (token, k) index of each pair, grouped by expert
        per_pair = x.new_zeros(x.shape[0] * self.top_k, x.shape[1])
        for e in range(self.experts):
            rows = pair[starts[e] : starts[e + 1]]
            if rows.numel():
                per_pair[rows] = self.expert(e, x[rows // self.top_k])  # unique rows: a plain scatter
        return self.combine(per_pair, weights)

    # --- torch_dsmhist, padded blocks (sync-free) ---------------------------------------------------------------

    def forward_padded(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.route(x)
        pairs = ids.numel()
        # pad_sorted_ids: the sorted ids fill whole blocks, so they view as [blocks, block_size].
        sorted_ids, expert_ids, _ = torch_dsmhist.moe_align_block_size(
            ids, self.block_size, self.experts, pad_sorted_ids=True
        )
        slot = sorted_ids.long()  # a pair's flat index, or `pairs` in a padding slot
        # Padding slots read an extra zero row of x and write an extra row of the output, dropped at the end.
        x_padded = torch.cat([x, x.new_zeros(1, x.shape[1])])
        token = torch.where(slot < pairs, slot // self.top_k, x.shape[0])
        blocks = x_padded[token].view(-1, self.block_size, x.shape[1])  # [blocks, block_size, hidden]
        expert = expert_ids.long().clamp(min=0)  # blocks past the used ones (-1) hold padding only: any expert will do
        h = torch.nn.functional.silu(torch.bmm(blocks, self.w1[expert]))
        y = torch.bmm(h, self.w2[expert]).view(-1, x.shape[1])
        per_pair = x.new_zeros(pairs + 1, x.shape[1])
        per_pair[slot] = y  # each pair's row once; every padding row lands in the extra row
        return self.combine(per_pair[:pairs], weights)

    # --- pure torch ----------------------------------------------------------------------------------------------

    def forward_torch(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.route(x)
        out = torch.zeros_like(x)
        for e in range(self.experts):
            token, k = torch.where(ids == e)  # synchronises (a data-dependent size)
            if token.numel():
                out.index_add_(0, token, self.expert(e, x[token]) * weights[token, k].unsqueeze(-1))
        return out


def check_close(got: torch.Tensor, want: torch.Tensor, what: str) -> float:
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"moe_layer: {what} differs from the pure-torch layer (max |diff| {diff(got, want):.3g})")
    return diff(got, want)


def check_same(first: torch.Tensor, second: torch.Tensor, what: str) -> None:
    if not torch.equal(first, second):
        raise SystemExit(f"moe_layer: {what}: two runs differ (max |diff| {diff(first, second):.3g})")


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def check_routing(layer: MoeLayer, x: torch.Tensor, routed, what: str) -> None:
    """The routing ops against torch: counts = bincount, permutation = stable argsort; the aligned blocks hold every
    pair once, each in a block of its expert."""
    _, ids = layer.route(x)
    flat = ids.reshape(-1)
    counts, offsets, permutation = routed[1]
    if not torch.equal(counts.long(), torch.bincount(flat, minlength=layer.experts)):
        raise SystemExit(f"moe_layer: {what}: moe_routing's counts differ from torch.bincount")
    if not torch.equal(permutation.long(), torch.argsort(flat, stable=True)):
        raise SystemExit(f"moe_layer: {what}: moe_routing's permutation differs from argsort(stable=True)")
    sorted_ids, expert_ids, total = torch_dsmhist.moe_align_block_size(ids, layer.block_size, layer.experts)
    used = sorted_ids[: int(total)].long()
    pair = used[used < flat.numel()]
    if not torch.equal(pair.sort().values, torch.arange(flat.numel(), device=flat.device)):
        raise SystemExit(f"moe_layer: {what}: moe_align_block_size's sorted ids do not hold every pair once")
    block_of = (used < flat.numel()).nonzero().squeeze(1) // layer.block_size
    if not torch.equal(expert_ids[block_of].long(), flat[pair]):
        raise SystemExit(f"moe_layer: {what}: a pair sits in a block of another expert")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in SIZES.items():  # --tokens, --hidden, ..., --top-k, --block-size, --steps
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    layer = MoeLayer(args.hidden, args.ffn, args.experts, args.top_k, args.block_size).to(device)
    inputs = [torch.randn(args.tokens, args.hidden, device=device) for _ in range(args.steps)]

    with torch.no_grad():
        wants = [layer.forward_torch(x) for x in inputs]
        for name, forward in (("loop", layer.forward_loop), ("padded", layer.forward_padded)):
            worst = 0.0
            for step, (x, want) in enumerate(zip(inputs, wants)):
                first = forward(x)
                worst = max(worst, check_close(first, want, f"eager {name}, step {step}"))
                check_same(first, forward(x), f"eager {name}, step {step}")
            print(f"eager, {name}: {args.steps} steps match the pure-torch layer (max |diff| {worst:.3g}); "
                  "bitwise identical on two runs")  # fmt: skip
        check_routing(layer, inputs[0], layer.route_grouped(inputs[0]), "eager")

        route_compiled = torch.compile(layer.route_grouped, fullgraph=True)
        padded_compiled = torch.compile(layer.forward_padded, fullgraph=True)
        worst_loop = worst_padded = 0.0
        for step, (x, want) in enumerate(zip(inputs, wants)):
            routed = route_compiled(x)
            check_routing(layer, x, routed, f"compiled routing, step {step}")
            first = layer.forward_loop(x, routed)
            worst_loop = max(worst_loop, check_close(first, want, f"compiled routing + eager loop, step {step}"))
            check_same(first, layer.forward_loop(x, route_compiled(x)), f"compiled routing + eager loop, step {step}")
            first = padded_compiled(x)
            worst_padded = max(worst_padded, check_close(first, want, f"compiled padded layer, step {step}"))
            check_same(first, padded_compiled(x), f"compiled padded layer, step {step}")
        print(f"torch.compile(fullgraph=True) routing + eager loop: {args.steps} steps match (max |diff| "
              f"{worst_loop:.3g}); bitwise identical on two runs")  # fmt: skip
        print(f"torch.compile(fullgraph=True) padded layer: {args.steps} steps match (max |diff| {worst_padded:.3g}); "
              "bitwise identical on two runs")  # fmt: skip

        if device.type == "cuda":
            static_x = inputs[0].clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up outside the capture, as CUDA graphs require
                layer.forward_padded(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = layer.forward_padded(static_x)
            worst, replays = 0.0, []
            for step, (x, want) in enumerate(zip(inputs, wants)):
                static_x.copy_(x)
                graph.replay()
                worst = max(worst, check_close(static_out, want, f"CUDA graph replay {step}"))
                replays.append(static_out.clone())
            static_x.copy_(inputs[0])
            graph.replay()
            check_same(replays[0], static_out, "CUDA graph replay")
            print(f"CUDA graph (padded layer): {args.steps} replays match the pure-torch layer (max |diff| "
                  f"{worst:.3g}); bitwise identical on two replays")  # fmt: skip
        else:
            print("CUDA graph: skipped (no CUDA device)")
    print("moe_layer: ok")


if __name__ == "__main__":
    main()
