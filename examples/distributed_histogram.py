#!/usr/bin/env python3
"""Global histograms of a dataset sharded across processes, with torch_dsmhist.distributed under torchrun.

Each process (rank) holds its own shard of a token dataset and of a floating feature column. The example computes:
  1. the global token histogram in one call (local count + one all-reduce);
  2. the same by streaming: each rank adds its batches into a local histogram with no communication, then one
     all_reduce_histogram at the end (the cheap pattern for a long pass over data);
  3. a histogram of the feature whose range is taken from the data of all ranks (the ranks' min/max merged first);
and checks each against the single-process histogram of all shards together (every rank can regenerate every
shard, since they are seeded by rank).

    torchrun --standalone --nproc-per-node=2 examples/distributed_histogram.py [--device cpu|cuda] [--tokens N]

On CUDA each rank uses GPU LOCAL_RANK and the group is "cpu:gloo,cuda:nccl" (NCCL sums the histograms, gloo runs
the ranks' agreement check on the host); on the CPU it is gloo. Rank 0 prints "distributed_histogram: ok".
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

import torch_dsmhist
import torch_dsmhist.distributed as dh


def shard(rank: int, tokens: int, vocab: int, device: torch.device):
    """Rank `rank`'s token ids (Zipf-like, a different skew per rank) and feature values (a shifted Gaussian)."""
    g = torch.Generator().manual_seed(1234 + rank)
    size = tokens + 1009 * rank  # uneven shards
    ranks_of_ids = torch.rand(size, generator=g).pow(3 + rank)  # mass near 0: small ids are frequent
    ids = (ranks_of_ids * vocab).long().clamp_(max=vocab - 1)
    feature = torch.randn(size, generator=g) * (1 + rank) + 3 * rank
    return ids.to(device), feature.to(device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, default=1 << 20, help="tokens per rank (about)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--bins", type=int, default=64, help="bins of the feature histogram")
    parser.add_argument("--batch", type=int, default=1 << 16, help="batch size of the streaming pass")
    args = parser.parse_args()

    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ids, feature = shard(rank, args.tokens, args.vocab, device)

    # 1. One call: every rank gets the global token counts.
    counts = dh.histogram(ids, args.vocab)

    # 2. Streaming: local running histogram, one all-reduce at the end.
    running = torch.zeros(args.vocab, dtype=torch.int64, device=device)
    for batch in ids.split(args.batch):
        torch_dsmhist.histogram_add_(running, batch)
    dh.all_reduce_histogram(running)

    # 3. The feature over the range of all ranks' data.
    feature_hist = dh.histogram(feature, args.bins)

    every = [shard(r, args.tokens, args.vocab, device) for r in range(world)]
    all_ids = torch.cat([s[0] for s in every])
    all_feature = torch.cat([s[1] for s in every])
    failures = []
    if not torch.equal(counts, torch.bincount(all_ids, minlength=args.vocab)):
        failures.append("global token counts differ from torch.bincount of all shards")
    if not torch.equal(running, counts):
        failures.append("the streamed histogram differs from the one-call histogram")
    if not torch.equal(feature_hist, torch_dsmhist.histogram(all_feature, args.bins)):
        failures.append("the feature histogram differs from the single-process histogram of all shards")
    if int(feature_hist.sum()) != all_feature.numel():
        failures.append("the feature histogram does not count every value")

    if rank == 0:
        top = counts.topk(5)
        lo, hi = all_feature.min().item(), all_feature.max().item()
        print(f"{world} ranks on {device.type}, {all_ids.numel()} tokens in all")
        print("most frequent ids:", ", ".join(f"{i}: {c}" for i, c in zip(top.indices.tolist(), top.values.tolist())))
        print(f"feature histogram over the global range [{lo:.3f}, {hi:.3f}]: {feature_hist.tolist()[:8]} ...")
    dist.destroy_process_group()
    if failures:
        print(f"rank {rank}: " + "; ".join(failures), file=sys.stderr)
        return 1
    if rank == 0:
        print("distributed_histogram: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
