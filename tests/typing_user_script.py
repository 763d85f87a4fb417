"""A user's script calling every public function of torch_dsmhist; tests/test_typing.py runs `mypy --strict` on it.

Not a test module (pytest does not collect it): it is checked, not run.
"""

import torch

import torch_dsmhist
import torch_dsmhist.distributed as dh
from torch_dsmhist import dropins


def counts(ids: torch.Tensor, feature: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    results: list[torch.Tensor] = [
        torch_dsmhist.histogram(ids, 8),
        torch_dsmhist.histogram(feature, 16, min=0.0, max=1.0, weight=weights, out_of_range="clamp"),
        torch_dsmhist.histogram(ids, 8, dtype=torch.int32),
        torch_dsmhist.batched_histogram(ids.view(2, -1), 8),
        torch_dsmhist.histogram_edges(feature, torch.linspace(0.0, 1.0, 5)),
        torch_dsmhist.histogramdd(feature.view(-1, 2), [torch.linspace(0.0, 1.0, 3)] * 2),
        torch_dsmhist.bincount(ids, weights=weights, minlength=3),
        torch_dsmhist.histc(feature, bins=10, min=0.0, max=1.0),
        dropins.bincount(ids),
        dropins.histc(feature),
    ]
    out = torch.zeros(8, dtype=torch.int64)
    results.append(torch_dsmhist.histogram(ids, 8, out=out, accumulate=True))
    results.append(torch_dsmhist.histogram_add_(out, ids))
    hist, edges = dropins.histogram(feature, 4, range=(0.0, 1.0))
    results += [hist, edges]
    hist_dd, edges_dd = dropins.histogramdd(feature.view(-1, 2), [2, 3])
    results += [hist_dd, *edges_dd]
    return results


def routing(topk_ids: torch.Tensor) -> int:
    sorted_ids, expert_ids, total = torch_dsmhist.moe_align_block_size(topk_ids, 16, 8, pad_sorted_ids=True)
    routed: torch_dsmhist.MoeRouting = torch_dsmhist.moe_routing(topk_ids, 8, block_size=4)
    counts: torch.Tensor = routed.counts
    return int(sorted_ids.numel() + expert_ids.numel() + total.numel() + counts.sum() + routed.permutation.numel())


def strategy() -> str:
    chosen: torch_dsmhist.Plan = torch_dsmhist.plan(4096, "cpu", torch.int32, n=1 << 20)
    with torch_dsmhist.force_tier("auto"):
        pass
    cuda: bool = torch_dsmhist.built_with_cuda()
    version: str = torch_dsmhist.__version__
    return f"{chosen.tier} {chosen.cluster_size} {cuda} {version}"


def distributed(shard: torch.Tensor) -> torch.Tensor:
    global_hist = dh.histogram(shard, 8)
    assert isinstance(global_hist, torch.Tensor)
    local = torch_dsmhist.histogram(shard, 8)
    dh.all_reduce_histogram(local)
    edges = torch.linspace(0.0, 8.0, 9)
    by_edges = dh.histogram_edges(shard.float(), edges)
    points = dh.histogramdd(shard.float().reshape(-1, 1), [edges])
    assert isinstance(by_edges, torch.Tensor) and isinstance(points, torch.Tensor)
    return local
