"""I/O. Where a single stream's time to first token goes inside the gateway (issue 15 item 3).

    python -m bench ttft_trace [--requests 200] [--step-ms 0] [--output-tokens 16]

The gateway runs in this process (harness/served_gateway.py) with the reference vLLM EngineCore
as a subprocess; one h2c client (the load bench's, bench/load/h2c_client.py) sends streamed
completions one after another from a process of its own, so none of its CPU lands between the
gateway's stamps. For the trace, and only in this process, a few of the gateway's functions
are wrapped to take a `perf_counter_ns` stamp (CLOCK_MONOTONIC, the same clock in both
processes) the first time each runs for the request in flight (nothing of it is left in the
gateway's code):

    sent        the client hands the request to its connection
    received    the gateway's h2 protocol is handed the request's bytes
    handle      Gateway.handle starts (h2 events, stream, app task, body read)
    prepared    prepare_for_path (request/endpoints.py) returned (decode, template, tokenize)
    finalized   finalize (request/retrying.py) returned: the engine request
    queued      the ZMQ backend handed the ADD to its input socket's writer
    add_sent    the ZMQ ADD left the backend's input socket (from the writer task, or from
                the request's own when the writer is idle)
    output      the first engine output message was decoded
    chunk       the first payload reached the SSE sink (from the output's own step, or the
                response's writer task)
    written     the first write began (bytes to the kernel): the connection writer's, or
                `write_through` from the task that framed them (a lone h2 stream: the head
                and the first DATA, docs/performance.md §3)
    first_byte  the client read the first response bytes

and the p50 of each step is printed (ms): `sent` → `received` and `written` → `first_byte`
are the kernel's and the client's, the steps in between the gateway's. Bounded: at most
`--requests` requests (≤ 2,000), loopback only.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from itertools import pairwise
from typing import Any, Final

import trio

from bench.load.h2c_client import open_h2c_connection
from harness.served_gateway import served_gateway, zmq_gateway_config
from smg_trio.backends import zmq_codec, zmq_input_writer
from smg_trio.engines.launch import EngineCommand
from smg_trio.frontends import sse
from smg_trio.frontends.http import connection_writer
from smg_trio.frontends.http import h2_protocol as http_h2
from smg_trio.neutral.runtime import Runtime
from smg_trio.request import gateway as gateway_module
from smg_trio.request import preparation as request_preparation
from smg_trio.request import retrying
from smg_trio.serving.config import GatewayConfig

STAGES: Final = (
    "sent",
    "received",
    "handle",
    "prepared",
    "finalized",
    "queued",
    "add_sent",
    "output",
    "chunk",
    "written",
    "first_byte",
)
MAX_REQUESTS: Final = 2000
WARM_UP: Final = 5
CLIENT_S: Final = 120.0
# The gateway's stamps of each request, in order: a request's record begins at `handle`, and
# its `received` is the h2 protocol's last input before that (the request's own bytes; the
# client's acknowledgements of the previous response came before them).
records: list[dict[str, int]] = []
last_received = [0]


def _stamp(stage: str) -> None:
    now = time.perf_counter_ns()
    if stage == "received":
        last_received[0] = now
        return
    if stage == "handle":
        records.append({"received": last_received[0]})
    if records and stage not in records[-1]:
        records[-1][stage] = now


Undo = list[tuple[Any, str, Any]]


def _after(owner: Any, name: str, stage: str, undo: Undo) -> None:
    """Wrap `owner.name` (sync or async) to stamp `stage` when it returns."""
    original: Callable[..., Any] = getattr(owner, name)
    undo.append((owner, name, original))
    if inspect.iscoroutinefunction(original):

        @wraps(original)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            _stamp(stage)
            return result

        setattr(owner, name, async_wrapper)
    else:

        @wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            _stamp(stage)
            return result

        setattr(owner, name, wrapper)


def _before(owner: Any, name: str, stage: str, undo: Undo) -> None:
    """Wrap `owner.name` (sync or async) to stamp `stage` when it is called."""
    original: Callable[..., Any] = getattr(owner, name)
    undo.append((owner, name, original))
    if inspect.iscoroutinefunction(original):

        @wraps(original)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            _stamp(stage)
            return await original(*args, **kwargs)

        setattr(owner, name, async_wrapper)
    else:

        @wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _stamp(stage)
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)


@contextmanager
def instrumented() -> Iterator[None]:
    """The gateway's functions wrapped for the trace, and put back on leaving."""
    undo: Undo = []
    try:
        _before(http_h2.GuardedH2Protocol, "handle", "received", undo)
        _before(gateway_module.Gateway, "handle", "handle", undo)
        _after(request_preparation, "prepare_for_path", "prepared", undo)  # as it is called
        _after(retrying, "finalize", "finalized", undo)
        # The ADDs are handed to the writer (queued, or sent at once when it is idle).
        _before(zmq_input_writer.InputWriter, "send_adds", "queued", undo)
        _after(zmq_input_writer.InputWriter, "_send", "add_sent", undo)  # by the writer task
        _after(zmq_input_writer.InputWriter, "_take_now", "add_sent", undo)  # or directly
        _after(zmq_codec, "decode_output", "output", undo)
        _before(sse.SseResponse, "send_chunks", "chunk", undo)  # by the response's writer task
        _before(sse.SseResponse, "send_chunks_now", "chunk", undo)  # or from the output's step
        _before(connection_writer.ConnectionWriter, "_write", "written", undo)
        # or the first bytes go out at once from the task that framed them (one h2 stream)
        _before(connection_writer.ConnectionWriter, "write_through", "written", undo)
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


async def trace(requests: int, step_ms: float, output_tokens: int) -> dict[str, list[float]]:
    config = zmq_gateway_config(1, Runtime.VLLM, api_key=None)
    steps: dict[str, list[float]] = {stage: [] for stage in STAGES[1:]}
    body: dict[str, object] = {
        "model": "demo_model",
        "prompt": "one two three four five six seven eight " * 16,
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    with instrumented():
        await _trace(config, requests, step_ms, body, steps)
    return steps


async def _trace(
    config: GatewayConfig,
    requests: int,
    step_ms: float,
    body: dict[str, object],
    steps: dict[str, list[float]],
) -> None:
    async with served_gateway(config, subprocess.DEVNULL) as served:
        (address,) = served.serving.worker_addresses
        await served.start_engine(
            EngineCommand("vllm-zmq", handshake=address, step_ms=step_ms).argv()
        )
        await served.wait_ready(served.serving.gateway.pool.workers)
        records.clear()
        argv = [sys.executable, "-m", "bench", "ttft_trace", "--client", str(served.serving.port)]
        argv += ["--requests", str(requests + WARM_UP), "--body", json.dumps(body)]
        with trio.fail_after(CLIENT_S):
            done = await trio.run_process(argv, capture_stdout=True)
    client = [json.loads(line) for line in done.stdout.decode().splitlines()]
    for (sent, first_byte), gateway in list(zip(client, records, strict=False))[WARM_UP:]:
        stamps = {"sent": sent, **gateway, "first_byte": first_byte}
        for previous, stage in pairwise(STAGES):
            if previous in stamps and stage in stamps:
                steps[stage].append((stamps[stage] - stamps[previous]) / 1e6)


async def _client(port: int, requests: int, body: bytes) -> None:
    """The client process: one stream at a time; prints `[sent, first_byte]` per request."""
    async with open_h2c_connection("127.0.0.1", port) as connection:
        for _ in range(requests):
            sent = time.perf_counter_ns()
            first_byte = 0
            async with connection.post("/v1/completions", body) as response:
                await response.status()
                async for _ in response:
                    first_byte = first_byte or time.perf_counter_ns()
            print(json.dumps([sent, first_byte]), flush=True)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ttft_trace", description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)  # the client process
    parser.add_argument("--body", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client is not None:
        trio.run(_client, args.client, args.requests, args.body.encode())
        return 0
    if not 0 < args.requests <= MAX_REQUESTS + WARM_UP:
        parser.error(f"--requests must be in 1..{MAX_REQUESTS}")
    steps = trio.run(trace, args.requests, args.step_ms, args.output_tokens)
    print("| step | p50 ms | p90 ms |")
    print("|---|---:|---:|")
    total = 0.0
    for stage, values in steps.items():
        if not values:
            continue
        p50 = statistics.median(values)
        total += p50
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else p50
        print(f"| → {stage} | {p50:.3f} | {p90:.3f} |")
    print(f"| sum of p50s | {total:.3f} | |")
    return 0
