"""I/O. The gateway served in this process with reference engines as subprocesses dialling its
workers, all on loopback: what the routing bench and the end-to-end tests' servers stand on
(tests/e2e/live_server.py, tests/e2e/routed_server.py), written once.

    async with served_gateway(config, log) as served:
        await served.start_engine(EngineCommand("vllm-zmq", handshake=address).argv())
        await served.wait_ready(served.serving.gateway.pool.workers)

Leaving sets the shutdown trigger (the gateway drains as on SIGTERM), then kills every engine
it started by its process, shielded, and waits for them (docs/architecture.md §4).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, BinaryIO, Final

import trio

from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.routing.vocabulary import Worker
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec

ENGINE_READY_S: Final = 30.0


def zmq_gateway_config(
    workers: int, runtime: Runtime = Runtime.VLLM, **settings: Any
) -> GatewayConfig:
    """The demo model behind `workers` ZMQ workers of `runtime`, every port picked by the
    kernel on loopback; `settings`: further GatewayConfig fields."""
    worker = WorkerSpec(runtime, Wire.ZMQ, "127.0.0.1:0")
    return GatewayConfig(
        model_path=demo_model_path(), workers=(worker,) * workers, port=0, **settings
    )


@dataclass
class ServedGateway:
    serving: Serving
    stop: trio.Event  # set: the gateway drains and shuts down, as on SIGTERM (engines stay up)
    log: BinaryIO | int  # the engines' stdout and stderr
    processes: list[trio.Process] = field(default_factory=list)

    async def start_engine(self, argv: Sequence[str]) -> trio.Process:
        process = await trio.lowlevel.open_process(list(argv), stdout=self.log, stderr=self.log)
        self.processes.append(process)
        return process

    async def wait_ready(self, workers: Iterable[Worker]) -> None:
        """Until each of `workers` has its engine, within ENGINE_READY_S."""
        with trio.fail_after(ENGINE_READY_S):
            for worker in workers:
                await worker.backend.wait_ready()


@asynccontextmanager
async def served_gateway(
    config: GatewayConfig, log: BinaryIO | int = subprocess.DEVNULL
) -> AsyncIterator[ServedGateway]:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        serving: Serving = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        served = ServedGateway(serving, stop, log)
        try:
            yield served
        finally:
            stop.set()
            with trio.CancelScope(shield=True):
                for process in served.processes:
                    process.kill()
                    await process.wait()
