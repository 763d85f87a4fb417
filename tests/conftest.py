"""Shared fixtures: a per-run seed (printed in the header, in every failure report and in the summary of a run with
failures; fixed with DSMHIST_TEST_SEED) and device parameters."""

import os
import random
import zlib

import pytest
import torch
import torch.distributed

import torch_dsmhist

SEED = int(os.environ.get("DSMHIST_TEST_SEED", random.SystemRandom().randrange(2**31)))
SEED_LINE = f"torch_dsmhist test seed: {SEED} (rerun with DSMHIST_TEST_SEED={SEED})"
CUDA_OK = torch.cuda.is_available() and torch_dsmhist.built_with_cuda()
CUDA_SKIP_REASON = "no CUDA device visible" if not torch.cuda.is_available() else "torch_dsmhist was built without CUDA"


def pytest_report_header(config):
    return [
        SEED_LINE,
        f"torch {torch.__version__}; CUDA tests: {'on, ' + torch.cuda.get_device_name() if CUDA_OK else 'skipped: ' + CUDA_SKIP_REASON}",
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Add the seed to the report of a failing test: its section shows under the failure, with -q too (which hides
    the header), so a CI log is enough to replay the test's random data."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("torch_dsmhist test seed", SEED_LINE))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Repeat the seed after the failure reports of a run that failed (the last lines a CI log shows)."""
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        terminalreporter.write_line(SEED_LINE)


@pytest.fixture
def gen(request) -> torch.Generator:
    """A CPU generator seeded from the run's seed and the test's id: fresh data each run, reproducible by seed."""
    g = torch.Generator()
    g.manual_seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))
    return g


cuda_only = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON)

TWO_GPUS = (
    CUDA_OK
    and torch.cuda.device_count() >= 2
    and torch.distributed.is_available()
    and torch.distributed.is_nccl_available()
)
needs_two_gpus = pytest.mark.skipif(not TWO_GPUS, reason="needs 2 CUDA GPUs, NCCL and a CUDA build")
# Multi-process runs keep NVLink multicast off (the 2-GPU device machines require it; nothing changes on a CPU).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

DEVICES = ["cpu", pytest.param("cuda", marks=cuda_only)]


# `pytest -m smoke`: the first-hour check (CONTRIBUTING.md), under a minute on a 2-core CPU machine: the op's
# contract, the drop-ins, the edges ops, the install and the layout. The full suite stays the gate.
SMOKE_FILES = frozenset(
    {
        "test_ops.py",
        "test_contract.py",
        "test_dropins.py",
        "test_dropins_edges.py",
        "test_edges.py",
        "test_install.py",
        "test_layout.py",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SMOKE_FILES:
            item.add_marker(pytest.mark.smoke)
