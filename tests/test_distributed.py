"""torch_dsmhist.distributed: 2-process runs under torchrun, gloo on CPU (CI) and NCCL on 2 GPUs.

Each backend configuration launches `tests/distributed_scenarios.py` once under torchrun (2 ranks) and every
scenario is reported here as its own test, per rank. The scenarios compare each rank's result with the
single-process op on the concatenated shards and with the independent reference in helpers.py.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import torch_dsmhist
import torch_dsmhist.distributed as dh
from conftest import MULTICAST_OFF, SEED, needs_two_gpus
from distributed_scenarios import CUDA_ONLY, SCENARIOS

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2
CONFIGS = {
    "gloo-cpu": ("gloo", "cpu"),
    "nccl-cuda": ("nccl", "cuda"),  # the agreement check goes through NCCL (and reads back to the host)
    "gloo+nccl-cuda": ("cpu:gloo,cuda:nccl", "cuda"),  # the agreement check goes through gloo on the host
}
CONFIG_PARAMS = [
    pytest.param(name, marks=[] if device == "cpu" else [needs_two_gpus]) for name, (_, device) in CONFIGS.items()
]

_runs = {}


def launch(config: str, tmp_path_factory) -> dict:
    """Run every scenario once for `config` under torchrun; {rank: {scenario: result}} plus the log."""
    if config in _runs:
        return _runs[config]
    backend, device = CONFIGS[config]
    out = tmp_path_factory.mktemp(config)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
               os.path.join(HERE, "distributed_scenarios.py"), "--backend", backend, "--device", device,
               "--out", str(out), "--seed", str(SEED)]
    env = {**os.environ, **MULTICAST_OFF, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        log = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        log = f"timed out after {exc.timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
    results = {}
    for rank in range(WORLD):
        path = out / f"rank{rank}.json"
        results[rank] = json.loads(path.read_text()) if path.exists() else {}
    _runs[config] = {"results": results, "log": log[-6000:]}
    return _runs[config]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("config", CONFIG_PARAMS)
def test_scenario(config, scenario, tmp_path_factory):
    if scenario in CUDA_ONLY and CONFIGS[config][1] != "cuda":
        pytest.skip("CUDA-only scenario")
    run = launch(config, tmp_path_factory)
    skips = []
    for rank in range(WORLD):
        result = run["results"][rank].get(scenario)
        if result is None:
            pytest.fail(f"rank {rank} did not report {scenario!r} (the launch failed or hung); log:\n{run['log']}")
        if result.startswith("skip: "):
            skips.append(f"rank {rank}: {result[6:]}")
        elif result != "ok":
            pytest.fail(f"rank {rank}:\n{result}")
    if skips:
        pytest.skip("; ".join(skips))


def test_not_initialized_is_a_clear_error():
    if dist.is_available() and dist.is_initialized():
        pytest.skip("this process already has a default process group")
    with pytest.raises(RuntimeError, match="not initialized"):
        dh.histogram(torch.arange(4), 4)


def test_range_keys_ops_match_the_data_range(gen):
    """The private range-key ops the distributed module merges: keys of one input give that input's histogram."""
    x = torch.randn(1001, generator=gen) * 7
    keys = torch.ops.dsmhist._finite_range_keys(x)
    got = torch.ops.dsmhist._histogram_with_range_keys(x, 50, keys)
    assert torch.equal(got, torch_dsmhist.histogram(x, 50))
    rows = x[:1000].reshape(10, 100)
    got = torch.ops.dsmhist._histogram_with_range_keys(rows, 50, keys, batched=True)
    assert torch.equal(got, torch_dsmhist.batched_histogram(rows, 50, float(x.min()), float(x.max())))
    empty_keys = torch.ops.dsmhist._finite_range_keys(torch.empty(0))
    assert empty_keys.tolist() == [0, 0]
    with pytest.raises(ValueError, match="floating"):
        torch.ops.dsmhist._finite_range_keys(torch.arange(3))
    with pytest.raises(ValueError, match="range_keys"):
        torch.ops.dsmhist._histogram_with_range_keys(x, 5, keys.int())
