"""I/O. The side-by-side scenarios of one bench run:

(a) gateway-bound: the reference engine at zero step time (the gateway's own cost) and at a
    realistic step time, driven directly (our ZMQ backend in this process, no gateway) and
    through `smg-trio serve` over HTTP/2 (h2c) and WebSocket, and (given the smg binary)
    through the Rust smg over h2c. All targets are up at once and the concurrencies alternate
    between them, so a change in the machine's load hits every one.
(b) real vLLM CPU: the headless EngineCore driven directly (the ceiling), behind smg-trio over
    ZMQ (HTTP/1.1, h2c, WebSocket), behind smg over ZMQ (HTTP/1.1, h2c); vLLM's gRPC engine
    server behind smg-trio (HTTP/1.1, h2c, WebSocket), then the same engine behind smg
    (HTTP/1.1, h2c); and vLLM's own HTTP server (HTTP/1.1, as `vllm bench serve` sends), one
    gateway at a time. `--processes` and `--real-zmq-http1-only`: see `real_vllm`.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from bench.load.runner import Progress, run_load
from bench.load.stats import RunSummary
from bench.load.targets import (
    EngineLaunch,
    ServerEngineLaunch,
    Target,
    direct_target,
    engine_server,
    reference_engine,
    smg_grpc_target,
    smg_target,
    smg_trio_grpc_target,
    smg_trio_target,
    vllm_grpc,
    vllm_headless,
    vllm_http_target,
)
from bench.load.transports import (
    DirectTransport,
    RequestBodies,
    Transport,
    TransportName,
    open_http_transport,
)
from bench.load.workload import (
    Endpoint,
    FixedConcurrency,
    LengthRange,
    RequestSpec,
    Workload,
    request_specs,
)
from harness.ports import LOOPBACK

H2_STREAMS_PER_CONNECTION: Final = 100  # hypercorn's and smg's default concurrent-stream limit
WS_STREAMS_PER_SOCKET: Final = 256  # smg_trio.frontends.websocket.MAX_STREAMS_PER_SOCKET
WARM_UP_STREAMS: Final = 4
THINK_STEPS: Final = 2.5
"""Each stream pauses this many engine steps between requests, so a request finds the engine
idle and its TTFT is the path's latency (at step 0 there is no pause)."""
TIME_CAP_S: Final = 60.0
"""Seconds per run, at most (scenario (b) runs get twice this)."""
WARM_UP: Final = Workload(
    FixedConcurrency(WARM_UP_STREAMS), 8, LengthRange(16, 16), LengthRange(16, 16), time_cap_s=30.0
)


@dataclass(frozen=True)
class LoadPlan:
    """The fixed-concurrency runs of a scenario: each stream count gets
    max(min_requests, requests_per_stream * streams) requests."""

    concurrencies: tuple[int, ...]
    prompt_tokens: LengthRange
    output_tokens: LengthRange
    requests_per_stream: int
    min_requests: int
    time_cap_s: float
    endpoint: Endpoint = "completions"
    stops: tuple[str, ...] = ()
    connections: int = 0  # h2c connections / WebSocket sockets; 0: as many as the streams need
    think_time_s: float = 0.0  # each stream's pause between its requests

    def workload(self, streams: int) -> Workload:
        return Workload(
            FixedConcurrency(streams, self.think_time_s),
            max(self.min_requests, self.requests_per_stream * streams),
            self.prompt_tokens,
            self.output_tokens,
            self.time_cap_s,
            endpoint=self.endpoint,
            stops=self.stops,
            seed=streams,
        )

    def connections_for(self, kind: TransportName, streams: int) -> int:
        if self.connections:
            return self.connections
        per = WS_STREAMS_PER_SOCKET if kind == "ws" else H2_STREAMS_PER_CONNECTION
        return max(1, math.ceil(streams / per))


@asynccontextmanager
async def open_transport(
    target: Target,
    kind: TransportName,
    specs: Sequence[RequestSpec],
    workload: Workload,
    connections: int,
) -> AsyncIterator[Transport]:
    if kind == "direct":
        assert target.backend is not None, "a direct target has a backend"
        assert target.model_dir is not None, "a direct target has a model folder"
        yield DirectTransport(
            target.backend,
            target.model_dir,
            specs,
            stops=workload.stops,
            ignore_eos=workload.ignore_eos,
        )
        return
    assert target.port is not None, f"{target.name} has no port"
    bodies = RequestBodies(
        specs,
        model=target.model,
        endpoint=workload.endpoint,
        stops=workload.stops,
        ignore_eos=workload.ignore_eos,
    )
    async with open_http_transport(
        kind, LOOPBACK, target.port, bodies, connections=connections
    ) as transport:
        yield transport


def row_name(target: Target, kind: TransportName) -> str:
    return target.name if kind == "direct" else f"{target.name} {kind}"


async def warm_up(
    pairs: Sequence[tuple[Target, TransportName]], plan: LoadPlan, words: Sequence[str]
) -> None:
    """A few short requests over every (target, transport); then, once per target, one round
    at each stream count with the plan's prompt lengths and short outputs, so an engine that
    compiles per batch shape (vLLM on the CPU) does it before the clock runs."""
    warmed: set[int] = set()
    for target, kind in pairs:
        loads = [(WARM_UP_STREAMS, WARM_UP)]
        if id(target) not in warmed:
            warmed.add(id(target))
            loads += [
                (
                    streams,
                    Workload(
                        FixedConcurrency(streams),
                        streams,
                        plan.prompt_tokens,
                        WARM_UP.output_tokens,
                        WARM_UP.time_cap_s,
                        seed=-streams,
                    ),
                )
                for streams in plan.concurrencies
            ]
        for streams, load in loads:
            specs = request_specs(load, words)
            connections = plan.connections_for(kind, streams)
            async with open_transport(target, kind, specs, load, connections) as transport:
                await run_load(
                    transport, specs, load, target=row_name(target, kind), scenario="warm-up"
                )


async def measure(
    pairs: Sequence[tuple[Target, TransportName]],
    plan: LoadPlan,
    scenario: str,
    words: Sequence[str],
    progress: Progress | None,
) -> list[RunSummary]:
    """Warm up, then run every concurrency over each (target, transport) in turn."""
    await warm_up(pairs, plan, words)
    summaries = []
    for streams in plan.concurrencies:
        workload = plan.workload(streams)
        specs = request_specs(workload, words)
        for target, kind in pairs:
            connections = plan.connections_for(kind, streams)
            async with open_transport(target, kind, specs, workload, connections) as transport:
                summary, _ = await run_load(
                    transport,
                    specs,
                    workload,
                    target=row_name(target, kind),
                    scenario=scenario,
                    probe=target.probe,
                    progress=progress,
                )
            summaries.append(summary)
    return summaries


async def gateway_bound(
    model_path: Path,
    step_ms_values: Sequence[float],
    plans: Sequence[LoadPlan],
    words: Sequence[str],
    log_dir: Path,
    progress: Progress | None,
    smg_bin: Path | None = None,
    processes: Sequence[int] = (1,),
) -> list[RunSummary]:
    """Scenario (a); `plans[i]` goes with `step_ms_values[i]`. With `smg_bin`, the Rust smg
    (its own reference engine, over ZMQ) is measured beside smg-trio over h2c, as an anchor.
    `processes`: one smg-trio per count (`serve --processes N`, docs/processes.md); with more
    than one count, each is also measured over HTTP/1.1 (see below)."""
    summaries = []
    for step_ms, plan in zip(step_ms_values, plans, strict=True):
        engine = reference_engine(model_path, step_ms)
        async with AsyncExitStack() as stack:
            direct = await stack.enter_async_context(direct_target(model_path, engine, log_dir))
            pairs: list[tuple[Target, TransportName]] = [(direct, "direct")]
            for count in processes:
                gateway = await stack.enter_async_context(
                    smg_trio_target(model_path, engine, log_dir, count)
                )
                # h2c and WebSocket carry every stream on one connection, which one process
                # accepts (docs/processes.md §2): several processes are measured over HTTP/1.1,
                # a connection per stream, beside one process over it.
                if count == 1:
                    pairs += [(gateway, "h2c"), (gateway, "ws")]
                if len(processes) > 1:
                    pairs.append((gateway, "http1"))
            if smg_bin is not None:
                anchor = await stack.enter_async_context(
                    smg_target(smg_bin, model_path, engine, log_dir)
                )
                pairs.append((anchor, "h2c"))
            summaries += await measure(pairs, plan, engine.name, words, progress)
    return summaries


async def real_vllm(
    venv: Path,
    smg_bin: Path | None,
    model_path: Path,
    plan: LoadPlan,
    words: Sequence[str],
    log_dir: Path,
    progress: Progress | None,
    *,
    with_direct: bool = True,
    processes: Sequence[int] = (1,),
    zmq_http1_only: bool = False,
    stand_ins: tuple[EngineLaunch, ServerEngineLaunch] | None = None,
) -> tuple[list[RunSummary], list[str]]:
    """Scenario (b): one gateway at a time; returns the rows and notes about skipped rows.
    With `with_direct`, first the engine alone: our ZMQ backend in this process (the ceiling
    on this machine, no gateway). The gRPC engine is started once and serves smg-trio, then
    smg (saving a vLLM start). `processes`: one smg-trio over ZMQ per count (`serve
    --processes N`); several processes are measured over HTTP/1.1 only (as in (a)).
    `zmq_http1_only`: just the ZMQ gateways over HTTP/1.1 (smg-trio per count, then smg), the
    rows issue 15's CPU-per-token acceptance compares, at one vLLM start per gateway.
    `stand_ins`: the engines in vLLM's place (ZMQ: dialing the gateways; gRPC: dialed), to try
    the setup without vLLM (`scenarios --reference-engines`); then there is no vLLM HTTP row."""
    engine, grpc_launch = stand_ins or (
        vllm_headless(venv, model_path),
        vllm_grpc(venv, model_path),
    )
    scenario = "vLLM CPU"
    notes = []
    summaries = []
    if with_direct and not zmq_http1_only:
        async with direct_target(model_path, engine, log_dir) as target:
            summaries += await measure([(target, "direct")], plan, scenario, words, progress)
    for count in processes:
        async with smg_trio_target(model_path, engine, log_dir, count) as target:
            pairs: list[tuple[Target, TransportName]] = [(target, "http1")]
            if count == 1 and not zmq_http1_only:
                pairs += [(target, "h2c"), (target, "ws")]
            summaries += await measure(pairs, plan, scenario, words, progress)
    if smg_bin is not None:
        async with smg_target(smg_bin, model_path, engine, log_dir) as target:
            pairs = [(target, "http1")] if zmq_http1_only else [(target, "http1"), (target, "h2c")]
            summaries += await measure(pairs, plan, scenario, words, progress)
    else:
        notes.append("smg rows skipped: no --smg-bin")
    if zmq_http1_only:
        return summaries, notes
    async with engine_server(grpc_launch, log_dir) as grpc_engine:
        async with smg_trio_grpc_target(model_path, grpc_engine, log_dir) as target:
            pairs = [(target, "http1"), (target, "h2c"), (target, "ws")]
            summaries += await measure(pairs, plan, scenario, words, progress)
        if smg_bin is not None:
            async with smg_grpc_target(smg_bin, model_path, grpc_engine, log_dir) as target:
                pairs = [(target, "http1"), (target, "h2c")]
                summaries += await measure(pairs, plan, scenario, words, progress)
    if stand_ins is not None:
        notes.append("vLLM HTTP row skipped: reference engines stand in for vLLM")
        return summaries, notes
    async with vllm_http_target(venv, model_path, log_dir) as target:
        summaries += await measure([(target, "http1")], plan, scenario, words, progress)
    return summaries, notes


def quick(plan: LoadPlan, *, requests: int, output_tokens: int, time_cap_s: float) -> LoadPlan:
    """A smaller plan (for the smoke test and trial runs)."""
    return replace(
        plan,
        requests_per_stream=1,
        min_requests=requests,
        output_tokens=LengthRange(output_tokens, output_tokens),
        time_cap_s=time_cap_s,
    )
