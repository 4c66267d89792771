"""I/O. `python -m bench.keepalive_scan [--streams 1000,10000]`: what keep-alives cost
(docs/resilience.md §5), bounded in count and in-process only.

- per chunk: the one flag store a sink does (`quiet = False`) versus what a per-stream timer
  would do instead (move its cancel scope's deadline, which reads the clock);
- per scan: `Lifecycle.scan_keep_alives` over N live streaming requests (four scans per
  keep-alive period, whatever the token rate).
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from typing import Final, cast

import trio

from smg_trio.lifecycle import Lifecycle

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
    lifecycle = Lifecycle()
    with ExitStack() as stack:
        for _ in range(streams):  # admitted as the gateway admits them, without running
            live = stack.enter_context(lifecycle.admit(_QuietSink()))  # type: ignore[arg-type]
            live.streaming = True
        sinks = [cast(_QuietSink, live.sink) for live in lifecycle.live_requests]
        scans_ns = 0
        for _ in range(SCANS):
            start = time.perf_counter_ns()
            assert not lifecycle.scan_keep_alives()  # none due: each sink streamed meanwhile
            scans_ns += time.perf_counter_ns() - start
            for sink in sinks:
                sink.quiet = False
    return scans_ns / SCANS / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", default="1000,10000")
    args = parser.parse_args()
    flag, timer = trio.run(_per_chunk_ns)
    print(f"per chunk: quiet flag {flag:.0f} ns; per-stream timer deadline {timer:.0f} ns")
    for streams in (int(n) for n in args.streams.split(",")):
        scan = trio.run(_scan_us, streams)
        per_s = scan * 4 / 15.0  # four scans per default 15 s period
        print(f"{streams} streams: one scan {scan:.0f} us; {per_s:.0f} us of CPU per second")


if __name__ == "__main__":
    main()
