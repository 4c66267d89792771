"""I/O. What a resumable Responses stream costs the gateway (docs/client-apis.md §3.5): the
same streamed `/v1/responses` requests with `store: false` (served as before: no event log)
and with `store: true` (the default: a run in the gateway's nursery writing the event log,
followed by its client), interleaved round by round.

A `smg-trio serve` process on a SQLite store, one reference vLLM EngineCore (replay mode, a
1 ms step); per round, STREAMS concurrent streams of one variant, read whole with httpx. The
gateway process's CPU seconds (utime + stime, /proc) per streamed delta event, and each
stream's wall time, medians over the rounds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import httpx
import trio

from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path

TEXT: Final = "Tokens stream from the engine to the client, one event per token. " * 12
ROUND_CAP_S: Final = 60.0
TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


async def stream_one(http: httpx.AsyncClient, store: bool, walls: list[float]) -> int:
    body = {"model": "demo_model", "input": "Hi", "stream": True, "store": store}
    started = time.perf_counter()
    deltas = 0
    async with http.stream("POST", "/v1/responses", json=body) as answer:
        async for line in answer.aiter_lines():
            deltas += line == "event: response.output_text.delta"
    walls.append(time.perf_counter() - started)
    return deltas


async def one_round(
    http: httpx.AsyncClient, pid: int, store: bool, streams: int, walls: list[float]
) -> tuple[float, int]:
    counts: list[int] = []

    async def one() -> None:
        counts.append(await stream_one(http, store, walls))

    before = cpu_seconds(pid)
    with trio.fail_after(ROUND_CAP_S):
        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(one)
    return cpu_seconds(pid) - before, sum(counts)


async def run(rounds: int, streams: int) -> dict[bool, tuple[list[float], list[float]]]:
    results: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    with tempfile.TemporaryDirectory(prefix="smg-trio-resumable-") as folder:
        http_port = free_port()  # its stderr goes nowhere: a pipe nobody reads would fill
        replay = Path(folder) / "replay.txt"
        replay.write_text(TEXT, encoding="utf-8")
        port = free_port()
        serve = [sys.executable, "-m", "smg_trio", "serve", "--model-path", str(demo_model_path())]
        gateway = await trio.lowlevel.open_process(
            [
                *serve,
                "--port",
                str(http_port),
                "--worker",
                f"vllm+zmq://127.0.0.1:{port}",
                "--response-store",
                f"sqlite:///{Path(folder) / 'r.sqlite3'}",
            ],
            stderr=subprocess.DEVNULL,
        )
        engine = await trio.lowlevel.open_process(
            EngineCommand(
                "vllm-zmq", handshake=f"tcp://127.0.0.1:{port}", replay_file=replay, step_ms=1.0
            ).argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{http_port}"
            await serving(base)
            limits = httpx.Limits(max_connections=streams)
            async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as http:
                while (await http.get("/health")).status_code != 200:  # noqa: ASYNC110 (polling a peer)
                    await trio.sleep(0.05)
                walls: list[float] = []
                await one_round(http, gateway.pid, True, streams, walls)  # warm-up
                for _ in range(rounds):
                    for store in (False, True):
                        walls = []
                        cpu, deltas = await one_round(http, gateway.pid, store, streams, walls)
                        results[store][0].append(cpu / max(deltas, 1))
                        results[store][1].append(statistics.median(walls))
        finally:
            with trio.CancelScope(shield=True):
                for process in (gateway, engine):
                    process.terminate()
                    await process.wait()
    return results


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("resumable_cost", __doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--streams", type=int, default=16)
    args = parser.parse_args(argv)
    recording = Recording("resumable_cost", "Responses: what a resumable stream costs (issue 31)")
    results = trio.run(run, args.rounds, args.streams)
    lines = [
        f"{args.streams} concurrent streams per round, {args.rounds} rounds per variant "
        "(interleaved), ~130 delta events per stream, engine step 1 ms; medians over rounds.",
        "",
        "| `/v1/responses`, `stream: true` | gateway CPU µs per delta event | stream wall ms |",
        "|---|---:|---:|",
    ]
    for store, label in ((False, "`store: false` (no log)"), (True, "`store: true` (run + log)")):
        cpu, wall = results[store]
        lines.append(
            f"| {label} | {statistics.median(cpu) * 1e6:.1f} | "
            f"{statistics.median(wall) * 1000:.0f} |"
        )
    recording.publish("\n".join(lines), write=not args.no_write)
    return 0


async def serving(base: str) -> None:
    """Wait until the gateway at `base` answers (its stderr is not read)."""
    async with httpx.AsyncClient(base_url=base) as http:
        while True:
            try:
                await http.get("/liveness")
                return
            except httpx.TransportError:
                await trio.sleep(0.05)
