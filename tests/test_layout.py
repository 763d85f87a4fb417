"""The tree's own rules (docs/design.md, the layers; csrc/README.md): source files stay small, the sanitizer drivers
live in tools/ where pytest does not collect them, and their summary never calls a run clean that did not finish.
The documentation's: the README stays short (at most 250 lines), every relative link in the README and docs/ reaches
an existing file (and heading), and every tier of the extension's tier table has its page docs/tiers/<name>.md."""

import importlib
import re
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


README_MAX_LINES = 250  # DESIGN.md: "README.md for users, <= 250 lines"
DOCS = REPOSITORY / "docs"


def markdown_files():
    """The README, every page under docs/, and the other hand-written READMEs and notes that link into docs/."""
    found = [
        REPOSITORY / "README.md",
        REPOSITORY / "csrc" / "README.md",
        REPOSITORY / "tests" / "README.md",
        REPOSITORY / "benchmarks" / "NOTES.md",
    ]
    return found + sorted(DOCS.rglob("*.md"))


def heading_anchors(path: Path) -> set:
    """GitHub's anchors for the headings of a markdown file: lower case, punctuation dropped but '-' and '_', spaces
    to '-', a repeated heading numbered -1, -2, ..."""
    anchors, seen = set(), {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def relative_links(path: Path) -> list:
    """(line number, target) of every markdown link outside code blocks and code spans that is not a URL."""
    links, in_code = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "``", line)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                links.append((number, target))
    return links


def test_readme_is_short():
    lines = len((REPOSITORY / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"
    )


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_every_relative_link_reaches_a_file_and_heading(path):
    assert path.is_file()
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"line {number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
            broken.append(f"line {number}: {target} (no heading #{anchor} in {dest.relative_to(REPOSITORY)})")
    assert not broken, "\n".join(broken)


def test_every_perf_log_entry_is_in_the_index():
    """docs/perf-log/README.md lists every entry ("Every entry, in the order written"): each `## ` heading of a log
    file has a row linking to it."""
    folder = REPOSITORY / "docs" / "perf-log"
    index = {target for _, target in relative_links(folder / "README.md")}
    missing = []
    for log in sorted(folder.glob("20*.md")):
        for line in log.read_text().splitlines():
            if line.startswith("## "):
                slug = re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-")
                if f"{log.name}#{slug}" not in index:
                    missing.append(f"{log.name}: {line}")
    assert not missing, "perf-log entries missing from docs/perf-log/README.md:\n" + "\n".join(missing)


def test_the_link_checker_sees_links_and_headings(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A `b.c` / d\n\n## A `b.c` / d\n\n[x](other.md#y) `[no](code.md)` [u](https://e.org)\n"
        "```\n[no](block.md)\n```\n"
    )
    assert heading_anchors(page) == {"a-bc--d", "a-bc--d-1"}
    assert relative_links(page) == [(5, "other.md#y")]


def test_every_tier_has_a_page():
    from torch_dsmhist._api import tier_table

    names = [tier.name for tier in tier_table()]
    assert names, "the extension's tier table is empty"
    missing = [name for name in names if not (DOCS / "tiers" / f"{name}.md").is_file()]
    assert not missing, f"tiers without a page under docs/tiers/: {missing}"
    index = (DOCS / "tiers" / "README.md").read_text()
    assert all(f"({name}.md)" in index for name in names), "docs/tiers/README.md links every tier's page"
