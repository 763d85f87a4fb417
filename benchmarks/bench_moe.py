#!/usr/bin/env python3
"""Mixture-of-experts routing on the GPU: torch_dsmhist.moe_align_block_size and moe_routing against the pure-torch
ways of doing the same, the token-counting idioms, and the compiled routing step, beside the issue's targets.

    python benchmarks/bench_moe.py [--quick] [--compiled-only] [--compiled-all] [--out-dir DIR] [--seed S]

Cases: tokens in {1, 16, 256, 4096, 16384, 65536} x top_k in {2, 8} x experts in {8, 64, 128, 256}; the alignment
also over block_size in {16, 64, 256} (--quick: tokens {1, 256, 16384}, top_k 8, experts {8, 256}, block 64). The ids
are the top-k of uniform random scores (top_k distinct experts per token): int32 for the alignment (vLLM's dtype),
int64 (torch.topk's) for routing and counting. Sections:
  a) moe_align_block_size against the pure-torch alignment of this file (torch_align_block_size: bincount with
     minlength, padded cumsum, stable argsort, a scatter into a sentinel-filled buffer, the expert of each block by
     repeat_interleave; it synchronises twice, in torch.bincount and in repeat_interleave's data-dependent size);
  b) moe_routing against bincount + cumsum + argsort(stable=True);
  c) the counting idioms torch.histc(ids.float(), bins=E, min=0, max=E), torch.bincount(ids.flatten(), minlength=E)
     and torch_dsmhist.histogram(ids, E);
  d) the routing step logits [tokens, E] -> softmax -> topk -> counts -> exclusive offsets under
     torch.compile(fullgraph=True, dynamic=False), counting with torch.histc, torch.ops.dsmhist.histogram or
     torch_dsmhist.moe_routing; (top_k, experts) in (2, 8), (8, 64), (8, 128), (8, 256) (the shapes of Mixtral,
     OLMoE, Qwen3-MoE and DeepSeek-V3; --compiled-all: every top_k x experts). One compile per case and version
     (2-4 s each on a warm cache), so this part takes a few minutes; --compiled-only runs it alone.
Every case is checked first: the op's outputs must equal the pure-torch ones exactly (each expert's ids in increasing
flat index, so the order is deterministic); a torch_dsmhist mismatch is FAIL and the script exits 1.
Device time: CUDA-graph replays of 20 calls (benchlib.graph_ms, no host launch overhead) where the call can be
captured, and the median of CUDA events around single calls (host gaps included: the pure-torch versions
synchronise). Host time: benchlib.host_us, back-to-back eager calls in 5 batches (one synchronize each), the median
batch. Writes two sections of benchmarks/RESULTS.md (moe-benchmark: a-c; moe-compiled-step: d) and plots/moe_align.png,
plots/moe_compiled.png.
Without CUDA it runs a small CPU comparison (the op against the pure-torch versions, wall time) and writes nothing.
"""

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from benchlib import (
    HERE,
    Cell,
    copy_into,
    event_ms,
    exit_status,
    first_line,
    fmt,
    git_commit,
    graph_ms,
    host_us,
    log,
    md_table,
    median_event_ms,
    progress,
    release,
    throughput_plot,
    today,
    torch_dsmhist,
    wall_median_ms,
    write_results_section,
)

SECTION = "moe-benchmark"  # sections a-c of RESULTS.md
SECTION_COMPILED = "moe-compiled-step"  # section d
DEVICE = "cuda"
PLOTS = HERE / "plots"
STARTED = time.perf_counter()
DECODE_TOKENS = 256  # "decode sizes": tokens <= this
SMALL_IDS = 32768  # the 10 µs device-time band: <= 32K ids
LARGE_IDS = 262144  # the 25 µs band: (32K, 256K] ids

LABELS = {
    "op_graph": "op, CUDA graph",
    "op_events": "op, events",
    "op_host": "op, host",
    "torch_events": "torch, events",
    "torch_host": "torch, host",
    "histc_graph": "histc, CUDA graph",
    "histc_host": "histc, host",
    "bincount_events": "bincount, events",
    "bincount_host": "bincount, host",
    "dsmhist_graph": "dsmhist, CUDA graph",
    "dsmhist_host": "dsmhist, host",
    "histc": "torch.histc",
    "ops": "torch.ops.dsmhist.histogram",
    "routing": "torch_dsmhist.moe_routing",
}
OURS = ("op_graph", "op_events", "op_host", "dsmhist_graph", "dsmhist_host", "ops", "routing")


@dataclass(frozen=True)
class Config:
    tokens: Tuple[int, ...]
    top_ks: Tuple[int, ...]
    experts: Tuple[int, ...]
    blocks: Tuple[int, ...]
    compiled: Tuple[Tuple[int, int], ...]  # (top_k, experts) of the compiled step
    warmup: int
    reps: int
    host_calls: int
    compiled_rounds: int  # interleaved rounds of the compiled step (each version timed once a round)


FULL = Config(
    tokens=(1, 16, 256, 4096, 16384, 32768, 65536),  # 32768 x top-8: the 256K-id point of the 25 µs target
    top_ks=(2, 8),
    experts=(8, 64, 128, 256),
    blocks=(16, 64, 256),
    compiled=((2, 8), (8, 64), (8, 128), (8, 256)),
    warmup=5,
    reps=30,
    host_calls=200,
    compiled_rounds=100,
)
QUICK = Config(
    tokens=(1, 256, 16384),
    top_ks=(8,),
    experts=(8, 256),
    blocks=(64,),
    compiled=((8, 256),),
    warmup=3,
    reps=10,
    host_calls=100,
    compiled_rounds=20,
)


@dataclass
class Row:
    """One case of a section: its sizes (block 0 where the section has none) and its cells, in µs."""

    tokens: int
    top_k: int
    experts: int
    block: int = 0
    cells: Dict[str, Cell] = field(default_factory=dict)

    @property
    def ids(self) -> int:
        return self.tokens * self.top_k

    @property
    def label(self) -> str:
        text = f"{self.tokens} tokens x top-{self.top_k}, {self.experts} experts"
        return text + (f", block {self.block}" if self.block else "")

    def value(self, *names: str) -> Optional[float]:
        """The first of `names` that was measured (a device time: the graph's, else the events')."""
        for name in names:
            cell = self.cells.get(name)
            if cell is not None and cell.measured is not None:
                return cell.measured
        return None


# ---------------------------------------------------------------------------------------------------------------
# The pure-torch versions (run on any device, so tests/test_benchmarks.py checks them on the CPU)
# ---------------------------------------------------------------------------------------------------------------


def sorted_size(numel: int, block_size: int, num_experts: int, pad_sorted_ids: bool = False) -> int:
    """The length of sorted_token_ids: min(numel * block_size, numel + num_experts * (block_size - 1)), the second
    term rounded up to block_size with pad_sorted_ids (fixed by the arguments, never by the data)."""
    padded = numel + num_experts * (block_size - 1)
    if pad_sorted_ids:
        padded = -(-padded // block_size) * block_size
    return min(numel * block_size, padded)


def torch_align_block_size(
    ids: torch.Tensor, block_size: int, num_experts: int, expert_map: Optional[torch.Tensor] = None, pad: bool = False
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """moe_align_block_size in plain torch, as a user without vLLM writes it: (sorted_token_ids, expert_ids,
    num_tokens_post_pad), int32, equal to the op's (each expert's ids in increasing flat index: the stable argsort);
    `pad` is the op's pad_sorted_ids.

    It synchronises twice on CUDA: torch.bincount reads the ids' max back, and repeat_interleave (the expert of each
    block) reads its output size back. Dropped ids (outside [0, num_experts), or mapped to a negative local id) go
    to a spare expert num_experts that sorts last and is cut off."""
    flat = ids.reshape(-1).long()
    numel = flat.numel()
    valid = (flat >= 0) & (flat < num_experts)
    if expert_map is not None:
        valid &= expert_map.long()[flat.clamp(0, num_experts - 1)] >= 0
    key = torch.where(valid, flat, num_experts)
    counts = torch.bincount(key, minlength=num_experts + 1)[:num_experts]
    padded = (counts + block_size - 1) // block_size * block_size
    padded_starts = torch.cumsum(padded, 0) - padded
    starts = torch.cumsum(counts, 0) - counts
    order = torch.argsort(key, stable=True)  # flat indices grouped by expert, in increasing flat index
    expert = key[order]
    size = sorted_size(numel, block_size, num_experts, pad)
    kept = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    rank = torch.arange(numel, device=flat.device) - starts[e]  # the id's place among its expert's ids
    slot = torch.where(kept, padded_starts[e] + rank, size)  # dropped ids: a spare slot past the end, cut off
    sorted_ids = torch.full((size + 1,), numel, dtype=torch.int32, device=flat.device)
    sorted_ids[slot] = order.int()
    blocks = -(-size // block_size)
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), padded // block_size)
    if expert_map is not None:
        block_expert = expert_map.long()[block_expert]
    expert_ids = torch.full((blocks,), -1, dtype=torch.int32, device=flat.device)
    expert_ids[: block_expert.numel()] = block_expert.int()
    return sorted_ids[:size], expert_ids, padded.sum().reshape(1).int()


def torch_routing(topk_ids: torch.Tensor, num_experts: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The torchtitan-style routing idiom: (counts, offsets [num_experts + 1], permutation), int64; for ids all in
    [0, num_experts), what moe_routing(topk_ids, num_experts) gives (as int32)."""
    flat = topk_ids.reshape(-1)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return counts, offsets, torch.argsort(flat, stable=True)


def routing_ids(tokens: int, top_k: int, experts: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """[tokens, top_k] expert ids: the top-k of uniform random scores (top_k distinct experts per token)."""
    scores = torch.rand(tokens, experts, generator=gen, device=gen.device)
    return scores.topk(top_k, dim=-1).indices.to(dtype)


def same(ours: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor]) -> Optional[str]:
    """None when every output equals its pure-torch counterpart exactly (dtypes aside), else which one differs."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a.shape != b.shape:
            return f"output {i}: shape {tuple(a.shape)}, expected {tuple(b.shape)}"
        differing = int((a.long() != b.long()).sum())
        if differing:
            return f"output {i}: {differing} of {b.numel()} elements differ"
    return None


# ---------------------------------------------------------------------------------------------------------------
# The compiled routing step (section d)
# ---------------------------------------------------------------------------------------------------------------


def step_histc(logits: torch.Tensor, top_k: int):
    experts = logits.shape[-1]
    weights, ids = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    counts = torch.histc(ids.float(), bins=experts, min=0, max=experts).long()
    return weights, ids, counts, torch.cumsum(counts, 0) - counts


def step_ops(logits: torch.Tensor, top_k: int):
    experts = logits.shape[-1]
    weights, ids = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    counts = torch.ops.dsmhist.histogram(ids, experts)
    return weights, ids, counts, torch.cumsum(counts, 0) - counts


def step_routing(logits: torch.Tensor, top_k: int):
    experts = logits.shape[-1]
    weights, ids = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    routing = torch_dsmhist.moe_routing(ids, experts)
    return weights, ids, routing.counts, routing.offsets[:-1], routing.permutation


STEPS: Dict[str, Callable] = {"histc": step_histc, "ops": step_ops, "routing": step_routing}


def check_step(name: str, out: Sequence[torch.Tensor], experts: int) -> Optional[str]:
    """None when the step's counts, offsets (and permutation) follow from its own ids, else what differs."""
    ids = out[1].reshape(-1)
    counts, offsets, permutation = torch_routing(ids, experts)
    expected = [counts, offsets[:-1]] + ([permutation] if name == "routing" else [])
    return same(list(out[2:]), expected)


# ---------------------------------------------------------------------------------------------------------------
# Verdicts and the RESULTS.md sections (pure python)
# ---------------------------------------------------------------------------------------------------------------


def us(x: float) -> str:
    return f"{fmt(x)} µs"


def times(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def judge(
    figures: Sequence[Tuple[str, Optional[float]]], limit: float, at_least: bool, show: Callable[[float], str]
) -> str:
    """ "met (worst ...)" or "missed: ..." with the worst figure and where, from (case label, figure) pairs (None:
    not measured); "not measured" when none was. at_least: the figure must be >= limit, else <= limit."""
    measured = [(where, value) for where, value in figures if value is not None]
    unmeasured = len(figures) - len(measured)
    if not measured:
        return "not measured"
    where, worst = (min if at_least else max)(measured, key=lambda pair: pair[1])
    misses = sum(1 for _, value in measured if (value < limit if at_least else value > limit))
    tail = f"; {unmeasured} of {len(figures)} cases not measured" if unmeasured else ""
    if misses:
        return f"missed: {show(worst)} at {where} ({misses} of {len(measured)} cases miss {show(limit)}){tail}"
    return f"met (worst {show(worst)} at {where}){tail}"


def ratio(theirs: Optional[float], ours: Optional[float]) -> Optional[float]:
    return theirs / ours if theirs and ours else None


def eager_verdicts(align: Sequence[Row], counting: Sequence[Row]) -> List[Tuple[str, str]]:
    """(target, verdict) of every target of sections a and c."""
    device = lambda r: r.value("op_graph", "op_events")  # noqa: E731
    small = [r for r in align if r.ids <= SMALL_IDS]
    large = [r for r in align if SMALL_IDS < r.ids <= LARGE_IDS]
    decode = [r for r in align if r.tokens <= DECODE_TOKENS]
    return [
        (
            "moe_align_block_size device time <= 10 µs at <= 32K ids",
            judge([(r.label, device(r)) for r in small], 10.0, False, us),
        ),
        (
            "moe_align_block_size device time <= 25 µs at 32K-256K ids",
            judge([(r.label, device(r)) for r in large], 25.0, False, us),
        ),
        (
            "moe_align_block_size eager host time per call <= 12 µs (at <= 32K ids, where the kernel takes <= 10 µs)",
            judge([(r.label, r.value("op_host")) for r in small], 12.0, False, us),
        ),
        (
            f"moe_align_block_size >= 20x the pure-torch alignment's host time at decode sizes (tokens <= {DECODE_TOKENS})",
            judge([(r.label, ratio(r.value("torch_host"), r.value("op_host"))) for r in decode], 20.0, True, times),
        ),
        (
            f"torch_dsmhist.histogram eager host time <= 10 µs at decode sizes (tokens <= {DECODE_TOKENS})",
            judge([(r.label, r.value("dsmhist_host")) for r in counting if r.tokens <= DECODE_TOKENS], 10.0, False, us),
        ),
    ]


def compiled_verdicts(compiled: Sequence[Row]) -> List[Tuple[str, str]]:
    return [
        (
            "compiled step with torch.ops.dsmhist.histogram >= 1.0x the torch.histc version (histc time / op time) "
            "at every size",
            judge([(r.label, ratio(r.value("histc"), r.value("ops"))) for r in compiled], 1.0, True, times),
        )
    ]


def failures(rows: Sequence[Row]) -> List[str]:
    return [
        f"{LABELS.get(name, name)} @ {row.label}: {cell.status} ({cell.note})"
        for row in rows
        for name, cell in row.cells.items()
        if cell.failed and name in OURS
    ]


def text(row: Row, name: str) -> str:
    cell = row.cells.get(name)
    return "" if cell is None else cell.text()


def ratio_text(theirs: Optional[float], ours: Optional[float]) -> str:
    value = ratio(theirs, ours)
    return "" if value is None else times(value)


def notes_of(rows: Sequence[Row]) -> List[str]:
    notes: Dict[str, List[str]] = {}
    for row in rows:
        for name, cell in row.cells.items():
            if cell.note:
                key = f"{'*' if cell.status == 'ok' else cell.status}: {LABELS.get(name, name)}: {cell.note}"
                notes.setdefault(key, []).append(row.label)
    return [f"- {note} — {', '.join(where[:4])}{' …' if len(where) > 4 else ''}" for note, where in notes.items()]


def footer_lines(rows: Sequence[Row], plot_and_reproduce: str) -> List[str]:
    """The end of a section: the notes on its rows' cells (if any), then where its plot is and how to rerun it."""
    notes = notes_of(rows)
    return (["Notes:", ""] + notes + [""] if notes else []) + [plot_and_reproduce]


def op_against_torch_table(sizes: Sequence[str], rows: Sequence[Row]) -> List[str]:
    """The table of sections a and b: each row's `sizes` (Row attributes, also the column names), the op's and the
    pure-torch version's cells, and how many times faster the op is on the device and on the host."""
    names = ("op_graph", "op_events", "op_host", "torch_events", "torch_host")
    return md_table(
        list(sizes) + [LABELS[n] for n in names] + ["device: torch events / op graph", "host: torch / op"],
        (
            [getattr(r, size) for size in sizes]
            + [text(r, n) for n in names]
            + [
                ratio_text(r.value("torch_events"), r.value("op_graph", "op_events")),
                ratio_text(r.value("torch_host"), r.value("op_host")),
            ]
            for r in rows
        ),
    )


def header_lines(title: str, quick: bool, device: str, broken: List[str]) -> List[str]:
    lines = [f"## {title}" + (" (--quick: a smoke run, not reference numbers)" if quick else ""), ""]
    if broken:
        lines += ["**CORRECTNESS FAILURES:** " + "; ".join(broken), ""]
    lines += [
        f"- Device: {device}; torch {torch.__version__}; torch_dsmhist {torch_dsmhist.__version__}; date {today()}; "
        f"git commit: {git_commit()}; {time.perf_counter() - STARTED:.0f} s since the script started",
    ]
    return lines


def render(
    cfg: Config, quick: bool, device: str, align: Sequence[Row], routing: Sequence[Row], counting: Sequence[Row]
) -> str:
    lines = header_lines(
        "MoE routing: moe_align_block_size, moe_routing and token counting",
        quick,
        device,
        failures([*align, *routing, *counting]),
    )
    lines += [
        "- Ids: the top-k of uniform random scores, top_k distinct experts per token. µs per call. CUDA graph: "
        f"device time per call from CUDA-graph replays of 20 calls (median of {cfg.reps} replays); events: median of "
        f"{cfg.reps} CUDA-event timings of single calls after {cfg.warmup} warm-up calls (host gaps included, so a "
        f"call that synchronises shows its whole time); host: {cfg.host_calls} back-to-back eager calls in 5 batches "
        "of one synchronize each, the median batch (benchlib.host_us).",
        "- a) moe_align_block_size (int32 ids) against `torch_align_block_size` (bench_moe.py): bincount with "
        "minlength, padded cumsum, stable argsort, scatter into a sentinel-filled buffer, the expert of each block by "
        "repeat_interleave; 2 synchronisations (bincount's max, repeat_interleave's size), so it cannot be captured "
        "in a CUDA graph. b) moe_routing (int64 ids) against bincount + cumsum + argsort(stable=True). c) "
        "`torch.histc(ids.float(), bins=E, min=0, max=E)`, `torch.bincount(ids.flatten(), minlength=E)` (synchronises: "
        "events only) and `torch_dsmhist.histogram(ids, E)`, int64 ids. Every op result equals the pure-torch one "
        "exactly (checked once per case before timing).",
        "",
        "### Targets",
        "",
    ]
    lines += md_table(["target", "verdict"], eager_verdicts(align, counting))
    lines += ["### a) moe_align_block_size against the pure-torch alignment", ""]
    lines += op_against_torch_table(("tokens", "top_k", "experts", "block", "ids"), align)
    lines += ["### b) moe_routing against bincount + cumsum + argsort(stable=True)", ""]
    lines += op_against_torch_table(("tokens", "top_k", "experts", "ids"), routing)
    lines += ["### c) counting the ids: torch.histc, torch.bincount, torch_dsmhist.histogram", ""]
    names = ("histc_graph", "bincount_events", "dsmhist_graph", "histc_host", "bincount_host", "dsmhist_host")
    lines += md_table(
        ["tokens", "top_k", "experts", "ids"] + [LABELS[n] for n in names] + ["host: best torch / dsmhist"],
        (
            [r.tokens, r.top_k, r.experts, r.ids]
            + [text(r, n) for n in names]
            + [
                ratio_text(
                    min(filter(None, (r.value("histc_host"), r.value("bincount_host"))), default=None),
                    r.value("dsmhist_host"),
                )
            ]
            for r in counting
        ),
    )
    lines += footer_lines(
        [*align, *routing, *counting],
        "Plot: [device time vs ids](plots/moe_align.png). Reproduce: `python benchmarks/bench_moe.py` (`--quick` for a "
        "smoke run).",
    )
    return "\n".join(lines) + "\n"


def render_compiled(cfg: Config, quick: bool, device: str, compiled: Sequence[Row]) -> str:
    lines = header_lines("MoE routing step under torch.compile(fullgraph=True)", quick, device, failures(compiled))
    lines += [
        "- The step: router logits [tokens, E] float32 -> softmax -> topk -> counts -> exclusive offsets (cumsum), "
        "compiled with `torch.compile(fullgraph=True, dynamic=False)`, one compile per case; counts by "
        "`torch.histc(ids.float(), bins=E, min=0, max=E)`, by `torch.ops.dsmhist.histogram(ids, E)`, or by "
        "`torch_dsmhist.moe_routing(ids, E)` (which also returns the stable permutation). µs per step: median of "
        f"{cfg.compiled_rounds} CUDA-event timings of single calls of the compiled function, the three versions "
        f"interleaved (one call of each a round), after {cfg.warmup} warm-up calls each (its host overhead included, "
        "the same in all three). "
        "Each version's counts and offsets are checked against bincount + cumsum of its own ids.",
        "",
        "### Target",
        "",
    ]
    lines += md_table(["target", "verdict"], compiled_verdicts(compiled))
    names = ("histc", "ops", "routing")
    lines += md_table(
        ["tokens", "top_k", "experts"]
        + [LABELS[n] for n in names]
        + ["histc / ops (target >= 1.0x)", "histc / moe_routing"],
        (
            [r.tokens, r.top_k, r.experts]
            + [text(r, n) for n in names]
            + [ratio_text(r.value("histc"), r.value("ops")), ratio_text(r.value("histc"), r.value("routing"))]
            for r in compiled
        ),
    )
    lines += footer_lines(
        compiled,
        "Plot: [histc time / op time](plots/moe_compiled.png). Reproduce: `python benchmarks/bench_moe.py "
        "--compiled-only` (`--quick` for a smoke run).",
    )
    return "\n".join(lines) + "\n"


def plot_align(align: Sequence[Row]) -> Optional[Path]:
    """Device time vs ids of the op (CUDA graph) and the pure-torch alignment (events), one pair of lines per
    expert count, at the block size nearest 64 (the median where two cases share an id count)."""
    if not align:
        return None
    block = min({r.block for r in align}, key=lambda b: (abs(b - 64), b))
    series: Dict[str, List[Tuple[float, float]]] = {}
    styles: Dict[str, Dict[str, str]] = {}
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for i, experts in enumerate(sorted({r.experts for r in align})):
        rows = [r for r in align if r.block == block and r.experts == experts]
        for key, label, style in (
            (("op_graph", "op_events"), f"moe_align_block_size, {experts} experts", "-"),
            (("torch_events",), f"pure-torch alignment, {experts} experts", "--"),
        ):
            by_ids: Dict[int, List[float]] = {}
            for r in rows:
                value = r.value(*key)
                if value is not None:
                    by_ids.setdefault(r.ids, []).append(value)
            series[label] = [(ids, statistics.median(v)) for ids, v in sorted(by_ids.items())]
            styles[label] = {"linestyle": style, "color": colors[i % len(colors)]}
    path = PLOTS / "moe_align.png"
    title = f"{torch.cuda.get_device_name()}: moe_align_block_size, block {block}"
    ok = throughput_plot(path, series, title, "ids (tokens x top_k)", ylabel="µs per call", styles=styles)
    return path if ok else None


def plot_compiled(compiled: Sequence[Row]) -> Optional[Path]:
    """histc time / op time of the compiled step vs tokens, per (top_k, experts), with the 1.0x target."""
    series: Dict[str, List[Tuple[float, float]]] = {}
    for r in compiled:
        for name in ("ops", "routing"):
            value = ratio(r.value("histc"), r.value(name))
            if value is not None:
                label = f"histc / {'op' if name == 'ops' else 'moe_routing'}, top-{r.top_k}, {r.experts} experts"
                series.setdefault(label, []).append((r.tokens, value))
    if not series:
        return None
    path = PLOTS / "moe_compiled.png"
    title = f"{torch.cuda.get_device_name()}: compiled routing step, histc time / ours"
    ok = throughput_plot(path, series, title, "tokens", ylabel="histc time / time (> 1: faster)", floor=(1.0, "target"))
    return path if ok else None


# ---------------------------------------------------------------------------------------------------------------
# Measuring (CUDA)
# ---------------------------------------------------------------------------------------------------------------


def device_cells(prefix: str, call: Callable[[], object], cfg: Config, capturable: bool = True) -> Dict[str, Cell]:
    """{prefix_graph or prefix_events, prefix_host}: device and host µs of `call`; a call that cannot be captured
    (RuntimeError) is timed by events, with the error noted."""
    cells: Dict[str, Cell] = {}
    if capturable:
        try:
            cells[f"{prefix}_graph"] = Cell(graph_ms(call, cfg.reps) * 1e3)
        except RuntimeError as error:
            cells[f"{prefix}_graph"] = Cell(status="ERROR", note=f"CUDA graph capture: {first_line(error)}")
            torch.cuda.synchronize()
    cells[f"{prefix}_events"] = Cell(median_event_ms(call, cfg.warmup, cfg.reps) * 1e3)
    cells[f"{prefix}_host"] = host_us(call, cfg.host_calls)
    return cells


def measure_against(row: Row, op: Callable[[], Any], reference: Callable[[], Any], what: str, cfg: Config) -> None:
    """Check the op against its pure-torch version once, then time both (the reference as "torch" cells)."""
    try:
        wrong = same(op(), reference())
    except RuntimeError as error:
        row.cells["op_graph"] = Cell(status="ERROR", note=first_line(error))
        return
    if wrong:
        row.cells["op_graph"] = Cell(status="FAIL", note=f"differs from {what}: {wrong}")
        return
    row.cells.update(device_cells("op", op, cfg))
    row.cells.update({k.replace("ref", "torch"): v for k, v in device_cells("ref", reference, cfg, False).items()})


def measure_align(row: Row, gen: torch.Generator, cfg: Config) -> None:
    ids = routing_ids(row.tokens, row.top_k, row.experts, torch.int32, gen)
    measure_against(
        row,
        lambda: torch_dsmhist.moe_align_block_size(ids, row.block, row.experts),
        lambda: torch_align_block_size(ids, row.block, row.experts),
        "the pure-torch alignment",
        cfg,
    )


def measure_routing(row: Row, gen: torch.Generator, cfg: Config) -> None:
    ids = routing_ids(row.tokens, row.top_k, row.experts, torch.int64, gen)
    measure_against(
        row,
        lambda: torch_dsmhist.moe_routing(ids, row.experts),
        lambda: torch_routing(ids, row.experts),
        "bincount + cumsum + argsort",
        cfg,
    )


def measure_counting(row: Row, gen: torch.Generator, cfg: Config) -> None:
    ids = routing_ids(row.tokens, row.top_k, row.experts, torch.int64, gen)
    E = row.experts
    calls = {
        "histc": lambda: torch.histc(ids.float(), bins=E, min=0, max=E),
        "bincount": lambda: torch.bincount(ids.flatten(), minlength=E),
        "dsmhist": lambda: torch_dsmhist.histogram(ids, E),
    }
    expected = torch.bincount(ids.flatten(), minlength=E)
    for name, call in calls.items():
        wrong = same([call()], [expected])
        if wrong and name == "dsmhist":
            row.cells["dsmhist_graph"] = Cell(status="FAIL", note=f"differs from torch.bincount: {wrong}")
            continue
        cells = device_cells(name, call, cfg, capturable=name != "bincount")
        if cells.get(f"{name}_graph", Cell(status="n/a")).measured is not None:
            cells.pop(f"{name}_events")  # the graph's time is the device time; the events' add host gaps
        if wrong:  # torch.histc's float32 arithmetic (not at power-of-two expert counts)
            cells[f"{name}_host"].note = f"its counts differ from torch.bincount's ({wrong}); timed anyway"
        row.cells.update(cells)


def measure_compiled(row: Row, gen: torch.Generator, cfg: Config) -> None:
    logits = torch.randn(row.tokens, row.experts, generator=gen, device=DEVICE)
    torch._dynamo.reset()  # one compile per case and version, static shapes (no recompile limit to hit)
    ready: Dict[str, Callable[[], object]] = {}
    for name, step in STEPS.items():
        try:
            compiled = torch.compile(step, fullgraph=True, dynamic=False)
            wrong = check_step(name, compiled(logits, row.top_k), row.experts)
        except Exception as error:  # a compile failure is the finding: record it and go on
            row.cells[name] = Cell(status="ERROR", note=first_line(error))
            continue
        if wrong and name in OURS:
            row.cells[name] = Cell(status="FAIL", note=f"counts or offsets differ from its ids': {wrong}")
            continue
        note = f"its counts differ from torch.bincount's ({wrong}); timed anyway" if wrong else ""
        row.cells[name] = Cell(note=note)
        ready[name] = lambda c=compiled: c(logits, row.top_k)
    # Interleaved rounds (each version once a round): the step is host-bound, and timing the versions one after the
    # other let the host's drift decide ratios near 1 (a 0.63x that was 1.0x on a rerun).
    times: Dict[str, List[float]] = {name: [] for name in ready}
    for fn in ready.values():
        for _ in range(cfg.warmup):
            fn()
    for _ in range(cfg.compiled_rounds):
        for name, fn in ready.items():
            times[name] += event_ms(fn, 1)
    for name, samples in times.items():
        row.cells[name].value = statistics.median(samples) * 1e3


def run_section(
    desc: str, rows: List[Row], measure: Callable[[Row, torch.Generator, Config], None], cfg: Config, seed: int
) -> List[Row]:
    for _, row in progress([(r.label, r) for r in rows], desc):
        gen = torch.Generator(device=DEVICE).manual_seed(seed * 1000003 + row.ids * 7 + row.experts + row.block)
        measure(row, gen, cfg)
        log(f"{desc}: {row.label}: " + ", ".join(f"{LABELS.get(k, k)} {c.text()}" for k, c in row.cells.items()))
        release()
    return rows


def grid(cfg: Config, with_blocks: bool) -> List[Row]:
    return [
        Row(t, k, e, b)
        for e in cfg.experts
        for k in cfg.top_ks
        for t in cfg.tokens
        for b in (cfg.blocks if with_blocks else (0,))
        if k <= e
    ]


def cpu_comparison(cfg: Config, seed: int) -> int:
    """Without CUDA: the op against the pure-torch versions on the CPU (quick sizes), wall time; nothing written."""
    gen = torch.Generator().manual_seed(seed)
    wrong, lines = [], []
    for row in grid(cfg, with_blocks=True):
        ids = routing_ids(row.tokens, row.top_k, row.experts, torch.int32, gen)
        pairs = {
            "moe_align_block_size": (
                lambda: torch_dsmhist.moe_align_block_size(ids, row.block, row.experts),
                lambda: torch_align_block_size(ids, row.block, row.experts),
            ),
            "moe_routing": (
                lambda: torch_dsmhist.moe_routing(ids.long(), row.experts),
                lambda: torch_routing(ids.long(), row.experts),
            ),
            "histogram": (
                lambda: [torch_dsmhist.histogram(ids, row.experts)],
                lambda: [torch.bincount(ids.flatten(), minlength=row.experts)],
            ),
        }
        for name, (ours, theirs) in pairs.items():
            differs = same(ours(), theirs())
            if differs:
                wrong.append(f"{name} @ {row.label}: {differs}")
                continue
            ours_ms, theirs_ms = wall_median_ms(ours, 20), wall_median_ms(theirs, 20)
            lines.append(
                f"  {name:<21} {row.label:<48} op {ours_ms * 1e3:8.1f} µs  torch {theirs_ms * 1e3:8.1f} µs  "
                f"({theirs_ms / ours_ms:.2f}x)"
            )
    print(f"bench_moe: no CUDA device; CPU comparison only ({torch.get_num_threads()} threads, wall time per call), "
          "RESULTS.md not written:")  # fmt: skip
    print("\n".join(lines))
    return exit_status(wrong)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few sizes, fewer timed runs (a smoke run)")
    parser.add_argument("--compiled-only", action="store_true", help="only the compiled routing step (section d)")
    parser.add_argument("--compiled-all", action="store_true", help="the compiled step at every top_k x experts")
    parser.add_argument("--out-dir", type=Path, help="also copy RESULTS.md and the plots into this directory")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if not torch.cuda.is_available() or not torch_dsmhist.built_with_cuda():
        return cpu_comparison(QUICK, args.seed)
    device = torch.cuda.get_device_name()
    log(f"bench_moe on {device}, {'quick' if args.quick else 'full'} mode, seed {args.seed}")
    broken: List[str] = []
    written: List[Path] = []
    if not args.compiled_only:
        align = run_section("a) moe_align_block_size", grid(cfg, True), measure_align, cfg, args.seed)
        routing = run_section("b) moe_routing", grid(cfg, False), measure_routing, cfg, args.seed)
        counting = run_section("c) counting", grid(cfg, False), measure_counting, cfg, args.seed)
        section = render(cfg, args.quick, device, align, routing, counting)
        print(section)
        write_results_section(SECTION, section)
        written += [p for p in (plot_align(align),) if p is not None]
        broken += failures([*align, *routing, *counting])
        for target, verdict in eager_verdicts(align, counting):
            log(f"TARGET {target}: {verdict}")
    pairs = tuple((k, e) for k in cfg.top_ks for e in cfg.experts if k <= e) if args.compiled_all else cfg.compiled
    rows = [Row(t, k, e) for k, e in pairs for t in cfg.tokens]
    compiled = run_section("d) compiled step", rows, measure_compiled, cfg, args.seed)
    section = render_compiled(cfg, args.quick, device, compiled)
    print(section)
    write_results_section(SECTION_COMPILED, section)
    written += [p for p in (plot_compiled(compiled),) if p is not None]
    broken += failures(compiled)
    for target, verdict in compiled_verdicts(compiled):
        log(f"TARGET {target}: {verdict}")
    copy_into(args.out_dir, [HERE / "RESULTS.md", *written])
    log(f"wrote {', '.join(str(p) for p in [HERE / 'RESULTS.md', *written])} in {time.perf_counter() - STARTED:.0f} s")
    return exit_status(broken)


if __name__ == "__main__":
    sys.exit(main())
