"""DSMHIST_LOG_LAUNCHES=1: one stderr line per histogram run saying what ran, agreeing with plan()."""

import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import cuda_only

SCRIPT = """
import sys, torch, torch_dsmhist
device = sys.argv[1]
torch.set_num_threads(2)
x = torch.randint(0, 1000, (300001,), generator=torch.Generator().manual_seed(0)).to(device)
torch_dsmhist.histogram(x, 1000)
torch_dsmhist.batched_histogram(x[:300000].view(3, -1), 1000)
if device == "cuda":
    torch.cuda.synchronize()
    p = torch_dsmhist.plan(1000, device, torch.int64, n=x.numel())
    print(f"PLAN tier {p.tier}, grid {p.grid_blocks}, cluster {p.cluster_size}, threads {p.threads_per_block}, "
          f"shared {p.shared_bytes_per_block}")
"""


def run(device, log):
    env = {k: v for k, v in os.environ.items() if k != "DSMHIST_LOG_LAUNCHES"}
    if log is not None:
        env["DSMHIST_LOG_LAUNCHES"] = log
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, device], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, [line for line in result.stderr.splitlines() if line.startswith("torch_dsmhist launch:")]


@pytest.mark.parametrize("log, lines", [(None, 0), ("0", 0), ("1", 2)])
def test_cpu_launch_log(log, lines):
    _, logged = run("cpu", log)
    assert len(logged) == lines
    if lines:
        assert (
            logged[0] == "torch_dsmhist launch: torch_dsmhist.histogram on cpu: tier cpu, 2 threads, bins 1000, "
            "rows 1 x 300001"
        )
        assert logged[1].startswith(
            "torch_dsmhist launch: torch_dsmhist.batched_histogram on cpu: tier cpu"
        ) and logged[1].endswith("rows 3 x 100000")


@cuda_only
def test_cuda_launch_log_says_what_plan_says():
    stdout, logged = run("cuda", "1")
    assert len(logged) == 2, logged
    plan = re.search(r"PLAN tier (\w+), grid (\d+), cluster (\d+), threads (\d+), shared (\d+)", stdout).groups()
    line = logged[0]
    assert f"tier {plan[0]}," in line and f"grid {plan[1]}," in line and f"cluster {plan[2]}," in line, (line, plan)
    assert f"threads {plan[3]}," in line and f"shared {plan[4]} bytes/block" in line, (line, plan)
    assert "variant counts of int64 by value" in line and "bins 1000" in line
    _, quiet = run("cuda", None)
    assert quiet == []
    assert torch.cuda.is_available()
