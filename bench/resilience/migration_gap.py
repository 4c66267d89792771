"""I/O. `python -m bench migration_gap`: how long a client's stream pauses when its engine is
killed mid-stream and the request moves to another worker (docs/resilience.md §9).

    python -m bench migration_gap [--rounds 8] [--streams 16] [--step-ms 10] [--no-write]

Each round: the gateway in this process (`serve`, two vllm+zmq workers), two reference vLLM
engines as subprocesses in random mode, and `--streams` greedy chat streams over HTTP/1.1
(httpx), each with its own `x-request-id`; every stream is first run once without a kill for
its reference text. Once every stream has tokens, engine 0 is `kill -9`ed. For each stream that
moved (its request log line has `migrations`): the resume gap on the client's clock, from the
last chunk received before the kill to the first one after it, and the gateway's own `resume_s`
(failure seen to the new worker's first token). The survivors' gaps across the kill are the
baseline (one engine step). Every stream's text must equal its reference. Target: resume gap
p50 <= 50 ms. Results: bench/RESULTS.md "Migration".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import httpx
import trio

from bench.load.stats import percentile
from bench.reports.results_page import Recording, recording_parser
from harness.served_gateway import served_gateway, zmq_gateway_config
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.observability.request_log import REQUEST_LOGGER

TARGET_P50_MS: Final = 50.0
ROUND_CAP_S: Final = 120.0
MAX_TOKENS: Final = 300


class Moves(logging.Handler):
    """The request log's `resume_s` per request id, for requests that migrated."""

    def __init__(self) -> None:
        super().__init__()
        self.resumed: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        resume = getattr(record, "resume_s", None)
        if resume:
            self.resumed[str(getattr(record, "request_id", ""))] = resume[0]


def body(index: int) -> dict[str, Any]:
    return {
        "model": "demo_model",
        "messages": [{"role": "user", "content": f"Tell me story {index}."}],
        "temperature": 0,
        "ignore_eos": True,
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }


async def stream(
    client: httpx.AsyncClient, index: int, request_id: str, arrivals: list[float]
) -> str:
    """One chat stream's text; the trio time each chunk arrived is appended to `arrivals`."""
    text: list[str] = []
    headers = {"x-request-id": request_id}
    async with client.stream(
        "POST", "/v1/chat/completions", json=body(index), headers=headers
    ) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                arrivals.append(trio.current_time())
                choices = httpx.Response(200, content=line[6:]).json()["choices"]
                text.extend(choice["delta"].get("content") or "" for choice in choices)
    return "".join(text)


async def one_round(
    number: int, streams: int, step_ms: float, moves: Moves
) -> list[tuple[str, float, float | None]]:
    """Per stream: 'moved' or 'stayed', its gap across the kill (s), the gateway's resume_s."""
    config = zmq_gateway_config(2)
    async with served_gateway(config) as served:
        serving = served.serving
        engines = [
            await served.start_engine(
                EngineCommand(
                    "vllm-zmq", handshake=address, step_ms=step_ms, mode=Mode.RANDOM
                ).argv()
            )
            for address in serving.worker_addresses
        ]
        await served.wait_ready(serving.gateway.pool.workers)
        base = f"http://127.0.0.1:{serving.port}"
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            expected = [""] * streams
            texts = [""] * streams
            arrivals: list[list[float]] = [[] for _ in range(streams)]

            async def one(into: list[str], i: int, request_id: str, times: list[float]) -> None:
                into[i] = await stream(client, i, request_id, times)

            async with trio.open_nursery() as nursery:
                for index in range(streams):
                    nursery.start_soon(one, expected, index, f"ref-{number}-{index}", [])
            async with trio.open_nursery() as nursery:
                for index in range(streams):
                    nursery.start_soon(one, texts, index, f"kill-{number}-{index}", arrivals[index])
                while not all(len(a) >= 5 for a in arrivals):  # noqa: ASYNC110 (polls)
                    await trio.sleep(0.001)
                await trio.sleep(step_ms / 1000 * 3)
                engines[0].kill()
                killed_at = trio.current_time()
        if texts != expected:
            raise SystemExit(f"round {number}: a migrated stream's text differs from its reference")
        rows = []
        for index, times in enumerate(arrivals):
            before = max((t for t in times if t <= killed_at), default=None)
            after = min((t for t in times if t > killed_at), default=None)
            if before is None or after is None:
                continue
            resume = moves.resumed.get(f"kill-{number}-{index}")
            rows.append(("moved" if resume is not None else "stayed", after - before, resume))
        return rows


def summary_table(rows: Sequence[tuple[str, float, float | None]], step_ms: float) -> str:
    def ms(values: list[float], q: float) -> str:
        value = percentile(values, q)
        return "-" if value is None else f"{value * 1000:.1f}"

    moved = [gap for kind, gap, _ in rows if kind == "moved"]
    stayed = [gap for kind, gap, _ in rows if kind == "stayed"]
    resumed = [resume for kind, _, resume in rows if kind == "moved" and resume is not None]
    lines = [
        f"Engine step {step_ms:g} ms; {len(moved)} streams moved, {len(stayed)} stayed; every "
        "moved stream's text equal to its reference.",
        "",
        "| gap across the kill (ms) | streams | p50 | p90 | max |",
        "|---|---|---|---|---|",
        f"| client: last chunk before → first after, moved | {len(moved)} | {ms(moved, 50)} | "
        f"{ms(moved, 90)} | {ms(moved, 100)} |",
        f"| gateway `resume_s`: failure seen → new worker's first token | {len(resumed)} | "
        f"{ms(resumed, 50)} | {ms(resumed, 90)} | {ms(resumed, 100)} |",
        f"| client, streams on the surviving engine (baseline) | {len(stayed)} | "
        f"{ms(stayed, 50)} | {ms(stayed, 90)} | {ms(stayed, 100)} |",
    ]
    p50 = percentile(moved, 50)
    verdict = "met" if p50 is not None and p50 * 1000 <= TARGET_P50_MS else "NOT met"
    lines += ["", f"Target resume gap p50 <= {TARGET_P50_MS:g} ms: {verdict}."]
    return "\n".join(lines)


async def run(rounds: int, streams: int, step_ms: float) -> list[tuple[str, float, float | None]]:
    moves = Moves()
    logger = logging.getLogger(REQUEST_LOGGER)
    logger.addHandler(moves)
    logger.setLevel(logging.INFO)
    rows = []
    try:
        for number in range(rounds):
            with trio.fail_after(ROUND_CAP_S):
                rows += await one_round(number, streams, step_ms, moves)
    finally:
        logger.removeHandler(moves)
    return rows


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("migration_gap", __doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--step-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    recording = Recording("migration", "Migration: the resume gap (issue 30)")
    rows = trio.run(run, args.rounds, args.streams, args.step_ms)
    table = summary_table(rows, args.step_ms)
    recording.publish(table, write=not args.no_write)
    return 0
