"""Our reference gRPC engines as subprocesses (`smg-trio engine <runtime>-grpc`), with the gRPC
backend connected and the engine's own counters read over its `EngineCounters` service: an
`EngineUnderTest` for the conformance suite. On exit it also checks that the backend left no
asyncio task on the bridge's loop."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Final

import trio
from grpclib.client import Channel

from smg_trio.backends.asyncio_bridge import AsyncioBridge, open_asyncio_bridge
from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import close_channel
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.model import demo_model_path
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as counters_pb2
from tests.backends.conformance import EngineFactory, EngineUnderTest

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
) -> tuple[trio.Process, int]:
    """Start the engine; return it and its port (from its first stdout line)."""
    command = EngineCommand(
        ENGINE_NAMES[runtime],
        host="127.0.0.1",
        port=port,
        model_path=MODEL_PATH,
        step_ms=step_ms,
        mode=mode,
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
        process: trio.Process,
        port: int,
        counters_channel: Channel,
    ) -> None:
        self._backend = backend
        self.bridge = bridge
        self.process = process
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
        self.process.send_signal(signal.SIGKILL)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)


async def _open_channel(port: int) -> Channel:
    return Channel("127.0.0.1", port)


@asynccontextmanager
async def reference_engine(
    runtime: Runtime, log: IO[bytes], *, step_ms: float = STEP_MS
) -> AsyncIterator[ReferenceGrpcEngine]:
    process, port = await start_engine(runtime, log, step_ms=step_ms)
    try:
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
    finally:
        await stop_engine(process)


def factory_for(runtime: Runtime, log_path: Path) -> EngineFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[EngineUnderTest]:
        with log_path.open("ab") as log:
            async with reference_engine(runtime, log) as engine:
                yield engine

    return factory
