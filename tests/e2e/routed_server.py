"""A gateway over several reference vLLM ZMQ engines, each with its own step time, and routing
settings of the test's choice (docs/routing.md): for the policy, retry, admission and /workers
tests. Everything on loopback; every engine is killed by its process on the way out."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.config import GatewayConfig, WorkerSpec
from smg_trio.model import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serve import Serving, serve
from tests.e2e.live_server import ENGINE_READY_S, REPLAY_TEXT, engine_command

ADMIN_KEY: Final = "admin-test-key"


@dataclass
class RoutedServer:
    serving: Serving
    processes: list[trio.Process]
    replay: Path
    log: Any

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.serving.port}"

    def backend_of(self, index: int) -> ZmqBackend:
        backend = self.serving.gateway.pool.workers[index].backend
        assert isinstance(backend, ZmqBackend)
        return backend

    async def start_engine(self, handshake: str, step_ms: float) -> trio.Process:
        command = engine_command(handshake, self.replay, step_ms)
        process = await trio.lowlevel.open_process(command, stdout=self.log, stderr=self.log)
        self.processes.append(process)
        return process


@asynccontextmanager
async def routed_server(
    tmp_path: Path,
    steps_ms: Sequence[float | None],
    **settings: Any,
) -> AsyncIterator[RoutedServer]:
    """One worker per entry of `steps_ms`; None: no engine ever dials that worker."""
    config = GatewayConfig(
        model_path=demo_model_path(),
        workers=(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0"),) * len(steps_ms),
        port=0,
        request_timeout_s=30.0,
        **settings,
    )
    replay = tmp_path / "replay.txt"
    replay.write_text(REPLAY_TEXT, encoding="utf-8")
    log_path = tmp_path / "engines.log"
    stop = trio.Event()
    with log_path.open("wb") as log:
        async with trio.open_nursery() as nursery:
            serving: Serving = await nursery.start(
                partial(serve, config, shutdown_trigger=stop.wait)
            )
            server = RoutedServer(serving, [], replay, log)
            try:
                workers = serving.gateway.pool.workers
                for address, step_ms in zip(serving.worker_addresses, steps_ms, strict=True):
                    if step_ms is not None:
                        await server.start_engine(address, step_ms)
                with trio.fail_after(ENGINE_READY_S):
                    for worker, step_ms in zip(workers, steps_ms, strict=True):
                        if step_ms is not None:
                            await worker.backend.wait_ready()
                yield server
            finally:
                stop.set()
                with trio.CancelScope(shield=True):
                    for process in server.processes:
                        process.kill()
                        await process.wait()
                if sys.exc_info()[0] is not None:
                    sys.stderr.write(log_path.read_text(errors="replace"))
