"""Shared fixtures: a per-run seed (printed in the header, fixed with DSMHIST_TEST_SEED) and device parameters."""

import os
import random
import zlib

import pytest
import torch

import torch_dsmhist

SEED = int(os.environ.get("DSMHIST_TEST_SEED", random.SystemRandom().randrange(2**31)))
CUDA_OK = torch.cuda.is_available() and torch_dsmhist.built_with_cuda()
CUDA_SKIP_REASON = (
    "no CUDA device visible" if not torch.cuda.is_available() else "torch_dsmhist was built without CUDA"
)


def pytest_report_header(config):
    return [
        f"torch_dsmhist test seed: {SEED} (rerun with DSMHIST_TEST_SEED={SEED})",
        f"torch {torch.__version__}; CUDA tests: {'on, ' + torch.cuda.get_device_name() if CUDA_OK else 'skipped: ' + CUDA_SKIP_REASON}",
    ]


@pytest.fixture
def gen(request) -> torch.Generator:
    """A CPU generator seeded from the run's seed and the test's id: fresh data each run, reproducible by seed."""
    g = torch.Generator()
    g.manual_seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))
    return g


cuda_only = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)

DEVICES = ["cpu", pytest.param("cuda", marks=cuda_only)]
