"""The tree's own rules (README, Layout; csrc/README.md): source files stay small, the sanitizer drivers live in
tools/ where pytest does not collect them."""

import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
MAX_LINES = 420  # "no source file over ~400 lines"


def source_files():
    found = [p for p in (REPOSITORY / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    return sorted(found + list((REPOSITORY / "torch_dsmhist").glob("*.py")))


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_no_source_file_is_long(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_sanitizer_drivers_are_tools_not_tests():
    assert (REPOSITORY / "tools" / "run_sanitizers.py").is_file()
    assert (REPOSITORY / "tools" / "sanitize_tiers.py").is_file()
    assert not list((REPOSITORY / "tests").glob("*saniti*"))
    if sys.version_info >= (3, 11):
        import tomllib

        config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
        assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
