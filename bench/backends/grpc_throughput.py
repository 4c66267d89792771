"""I/O. Streaming throughput of our gRPC backend client, and the asyncio bridge's own cost.

Run: `python -m bench grpc_throughput` (under 2 minutes; `--no-write` leaves RESULTS.md alone).
Starts `python -m smg_trio.engines vllm-grpc --host 127.0.0.1 --port 0 --step-ms 0` (the
reference vLLM gRPC engine, zero step time) and drives 1, 64 and 256 concurrent streams with two
clients in this one process, against the same engine:

- "native": plain asyncio grpclib (`asyncio.run`, one task per stream) calling Generate and
  reading every response (parsed with `parse_generate_response`), no trio, no bridge;
- "smg-trio": `open_grpc_backend` under `trio.run`, each stream an `open_stream` block whose
  `TokenDelta`s are counted: grpclib on the bridge's loop thread, responses parsed there and
  handed into trio through the coalescing `TrioHandoff`.

Every request is the same greedy `ignore_eos` request with `MAX_TOKENS`; each stream sends its
share of the configuration's requests one after another. Per run: tokens received, wall time,
and this process's CPU time (`time.process_time`: all threads). The engine sends one message per
token plus one complete message per request (the native client counts them; the bridge client
is charged the same). Client CPU per message is the stable figure (the engine shares the two
cores); the bridge's own cost is smg-trio minus native. Medians of `REPETITIONS` runs.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import trio
from grpclib.client import Channel

from bench.reports.results_page import Recording, recording_parser
from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import close_channel
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.events import TokenDelta
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire._proto import vllm_engine_grpc, vllm_engine_pb2
from smg_trio.wire.grpc_messages import build_vllm_generate
from smg_trio.wire.grpc_responses import GrpcChunk, parse_generate_response

STREAM_COUNTS: Final = (1, 64, 256)
MAX_TOKENS: Final = 128
REQUESTS: Final[Mapping[int, int]] = {1: 64, 64: 128, 256: 256}
"""Requests per configuration (a multiple of its stream count): about 0.5-3 s each here."""
REPETITIONS: Final = 3
RUN_CAP_S: Final = 15.0
ENGINE_START_S: Final = 30.0
PROMPT: Final = (300, 301, 302, 303, 304, 305, 306, 307)
CLIENTS: Final = ("native", "smg-trio")


@dataclass(frozen=True)
class Run:
    client: str
    streams: int
    requests: int
    tokens: int
    messages: int
    wall_s: float
    cpu_s: float
    items_per_wakeup: float | None = None  # smg-trio only: hand-off items per trio wake-up

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def cpu_us_per_message(self) -> float:
        return 1e6 * self.cpu_s / self.messages


def finalized_request(index: int) -> Finalized:
    plan = GeneratePlan(
        request_id=f"bench-{index}",
        endpoint=Endpoint.GENERATE,
        model="bench",
        prompt_ids=PROMPT,
        sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True),
    )
    return finalize(plan, WorkerTarget(runtime=Runtime.VLLM, wire=Wire.GRPC), None)


@contextmanager
def reference_engine() -> Iterator[int]:
    """The reference vLLM gRPC engine as a subprocess; yields its port."""
    command = EngineCommand(
        "vllm-grpc",
        host="127.0.0.1",
        port=0,
        model_path=demo_model_path(),
        step_ms=0,
        max_batch=512,
    ).argv()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "listening on 127.0.0.1:PORT" comes first
        match = re.search(r"listening on [\d.]+:(\d+)", line)
        if match is None:
            raise RuntimeError(f"the engine did not say where it listens: {line!r}")
        yield int(match.group(1))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure_native(port: int, streams: int) -> Run:
    requests = REQUESTS[streams]
    messages = [
        build_vllm_generate(finalized_request(i).requests[0], f"n-{i}") for i in range(requests)
    ]

    async def main() -> Run:
        channel = Channel("127.0.0.1", port)
        stub = vllm_engine_grpc.VllmEngineStub(channel)
        await stub.HealthCheck(vllm_engine_pb2.HealthCheckRequest())  # connected before timing
        counts = [0, 0]  # tokens, messages

        async def one_stream(first: int) -> None:
            for index in range(first, requests, streams):
                async with stub.Generate.open() as call:
                    await call.send_message(messages[index], end=True)
                    async for response in call:
                        event = parse_generate_response(response)
                        counts[1] += 1
                        if isinstance(event, GrpcChunk):
                            counts[0] += len(event.token_ids)

        try:
            wall, cpu = time.perf_counter(), time.process_time()
            await asyncio.wait_for(
                asyncio.gather(*(one_stream(i) for i in range(streams))), RUN_CAP_S
            )
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await close_channel(channel)
        return Run("native", streams, requests, counts[0], counts[1], wall, cpu)

    return asyncio.run(main())


def measure_ours(port: int, streams: int) -> Run:
    requests = REQUESTS[streams]
    finalized = [finalized_request(i) for i in range(requests)]
    runs: list[Run] = []

    async def one_stream(backend: GrpcBackend, first: int, tokens: list[int]) -> None:
        for index in range(first, requests, streams):
            async with backend.open_stream(finalized[index]) as events:
                async for event in events:
                    if isinstance(event, TokenDelta):
                        tokens[0] += len(event.token_ids)

    async def main() -> None:
        async with open_grpc_backend(runtime=Runtime.VLLM, address=f"127.0.0.1:{port}") as backend:
            with trio.fail_after(ENGINE_START_S):
                await backend.wait_ready()  # connected before timing
            tokens = [0]
            handed = backend.handoff_statistics()
            wall, cpu = time.perf_counter(), time.process_time()
            with trio.fail_after(RUN_CAP_S):
                async with trio.open_nursery() as nursery:
                    for first in range(streams):
                        nursery.start_soon(one_stream, backend, first, tokens)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            after = backend.handoff_statistics()
            per_wakeup = (after.items - handed.items) / max(1, after.batches - handed.batches)
            # One message per token plus one complete per request, as the native client counts.
            messages = tokens[0] + requests
            runs.append(
                Run("smg-trio", streams, requests, tokens[0], messages, wall, cpu, per_wakeup)
            )

    trio.run(main)
    return runs[0]


MEASURE: Final = {"native": measure_native, "smg-trio": measure_ours}


def median_run(runs: list[Run]) -> Run:
    """The run with the median client CPU per message (its own wall time and tokens)."""
    return sorted(runs, key=lambda run: run.cpu_us_per_message)[len(runs) // 2]


def report(runs: list[Run]) -> str:
    by_config: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        by_config.setdefault((run.client, run.streams), []).append(run)
    lines = [
        "The cores are shared by the client and the engine process (the reference vLLM gRPC "
        f"engine, `--step-ms 0`). Each request: greedy, ignore_eos, max_tokens {MAX_TOKENS} (one message per token plus "
        "a complete message); each stream sends its share one after another. Medians of "
        f"{REPETITIONS} runs (by client CPU/message). tokens/s is bound by the engine process "
        "here (both share two cores), so compare client CPU per message: the bridge's own cost is "
        "smg-trio minus native (asyncio grpclib in the same process, parsing the same way). "
        "Items per trio wake-up: hand-off items (responses and call outcomes) per "
        "`run_sync_soon` callback; the fewer, the more often a message costs a wake-up of the "
        "trio thread on top of the loop thread's.",
        "",
        "| streams | requests | native tokens/s | smg-trio tokens/s | native CPU µs/msg "
        "| smg-trio CPU µs/msg | bridge µs/msg | items per trio wake-up |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for streams in STREAM_COUNTS:
        native = median_run(by_config[("native", streams)])
        ours = median_run(by_config[("smg-trio", streams)])
        bridge = ours.cpu_us_per_message - native.cpu_us_per_message
        lines.append(
            f"| {streams} | {ours.requests} | {native.tokens_per_s:,.0f} | "
            f"{ours.tokens_per_s:,.0f} | {native.cpu_us_per_message:.1f} | "
            f"{ours.cpu_us_per_message:.1f} | {bridge:+.1f} | {ours.items_per_wakeup or 0:.1f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("grpc_throughput", __doc__)
    arguments = parser.parse_args(argv)
    recording = Recording("grpc_throughput", "gRPC backend throughput")
    runs: list[Run] = []
    with reference_engine() as port:
        for _ in range(REPETITIONS):
            for streams in STREAM_COUNTS:
                for client in CLIENTS:
                    run = MEASURE[client](port, streams)
                    runs.append(run)
                    print(
                        f"{client:>8} x{streams:<3} {run.tokens:>6} tokens {run.wall_s:6.2f} s "
                        f"{run.tokens_per_s:>9,.0f} tok/s {run.cpu_us_per_message:6.1f} µs/msg",
                        flush=True,
                    )
    recording.publish(report(runs), write=not arguments.no_write)
    return 0
