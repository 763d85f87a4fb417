"""The public API type-checks for users: `mypy --strict` on a script that calls every public function."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("typing_user_script.py")


@pytest.mark.skipif(
    shutil.which("mypy") is None and not Path(sys.executable).with_name("mypy").exists(),
    reason="mypy is not installed (pip install '.[dev]')",
)
def test_mypy_strict_on_a_user_script():
    # From the repository root, where mypy finds the package (an editable install's import hook is invisible to it).
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=SCRIPT.parent.parent,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_every_public_function_documents_what_it_raises():
    """help() shows each public function's Raises, TypeError (a wrong Python type) included."""
    import inspect

    import torch_dsmhist
    from torch_dsmhist import dropins

    functions = [getattr(torch_dsmhist, name) for name in torch_dsmhist.__all__] + [
        getattr(dropins, name) for name in dropins.__all__
    ]
    for fn in functions:
        if not inspect.isfunction(fn) or fn.__name__ in ("built_with_cuda",):
            continue
        doc = inspect.getdoc(fn) or ""
        assert "Raises:" in doc and "TypeError" in doc, f"{fn.__module__}.{fn.__name__}"


def test_demo_help_is_plain_text():
    result = subprocess.run(
        [sys.executable, "-m", "torch_dsmhist", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "``" not in result.stdout and ":func:" not in result.stdout, result.stdout
