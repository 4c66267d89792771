"""Pure. A bench run's results as JSON-ready data and as Markdown: the measurement tables, the
ratios against the anchors, and the goals with their gaps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bench.load.stats import Percentiles, RunSummary, StopCost

ANCHORS: Final = (  # real-engines.md, `vllm bench serve`, output tokens/s at C = 1, 16, 64
    ("vLLM's own HTTP server (doc)", (575, 3228, 4793)),
    ("smg → vLLM over HTTP (doc)", (602, 2907, 4140)),
    ("smg → vLLM gRPC, Python servicer (doc)", (411, 2819, 4719)),
    ("smg → vLLM gRPC, Rust servicer (doc)", (669, 3624, 4796)),
    ("smg → headless vLLM over ZMQ (doc)", (661, 3263, 5640)),
)
ANCHOR_STREAMS: Final = (1, 16, 64)
GOAL_STREAMS: Final = 64


@dataclass(frozen=True)
class RunReport:
    command: str
    started: str  # ISO 8601
    elapsed_s: float
    machine: str
    load_average: tuple[str, str]  # "1 / 5 / 15 min" at the start and at the end
    prompt_tokens: str  # the length ranges asked for, e.g. "128" or "64-256"
    output_tokens: str
    runs: tuple[RunSummary, ...]
    stop_costs: tuple[StopCost, ...] = ()
    notes: tuple[str, ...] = ()


def to_json(report: RunReport) -> dict[str, Any]:
    data = dataclasses.asdict(report)
    for run, summary in zip(data["runs"], report.runs, strict=True):
        run["tokens_per_server_cpu_s"] = summary.tokens_per_server_cpu_s
    for cost, stop in zip(data["stop_costs"], report.stop_costs, strict=True):
        cost["after_stop"] = list(stop.after_stop)
        cost["after_stop_mean"] = stop.after_stop_mean
    return data


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _triple(p: Percentiles, digits: int = 1) -> str:
    return " / ".join(_number(v, digits) for v in (p.p50_ms, p.p90_ms, p.p99_ms))


def runs_table(runs: Iterable[RunSummary]) -> str:
    lines = [
        "| scenario | target | load | ok / err / cancelled | output tok/s | TTFT p50 / p90 / p99 "
        "ms | ITL p50 / p90 / p99 ms | E2E p50 / p90 / p99 ms | server CPU s | tok per server "
        "CPU-s | server peak RSS MB | client CPU s |",
        "|---|---|---|---|---:|---|---|---|---:|---:|---:|---:|",
    ]
    for run in runs:
        server = run.server
        lines.append(
            f"| {run.scenario} | {run.target} | {run.load} | {run.completed} / {run.errors} / "
            f"{run.cancelled} | {run.tokens_per_s:,.0f} | {_triple(run.ttft)} | "
            f"{_triple(run.itl, 2)} | {_triple(run.e2e, 0)} | "
            f"{_number(server.cpu_s if server else None, 2)} | "
            f"{_number(run.tokens_per_server_cpu_s)} | "
            f"{_number(server.peak_rss_mb if server else None, 1)} | {run.client_cpu_s:.2f} |"
        )
    return "\n".join(lines)


def find(
    runs: Sequence[RunSummary], target: str, streams: int, scenario: str | None = None
) -> RunSummary | None:
    for run in runs:
        if (run.target, run.streams) == (target, streams) and scenario in (None, run.scenario):
            return run
    return None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def gateway_ratios(runs: Sequence[RunSummary]) -> str:
    """Scenario (a): each gateway row vs direct, per engine step time and stream count."""
    lines = [
        "| scenario | streams | through | tok/s vs direct | added TTFT p50 ms "
        "| output tok per gateway CPU-s |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for scenario in dict.fromkeys(r.scenario for r in runs):
        for streams in dict.fromkeys(r.streams for r in runs if r.scenario == scenario):
            direct = find(runs, "direct", streams, scenario) if streams is not None else None
            if direct is None:
                continue
            for run in runs:
                if run.scenario != scenario or run.streams != streams or run is direct:
                    continue
                lines.append(
                    f"| {scenario} | {streams} | {run.target} | "
                    f"{_number(_ratio(run.tokens_per_s, direct.tokens_per_s), 2)} | "
                    f"{_number(_delta(run.ttft.p50_ms, direct.ttft.p50_ms), 2)} | "
                    f"{_number(run.tokens_per_server_cpu_s)} |"
                )
    return "\n".join(lines)


def anchors_table(runs: Sequence[RunSummary]) -> str:
    """Scenario (b) laid out like real-engines.md's table: output tokens/s per stream count."""
    header = " | ".join(f"C={c}" for c in ANCHOR_STREAMS)
    lines = [f"| path | {header} |", "|---|" + "---:|" * len(ANCHOR_STREAMS)]
    for name, values in ANCHORS:
        lines.append(f"| {name} | " + " | ".join(f"{v:,}" for v in values) + " |")
    for target in dict.fromkeys(r.target for r in runs):
        cells = [find(runs, target, c) for c in ANCHOR_STREAMS]
        lines.append(
            f"| **{target}** (this run) | "
            + " | ".join(_number(c.tokens_per_s if c else None) for c in cells)
            + " |"
        )
    return "\n".join(lines)


def _goal_line(
    name: str, value: float | None, goal: float, met: Callable[[float, float], bool], unit: str
) -> str:
    if value is None:
        return f"- {name}: not measured in this run"
    verdict = "met" if met(value, goal) else "NOT met"
    return f"- {name}: {value:,.2f}{unit} (goal {goal:g}{unit}: {verdict})"


ANCHOR_GOALS: Final = (  # (ours, theirs, least ratio of output tok/s): the issue's, over ZMQ
    ("smg-trio http1", "smg http1", 1.0),
    ("smg-trio h2c", "smg h2c", 1.0),
    ("smg-trio http1", "vLLM HTTP http1", 1.15),
    ("smg-trio h2c", "vLLM HTTP http1", 1.15),
)
GRPC_GOALS: Final = (  # the same bar over vLLM's gRPC engine (not one of the goals)
    ("smg-trio gRPC http1", "smg gRPC http1", 1.0),
    ("smg-trio gRPC h2c", "smg gRPC h2c", 1.0),
)


def anchor_goals(
    runs: Sequence[RunSummary], goals: Sequence[tuple[str, str, float]] = ANCHOR_GOALS
) -> list[str]:
    """The throughput goals at 64 streams, per transport both sides share."""
    lines = []
    for ours, theirs, goal in goals:
        a, b = find(runs, ours, GOAL_STREAMS), find(runs, theirs, GOAL_STREAMS)
        value = _ratio(a.tokens_per_s if a else None, b.tokens_per_s if b else None)
        lines.append(
            _goal_line(
                f"{ours} / {theirs} output tok/s at {GOAL_STREAMS} streams",
                value,
                goal,
                lambda v, g: v >= g,
                "x",
            )
        )
    return lines


def ceiling_ratios(runs: Sequence[RunSummary]) -> list[str]:
    """Each row's output tokens/s over the engine alone (`direct`), per stream count."""
    lines = []
    for streams in ANCHOR_STREAMS:
        direct = find(runs, "direct", streams)
        if direct is None or not direct.tokens_per_s:
            continue
        parts = [
            f"{run.target} {run.tokens_per_s / direct.tokens_per_s:.2f}"
            for run in runs
            if run.streams == streams and run.target != "direct"
        ]
        lines.append(f"- {streams} stream(s), share of the engine alone: " + ", ".join(parts))
    return lines


def ttft_goals(runs: Sequence[RunSummary], scenario: str) -> list[str]:
    """The goal lines for smg-trio, then the same measure for smg (an anchor, when it ran)."""
    direct = find(runs, "direct", 1, scenario)
    lines = []
    for target in ("smg-trio h2c", "smg-trio ws"):
        run = find(runs, target, 1, scenario)
        added = _delta(run.ttft.p50_ms if run else None, direct.ttft.p50_ms if direct else None)
        lines.append(
            _goal_line(
                f"added TTFT p50 at 1 stream, {target} vs direct ({scenario})",
                added,
                1.0,
                lambda v, g: v <= g,
                " ms",
            )
        )
    anchor = find(runs, "smg h2c", 1, scenario)
    if anchor is not None and direct is not None:
        added = _delta(anchor.ttft.p50_ms, direct.ttft.p50_ms)
        lines.append(
            f"- for comparison, the Rust smg on the same engine: added TTFT p50 at 1 stream, "
            f"smg h2c vs direct ({scenario}): {_number(added, 2)} ms"
        )
    return lines


def stop_cost_table(costs: Sequence[StopCost]) -> str:
    lines = [
        "| gateway | streams | requests | client saw stop | stop at token | max_tokens | engine "
        "step ms | engine tokens after the stop: mean / max per request | in engine steps | "
        "engine ends |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for cost in costs:
        ends = ", ".join(f"{e} {cost.ends.count(e)}" for e in sorted(set(cost.ends)))
        worst = max(cost.after_stop, default=0)
        lines.append(
            f"| {cost.target} | {cost.streams} | {cost.requests} | {cost.stopped} | "
            f"{cost.stop_at} | {cost.max_tokens} | {cost.step_ms:g} | "
            f"{cost.after_stop_mean:.2f} / {worst} | {worst} | {ends} |"
        )
    return "\n".join(lines)


def stop_goals(costs: Sequence[StopCost]) -> list[str]:
    return [
        _goal_line(
            f"engine tokens after a router-side stop, {cost.target}, {cost.streams} stream(s), "
            "worst request (in engine steps)",
            float(max(cost.after_stop, default=0)),
            1.0,
            lambda v, g: v <= g,
            "",
        )
        for cost in costs
    ]
