"""The public API type-checks for users: `mypy --strict` on a script that calls every public function."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("typing_user_script.py")


@pytest.mark.skipif(shutil.which("mypy") is None and not Path(sys.executable).with_name("mypy").exists(),
                    reason="mypy is not installed (pip install '.[dev]')")
def test_mypy_strict_on_a_user_script():
    # From the repository root, where mypy finds the package (an editable install's import hook is invisible to it).
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SCRIPT)],
                            capture_output=True, text=True, timeout=900, cwd=SCRIPT.parent.parent)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
