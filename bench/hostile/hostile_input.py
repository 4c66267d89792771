"""I/O. `python -m bench hostile_input`: issue 17's acceptance figures on loopback (docs/limits.md).

The gateway and the reference vLLM engine run as processes of their own, so the gateway's RSS
(`/proc/PID/status`, sampled every 20 ms) is its alone. Phases, each bounded in count and time:

1. Big prompts: `--big` concurrent chat requests whose prompt is `--big-mb` MB of text, over
   HTTP and then over WebSocket (spread over 4 sockets), while one ordinary stream runs beside
   them. Every one must be a 400 within 2 s, the ordinary stream must finish, the peak RSS must
   stay under 1 GB, and 10 s later the RSS must be within 20 % of the baseline.
2. Fuzz: `--bodies` seeded hostile bodies over every endpoint (8 at a time) and `--frames`
   seeded hostile WebSocket frames (over 4 sockets): 0 answers of 5xx, 0 sockets closed by
   the server, RSS within 20 % of the baseline afterwards. 15 % of the bodies (and frames)
   are of issue 45's class, numbers no field holds on the numeric fields the request Structs
   declare (harness/numeric_fields.py), reported on a row of their own.
3. h2 frames: `--h2` seeded hostile HTTP/2 frame sequences, one h2c connection each, 8 at a
   time (harness/h2_frame_fuzz.py): 0 × 5xx, every well-formed request ended, GOAWAY codes.

The figures replace its section of bench/RESULTS.md (not with `--no-write`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from bench.load.servers import (
    reference_engine_command,
    smg_trio_command,
    started_process,
    wait_serving,
)
from bench.reports.results_page import Recording, recording_parser
from harness.h2_frame_corpus import h2_sequences
from harness.h2_frame_fuzz import H2FuzzResult, fuzz_h2
from harness.hostile_corpus import expected_id, hostile_bodies, hostile_frames
from harness.ports import free_port
from smg_trio.model.folder import demo_model_path

ANSWER_WITHIN_S: Final = 2.0
PEAK_LIMIT_MB: Final = 1024
RETURN_WITHIN: Final = 0.20
SETTLE_S: Final = 10.0
SAMPLE_S: Final = 0.02
CHAT: Final = "/v1/chat/completions"
SOCKETS: Final = 4
FUZZ_RSS_BACK_MB: Final = 64  # issue 33: RSS back within 64 MB of the start after the fuzz
SERVED_MODEL: Final = "demo_model"  # the demo model folder's served name (no --served-model-name)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class RssWatch:
    pid: int
    peak_mb: float = 0.0

    async def run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, rss_mb(self.pid))
            await trio.sleep(SAMPLE_S)

    def reset(self) -> float:
        self.peak_mb = rss_mb(self.pid)
        return self.peak_mb


@dataclass
class BigResult:
    transport: str
    statuses: list[int] = field(default_factory=list)
    slowest_s: float = 0.0
    peak_mb: float = 0.0
    baseline_mb: float = 0.0
    settled_mb: float = 0.0
    beside_ok: bool = False


def big_chat(megabytes: float) -> dict[str, Any]:
    text = "hello world " * int(megabytes * 1_000_000 / 12)
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 4}


async def stream_beside(base_url: str) -> bool:
    """An ordinary streamed chat running during the storm: True if it ended with [DONE]."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "stream": True}
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
        client.stream("POST", CHAT, json=body) as response,
    ):
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    return response.status_code == 200 and raw.rstrip().endswith(b"data: [DONE]")


async def big_over_http(base_url: str, body: bytes, count: int, result: BigResult) -> None:
    async def one(client: httpx.AsyncClient) -> None:
        start = time.perf_counter()
        response = await client.post(CHAT, content=body)
        result.slowest_s = max(result.slowest_s, time.perf_counter() - start)
        result.statuses.append(response.status_code)

    async with (
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
        trio.open_nursery() as nursery,
    ):
        for _ in range(count):
            nursery.start_soon(one, client)


async def big_over_websocket(ws_url: str, body: bytes, count: int, result: BigResult) -> None:
    async def socket(ids: range) -> None:
        async with trio_websocket.open_websocket_url(ws_url, max_message_size=2**26) as ws:
            start = time.perf_counter()
            for stream_id in ids:
                frame = b'{"type":"request","id":%d,"path":"%s","body":%s}' % (
                    stream_id,
                    CHAT.encode(),
                    body,
                )
                await ws.send_message(frame.decode())
            for _ in ids:
                answer = json.loads(await ws.get_message())
                result.slowest_s = max(result.slowest_s, time.perf_counter() - start)
                status = 400 if answer["error"]["code"] == "context_length_exceeded" else 0
                result.statuses.append(status)

    async with trio.open_nursery() as nursery:
        for first in range(SOCKETS):
            nursery.start_soon(socket, range(first, count, SOCKETS))


async def big_prompts(
    args: argparse.Namespace, base_url: str, watch: RssWatch, transport: str
) -> BigResult:
    result = BigResult(transport)
    body = json.dumps(big_chat(args.big_mb)).encode()
    result.baseline_mb = watch.reset()
    with trio.fail_after(args.time_cap):
        async with trio.open_nursery() as nursery:

            async def beside() -> None:
                result.beside_ok = await stream_beside(base_url)

            nursery.start_soon(beside)
            if transport == "http":
                await big_over_http(base_url, body, args.big, result)
            else:
                ws_url = base_url.replace("http://", "ws://") + "/v1/ws"
                await big_over_websocket(ws_url, body, args.big, result)
    del body
    result.peak_mb = watch.peak_mb
    await trio.sleep(SETTLE_S)
    result.settled_mb = rss_mb(watch.pid)
    return result


@dataclass
class FuzzResult:
    bodies: int = 0
    frames: int = 0
    server_errors: int = 0
    sockets_closed: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    huge_bodies: int = 0  # of issue 45's class: numbers no field holds
    huge_statuses: Counter[int] = field(default_factory=Counter)
    ids_expected: int = 0
    ids_without_terminal: int = 0
    ids_ended_twice: int = 0
    baseline_mb: float = 0.0
    peak_mb: float = 0.0
    after_mb: float = 0.0
    seconds: float = 0.0


async def fuzz(args: argparse.Namespace, base_url: str, watch: RssWatch) -> FuzzResult:
    result = FuzzResult(baseline_mb=watch.reset())
    start = time.perf_counter()
    bodies = list(hostile_bodies(args.seed, args.bodies))
    frames = list(hostile_frames(args.seed, args.frames))
    with trio.fail_after(args.time_cap):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:

            async def post_every(offset: int) -> None:
                for item in bodies[offset::8]:
                    response = await client.post(item.path, content=item.body)
                    result.bodies += 1
                    result.statuses[response.status_code] += 1
                    result.server_errors += response.status_code >= 500
                    if item.huge_number:
                        result.huge_bodies += 1
                        result.huge_statuses[response.status_code] += 1

            async with trio.open_nursery() as nursery:
                for offset in range(8):
                    nursery.start_soon(post_every, offset)

        async def send_every(offset: int) -> None:
            """One socket: its share of the frames, read while sent; then every id a frame
            still names must have ended exactly once (README.md "WebSocket protocol")."""
            ws_url = base_url.replace("http://", "ws://") + "/v1/ws"
            indexes = range(offset, len(frames), SOCKETS)
            expected = {i for i in indexes if expected_id(frames[i], i) is not None}
            waiting = {expected_id(frames[i], i) for i in expected}
            result.ids_expected += len(waiting)
            ends: Counter[object] = Counter()
            sent = trio.Event()

            async def read_answers(ws: trio_websocket.WebSocketConnection) -> None:
                while True:  # every answer, until each expected id ended and all were sent
                    answer = json.loads(await ws.get_message())
                    error = answer.get("error") or {}
                    result.server_errors += "internal_error" in (
                        error.get("code"),
                        error.get("type"),
                    )
                    result.server_errors += error.get("type") == "api_error"
                    if (
                        answer.get("type") in ("done", "response", "error")
                        and answer["id"] is not None
                    ):
                        ends[answer["id"]] += 1
                        waiting.discard(answer["id"])
                    if sent.is_set() and not waiting:
                        return

            try:
                # Answers are read while frames are sent: the server holds back a socket
                # whose client does not read (docs/limits.md §5).
                async with trio_websocket.open_websocket_url(ws_url) as ws:
                    with trio.move_on_after(args.time_cap):
                        async with trio.open_nursery() as readers:
                            readers.start_soon(read_answers, ws)
                            for index in indexes:
                                await ws.send_message(frames[index])
                                result.frames += 1
                            sent.set()
                            # An answer for an id nobody waits for wakes no one: a last frame.
                            await ws.send_message('{"type":"cancel","id":"end-of-fuzz"}')
                    # Anything queued behind the last end: no id may end twice.
                    with trio.move_on_after(0.5):
                        while True:
                            answer = json.loads(await ws.get_message())
                            if (
                                answer.get("type") in ("done", "response", "error")
                                and answer["id"] is not None
                            ):
                                ends[answer["id"]] += 1
            except* trio_websocket.ConnectionClosed:  # the reader's or the sender's
                result.sockets_closed += 1
            result.ids_without_terminal += len(waiting)
            result.ids_ended_twice += sum(count > 1 for count in ends.values())

        async with trio.open_nursery() as nursery:
            for offset in range(SOCKETS):
                nursery.start_soon(send_every, offset)
    result.seconds = time.perf_counter() - start
    result.peak_mb = watch.peak_mb
    await trio.sleep(SETTLE_S)
    result.after_mb = rss_mb(watch.pid)
    return result


def _within(value: float, baseline: float) -> str:
    ok = value <= baseline * (1 + RETURN_WITHIN)
    return f"{value:.0f} MB ({(value / baseline - 1) * 100:+.0f} %, {'ok' if ok else 'FAIL'})"


def h2_rows(result: H2FuzzResult | None, args: argparse.Namespace) -> list[str]:
    if result is None:
        return []
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(result.statuses.items()))
    goaways = ", ".join(f"{code}: {n}" for code, n in sorted(result.goaways.items()))
    unended = ", ".join(result.without_end[:5]) or "0"
    return [
        "",
        f"| h2 frame sequences (seed {args.seed}) | connections | well-formed requests "
        "| answers | 5xx / internal_error | requests never ended | GOAWAY codes "
        "| unparsable server frames | time |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {args.h2} | {result.sequences} | {result.requests} | {statuses} | "
        f"{result.server_errors} | {len(result.without_end)} ({unended}) | {goaways} | "
        f"{result.unparsable} | {result.seconds:.1f} s |",
    ]


def report(
    big: list[BigResult],
    fuzzed: FuzzResult,
    args: argparse.Namespace,
    h2: H2FuzzResult | None = None,
) -> str:
    lines = [
        "2 shared cores, other helpers running (load average in the header). Gateway and reference vLLM engine as separate processes on "
        "loopback; RSS is the gateway's VmRSS, sampled every 20 ms.",
        "",
        f"| {args.big} concurrent {args.big_mb:g} MB prompts | all 400 | slowest answer | peak RSS "
        f"| RSS {SETTLE_S:g} s later (vs baseline) | stream beside them |",
        "|---|---|---|---|---|---|",
    ]
    for result in big:
        all_400 = sum(status == 400 for status in result.statuses)
        lines.append(
            f"| {result.transport} | {all_400}/{len(result.statuses)} | "
            f"{result.slowest_s:.2f} s ({'ok' if result.slowest_s < ANSWER_WITHIN_S else 'FAIL'}) | "
            f"{result.peak_mb:.0f} MB ({'ok' if result.peak_mb < PEAK_LIMIT_MB else 'FAIL'}) | "
            f"{_within(result.settled_mb, result.baseline_mb)} from {result.baseline_mb:.0f} MB | "
            f"{'completed' if result.beside_ok else 'FAILED'} |"
        )
    back = fuzzed.after_mb - fuzzed.baseline_mb
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(fuzzed.statuses.items()))
    huge = ", ".join(f"{status}: {n}" for status, n in sorted(fuzzed.huge_statuses.items()))
    lines += [
        "",
        f"| fuzz (seed {args.seed}) | sent | statuses | 5xx / internal_error | ids named "
        f"| ids without a terminal | ids ended twice | sockets closed | peak RSS "
        f"| RSS {SETTLE_S:g} s later (vs start) | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {args.bodies} bodies + {args.frames} WS frames | {fuzzed.bodies} + {fuzzed.frames} | "
        f"{statuses} | {fuzzed.server_errors} | {fuzzed.ids_expected} | "
        f"{fuzzed.ids_without_terminal} | {fuzzed.ids_ended_twice} | {fuzzed.sockets_closed} | "
        f"{fuzzed.peak_mb:.0f} MB | {fuzzed.after_mb:.0f} MB ({back:+.0f} MB, "
        f"{'ok' if back <= FUZZ_RSS_BACK_MB else 'FAIL'}) from {fuzzed.baseline_mb:.0f} MB | "
        f"{fuzzed.seconds:.1f} s |",
        "",
        "| of which numbers no field holds (issue 45) | bodies | statuses | 5xx |",
        "|---|---|---|---|",
        f"| beyond int64 / float range, 1e400, bools, negatives | {fuzzed.huge_bodies} | "
        f"{huge} | {sum(n for status, n in fuzzed.huge_statuses.items() if status >= 500)} |",
        *h2_rows(h2, args),
    ]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> str:
    port, handshake = free_port(), free_port()
    model = demo_model_path()
    with tempfile.TemporaryDirectory(prefix="hostile-") as scratch:
        logs = Path(scratch)
        gateway_command = [
            *smg_trio_command(port, f"vllm+zmq://127.0.0.1:{handshake}", model),
            "--max-body-bytes",
            str(16 * 1024 * 1024),
        ]
        async with (
            started_process(gateway_command, logs / "gateway.log") as gateway,
            started_process(
                reference_engine_command(
                    f"tcp://127.0.0.1:{handshake}", model_path=model, step_ms=1.0
                ),
                logs / "engine.log",
            ),
        ):
            await wait_serving(gateway, port, timeout_s=60)
            base_url = f"http://127.0.0.1:{port}"
            watch = RssWatch(gateway.process.pid)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch.run)
                big = (
                    [await big_prompts(args, base_url, watch, t) for t in ("http", "websocket")]
                    if "big" in args.phases.split(",")
                    else []
                )
                fuzzed = await fuzz(args, base_url, watch)
                h2 = None
                if "h2" in args.phases.split(","):
                    with trio.fail_after(args.time_cap):
                        sequences = list(h2_sequences(args.seed, args.h2, model=SERVED_MODEL))
                        h2 = await fuzz_h2(port, sequences)
                nursery.cancel_scope.cancel()
    return report(big, fuzzed, args, h2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--big", type=int, default=16, help="concurrent big prompts")
    parser.add_argument("--big-mb", type=float, default=8.0, help="size of each big prompt")
    parser.add_argument("--bodies", type=int, default=20_000, help="fuzzed HTTP bodies")
    parser.add_argument("--frames", type=int, default=5_000, help="fuzzed WebSocket frames")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--h2", type=int, default=2_000, help="fuzzed h2 frame sequences")
    parser.add_argument("--phases", default="big,fuzz,h2", help="big,fuzz,h2 or some of them")
    parser.add_argument("--time-cap", type=float, default=600.0, help="seconds per phase")


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("hostile_input", __doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    recording = Recording("hostile_input", "Hostile input (issue 17)")
    body = trio.run(run, args)
    recording.publish(body, write=not args.no_write)
    return 0
