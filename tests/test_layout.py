"""The tree's own rules (README, Layout; csrc/README.md): source files stay small, the sanitizer drivers live in
tools/ where pytest does not collect them, and their summary never calls a run clean that did not finish."""

import importlib
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


@pytest.fixture()
def run_sanitizers(monkeypatch):
    monkeypatch.syspath_prepend(str(REPOSITORY / "tools"))
    sys.modules.pop("run_sanitizers", None)
    return importlib.import_module("run_sanitizers")


def test_sanitizer_summary_calls_only_finished_runs_clean(run_sanitizers):
    verdict = run_sanitizers.verdict
    cases = "ok   exchange2 bins=256 uint8 n=1 offset=0 (0.2 s)\nok   exchange2 bins=256 uint8 n=1 offset=1 (0.1 s)\n"
    racecheck_summary = "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    finished = cases + "sanitize_tiers: 2 passed, 0 failed\n========= " + racecheck_summary
    clean, line = verdict("racecheck", 0, finished)
    assert clean and "2 ok, 0 bad" in line
    stopped, line = verdict("racecheck", None, cases)  # stopped at --time-limit: no summary
    assert not stopped and "unfinished, 2 done" in line and line.endswith("FAIL")
    assert not verdict("racecheck", 0, finished.replace("(0 errors", "(1 errors"))[0]
    wrong = cases.replace("ok   exchange2 bins=256 uint8 n=1 offset=1", "FAIL exchange2 bins=256 uint8 n=1 offset=1")
    failed = wrong + "sanitize_tiers: 1 passed, 1 failed\n========= ERROR SUMMARY: 0 errors\n"
    assert not verdict("memcheck", 1, failed)[0]
