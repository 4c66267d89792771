"""I/O. Where a streamed token's server CPU goes: smg-trio against the HTTP-layer floors, in one run.

    python -m bench floor_compare [--step-ms 20] [--concurrency 1,64] [--quick] [--no-write]

Three servers take the same load one after another (our load generator, completions of 128
one-token chunks, back to back per stream count): `smg-trio` (`serve` + the reference vLLM
EngineCore at the given step time: one token per stream per step, so every chunk carries one
token), `hypercorn floor` and `raw trio floor` (`bench.floors.http_floor`: chunks of the same shape
on a shared step tick, no gateway behind them). The column that matters is server CPU µs per
output token: the floors say what the HTTP server and trio cost before any gateway work, so
smg-trio minus `hypercorn floor` is the gateway's own share (engine client, detokenize, stops,
render, hand-offs) and `hypercorn floor` minus `raw trio floor` is the HTTP library's.
The table goes to stdout, `bench/results/floor-*.md` and (without --no-write) the
"HTTP layer floor" section of bench/RESULTS.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from bench.load.output import RESULTS_DIR
from bench.load.report import runs_table
from bench.load.runner import ProcessProbe, Progress
from bench.load.scenarios import THINK_STEPS, TIME_CAP_S, LoadPlan, measure, quick
from bench.load.servers import python_module, started_process, wait_serving
from bench.load.stats import RunSummary
from bench.load.targets import Target, reference_engine, smg_trio_target
from bench.load.transports import TransportName
from bench.load.workload import LengthRange, prompt_words
from bench.reports.results_page import Recording, publish, recording_parser
from harness.ports import free_port
from smg_trio.model.folder import demo_model_path, load_model_dir

REQUESTS_PER_STREAM: Final = 4
MIN_REQUESTS: Final = 16


@asynccontextmanager
async def floor_target(server: str, step_ms: float, log_dir: Path) -> AsyncIterator[Target]:
    port = free_port()
    command = python_module(
        "bench",
        "http_floor",
        "--server",
        server,
        "--port",
        str(port),
        "--step-ms",
        f"{step_ms:g}",
    )
    async with started_process(command, log_dir / f"floor-{server}.log") as started:
        model = await wait_serving(started, port, timeout_s=30.0)
        name = "hypercorn floor" if server == "hypercorn" else "raw trio floor"
        yield Target(name, model, port, ProcessProbe(started.process.pid))


async def compare(
    step_ms: float, plan: LoadPlan, log_dir: Path, progress: Progress
) -> list[RunSummary]:
    model_path = demo_model_path()
    model = load_model_dir(model_path)
    words = prompt_words(model.tokenizer, model.tokenizer.vocab_size)
    scenario = f"one token per chunk, step {step_ms:g} ms"
    runs: list[RunSummary] = []
    engine = reference_engine(model_path, step_ms)
    async with smg_trio_target(model_path, engine, log_dir) as gateway:
        pairs: list[tuple[Target, TransportName]] = [(gateway, "http1"), (gateway, "h2c")]
        runs += await measure(pairs, plan, scenario, words, progress)
    async with floor_target("hypercorn", step_ms, log_dir) as floor:
        runs += await measure([(floor, "http1"), (floor, "h2c")], plan, scenario, words, progress)
    async with floor_target("raw", step_ms, log_dir) as floor:
        runs += await measure([(floor, "http1")], plan, scenario, words, progress)
    return runs


def cpu_table(runs: Sequence[RunSummary]) -> str:
    lines = [
        "| target | load | output tok/s | server CPU s | server CPU µs per output token "
        "| vs hypercorn floor (same transport) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    per_token = {
        (r.target, r.load): 1e6 / r.tokens_per_server_cpu_s
        for r in runs
        if r.tokens_per_server_cpu_s
    }
    for run in runs:
        cost = per_token.get((run.target, run.load))
        transport = run.target.rsplit(" ", 1)[-1]
        floor = per_token.get((f"hypercorn floor {transport}", run.load))
        ratio = f"{cost / floor:.2f}x" if cost and floor else "—"
        cpu = f"{run.server.cpu_s:.2f}" if run.server else "—"
        per = f"{cost:,.0f}" if cost else "—"
        lines.append(
            f"| {run.target} | {run.load} | {run.tokens_per_s:,.0f} | {cpu} | {per} | {ratio} |"
        )
    return "\n".join(lines)


def shares(runs: Sequence[RunSummary]) -> list[str]:
    """Where a token's server CPU goes at the largest stream count, per transport."""
    streams = max((r.streams for r in runs if r.streams is not None), default=None)
    cost = {
        r.target: 1e6 / r.tokens_per_server_cpu_s
        for r in runs
        if r.streams == streams and r.tokens_per_server_cpu_s
    }
    raw = cost.get("raw trio floor http1")
    lines = []
    for transport in ("http1", "h2c"):
        gateway = cost.get(f"smg-trio {transport}")
        library = cost.get(f"hypercorn floor {transport}")
        if gateway is None or library is None:
            continue
        parts = [f"smg-trio {gateway:,.0f} µs = its own work {gateway - library:,.0f} µs"]
        if raw is not None:
            parts.append(f"hypercorn {library - raw:,.0f} µs (vs raw HTTP/1.1 on trio)")
            parts.append(f"trio, sockets and wake-ups {raw:,.0f} µs")
        else:
            parts.append(f"hypercorn and below {library:,.0f} µs")
        lines.append(f"- {transport}, {streams} streams: " + " + ".join(parts))
    return lines


def section_body(runs: Sequence[RunSummary]) -> str:
    return "\n".join(
        [
            "Shared cores: absolute numbers move by ±30 %; compare rows of one run.",
            "",
            " ".join((__doc__ or "").split("\n\n")[2].split()),
            "",
            cpu_table(runs),
            "",
            "Server CPU per output token, split (the floors' differences; one token per chunk):",
            "",
            *shares(runs),
            "",
            runs_table(runs),
            "",
        ]
    )


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("floor_compare", __doc__)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", default="1,64")
    parser.add_argument("--quick", action="store_true", help="tiny runs, to try the setup")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    concurrencies = tuple(int(c) for c in args.concurrency.split(","))
    tokens = LengthRange(128, 128)
    plan = LoadPlan(
        concurrencies,
        tokens,
        tokens,
        REQUESTS_PER_STREAM,
        MIN_REQUESTS,
        TIME_CAP_S,
        think_time_s=THINK_STEPS * args.step_ms / 1000,
    )
    if args.quick:
        plan = quick(plan, requests=4, output_tokens=16, time_cap_s=20)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    recording = Recording("floor_compare", "HTTP layer floor")
    log_dir = args.out / "logs" / ("floor-" + started.replace(":", "").replace("-", "")[:15])
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = trio.run(compare, args.step_ms, plan, log_dir, Progress())
    section = recording.section(section_body(runs))
    stamp = started.replace(":", "").replace("-", "")[:15]
    (args.out / f"floor-{stamp}.md").write_text(section.text(), encoding="utf-8")
    publish(section, write=not (args.no_write or args.quick))
    return 0
