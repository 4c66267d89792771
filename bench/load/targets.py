"""I/O. The targets a scenario measures, each an async context manager that starts what it
needs, waits until it serves, yields a `Target`, and stops everything it started:

- `smg_trio_target`: `smg-trio serve` (a subprocess, the process measured) with one
  `vllm+zmq` worker, and the engine dialing its handshake port;
- `smg_target`: the Rust `smg launch --backend vllm` with an ipc worker URL, and the engine
  dialing smg's FNV-derived handshake port;
- `vllm_http_target`: vLLM's own OpenAI server (its API server process is the one measured);
- `direct_target`: no gateway: our ZMQ backend in this process, the engine dialing it;
- `smg_trio_grpc_target` / `smg_grpc_target`: `smg-trio serve` with one `vllm+grpc` worker /
  smg with a `grpc://` worker URL, dialing an engine server that is already up.

An engine that dials its gateway (ZMQ) is described by an `EngineLaunch`: given the handshake
port to dial, the command; each target starts its own. An engine that listens (gRPC) is a
`ServerEngineLaunch`: given the port to listen on, the command. `engine_server` starts it and
waits until it passes a health check, so several gateways, one after another, can share it.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from bench.load.runner import ProcessProbe
from bench.load.servers import (
    VLLM_ENV,
    ServerFailed,
    log_tail,
    reference_engine_command,
    smg_command,
    smg_handshake_port,
    smg_trio_command,
    started_process,
    vllm_grpc_command,
    vllm_headless_command,
    vllm_http_command,
    wait_serving,
)
from harness.ports import LOOPBACK, free_port
from smg_trio.backends.grpc_backend import open_grpc_backend
from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import ModelDir, load_model_dir
from smg_trio.neutral.runtime import Runtime

GATEWAY_READY_S: Final = 60.0  # a gateway in front of an engine that is already up
HEALTH_PERIOD_S: Final = 1.0  # how often the readiness wait asks a starting engine server


@dataclass(frozen=True)
class EngineLaunch:
    name: str  # e.g. "ref engine, step 20 ms", "vLLM CPU"
    command: Callable[[int], list[str]]  # handshake port -> command line
    ready_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    own_group: bool = False


def reference_engine(
    model_path: Path,
    step_ms: float,
    *,
    replay_file: Path | None = None,
    counts_file: Path | None = None,
) -> EngineLaunch:
    return EngineLaunch(
        name=f"ref engine, step {step_ms:g} ms",
        command=lambda port: reference_engine_command(
            f"tcp://{LOOPBACK}:{port}",
            model_path=model_path,
            step_ms=step_ms,
            replay_file=replay_file,
            counts_file=counts_file,
        ),
        ready_s=30.0,
    )


def vllm_headless(venv: Path, model_path: Path) -> EngineLaunch:
    return EngineLaunch(
        name="vLLM CPU",
        command=lambda port: vllm_headless_command(venv, model_path, port),
        ready_s=300.0,
        env=VLLM_ENV,
        own_group=True,
    )


@dataclass(frozen=True)
class ServerEngineLaunch:
    """An engine that listens and is dialed by its gateways (gRPC)."""

    name: str  # e.g. "vLLM CPU gRPC"
    runtime: Runtime  # the service it speaks (the worker spec's RUNTIME)
    command: Callable[[int], list[str]]  # listen port -> command line
    ready_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    own_group: bool = False


@dataclass(frozen=True)
class EngineServer:
    """A started `ServerEngineLaunch` that passed a health check."""

    name: str
    runtime: Runtime
    port: int

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"


def vllm_grpc(venv: Path, model_path: Path) -> ServerEngineLaunch:
    return ServerEngineLaunch(
        name="vLLM CPU gRPC",
        runtime=Runtime.VLLM,
        command=lambda port: vllm_grpc_command(venv, model_path, port),
        ready_s=300.0,
        env=VLLM_ENV,
        own_group=True,
    )


def reference_grpc_engine(model_path: Path) -> ServerEngineLaunch:
    """Our reference vLLM gRPC engine at step 0, standing in for vLLM's gRPC server."""
    return ServerEngineLaunch(
        name="ref engine gRPC",
        runtime=Runtime.VLLM,
        command=lambda port: EngineCommand(
            "vllm-grpc", host=LOOPBACK, port=port, model_path=model_path, step_ms=0
        ).argv(),
        ready_s=20.0,
    )


@asynccontextmanager
async def engine_server(launch: ServerEngineLaunch, log_dir: Path) -> AsyncIterator[EngineServer]:
    """Start the engine and wait (our gRPC client's health check) until it serves."""
    port = free_port()
    async with started_process(
        launch.command(port),
        log_dir / "engine-grpc.log",
        env=launch.env,
        own_group=launch.own_group,
    ) as started:
        server = EngineServer(launch.name, launch.runtime, port)
        async with open_grpc_backend(
            runtime=launch.runtime, address=server.address, health_period_s=HEALTH_PERIOD_S
        ) as client:
            ready = False
            with trio.move_on_after(launch.ready_s):
                while not ready and started.process.returncode is None:
                    with trio.move_on_after(HEALTH_PERIOD_S):  # then see if it is still alive
                        await client.wait_ready()
                        ready = True
        if started.process.returncode is not None:
            raise ServerFailed(f"exited with {started.process.returncode}:\n{log_tail(started)}")
        if not ready:
            raise ServerFailed(f"not ready after {launch.ready_s:g} s:\n{log_tail(started)}")
        yield server


@dataclass(frozen=True)
class Target:
    name: str  # e.g. "smg-trio", "smg", "vLLM HTTP", "direct"
    model: str  # the name its API serves the model under
    port: int | None = None  # None: in-process (direct)
    probe: ProcessProbe | None = None  # the gateway process, when there is one
    backend: ZmqBackend | None = None  # direct only
    model_dir: ModelDir | None = None  # direct only


@asynccontextmanager
async def smg_trio_target(
    model_path: Path, engine: EngineLaunch, log_dir: Path, processes: int = 1
) -> AsyncIterator[Target]:
    """`processes` > 1: `serve --processes N`, its row named `smg-trio xN` and its CPU the sum
    of the supervisor's and every gateway process's."""
    port, handshake_port = free_port(), free_port()
    worker = f"vllm+zmq://{LOOPBACK}:{handshake_port}"
    name = "smg-trio" if processes == 1 else f"smg-trio x{processes}"
    async with (
        started_process(
            smg_trio_command(port, worker, model_path, processes),
            log_dir / f"{name.replace(' ', '-')}.log",
        ) as gateway,
        started_process(
            engine.command(handshake_port),
            log_dir / "engine-smg-trio.log",
            env=engine.env,
            own_group=engine.own_group,
        ),
    ):
        model = await wait_serving(gateway, port, timeout_s=engine.ready_s, processes=processes)
        probe = ProcessProbe(gateway.process.pid, children=processes > 1)
        yield Target(name, model, port, probe)


@asynccontextmanager
async def smg_target(
    smg_bin: Path, model_path: Path, engine: EngineLaunch, log_dir: Path
) -> AsyncIterator[Target]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-smg-") as ipc_dir:
        ipc_url = f"ipc://{ipc_dir}/engine"
        handshake_port = smg_handshake_port(ipc_url)
        async with started_process(
            smg_command(smg_bin, port, ipc_url, model_path), log_dir / "smg.log"
        ) as gateway:
            await trio.sleep(0.5)  # smg binds the handshake port right after it starts
            async with started_process(
                engine.command(handshake_port),
                log_dir / "engine-smg.log",
                env=engine.env,
                own_group=engine.own_group,
            ):
                model = await wait_serving(gateway, port, timeout_s=engine.ready_s)
                yield Target("smg", model, port, ProcessProbe(gateway.process.pid))


@asynccontextmanager
async def vllm_http_target(venv: Path, model_path: Path, log_dir: Path) -> AsyncIterator[Target]:
    port = free_port()
    async with started_process(
        vllm_http_command(venv, model_path, port),
        log_dir / "vllm-http.log",
        env=VLLM_ENV,
        own_group=True,
    ) as server:
        model = await wait_serving(server, port, timeout_s=300.0)
        yield Target("vLLM HTTP", model, port, ProcessProbe(server.process.pid))


@asynccontextmanager
async def direct_target(
    model_path: Path, engine: EngineLaunch, log_dir: Path
) -> AsyncIterator[Target]:
    model_dir = load_model_dir(model_path)
    async with open_zmq_backend(
        runtime=Runtime.VLLM,
        vocab_size=model_dir.tokenizer.vocab_size,
    ) as backend:
        port = backend.handshake_port
        assert port is not None, "a tcp handshake address has a port"
        async with started_process(
            engine.command(port),
            log_dir / "engine-direct.log",
            env=engine.env,
            own_group=engine.own_group,
        ) as started:
            with trio.move_on_after(engine.ready_s) as waited:
                await backend.wait_ready()
            if waited.cancelled_caught:
                raise ServerFailed(f"the engine did not connect:\n{log_tail(started)}")
            yield Target("direct", model_dir.served_name, backend=backend, model_dir=model_dir)


@asynccontextmanager
async def smg_trio_grpc_target(
    model_path: Path, engine: EngineServer, log_dir: Path
) -> AsyncIterator[Target]:
    port = free_port()
    worker = f"{engine.runtime.value}+grpc://{engine.address}"
    async with started_process(
        smg_trio_command(port, worker, model_path), log_dir / "smg-trio-grpc.log"
    ) as gateway:
        model = await wait_serving(gateway, port, timeout_s=GATEWAY_READY_S)
        yield Target("smg-trio gRPC", model, port, ProcessProbe(gateway.process.pid))


@asynccontextmanager
async def smg_grpc_target(
    smg_bin: Path, model_path: Path, engine: EngineServer, log_dir: Path
) -> AsyncIterator[Target]:
    port = free_port()
    command = smg_command(smg_bin, port, f"grpc://{engine.address}", model_path, backend=None)
    async with started_process(command, log_dir / "smg-grpc.log") as gateway:
        model = await wait_serving(gateway, port, timeout_s=GATEWAY_READY_S)
        yield Target("smg gRPC", model, port, ProcessProbe(gateway.process.pid))
