"""I/O. `python -m bench keepalive_scan [--streams 1000,10000]`: what keep-alives cost
(docs/resilience.md §5), bounded in count and in-process only.

- per chunk: the one flag store a sink does (`quiet = False`) versus what a per-stream timer
  would do instead (move its cancel scope's deadline, which reads the clock);
- per scan: `LiveRequests.scan_keep_alives` over N live streaming requests (four scans per
  keep-alive period, whatever the token rate).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Final, cast

import trio

from bench.reports.results_page import Recording, recording_parser
from smg_trio.request.live_requests import LiveRequests

CHUNKS: Final = 1_000_000
SCANS: Final = 50


class _QuietSink:
    def __init__(self) -> None:
        self.quiet = False

    async def keep_alive(self) -> None:  # pragma: no cover - never due during the measure
        pass


async def _per_chunk_ns() -> tuple[float, float]:
    sink = _QuietSink()
    start = time.perf_counter_ns()
    for _ in range(CHUNKS):
        sink.quiet = False
    flag = (time.perf_counter_ns() - start) / CHUNKS
    scope = trio.CancelScope()
    start = time.perf_counter_ns()
    for _ in range(CHUNKS):
        scope.deadline = trio.current_time() + 15.0
    timer = (time.perf_counter_ns() - start) / CHUNKS
    return flag, timer


async def _scan_us(streams: int) -> float:
    lifecycle = LiveRequests()
    with ExitStack() as stack:
        for _ in range(streams):  # admitted as the gateway admits them, without running
            live = stack.enter_context(lifecycle.admit(_QuietSink()))  # type: ignore[arg-type]
            live.streaming = True
        sinks = [cast(_QuietSink, live.sink) for live in lifecycle.requests]
        scans_ns = 0
        for _ in range(SCANS):
            start = time.perf_counter_ns()
            assert not lifecycle.scan_keep_alives()  # none due: each sink streamed meanwhile
            scans_ns += time.perf_counter_ns() - start
            for sink in sinks:
                sink.quiet = False
    return scans_ns / SCANS / 1000


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("keepalive_scan", __doc__)
    parser.add_argument("--streams", default="1000,10000")
    args = parser.parse_args(argv)
    recording = Recording("keepalive_scan", "Keep-alive cost")
    flag, timer = trio.run(_per_chunk_ns)
    lines = [
        "| what | cost |",
        "|---|---:|",
        f"| per chunk: the quiet flag a sink stores | {flag:.0f} ns |",
        f"| per chunk: a per-stream timer's deadline moved instead | {timer:.0f} ns |",
    ]
    for streams in (int(n) for n in args.streams.split(",")):
        scan = trio.run(_scan_us, streams)
        per_s = scan * 4 / 15.0  # four scans per default 15 s period
        lines.append(
            f"| one scan of {streams} streams (CPU per second) | {scan:.0f} µs ({per_s:.0f} µs) |"
        )
    recording.publish("\n".join(lines), write=not args.no_write)
    return 0
