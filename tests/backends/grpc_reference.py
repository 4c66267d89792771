"""Our reference gRPC engines as subprocesses (`smg-trio engine <runtime>-grpc`), with the gRPC
backend connected and the engine's own counters read over its `EngineCounters` service: an
`EngineUnderTest` for the conformance suite. On exit it also checks that the backend left no
asyncio task on the bridge's loop.

An engine is either owned by one check (`reference_engine`: started and killed with it; the
checks that harm their engine need one) or shared by a module's checks (`start_shared_engines`
in a sync module-scoped fixture, since pytest-trio runs each test in a trio run of its own;
`shared_factory_for` opens a fresh backend on it per check, which is cheap)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Final

import trio
from grpclib.client import Channel

from harness.served_gateway import served_gateway
from smg_trio.backends.asyncio_bridge import AsyncioBridge, open_asyncio_bridge
from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import close_channel
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving
from smg_trio.serving.worker_specs import WorkerSpec
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as counters_pb2
from tests.backends.conformance import EngineFactory, EngineUnderTest
from tests.engines.grpc_harness import Engine, start_engines

MODEL_PATH: Final = demo_model_path()
ENGINE_NAMES: Final = {
    Runtime.SGLANG: "sglang-grpc",
    Runtime.VLLM: "vllm-grpc",
    Runtime.TOKENSPEED: "tokenspeed-grpc",
    Runtime.MLX: "mlx-grpc",
    Runtime.TRTLLM: "trtllm-grpc",
}
STEP_MS: Final = 2.0
WATCHDOG_S: Final = 1.0
HEALTH_PERIOD_S: Final = 0.05
START_S: Final = 20.0


async def start_engine(
    runtime: Runtime,
    log: IO[bytes],
    *,
    port: int = 0,
    step_ms: float = STEP_MS,
    mode: Mode | None = None,
    extra: Sequence[str] = (),
    model_path: Path = MODEL_PATH,
) -> tuple[trio.Process, int]:
    """Start the engine; return it and its port (from its first stdout line). `extra`: more
    flags, as the engine's CLI spells them."""
    command = EngineCommand(
        ENGINE_NAMES[runtime],
        host="127.0.0.1",
        port=port,
        model_path=model_path,
        step_ms=step_ms,
        mode=mode,
        extra=tuple(extra),
    ).argv()
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=log)
    assert process.stdout is not None
    seen = b""
    try:
        with trio.fail_after(START_S):
            while b"\n" not in seen:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise RuntimeError(f"the engine exited before listening: {seen!r}")
                seen += chunk
    except BaseException:
        await stop_engine(process)
        raise
    line = seen.split(b"\n", 1)[0].decode()
    assert line.startswith("listening on 127.0.0.1:"), line
    return process, int(line.rsplit(":", 1)[1])


async def stop_engine(process: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        process.kill()  # works on a SIGSTOPped process too
        await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


class ReferenceGrpcEngine:
    def __init__(
        self,
        backend: GrpcBackend,
        bridge: AsyncioBridge,
        process: trio.Process | None,
        port: int,
        counters_channel: Channel,
    ) -> None:
        self._backend = backend
        self.bridge = bridge
        self.process = process
        """None for a shared engine: the other checks of the module still need it."""
        self.port = port
        self._counters = smg_trio_engine_grpc.EngineCountersStub(counters_channel)

    @property
    def backend(self) -> GrpcBackend:
        return self._backend

    @property
    def watchdog_period_s(self) -> float:
        return WATCHDOG_S

    async def counters(self) -> Mapping[str, int]:
        async def get() -> dict[str, int]:
            response = await self._counters.Get(counters_pb2.GetCountersRequest())
            return dict(response.counters)

        return await self.bridge.run(get)

    def kill(self) -> None:
        self._owned().send_signal(signal.SIGKILL)

    def pause(self) -> None:
        self._owned().send_signal(signal.SIGSTOP)

    def _owned(self) -> trio.Process:
        assert self.process is not None, "a shared engine is never harmed: use reference_engine"
        return self.process


async def _open_channel(port: int) -> Channel:
    return Channel("127.0.0.1", port)


@asynccontextmanager
async def reference_engine(
    runtime: Runtime, log: IO[bytes], *, step_ms: float = STEP_MS
) -> AsyncIterator[ReferenceGrpcEngine]:
    """An engine of its own, started here and killed on leaving."""
    process, port = await start_engine(runtime, log, step_ms=step_ms)
    try:
        async with attach(runtime, port, process) as engine:
            yield engine
    finally:
        await stop_engine(process)


@asynccontextmanager
async def attach(
    runtime: Runtime, port: int, process: trio.Process | None
) -> AsyncIterator[ReferenceGrpcEngine]:
    """A backend and a counters channel to the engine listening on `port`."""
    async with open_asyncio_bridge() as bridge:
        counters_channel = await bridge.run(_open_channel, port)
        try:
            async with open_grpc_backend(
                runtime=runtime,
                address=f"127.0.0.1:{port}",
                health_period_s=HEALTH_PERIOD_S,
                watchdog_period_s=WATCHDOG_S,
            ) as backend:
                yield ReferenceGrpcEngine(backend, bridge, process, port, counters_channel)
            assert await bridge.task_count() == 0, "the backend left asyncio tasks running"
        finally:
            with trio.CancelScope(shield=True):
                await bridge.run(close_channel, counters_channel)


def factory_for(runtime: Runtime, log_path: Path) -> EngineFactory:
    """A fresh engine per check (the checks that kill or silence their engine)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[EngineUnderTest]:
        with log_path.open("ab") as log:
            async with reference_engine(runtime, log) as engine:
                yield engine

    return factory


def start_shared_engines(runtimes: Sequence[Runtime], logs: Path) -> dict[Runtime, Engine]:
    """One engine per runtime, all started at once (blocking: for a sync fixture)."""
    flags = ("--model-path", str(MODEL_PATH), "--step-ms", str(STEP_MS))
    started = start_engines([(runtime, flags) for runtime in runtimes], logs)
    return {engine.runtime: engine for engine in started}


def shared_factory_for(engine: Engine) -> EngineFactory:
    """A fresh backend per check on an engine the module's checks share."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[EngineUnderTest]:
        assert engine.process.poll() is None, f"the shared {engine.runtime.value} engine exited"
        async with attach(engine.runtime, engine.port, None) as attached:
            yield attached

    return factory


@asynccontextmanager
async def grpc_gateway(port: int) -> AsyncIterator[Serving]:
    """The gateway served in this process with one vLLM gRPC worker, the engine at `port`,
    once that worker is ready."""
    config = GatewayConfig(
        model_path=MODEL_PATH,
        workers=(WorkerSpec(Runtime.VLLM, Wire.GRPC, f"127.0.0.1:{port}"),),
        port=0,
    )
    async with served_gateway(config) as served:
        await served.wait_ready(served.serving.gateway.pool.workers)
        yield served.serving
