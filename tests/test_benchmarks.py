"""The benchmark scripts' shared ground (CPU only, nothing timed): every bench_*.py imports benchmarks/benchlib.py and
no other script, and each rewrites only its own marked section of RESULTS.md, so the order they run in does not
matter."""

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))
SECTION = re.compile(r"<!-- ([\w-]+):begin -->(.*?)<!-- \1:end -->", flags=re.S)


@pytest.fixture()
def benchlib(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("benchlib", None)
    return importlib.import_module("benchlib")


def imported_modules(path: Path) -> set:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_imports_benchlib_and_no_other_script(script):
    modules = imported_modules(script)
    assert "benchlib" in modules
    assert not {m for m in modules if m.startswith("bench_")}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_imports_on_cpu(script, benchlib, monkeypatch):
    monkeypatch.setattr(sys, "argv", [script.name])
    sys.modules.pop(script.stem, None)
    module = importlib.import_module(script.stem)
    assert callable(module.main)


def test_recorded_results_are_all_in_marked_sections():
    text = (BENCHMARKS / "RESULTS.md").read_text()
    outside = SECTION.sub("", text).strip()
    assert outside == ""
    names = [m.group(1) for m in SECTION.finditer(text)]
    assert len(names) == len(set(names))


def test_a_section_is_rewritten_in_place_and_the_others_kept(benchlib, tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text((BENCHMARKS / "RESULTS.md").read_text())
    monkeypatch.setattr(benchlib, "RESULTS", results)
    before = dict(SECTION.findall(results.read_text()))
    order = [name for name, _ in SECTION.findall(results.read_text())]

    benchlib.write_results_section("plan", "# new plan figures\n\n| a |\n")
    benchlib.write_results_section("a-new-benchmark", "# appended")
    after_text = results.read_text()
    after = dict(SECTION.findall(after_text))

    assert after["plan"].strip() == "# new plan figures\n\n| a |"
    assert after["a-new-benchmark"].strip() == "# appended"
    assert {k: v for k, v in after.items() if k not in ("plan", "a-new-benchmark")} == \
        {k: v for k, v in before.items() if k != "plan"}
    assert [name for name, _ in SECTION.findall(after_text)] == order + ["a-new-benchmark"]
    out_dir = tmp_path / "out"
    benchlib.write_results_section("plan", "# again", out_dir)
    assert (out_dir / "RESULTS.md").read_text() == results.read_text()
