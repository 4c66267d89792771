"""I/O. Throughput of our ZMQ backend client against the reference vLLM EngineCore.

Run: `python -m bench zmq_throughput` or `make bench-zmq` (about a minute; `--no-write` leaves
RESULTS.md alone). Starts `python -m smg_trio.engines vllm-zmq --step-ms 0 --max-batch 512 --mode
random` as a subprocess dialling `open_zmq_backend(runtime=Runtime.VLLM)` (loopback tcp handshake,
private ipc data sockets), then drives 1, 64 and 256 concurrent streams. Every request is the same
streaming chat request (demo model, `ignore_eos`, fixed `max_tokens`, so all are equally long);
each stream sends its share of the configuration's fixed request count one after another, under
a time cap.

Two passes: "backend" only counts the tokens of each `TokenDelta`; "pipeline" also feeds each
batch of events to a `ResponseAssembler` (detokenize, stop scan for two strings that practically
never match, chat render) and SSE-frames its payloads: the gateway's per-request work without
HTTP.
Per run: tokens received through our client, wall time, the client process's CPU time
(`time.process_time`: all its threads, libzmq's I/O thread too), the engine's output messages
(its own counter, read with the `smg_trio_counters` utility call) and the engine process's CPU
time (/proc). Each configuration runs `REPETITIONS` times and the medians are reported. One extra
run per pass at the largest stream count is profiled with cProfile.
"""

from __future__ import annotations

import cProfile
import datetime as dt
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Final

import msgspec
import trio

from bench.backends.zmq_throughput_report import (
    INTERPRETATION,
    BenchReport,
    Measurement,
    Workload,
    describe_profile,
    pass_name,
    section_body,
)
from bench.reports.results_page import Recording, recording_parser
from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import prepare_chat
from smg_trio.core.render import sse
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import TokenDelta
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.wire.openai_decode import decode_chat_request

STREAM_COUNTS: Final = (1, 64, 256)
MAX_TOKENS: Final = 256
REQUESTS: Final[Mapping[int, int]] = {1: 32, 64: 256, 256: 512}
"""Requests per configuration (a multiple of the stream count): about 1-3 s each here."""
REPETITIONS: Final = 3
TIME_CAP_S: Final = 10.0
"""A run still going after this is cancelled (its streams abort) and reported as capped."""
ENGINE_MAX_BATCH: Final = 512
READY_TIMEOUT_S: Final = 30.0
COUNTERS_TIMEOUT_S: Final = 10.0
STOPS: Final = ("\n\nUser:", "</answer>")


class BenchEngine:
    """The backend, the engine process behind it, and the request every stream sends."""

    def __init__(
        self,
        backend: ZmqBackend,
        process: trio.Process,
        plan: GeneratePlan,
        tokenizer: TokenizerLike,
        target: WorkerTarget,
    ) -> None:
        self.backend = backend
        self.target = target
        self.process = process
        self.plan = plan
        self.tokenizer = tokenizer
        self._serial = 0

    def next_plan(self, max_tokens: int) -> GeneratePlan:
        self._serial += 1
        sampling = msgspec.structs.replace(self.plan.sampling, max_tokens=max_tokens)
        return msgspec.structs.replace(
            self.plan, request_id=f"bench-{self._serial}", sampling=sampling
        )

    async def output_messages(self) -> int:
        """The engine's count of output messages sent so far (this call's reply not included)."""
        with trio.fail_after(COUNTERS_TIMEOUT_S):
            counters = await self.backend.call_utility("smg_trio_counters")
        return int(counters["output_messages"])

    def engine_cpu_s(self) -> float:
        """The engine process's user + system CPU time so far, from /proc."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        user, system = int(fields[11]), int(fields[12])  # utime, stime (fields 14, 15)
        return (user + system) / os.sysconf("SC_CLK_TCK")


def chat_plan(tokenizer_model_path: Path) -> tuple[GeneratePlan, TokenizerLike]:
    """A streaming chat request prepared as the gateway would (template, tokenize, stops)."""
    model = load_model_dir(tokenizer_model_path)
    body = msgspec.json.encode(
        {
            "model": model.served_name,
            "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "stream": True,
            "stop": list(STOPS),
        }
    )
    request = decode_chat_request(body)
    now = dt.datetime.now(dt.UTC)
    plan = prepare_chat(request, model.prompt_model(), request_id="bench", now=now)
    # A stop the engine could see (a single-token stop string) would end requests early.
    target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
    engine_stops = finalize(plan, target, model.tokenizer).requests[0].sampling.stop_token_ids
    assert not engine_stops, f"bench stops must stay router-side, got ids {engine_stops}"
    return plan, model.tokenizer


@asynccontextmanager
async def open_bench_engine(log: IO[bytes]) -> AsyncIterator[BenchEngine]:
    """Bind the backend, start the engine subprocess, wait until it is ready; kill it on exit."""
    model_path = demo_model_path()
    model = load_model_dir(model_path)
    plan, tokenizer = chat_plan(model_path)
    async with open_zmq_backend(
        runtime=Runtime.VLLM, vocab_size=model.tokenizer.vocab_size
    ) as backend:
        command = EngineCommand(
            "vllm-zmq",
            handshake=backend.handshake_address,
            model_path=model_path,
            step_ms=0,
            max_batch=ENGINE_MAX_BATCH,
            mode=Mode.RANDOM,
        ).argv()
        process = await trio.lowlevel.open_process(command, stdout=log, stderr=log)
        try:
            with trio.fail_after(READY_TIMEOUT_S):
                await backend.wait_ready()
            target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
            yield BenchEngine(backend, process, plan, tokenizer, target)
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    os.kill(process.pid, signal.SIGKILL)
                await process.wait()


@dataclass
class _Tally:
    requests_done: int = 0
    tokens: int = 0
    payload_bytes: int = 0


async def _run_stream(
    engine: BenchEngine, workload: Workload, requests: int, tally: _Tally
) -> None:
    for _ in range(requests):
        plan = engine.next_plan(workload.max_tokens)
        finalized = finalize(plan, engine.target, engine.tokenizer)
        assembler = (
            ResponseAssembler(plan, engine.tokenizer, created=0) if workload.pipeline else None
        )
        async with engine.backend.open_stream(finalized) as events:
            async for batch in events.batches():  # as the gateway takes them
                for event in batch:
                    if isinstance(event, TokenDelta):
                        tally.tokens += len(event.token_ids)
                if assembler is not None:
                    for payload in assembler.on_events(batch):
                        tally.payload_bytes += len(sse(payload))
                    if assembler.done:
                        break  # a router stop matched: the gateway leaves (and aborts) here too
        tally.requests_done += 1


async def run_workload(
    engine: BenchEngine, workload: Workload, *, time_cap_s: float = TIME_CAP_S
) -> Measurement:
    """Drive `workload.streams` concurrent streams through the backend; measure the client."""
    if workload.requests % workload.streams:
        raise ValueError("requests must be a multiple of streams")
    per_stream = workload.requests // workload.streams
    tally = _Tally()
    messages_before = await engine.output_messages()
    engine_cpu_before = engine.engine_cpu_s()
    wall_before = time.perf_counter()
    cpu_before = time.process_time()
    with trio.move_on_after(time_cap_s) as cap:
        async with trio.open_nursery() as nursery:
            for _ in range(workload.streams):
                nursery.start_soon(_run_stream, engine, workload, per_stream, tally)
    cpu_s = time.process_time() - cpu_before
    wall_s = time.perf_counter() - wall_before
    engine_cpu_s = engine.engine_cpu_s() - engine_cpu_before
    # The first counters call's reply went out after its snapshot, so it is in the difference.
    messages = await engine.output_messages() - messages_before - 1
    return Measurement(
        workload=workload,
        requests_done=tally.requests_done,
        tokens=tally.tokens,
        messages=messages,
        wall_s=wall_s,
        client_cpu_s=cpu_s,
        engine_cpu_s=engine_cpu_s,
        payload_bytes=tally.payload_bytes,
        capped=cap.cancelled_caught,
    )


async def run_bench(
    *,
    stream_counts: Sequence[int] = STREAM_COUNTS,
    requests: Mapping[int, int] = REQUESTS,
    max_tokens: int = MAX_TOKENS,
    repetitions: int = REPETITIONS,
    pipelines: Sequence[bool] = (False, True),
    profile_streams: int | None = None,
    time_cap_s: float = TIME_CAP_S,
) -> BenchReport:
    """Start the engine, warm up, run every configuration `repetitions` times per pass
    (`pipelines`: False = backend only, True = with the response pipeline), optionally profile
    one run of `profile_streams` streams per pass, and stop the engine.

    If anything fails, the engine's log is copied to stderr before the error propagates.
    """
    measurements: list[Measurement] = []
    profiles: dict[str, str] = {}
    with tempfile.TemporaryFile() as log:
        try:
            async with open_bench_engine(log) as engine:
                widest = max(stream_counts)
                await run_workload(engine, Workload(widest, widest, 8, True), time_cap_s=time_cap_s)
                for pipeline in pipelines:
                    for streams in stream_counts:
                        workload = Workload(streams, requests[streams], max_tokens, pipeline)
                        measurements += [
                            await run_workload(engine, workload, time_cap_s=time_cap_s)
                            for _ in range(repetitions)
                        ]
                    if profile_streams is not None:
                        # One request per stream: cProfile slows the client several times over.
                        workload = Workload(profile_streams, profile_streams, max_tokens, pipeline)
                        name = pass_name(workload)
                        profiles[name] = await _profiled(engine, workload, time_cap_s)
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
            raise
    return BenchReport(tuple(measurements), profiles)


async def _profiled(engine: BenchEngine, workload: Workload, time_cap_s: float) -> str:
    # The default (wall) clock: the CPU clock costs a ~1 µs syscall per read here, which would
    # swamp the many tiny calls. Time blocked in epoll is set apart by `describe_profile`.
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await run_workload(engine, workload, time_cap_s=time_cap_s)
    finally:
        profiler.disable()
    return describe_profile(profiler)


SETUP: Final = (
    f"Reference vLLM EngineCore (`python -m smg_trio engine vllm-zmq --step-ms 0 --max-batch "
    f"{ENGINE_MAX_BATCH} --mode random`, a subprocess) behind "
    "`open_zmq_backend(runtime=Runtime.VLLM)`; loopback tcp handshake, ipc data sockets. Every "
    f"request is a streaming chat request (demo model, `ignore_eos`, max_tokens {MAX_TOKENS}, "
    "so all are equally long); each stream sends its share of the row's requests back to back. "
    f"Medians of {REPETITIONS} runs per row, each capped at {TIME_CAP_S:g} s. backend = count "
    "the tokens of each engine event; pipeline = also a `ResponseAssembler` per request "
    "(detokenize, 2-stop scan, chat SSE chunk render) and SSE framing. Client CPU = "
    "`time.process_time` of the client process (libzmq's I/O thread included, 2-7 % of it); "
    "engine messages = the engine's own output-message counter (one per engine step); "
    "cores = CPU seconds / wall seconds."
)


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("zmq_throughput", __doc__)
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled runs")
    parser.add_argument(
        "--quick", action="store_true", help="2 streams of 8 tokens, once; never written"
    )
    args = parser.parse_args(argv)
    recording = Recording("zmq_throughput", "ZMQ backend throughput")
    profile_streams = None if args.no_profile else max(STREAM_COUNTS)
    if args.quick:
        run = partial(
            run_bench,
            stream_counts=(2,),
            requests={2: 2},
            max_tokens=8,
            repetitions=1,
            profile_streams=None if args.no_profile else 2,
        )
    else:
        run = partial(run_bench, profile_streams=profile_streams)
    report = trio.run(run)
    body = section_body(report, setup=SETUP, interpretation="" if args.quick else INTERPRETATION)
    recording.publish(body, write=not (args.no_write or args.quick))
    return 0
