"""I/O. `python -m bench stream_load`: issue 33's load figures. 1,000 concurrent streaming chat
requests on each transport in turn (h2c over 10 connections, HTTP/1.1 one connection per
stream, WebSocket over 10 sockets) for `--seconds` each, against a gateway and the reference
vLLM engine as processes of their own on loopback; every request that did not end normally
(an SSE error event, an error frame, a transport error) is counted by kind (an error event's
code, or the client's exception). Streams still running at the time cap are cancelled by the
client and counted apart. The load generator is `python -m bench run`'s (bench/load/cli.py).
The figures replace its section of bench/RESULTS.md (not with `--no-write`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from bench.load.cli import run_against
from bench.load.servers import (
    reference_engine_command,
    smg_trio_command,
    started_process,
    wait_serving,
)
from bench.load.stats import RunSummary
from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.model.folder import demo_model_path

TRANSPORTS: Final = ("h2c", "http1", "ws")
CONNECTIONS: Final = {"h2c": 10, "http1": 1, "ws": 10}  # HTTP/1.1: one per stream, as needed


def run_args(args: argparse.Namespace, port: int, transport: str) -> argparse.Namespace:
    """`python -m bench run`'s flags for one transport's load."""
    return argparse.Namespace(
        url=f"http://127.0.0.1:{port}",
        transport=transport,
        concurrency=(args.streams,),
        rate=None,
        requests=args.streams * 60,  # more than a run gets through: bounded by the time cap
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        stop=[],
        no_ignore_eos=False,
        endpoint="chat",
        time_cap=args.seconds,
        connections=CONNECTIONS[transport],
        pid=None,
        model=None,
        model_path=demo_model_path(),
        json=None,
        no_gateway_view=True,
    )


async def run(args: argparse.Namespace, loads: list[str]) -> list[RunSummary]:
    """Each transport's load in turn; `loads` gets the load average after each."""
    port, handshake = free_port(), free_port()
    model = demo_model_path()
    summaries: list[RunSummary] = []
    with tempfile.TemporaryDirectory(prefix="stream-load-") as scratch:
        logs = Path(scratch)
        async with (
            started_process(
                smg_trio_command(port, f"vllm+zmq://127.0.0.1:{handshake}", model),
                logs / "gateway.log",
            ) as gateway,
            started_process(
                reference_engine_command(
                    f"tcp://127.0.0.1:{handshake}", model_path=model, step_ms=args.step_ms
                ),
                logs / "engine.log",
            ),
        ):
            await wait_serving(gateway, port, timeout_s=60)
            for transport in args.transports.split(","):
                (summary, _), *_ = await run_against(run_args(args, port, transport))
                summaries.append(summary)
                loads.append(" / ".join(f"{x:.1f}" for x in os.getloadavg()))
                print(f"{transport}: errors by kind {summary.error_kinds or 'none'}", flush=True)
    return summaries


def report(summaries: Sequence[RunSummary], args: argparse.Namespace, loads: list[str]) -> str:
    lines = [
        "2 shared cores, other helpers running (load average in the header and per run). "
        f"Gateway and reference vLLM engine (step {args.step_ms:g} ms) as separate processes "
        f"on loopback; {args.streams} concurrent streaming chat requests per transport for "
        f"{args.seconds:g} s, prompt {args.prompt_tokens} and output {args.output_tokens} "
        "tokens; h2c over 10 connections, HTTP/1.1 one connection per stream, WebSocket over "
        "10 sockets. Cancelled: still running at the time cap (ended by the client).",
        "",
        "| transport | ok | errors | errors by kind | cancelled at the cap | output tok/s "
        "| E2E p50 / p99 ms | load average after |",
        "|---|---:|---:|---|---:|---:|---|---|",
    ]
    for summary, load in zip(summaries, loads, strict=True):
        kinds = ", ".join(f"{kind}: {n}" for kind, n in sorted(summary.error_kinds.items()))
        lines.append(
            f"| {summary.target.rsplit(' ', 1)[-1]} | {summary.completed:,} | {summary.errors} | "
            f"{kinds or 'none'} | {summary.cancelled} | {summary.tokens_per_s:,.0f} | "
            f"{_ms(summary.e2e.p50_ms)} / {_ms(summary.e2e.p99_ms)} | {load} |"
        )
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("stream_load", __doc__)
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams")
    parser.add_argument("--seconds", type=float, default=60.0, help="per transport")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--step-ms", type=float, default=1.0, help="the engine's step")
    parser.add_argument("--prompt-tokens", default="32")
    parser.add_argument("--output-tokens", default="64")
    args = parser.parse_args(argv)
    recording = Recording("stream_load", "Streams under load, errors by kind (issue 33)")
    loads: list[str] = []
    summaries = trio.run(run, args, loads)
    recording.publish(report(summaries, args, loads), write=not args.no_write)
    failed = sum(summary.errors for summary in summaries)
    return 1 if failed else 0
