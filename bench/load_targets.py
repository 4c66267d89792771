"""I/O. The targets a scenario measures, each an async context manager that starts what it
needs, waits until it serves, yields a `Target`, and stops everything it started:

- `smg_trio_target`: `smg-trio serve` (a subprocess, the process measured) with one
  `vllm+zmq` worker, and the engine dialing its handshake port;
- `smg_target`: the Rust `smg launch --backend vllm` with an ipc worker URL, and the engine
  dialing smg's FNV-derived handshake port;
- `vllm_http_target`: vLLM's own OpenAI server (its API server process is the one measured);
- `direct_target`: no gateway: our ZMQ backend in this process, the engine dialing it.

An engine is described by an `EngineLaunch`: given the handshake port to dial, the command.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from bench.load_runner import ProcessProbe
from bench.load_servers import (
    LOOPBACK,
    VLLM_ENV,
    ServerFailed,
    free_port,
    log_tail,
    reference_engine_command,
    smg_command,
    smg_handshake_port,
    smg_trio_command,
    started_process,
    vllm_headless_command,
    vllm_http_command,
    wait_serving,
)
from smg_trio.backends.zmq_engine import ZmqEngine, open_zmq_engine
from smg_trio.core.runtime import Runtime
from smg_trio.model import ModelDir, load_model_dir


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
class Target:
    name: str  # e.g. "smg-trio", "smg", "vLLM HTTP", "direct"
    model: str  # the name its API serves the model under
    port: int | None = None  # None: in-process (direct)
    probe: ProcessProbe | None = None  # the gateway process, when there is one
    backend: ZmqEngine | None = None  # direct only
    model_dir: ModelDir | None = None  # direct only


@asynccontextmanager
async def smg_trio_target(
    model_path: Path, engine: EngineLaunch, log_dir: Path
) -> AsyncIterator[Target]:
    port, handshake_port = free_port(), free_port()
    async with (
        started_process(
            smg_trio_command(port, handshake_port, model_path), log_dir / "smg-trio.log"
        ) as gateway,
        started_process(
            engine.command(handshake_port),
            log_dir / "engine-smg-trio.log",
            env=engine.env,
            own_group=engine.own_group,
        ),
    ):
        model = await wait_serving(gateway, port, timeout_s=engine.ready_s)
        yield Target("smg-trio", model, port, ProcessProbe(gateway.process.pid))


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
    async with open_zmq_engine(
        runtime=Runtime.VLLM,
        eos_ids=model_dir.eos_ids,
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
