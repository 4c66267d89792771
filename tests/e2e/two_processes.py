"""Two gateway "processes" in this one test process, as `serve --processes 2` runs them
(docs/processes.md): each a whole `serve()` with its `ProcessRole` (client_index 0 and 1, its
own ZMQ input and output), the supervisor's handshake answerer for the worker, and one
reference vLLM EngineCore subprocess dialling it. Each gateway listens on a port of its own,
so a test can send a request to the process it means, and read the engine's counters through
either one's backend (a UTILITY call answered on that process's own output socket)."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

import msgspec
import trio

from harness.ports import free_port
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.backends.zmq_clients import answer_handshakes, client_addresses
from smg_trio.backends.zmq_socket import private_ipc_dir
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.process_role import ProcessRole
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec
from tests.e2e.live_server import engine_command, engine_log, write_replay

PROCESSES: Final = 2
READY_S: Final = 15.0


@dataclass
class GatewayProcess:
    """One of the two: its role, its `serve()` (until `stop`), its port and backend."""

    role: ProcessRole
    stop: trio.Event = field(default_factory=trio.Event)
    serving: Serving | None = None
    done: trio.Event = field(default_factory=trio.Event)

    @property
    def base_url(self) -> str:
        assert self.serving is not None
        return f"http://127.0.0.1:{self.serving.port}"

    @property
    def backend(self) -> ZmqBackend:
        assert self.serving is not None
        backend = self.serving.gateway.pool.workers[0].backend
        assert isinstance(backend, ZmqBackend)
        return backend

    async def counters(self) -> Mapping[str, int]:
        result: Mapping[str, int] = await self.backend.call_utility("smg_trio_counters")
        return result


@dataclass
class TwoProcesses:
    processes: list[GatewayProcess]
    listeners: list[socket.socket]
    engines: list[trio.Process]
    handshake: str
    replay: Path
    step_ms: float
    log: BinaryIO
    nursery: trio.Nursery

    async def start(self, index: int) -> GatewayProcess:
        """(Re)start gateway `index` with its role, as the supervisor restarts a process: on
        the same listening socket (a descriptor of its own, which its server closes)."""
        http_fd = os.dup(self.listeners[index].fileno())
        role = msgspec.structs.replace(self.processes[index].role, http_fd=http_fd)
        process = GatewayProcess(role)
        self.processes[index] = process

        async def run(task_status: trio.TaskStatus[Serving]) -> None:
            try:
                await serve(
                    role.config,
                    shutdown_trigger=process.stop.wait,
                    role=role,
                    task_status=task_status,
                )
            finally:
                process.done.set()

        process.serving = await self.nursery.start(run)
        return process

    async def stop(self, index: int) -> None:
        process = self.processes[index]
        process.stop.set()
        await process.done.wait()

    async def start_engine(self) -> trio.Process:
        argv = engine_command(self.handshake, self.replay, self.step_ms)
        engine = await trio.lowlevel.open_process(argv, stdout=self.log, stderr=self.log)
        self.engines.append(engine)
        return engine

    async def wait_ready(self, limit_s: float = READY_S) -> None:
        with trio.fail_after(limit_s):
            for process in self.processes:
                await process.backend.wait_ready()


@asynccontextmanager
async def two_processes(
    tmp_path: Path,
    replay_text: str,
    step_ms: float,
    *,
    model_path: Path | None = None,
    with_engine: bool = True,
) -> AsyncIterator[TwoProcesses]:
    """`model_path`: the gateways' model (default: the demo model); without `with_engine`,
    the caller starts the engine that dials `handshake` (e.g. a real vLLM) and waits."""
    handshake = f"tcp://127.0.0.1:{free_port()}"
    spec = WorkerSpec(Runtime.VLLM, Wire.ZMQ, handshake.removeprefix("tcp://"))
    config = GatewayConfig(
        model_path=model_path or demo_model_path(), workers=(spec,), port=0, processes=2
    )
    with private_ipc_dir() as run_dir, engine_log(tmp_path / "engine.log") as log:
        (run_dir / "metrics").mkdir()
        listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(PROCESSES)]
        roles = [
            ProcessRole(
                index=index,
                count=PROCESSES,
                run_dir=run_dir,
                metrics_dir=run_dir / "metrics",
                http_fd=-1,  # each start gets a descriptor of its own (`start`)
                metrics_fd=None,
                log_level="INFO",
                log_format="text",
                supervisor_pid=os.getpid(),
                config=config,
            )
            for index in range(PROCESSES)
        ]
        async with trio.open_nursery() as nursery:
            inputs, outputs = client_addresses(run_dir, 0, PROCESSES)
            await nursery.start(answer_handshakes, handshake, inputs, outputs)
            setup = TwoProcesses(
                [GatewayProcess(role) for role in roles],
                listeners,
                [],
                handshake,
                write_replay(tmp_path, replay_text),
                step_ms,
                log,
                nursery,
            )
            try:
                for index in range(PROCESSES):
                    await setup.start(index)
                if with_engine:
                    await setup.start_engine()
                    await setup.wait_ready()
                yield setup
            finally:
                with trio.CancelScope(shield=True):
                    for process in setup.processes:
                        process.stop.set()
                        await process.done.wait()
                    for engine in setup.engines:
                        engine.kill()
                        await engine.wait()
                nursery.cancel_scope.cancel()
                for listener in listeners:
                    listener.close()
