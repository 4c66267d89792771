"""The reference gRPC engines as subprocesses, and a small grpclib client to drive them.

`start_engines` launches several engines at once and reads each one's `listening on HOST:PORT`
line; `stop_engines` signals them and always kills what is left, by PID. The client side runs
on plain asyncio (grpclib is asyncio only): tests call `run(...)`, which bounds every call.
"""

from __future__ import annotations

import asyncio
import select
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from grpclib.client import Channel

from smg_trio.engines.launch import EngineCommand
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire._proto import (
    mlx_engine_grpc,
    mlx_engine_pb2,
    sglang_scheduler_grpc,
    sglang_scheduler_pb2,
    smg_trio_engine_grpc,
    tokenspeed_scheduler_grpc,
    tokenspeed_scheduler_pb2,
    trtllm_service_grpc,
    trtllm_service_pb2,
    vllm_engine_grpc,
    vllm_engine_pb2,
)
from smg_trio.wire._proto import smg_trio_engine_pb2 as counters_pb2
from smg_trio.wire.grpc_responses import GrpcEvent, parse_generate_response

START_SECONDS = 15.0
CALL_SECONDS = 10.0
T = TypeVar("T")

STUBS: dict[Runtime, Callable[[Channel], Any]] = {
    Runtime.SGLANG: sglang_scheduler_grpc.SglangSchedulerStub,
    Runtime.VLLM: vllm_engine_grpc.VllmEngineStub,
    Runtime.TOKENSPEED: tokenspeed_scheduler_grpc.TokenSpeedSchedulerStub,
    Runtime.MLX: mlx_engine_grpc.MlxEngineStub,
    Runtime.TRTLLM: trtllm_service_grpc.TrtllmServiceStub,
}

MESSAGES: dict[Runtime, ModuleType] = {
    Runtime.SGLANG: sglang_scheduler_pb2,
    Runtime.VLLM: vllm_engine_pb2,
    Runtime.TOKENSPEED: tokenspeed_scheduler_pb2,
    Runtime.MLX: mlx_engine_pb2,
    Runtime.TRTLLM: trtllm_service_pb2,
}


@dataclass
class Engine:
    runtime: Runtime
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def channel(self) -> Channel:
        """A channel to the engine; create it inside the running event loop, close it there."""
        return Channel("127.0.0.1", self.port)


def engine_command(runtime: Runtime, *flags: str) -> list[str]:
    return EngineCommand(f"{runtime.value}-grpc", port=0, extra=flags).argv()


def start_engines(specs: Sequence[tuple[Runtime, Sequence[str]]], logs: Path) -> list[Engine]:
    """Start every engine, then wait for each one's port line (all start in parallel)."""
    started: list[tuple[Runtime, subprocess.Popen[bytes], Path]] = []
    try:
        for index, (runtime, flags) in enumerate(specs):
            log = logs / f"{index}-{runtime.value}.log"
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    engine_command(runtime, *flags),
                    stdout=subprocess.PIPE,
                    stderr=sink,
                )
            started.append((runtime, process, log))
        deadline = time.monotonic() + START_SECONDS
        return [
            Engine(runtime, process, _read_port(process, log, deadline), log)
            for runtime, process, log in started
        ]
    except BaseException:
        stop_engines([process for _, process, _ in started])
        raise


def _read_port(process: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
    line = process.stdout.readline().decode() if ready else ""
    prefix = "listening on 127.0.0.1:"
    if not line.startswith(prefix):
        raise AssertionError(f"engine did not start ({line!r}); its log:\n{log.read_text()}")
    return int(line.removeprefix(prefix))


def stop_engines(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(3)
        if process.stdout is not None:
            process.stdout.close()


def run(call: Awaitable[T], seconds: float = CALL_SECONDS) -> T:
    """Run one client coroutine on a fresh asyncio loop, bounded."""

    async def bounded() -> T:
        return await asyncio.wait_for(call, seconds)

    return asyncio.run(bounded())


async def generate(engine: Engine, request: Any) -> list[GrpcEvent]:
    """Every message of one Generate call, parsed into neutral events."""
    channel = engine.channel()
    try:
        async with STUBS[engine.runtime](channel).Generate.open() as stream:
            await stream.send_message(request, end=True)
            return [parse_generate_response(message) async for message in stream]
    finally:
        channel.close()


async def counters(channel: Channel) -> dict[str, int]:
    reply = await smg_trio_engine_grpc.EngineCountersStub(channel).Get(
        counters_pb2.GetCountersRequest()
    )
    return dict(reply.counters)


async def wait_for_counters(
    channel: Channel, done: Callable[[dict[str, int]], bool], seconds: float
) -> tuple[dict[str, int], float]:
    """Poll the counters until `done`; (the counters, seconds it took). Fails after `seconds`."""
    started = time.monotonic()
    while True:
        snapshot = await counters(channel)
        elapsed = time.monotonic() - started
        if done(snapshot):
            return snapshot, elapsed
        assert elapsed < seconds, f"counters never got there: {snapshot}"
        await asyncio.sleep(0.002)
