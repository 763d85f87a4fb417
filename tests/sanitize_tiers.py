"""Small runs of every tier, forced, for compute-sanitizer (not collected by pytest).

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python tests/sanitize_tiers.py

Each case is checked against the reference too; the exit status is non-zero if any case is wrong.
"""

import sys

import torch
from helpers import cluster_available, make_index_values, make_range_values, reference_histogram, shared_capacity

import torch_dsmhist


def cases(gen: torch.Generator):
    capacity = shared_capacity()
    tiers = [("shared", None, 1000), ("global", None, 1000), ("global", None, 100003)]
    if cluster_available():
        tiers += [("cluster", 2, 1000), ("cluster", 3, 100003), ("cluster", None, 262144)]
    for tier, size, bins in tiers:
        x = make_index_values(10007, bins, torch.int32, "uniform", gen).cuda()
        yield f"{tier}{size or ''} bins={bins} int32 contiguous+offset", tier, size, x[3:], bins, {}
        yield f"{tier}{size or ''} bins={bins} int32 strided", tier, size, x[:10000].reshape(100, 100)[:, 1::3], bins, {}
        f = make_range_values(4099, -1.0, 1.0, torch.float16, "uniform", gen).cuda()
        w = torch.rand(4099, generator=gen, dtype=torch.float64).cuda()
        yield f"{tier}{size or ''} bins={bins} fp16 data range", tier, size, f, bins, {}
        yield f"{tier}{size or ''} bins={bins} fp16 fp32-weighted clamp", tier, size, f, bins, dict(
            min=-0.5, max=0.5, weight=w.float(), out_of_range="clamp"
        )
        if bins <= capacity // 2:  # float64 sums take 8 bytes a bin
            yield f"{tier}{size or ''} bins={bins} fp16 fp64-weighted", tier, size, f, bins, dict(
                min=-0.5, max=0.5, weight=w
            )


def main() -> int:
    gen = torch.Generator().manual_seed(1234)
    failures = 0
    count = 0
    for name, tier, size, x, bins, kwargs in cases(gen):
        with torch_dsmhist.force_tier(tier, size):
            out = torch_dsmhist.histogram(x, bins, **kwargs).cpu()
        expected = reference_histogram(x, bins, **kwargs)
        tolerance = 1e-5 if out.dtype == torch.float32 else 1e-9
        ok = out.dtype == expected.dtype and torch.allclose(out.double(), expected.double(), rtol=tolerance, atol=tolerance)
        failures += not ok
        count += 1
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    print(f"sanitize_tiers: {count - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
