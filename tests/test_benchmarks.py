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
    assert {k: v for k, v in after.items() if k not in ("plan", "a-new-benchmark")} == {
        k: v for k, v in before.items() if k != "plan"
    }
    assert [name for name, _ in SECTION.findall(after_text)] == order + ["a-new-benchmark"]
    out_dir = tmp_path / "out"
    benchlib.write_results_section("plan", "# again", out_dir)
    assert (out_dir / "RESULTS.md").read_text() == results.read_text()


@pytest.fixture()
def bench_edges(benchlib):
    sys.modules.pop("bench_edges", None)
    return importlib.import_module("bench_edges")


@pytest.mark.parametrize("edge_count", [2, 3, 101, 1000])
def test_bench_edges_torch_idiom_follows_torch_histogram(bench_edges, gen, edge_count):
    """The bucketize + bincount contender bins as torch.histogram does: values on edges (the last one included),
    outside the edges, NaN, repeated edges, a strided view."""
    import torch

    edges = torch.randn(edge_count, generator=gen).sort().values
    edges[edge_count // 2] = edges[max(0, edge_count // 2 - 1)]  # a repeated edge: an empty bin
    values = torch.randn(2 * 30011, generator=gen) * 1.5
    values[:64] = edges[torch.randint(0, edge_count, (64,), generator=gen)]
    values[64:70] = edges[-1]
    values[70] = float("nan")
    strided = values[::2]
    want = torch.histogram(strided.contiguous(), edges).hist.long()
    assert torch.equal(bench_edges.bucketize_bincount(strided, edges), want)

    points = torch.randn(20011, 2, generator=gen)
    per_dim = [torch.randn(edge_count, generator=gen).sort().values for _ in range(2)]
    points[:50, 0] = per_dim[0][-1]
    points[50:100, 1] = per_dim[1][0]
    want = torch.histogramdd(points, bins=per_dim).hist.long()
    assert torch.equal(bench_edges.linearised_bincount(points, per_dim), want)


def test_bench_edges_verdicts_name_each_missed_target(bench_edges, benchlib):
    cases = {case.label: case for case in bench_edges.CASES}
    Cell, Result = benchlib.Cell, bench_edges.Result
    met = Result(cases["1000 edges"], cells={"op": Cell(0.1), "cupy": Cell(1.4)})
    assert bench_edges.verdict(met) == "met"
    slow = Result(cases["10000 edges"], cells={"op": Cell(0.5), "cupy": Cell(1.5)})
    assert bench_edges.verdict(slow) == "missed: 0.5 ms is 1.43x the 0.35 ms target; 3.0x CuPy, not 4.8x"
    no_cupy = Result(cases["10000 edges"], cells={"op": Cell(0.2)})
    assert bench_edges.verdict(no_cupy) == "met (CuPy not measured)"

    linspace = cases["1000 bins, linspace edges"]
    assert bench_edges.verdict(Result(linspace, cells={"op": Cell(0.12), "minmax": Cell(0.1)})) == "met"
    assert bench_edges.verdict(Result(linspace, cells={"op": Cell(0.15), "minmax": Cell(0.1)})) == (
        "missed: dsmhist op 0.15 ms is 1.50x op with min/max's 0.1 ms, not <= 1.2x"
    )
    assert bench_edges.verdict(Result(linspace, cells={"op": Cell(0.15)})) == "met (op with min/max not measured)"

    small = cases["2-D, 64x64 bins"]
    assert bench_edges.verdict(Result(small, cells={"op": Cell(0.2), "dropin": Cell(0.21)})) == "met"
    assert bench_edges.verdict(Result(small, cells={"op": Cell(0.3), "dropin": Cell(0.36)})) == (
        "missed: 0.3 ms is 1.20x the 0.25 ms target; dsmhist drop-in 0.36 ms is 1.20x dsmhist op's 0.3 ms, not <= 1.1x"
    )
    failed_dropin = Result(small, cells={"op": Cell(0.2), "dropin": Cell(status="FAIL")})
    assert bench_edges.verdict(failed_dropin) == "met (dsmhist drop-in not measured)"
    large = cases["2-D, 1024x1024 bins"]
    assert bench_edges.verdict(Result(large, cells={"op": Cell(0.7), "dropin": Cell(0.7)})) == (
        "missed: 0.7 ms is 1.17x the 0.6 ms target"
    )
    assert bench_edges.verdict(Result(large, cells={"op": Cell(status="FAIL")})) == "not measured: the op failed"
    cube = cases["3-D, 16x16x16 bins"]
    assert bench_edges.verdict(Result(cube, cells={"op": Cell(0.25), "dropin": Cell(0.25)})) == (
        "missed: 0.25 ms is 1.25x the 0.2 ms target"
    )

    # Sizes, the floor's bytes and the two-stage contender's tier follow each case.
    assert bench_edges.sizes(cases["1000 edges"], quick=False) == (2**26, 2**22)
    assert bench_edges.sizes(cube, quick=False) == (2**25, 2**21)
    assert bench_edges.sizes(cases["1000 edges"], quick=True) == (2**20, 2**16)
    assert bench_edges.input_bytes(cases["1000 edges"], 2**26) == 2**28
    assert bench_edges.input_bytes(large, 2**26) == 2**29
    assert bench_edges.input_bytes(cube, 2**25) == 3 * 2**27
    assert [bench_edges.stages_tier(c) for c in bench_edges.CASES] == [
        "shared",  # 99 bins
        "shared",  # 999
        "shared",  # 9999
        "shared",  # 1000 (linspace)
        "shared",  # 4096
        "exchange",  # 65536
        "partition",  # 1048576
        "shared",  # 4096 (3-D)
    ]

    fused = Result(cases["1000 edges"], cpu_scale=16.0, cells={"op": Cell(0.1), "stages": Cell(0.25), "cpu": Cell(5)})
    section = bench_edges.render([met, slow, fused, Result(cube)], 3e12, "a GPU", "not installed", quick=False)
    assert section.count("\n| ") == 5  # header and four rows
    assert "| 1000 edges | 2^26 values | 0.1 |" in section and "2^22 of 2^26, 2^21 of 2^25" in section
    assert "| 3-D, 16x16x16 bins | 2^25 points [N, 3] |" in section
    assert "| 2.5x |" in section and "| 800.0x |" in section  # two stages / op; torch CPU scaled by 16
    assert "issue 50" in section


@pytest.fixture()
def suite_targets(benchlib):
    sys.modules.pop("suite_targets", None)
    return importlib.import_module("suite_targets")


def test_suite_targets_name_each_miss_and_what_was_not_measured(suite_targets):
    """Issue 15's verdicts from a bench_suite run: a met target, a miss by how much, a case the run lacks."""
    uniform = {131072: 0.59, 262144: 0.9, 524288: 0.97, 1048576: 1.05, 4194304: 0.99, 16777216: 1.66}
    histc = {262144: 3.13, 524288: 3.13, 1048576: 3.13, 16777216: 12.0}
    zipf = {1048576: 1.35}

    def ms(section, distribution, label, contender):
        if section == "bins":
            bins = int(label)
            table = {("uniform", "auto"): uniform, ("uniform", "histc"): histc, ("zipf", "auto"): zipf}
            return table.get((distribution, contender), {}).get(bins)
        if section == "dtypes" and label == "uint8, 2^30, 256 bins" and contender == "auto":
            return 0.355
        if section == "sizes" and label.endswith("65536 bins"):
            return {"auto": 0.0057, "histc": 0.0039}[contender] if label.startswith("2^16") else 0.0190
        return None

    verdicts = {target.split(":")[0]: verdict for target, _, verdict in suite_targets.judge(ms)}
    assert verdicts["128K bins"] == "met"
    assert verdicts["256K-1M bins"] == "missed: 1.05 ms is 1.31x the 0.8 ms target; 2.98x torch.histc, not 3.9x"
    assert verdicts["4M bins"] == "met"
    assert verdicts["16M bins"] == "missed: 1.66 ms is 1.04x the 1.6 ms target; 7.23x torch.histc, not 7.5x"
    assert (
        verdicts["no distribution > 1.25x uniform's time at the same bins (128K-16M)"]
        == "missed: 1.29x at 1048576 bins (zipf)"
    )
    assert verdicts["uniform"] == "met"
    assert verdicts["uint8, 2^30 values, 256 bins"] == "met"
    assert verdicts["float32 with a range, 256 bins"] == "not measured"
    assert verdicts["2^16-2^20 values at 65536 bins"] == "missed: 2^16 1.46x torch.histc"
    section = "\n".join(suite_targets.render(ms))
    assert section.count("\n| ") == len(verdicts) + 1  # header and one row a target
    assert "measured elsewhere" in section


@pytest.fixture()
def bench_moe(benchlib):
    sys.modules.pop("bench_moe", None)
    return importlib.import_module("bench_moe")


def contract_alignment(ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    """moe_align_block_size's contract (torch_dsmhist/_moe.py) as a python loop: each expert's flat indices in
    increasing order, padded with numel to whole blocks, the experts in (global) order; the tail holds numel, the
    blocks past the used ones -1."""
    flat = ids.reshape(-1).tolist()
    numel = len(flat)
    local = expert_map.tolist() if expert_map is not None else list(range(num_experts))
    groups = [[] for _ in range(num_experts)]
    for i, e in enumerate(flat):
        if 0 <= e < num_experts and local[e] >= 0:
            groups[e].append(i)
    sorted_ids, expert_ids = [], []
    for e, group in enumerate(groups):
        share = -(-len(group) // block_size) * block_size
        sorted_ids += group + [numel] * (share - len(group))
        expert_ids += [local[e]] * (share // block_size)
    total = len(sorted_ids)
    size = numel + num_experts * (block_size - 1)
    if pad_sorted_ids:
        size = -(-size // block_size) * block_size
    size = min(numel * block_size, size)
    sorted_ids += [numel] * (size - total)
    expert_ids += [-1] * (-(-size // block_size) - len(expert_ids))
    return sorted_ids, expert_ids, [total]


def test_bench_moe_torch_alignment_follows_the_contract(bench_moe, gen):
    """The pure-torch alignment the benchmark checks the op against (and times) gives the contract's outputs:
    dropped ids (out of range, mapped to -1), an expert map, pad_sorted_ids, block size 1, empty and 1-D input."""
    import torch

    cases = 0
    for num_experts in (1, 3, 8, 64):
        for block_size in (1, 2, 5, 16):
            for shape in ((0,), (1, 1), (7,), (33, 2), (64, 8)):
                ids = torch.randint(-2, num_experts + 3, shape, generator=gen)
                expert_map = torch.randint(-1, num_experts, (num_experts,), generator=gen)
                for dtype, mapped, pad in ((torch.int64, None, False), (torch.int32, expert_map, True)):
                    got = bench_moe.torch_align_block_size(ids.to(dtype), block_size, num_experts, mapped, pad)
                    want = contract_alignment(ids, block_size, num_experts, mapped, pad)
                    assert [t.dtype for t in got] == [torch.int32] * 3
                    assert [t.tolist() for t in got] == list(want), (num_experts, block_size, shape, pad)
                    assert got[0].numel() == bench_moe.sorted_size(ids.numel(), block_size, num_experts, pad)
                    cases += 1
    assert cases == 160
    # The docstring's example.
    got = bench_moe.torch_align_block_size(torch.tensor([[2, 0], [0, 1]]), 2, 3)
    assert [t.tolist() for t in got] == [[1, 2, 3, 4, 0, 4, 4], [0, 1, 2, -1], [6]]


def test_bench_moe_routing_idiom_and_ids(bench_moe, gen):
    """bincount + cumsum + argsort(stable=True) is the block-1 alignment of valid ids (what moe_routing returns);
    the benchmark's ids are top_k distinct experts per token."""
    import torch

    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    ids = bench_moe.routing_ids(300, 8, 64, torch.int64, g)
    assert ids.shape == (300, 8) and ids.dtype == torch.int64
    assert all(len(set(row)) == 8 for row in ids.tolist()) and 0 <= int(ids.min()) and int(ids.max()) < 64
    counts, offsets, permutation = bench_moe.torch_routing(ids, 64)
    sorted_ids, _, total = bench_moe.torch_align_block_size(ids, 1, 64)
    assert torch.equal(permutation, sorted_ids.long()) and int(offsets[-1]) == int(total) == ids.numel()
    assert torch.equal(offsets[1:] - offsets[:-1], counts)
    assert bench_moe.same([counts.int(), offsets], [counts, offsets.int()]) is None
    assert bench_moe.same([counts], [counts + 1]) == "output 0: 64 of 64 elements differ"


def test_bench_moe_verdicts_name_the_worst_case(bench_moe, benchlib):
    Cell, Row = benchlib.Cell, bench_moe.Row
    align = [
        Row(1, 8, 64, 64, {"op_graph": Cell(4.0), "op_host": Cell(6.0), "torch_host": Cell(300.0)}),
        Row(4096, 8, 64, 64, {"op_graph": Cell(12.5), "op_host": Cell(13.0), "torch_host": Cell(400.0)}),
        Row(16384, 8, 64, 64, {"op_graph": Cell(status="ERROR"), "op_events": Cell(20.0), "op_host": Cell(21.0)}),
    ]
    counting = [Row(16, 2, 8, 0, {"dsmhist_host": Cell(7.5)})]
    verdicts = dict(bench_moe.eager_verdicts(align, counting))
    targets = list(verdicts)
    assert verdicts[targets[0]] == (
        "missed: 12.5 µs at 4096 tokens x top-8, 64 experts, block 64 (1 of 2 cases miss 10 µs)"
    )
    assert verdicts[targets[1]] == "met (worst 20 µs at 16384 tokens x top-8, 64 experts, block 64)"
    assert verdicts[targets[2]].startswith("missed: 13 µs at 4096 tokens")
    assert verdicts[targets[3]] == "met (worst 50.0x at 1 tokens x top-8, 64 experts, block 64)"
    assert verdicts[targets[4]] == "met (worst 7.5 µs at 16 tokens x top-2, 8 experts)"
    compiled = [Row(1, 8, 256, 0, {"histc": Cell(30.0), "ops": Cell(31.0)}), Row(16, 8, 256, 0, {"histc": Cell(9.0)})]
    assert bench_moe.compiled_verdicts(compiled)[0][1] == (
        "missed: 0.97x at 1 tokens x top-8, 256 experts (1 of 1 cases miss 1.00x); 1 of 2 cases not measured"
    )
    assert bench_moe.eager_verdicts([], [])[0][1] == "not measured"
    section = bench_moe.render(bench_moe.QUICK, True, "a GPU", align, [], counting)
    assert "| 4096 | 8 | 64 | 64 | 32768 | 12.5 |" in section and "### Targets" in section
    assert bench_moe.failures(align) == ["op, CUDA graph @ 16384 tokens x top-8, 64 experts, block 64: ERROR ()"]
