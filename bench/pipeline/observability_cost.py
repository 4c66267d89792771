"""I/O. `python -m bench observability_cost`: the CPU the observability hooks add, measured in
process, away from the load of a shared machine (docs/observability.md §1, §2).

Per request: a `RequestRecord` opened, fed `BATCHES` engine batches (one token each, the
streaming case), closed into the metrics and into one JSON request log line, formatted (as the
writer thread does). Per batch: `RequestRecord.on_batch` alone. Per scrape: the exposition of a
registry holding `ROUTES` routes. Bounded: `REQUESTS` requests, a few seconds in all.
"""

from __future__ import annotations

import io
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Final

from bench.reports.results_page import Recording, recording_parser
from smg_trio.neutral.events import TokenDelta
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.observability.request_log import (
    REQUEST_LOGGER,
    BufferedHandler,
    JsonLineFormatter,
    log_request,
)
from smg_trio.observability.request_record import RequestRecord
from smg_trio.wire.openai_responses import Usage

REQUESTS: Final = 2_000
BATCHES: Final = 128  # one token per batch: 128 output tokens, every one its own batch
ROUTES: Final = 12  # endpoints × transports × workers a busy gateway has seen
REPEATS: Final = 5


def per_request_us(metrics: GatewayMetrics, handler: BufferedHandler) -> tuple[float, float]:
    """(µs per request for the whole hook set, µs per batch for `on_batch` alone)."""
    batch = [TokenDelta(0, (7,), None, None)]
    formatter, stream = JsonLineFormatter(), io.StringIO()
    on_batch_s = 0.0
    started = time.perf_counter()
    for index in range(REQUESTS):
        record = RequestRecord(f"id-{index}", "/v1/completions", "http1", "127.0.0.1:1")
        metrics.request_started(record)
        record.worker_picked("vllm+zmq://127.0.0.1:1", "vllm")
        record.engine_sent()
        batch_started = time.perf_counter()
        for _ in range(BATCHES):
            record.on_batch(batch)
        on_batch_s += time.perf_counter() - batch_started
        record.assembled(Usage.of(128, BATCHES), ("length",), None)
        ended = time.perf_counter()
        metrics.request_finished(record, ended)
        log_request(record, ended, with_text=None)
        if index % 16 == 15:
            handler.drain(formatter, stream)  # the writer thread's share, counted here too
    total = time.perf_counter() - started
    return total / REQUESTS * 1e6, on_batch_s / (REQUESTS * BATCHES) * 1e6


def exposition_ms(metrics: GatewayMetrics) -> float:
    for route in range(ROUTES):
        record = RequestRecord("r", f"/route-{route}", ("http1", "h2", "ws")[route % 3], "-")
        record.worker_picked(f"worker-{route % 2}", "vllm")
        record.engine_sent()
        record.on_batch([TokenDelta(0, (1,), None, None)])
        record.on_batch([TokenDelta(0, (1,), None, None)])
        metrics.request_started(record)
        metrics.request_finished(record, time.perf_counter())
    started = time.perf_counter()
    for _ in range(50):
        metrics.exposition()
    return (time.perf_counter() - started) / 50 * 1e3


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("observability_cost", __doc__)
    args = parser.parse_args(argv)
    recording = Recording("observability_cost", "Observability (issue 14)")
    handler = BufferedHandler()
    logger = logging.getLogger(REQUEST_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    runs = [per_request_us(GatewayMetrics(), handler) for _ in range(REPEATS)]
    request_us = statistics.median(run[0] for run in runs)
    batch_us = statistics.median(run[1] for run in runs)
    render_ms = statistics.median(exposition_ms(GatewayMetrics()) for _ in range(REPEATS))
    lines = [
        "| hook | cost (median) |",
        "|---|---:|",
        f"| per request ({BATCHES} one-token batches, metrics, JSON line) | {request_us:.1f} µs |",
        f"| of which on_batch, per batch | {batch_us:.2f} µs |",
        f"| per output token | {request_us / BATCHES:.2f} µs |",
        f"| exposition with {ROUTES} routes | {render_ms:.2f} ms |",
    ]
    recording.publish("\n".join(lines), write=not args.no_write)
    return 0
