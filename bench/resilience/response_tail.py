"""I/O. The tail latency of a response's event log across processes (docs/client-apis.md §3.5):
from an event's append by one process to its delivery, by another gateway process, to a
client streaming `GET /v1/responses/{id}?stream=true`.

    writer process (`python -m bench response_tail_writer`): a gateway's run (`ResponseRuns`
        and its `LogSink`) appending one event every STEP ms to the event log of a SQLite (or
        PostgreSQL) store, each stamped with the wall clock just before its append
    reader: a `smg-trio serve` process on the same store (no engine: it only reads the log)
    client (this process): streams the response from the reader; per event, the arrival time
        less the stamp

Both clocks are this machine's `time.time()`. The delay is the writer's flush interval
(`FLUSH_INTERVAL_S`) and commit, the reader's poll period (`TAIL_POLL_S`), its read, and the
HTTP hop to the client.
"""

from __future__ import annotations

import json
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

from bench.load.stats import percentile
from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.core.api_dialect import named_event
from smg_trio.core.stream_end import StreamEnd
from smg_trio.model.folder import demo_model_path
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.responses.flusher import FLUSH_INTERVAL_S
from smg_trio.responses.followers import TAIL_POLL_S
from smg_trio.responses.log_sink import LogSink
from smg_trio.responses.runs import ResponseRuns
from smg_trio.responses.store.stores import open_response_store

ROUND_CAP_S: Final = 120.0
SETTLE_S: Final = 0.3
"""Events stamped earlier than this after the writer began are not counted (the client's
stream was still opening)."""


async def write(url: str, run_id: str, events: int, step_ms: float) -> None:
    """The writer: a gateway's run (`ResponseRuns`, its flusher and its `LogSink`, as a
    background response uses them) of `events` delta events, one per `step_ms`, then its end.
    Each event is stamped just before the sink takes it."""
    async with open_response_store(url) as store, trio.open_nursery() as nursery:
        runs = ResponseRuns(store.events, GatewayMetrics())
        await nursery.start(runs.serve)
        response = json.dumps({"id": run_id, "status": "in_progress", "output": []}).encode()
        done = trio.Event()

        async def generate(sink: LogSink) -> None:
            for _ in range(events):
                await trio.sleep(step_ms / 1000)
                data = b'{"type":"response.output_text.delta","delta":"x","t":%r}' % time.time()
                await sink.send_chunks([named_event(b"response.output_text.delta", data)])
            completed = b'{"type":"response.completed","response":%s}' % response.replace(
                b"in_progress", b"completed"
            )
            await sink.end_stream(
                StreamEnd(payloads=(named_event(b"response.completed", completed),))
            )
            done.set()

        await runs.start(run_id, response, generate, background=True)
        print("begun", flush=True)
        await done.wait()
        nursery.cancel_scope.cancel()


def writer_main(argv: Sequence[str]) -> int:
    url, run_id, events, step_ms = argv
    trio.run(write, url, run_id, int(events), float(step_ms))
    return 0


async def one_round(base: str, url: str, number: int, events: int, step_ms: float) -> list[float]:
    run_id = f"resp_bench_{number}"
    command = [sys.executable, "-m", "bench", "response_tail_writer", url, run_id]
    writer = await trio.lowlevel.open_process(
        [*command, str(events), str(step_ms)], stdout=subprocess.PIPE
    )
    delays: list[float] = []
    received = 0
    try:
        assert writer.stdout is not None
        assert b"begun" in await writer.stdout.receive_some(64)
        # Events appended before the client's stream settled wait for it, not for the tail.
        settled = time.time() + SETTLE_S
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as http,
            http.stream("GET", f"/v1/responses/{run_id}?stream=true") as answer,
        ):
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    arrived = time.time()
                    stamp = json.loads(line[6:]).get("t")
                    if stamp is None:  # the end
                        continue
                    received += 1
                    if stamp > settled:
                        delays.append(arrived - stamp)
        await writer.wait()
    finally:
        with trio.CancelScope(shield=True):
            writer.kill()
            await writer.wait()
            if writer.stdout is not None:
                await writer.stdout.aclose()
    assert received == events, (received, events)
    return delays


async def run(rounds: int, events: int, step_ms: float, url: str | None) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="smg-trio-tail-") as folder:
        http_port = free_port()  # its stderr goes nowhere: a pipe nobody reads would fill
        url = url or f"sqlite:///{Path(folder) / 'tail.sqlite3'}"
        serve = [sys.executable, "-m", "smg_trio", "serve", "--model-path", str(demo_model_path())]
        reader = await trio.lowlevel.open_process(
            [
                *serve,
                "--port",
                str(http_port),
                "--worker",
                f"vllm+zmq://127.0.0.1:{free_port()}",
                "--response-store",
                url,
            ],
            stderr=subprocess.DEVNULL,
        )
        delays: list[float] = []
        try:
            base = f"http://127.0.0.1:{http_port}"
            await serving(base)
            for number in range(rounds):
                with trio.fail_after(ROUND_CAP_S):
                    delays += await one_round(base, url, number, events, step_ms)
        finally:
            with trio.CancelScope(shield=True):
                reader.terminate()
                await reader.wait()
    return delays


async def append_cost(url: str | None, appends: int) -> list[tuple[int, float, float]]:
    """What a resumable stream pays per engine batch: one `EventLog.append` (a thread hop and
    one transaction), for batches of 1 and 16 events: (events, median wall µs, CPU µs)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="smg-trio-append-") as folder:
        url = url or f"sqlite:///{Path(folder) / 'append.sqlite3'}"
        async with open_response_store(url) as store:
            log = store.events
            for size in (1, 16):
                run_id = f"resp_cost_{size}"
                response = b'{"id":"%s","status":"in_progress","output":[]}' % run_id.encode()
                await log.begin(run_id, "bench", background=True, response=response, now=0.0)
                event = (b"response.output_text.delta", b'{"delta":" word","sequence_number":0}')
                walls = []
                cpu_start = time.process_time()
                for number in range(appends):
                    started = time.perf_counter()
                    await log.append(
                        run_id,
                        number * size,
                        [event] * size,
                        status="in_progress",
                        response=response,
                        now=0.0,
                    )
                    walls.append(time.perf_counter() - started)
                cpu = (time.process_time() - cpu_start) / appends
                rows.append((size, statistics.median(walls) * 1e6, cpu * 1e6))
    return rows


def summary_table(delays: list[float], rounds: int, step_ms: float, store: str) -> str:
    def ms(q: float) -> str:
        value = percentile(delays, q)
        return "-" if value is None else f"{value * 1000:.1f}"

    return "\n".join(
        [
            f"{rounds} responses, one event every {step_ms:g} ms appended by "
            f"a writer process (a gateway's run: flushed every {FLUSH_INTERVAL_S * 1000:g} ms); "
            f"the reader polls every {TAIL_POLL_S * 1000:g} ms; the events "
            f"of each response's first {SETTLE_S * 1000:g} ms (the stream still opening) are "
            "not counted.",
            "",
            "| append (process A) → client receives it from process B (ms) | events | p50 | "
            "p90 | p99 | max |",
            "|---|---|---|---|---|---|",
            f"| {store}, `GET ...?stream=true` over HTTP/1.1 | {len(delays)} | {ms(50)} | "
            f"{ms(90)} | {ms(99)} | {ms(100)} |",
        ]
    )


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("response_tail", __doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--appends", type=int, default=1000, help="appends timed per size")
    parser.add_argument("--store", default=None, help="postgresql://... (default: SQLite)")
    args = parser.parse_args(argv)
    store = "SQLite file (WAL)" if args.store is None else "PostgreSQL"
    recording = Recording(
        "response_tail" if args.store is None else "response_tail_postgres",
        f"Responses across processes: the event log's tail latency, {store} (issue 31)",
    )
    delays = trio.run(run, args.rounds, args.events, args.step_ms, args.store)
    costs = trio.run(append_cost, args.store, args.appends)
    table = summary_table(delays, args.rounds, args.step_ms, store)
    table += (
        "\n\n| one write of the log (one transaction: every run's events of a flush interval) | "
    )
    table += "median wall µs | CPU µs |\n|---|---:|---:|\n"
    table += "\n".join(
        f"| {size} event{'s' if size > 1 else ''} | {wall:.0f} | {cpu:.0f} |"
        for size, wall, cpu in costs
    )
    recording.publish(table, write=not args.no_write)
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
