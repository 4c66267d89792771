"""A gateway over several reference vLLM ZMQ engines, each with its own step time, and routing
settings of the test's choice (docs/routing.md): for the policy, retry, admission and /workers
tests. Everything on loopback; every engine is killed by its process on the way out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio

from harness.served_gateway import ServedGateway, served_gateway, zmq_gateway_config
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.serving.serve import Serving
from tests.e2e.live_server import REPLAY_TEXT, engine_command, engine_log, write_replay

ADMIN_KEY: Final = "admin-test-key"


@dataclass
class RoutedServer:
    served: ServedGateway
    replay: Path

    @property
    def serving(self) -> Serving:
        return self.served.serving

    @property
    def processes(self) -> list[trio.Process]:
        return self.served.processes

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.serving.port}"

    def backend_of(self, index: int) -> ZmqBackend:
        backend = self.serving.gateway.pool.workers[index].backend
        assert isinstance(backend, ZmqBackend)
        return backend

    async def start_engine(self, handshake: str, step_ms: float) -> trio.Process:
        return await self.served.start_engine(engine_command(handshake, self.replay, step_ms))


@asynccontextmanager
async def routed_server(
    tmp_path: Path,
    steps_ms: Sequence[float | None],
    **settings: Any,
) -> AsyncIterator[RoutedServer]:
    """One worker per entry of `steps_ms`; None: no engine ever dials that worker."""
    config = zmq_gateway_config(len(steps_ms), request_timeout_s=30.0, **settings)
    replay = write_replay(tmp_path, REPLAY_TEXT)
    with engine_log(tmp_path / "engines.log") as log:
        async with served_gateway(config, log) as served:
            server = RoutedServer(served, replay)
            dialled = [
                (address, worker, step_ms)
                for address, worker, step_ms in zip(
                    served.serving.worker_addresses,
                    served.serving.gateway.pool.workers,
                    steps_ms,
                    strict=True,
                )
                if step_ms is not None
            ]
            for address, _, step_ms in dialled:
                await server.start_engine(address, step_ms)
            await served.wait_ready(worker for _, worker, _ in dialled)
            yield server
