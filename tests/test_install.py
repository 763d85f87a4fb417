"""The install (issue 48, item 13): the package requires the exact torch it was built against, and an import under
another torch raises an ImportError naming both versions and the fix (a bare "undefined symbol" before)."""

import importlib.metadata
import subprocess
import sys

import pytest
import torch

import torch_dsmhist
from torch_dsmhist import _install


def test_requires_the_torch_it_was_built_against():
    built = _install.built_against()
    assert built is not None, "setup.py writes torch_dsmhist/_build_info.py when it builds"
    assert built == torch.__version__
    requires = importlib.metadata.requires("torch_dsmhist") or []
    assert f"torch=={built.split('+')[0]}" in requires, requires


@pytest.mark.parametrize(
    "running, built, ok",
    [
        ("2.13.0", "2.13.0+cpu", True),  # the local build tag does not change the C++ ABI
        ("2.13.0+cu130", "2.13.0", True),
        ("2.14.1", "2.13.0+cpu", False),
        ("2.13.1", "2.13.0", False),
        ("2.99.0", None, True),  # a source tree never built has no record: nothing to compare
    ],
)
def test_check_torch_version(running, built, ok):
    if ok:
        _install.check_torch_version(running, built)
        return
    with pytest.raises(ImportError) as error:
        _install.check_torch_version(running, built)
    text = str(error.value)
    assert running in text and built in text and "pip install --no-build-isolation" in text


def test_import_under_another_torch_names_both_versions():
    script = "import torch; torch.__version__ = '2.99.1'; import torch_dsmhist"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: torch_dsmhist was built against torch " + torch.__version__), last
    assert "torch 2.99.1 is installed" in last and "--no-build-isolation" in last


def test_the_package_namespace_loads_the_extension():
    assert torch_dsmhist._C.__name__ == "torch_dsmhist._C"
    assert hasattr(torch.ops.dsmhist, "histogram")
