#!/usr/bin/env python3
"""Top-k MoE router whose tokens-per-expert counts come from torch_dsmhist inside a compiled step and a CUDA graph.

A mixture-of-experts layer routes every token to its k best experts and needs, on every step, how many tokens each
expert received (to size expert buffers and for the load-balancing loss). torch.bincount cannot do this inside a
CUDA graph (it reads the input's max back to the host); torch_dsmhist.histogram with a fixed bin count never
synchronises, so the whole step compiles with torch.compile(fullgraph=True) and captures into a CUDA graph.

    python examples/moe_router.py [--device cuda] [--tokens 8192] [--experts 64] [--top-k 2] [--steps 5]

Every step's counts are checked against torch.bincount; prints "moe_router: ok" at the end.
"""

import argparse

import torch

import torch_dsmhist


class TopKRouter(torch.nn.Module):
    """Scores tokens against experts and keeps each token's top-k experts."""

    def __init__(self, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.experts = experts
        self.top_k = top_k

    def forward(self, tokens: torch.Tensor):
        probs = torch.softmax(self.gate(tokens), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)  # [tokens, k]
        # Tokens per expert: a histogram of the chosen expert ids, no host sync.
        counts = torch_dsmhist.histogram(experts, self.experts)
        # Switch-Transformer load-balancing loss: fraction routed x mean gate probability, per expert.
        fraction = counts.float() / experts.numel()
        balance_loss = self.experts * (fraction * probs.mean(dim=0)).sum()
        return experts, weights, counts, balance_loss


def check(counts: torch.Tensor, experts: torch.Tensor, n_experts: int, what: str) -> None:
    expected = torch.bincount(experts.reshape(-1).cpu(), minlength=n_experts)
    if not torch.equal(counts.cpu(), expected):
        raise SystemExit(f"moe_router: {what} counts differ from torch.bincount")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)

    router = TopKRouter(args.hidden, args.experts, args.top_k).to(device)
    compiled = torch.compile(router, fullgraph=True)
    with torch.no_grad():
        for step in range(args.steps):
            tokens = torch.randn(args.tokens, args.hidden, device=device)
            experts, _, counts, loss = compiled(tokens)
            check(counts, experts, args.experts, f"compiled step {step}")
        print(f"compiled step: {args.steps} steps match torch.bincount; last balance loss {loss.item():.4f}")
        print(f"tokens per expert (last step, first 8): {counts[:8].tolist()}")

        if device.type == "cuda":
            static_tokens = torch.randn(args.tokens, args.hidden, device=device)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up outside the capture, as CUDA graphs require
                router(static_tokens)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                g_experts, _, g_counts, _ = router(static_tokens)
            for step in range(args.steps):
                static_tokens.copy_(torch.randn(args.tokens, args.hidden, device=device))
                graph.replay()
                check(g_counts, g_experts, args.experts, f"CUDA graph replay {step}")
            print(f"CUDA graph: {args.steps} replays match torch.bincount")
        else:
            print("CUDA graph: skipped (no CUDA device)")
    print("moe_router: ok")


if __name__ == "__main__":
    main()
