"""I/O. Start and stop the processes a scenario measures, all on loopback: the reference vLLM
EngineCore (or its counted variant), the smg-trio gateway, the Rust smg gateway, and real vLLM
(headless EngineCore dialing a frontend, its gRPC engine server, or its own HTTP server). Every
process is ours: it is stopped by its PID (vLLM: by the process group it was started in, as its
EngineCore is a child).

Readiness is proven by a real request: `wait_serving` polls `GET /v1/models` until it names a
model, then sends a short completion until one succeeds, within a deadline, and fails early if
the process died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

import msgspec
import trio

from bench.load.http1_client import Http1Connection, Http1Error
from harness.ports import LOOPBACK, free_port
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand

STOP_GRACE_S: Final = 10.0
POLL_S: Final = 0.25
VLLM_FLAGS: Final = ("--dtype", "float32", "--max-model-len", "2048")


class ServerFailed(Exception):
    """A server process exited, or did not serve within its deadline (see its log)."""


@dataclass(frozen=True)
class Started:
    process: trio.Process
    log_path: Path
    own_group: bool  # started in its own session: stop the whole group


def smg_handshake_port(ipc_url: str) -> int:
    """The TCP port smg listens on for a ZMQ worker's handshake: 20000 + FNV-1a-64 of the path
    after "ipc://", modulo 10000 (real-engines.md)."""
    value = 0xCBF29CE484222325
    for byte in ipc_url.removeprefix("ipc://").encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return 20000 + value % 10000


@asynccontextmanager
async def started_process(
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    own_group: bool = False,
    cwd: Path | None = None,
) -> AsyncIterator[Started]:
    """Run `command` (in `cwd`, if given) with its output in `log_path`; SIGTERM it (then
    SIGKILL) on leaving."""
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        process = await trio.lowlevel.open_process(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=None if env is None else {**os.environ, **env},
            start_new_session=own_group,
            cwd=cwd,
        )
    started = Started(process, log_path, own_group)
    try:
        yield started
    finally:
        with trio.CancelScope(shield=True):
            await stop_process(started)


async def stop_process(started: Started) -> None:
    process = started.process

    def signal_it(how: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if started.own_group:
                os.killpg(process.pid, how)  # the group we created for it, children included
            else:
                os.kill(process.pid, how)

    if process.returncode is None:
        signal_it(signal.SIGTERM)
        with trio.move_on_after(STOP_GRACE_S):
            await process.wait()
    signal_it(signal.SIGKILL)  # a hung process, or (for a group) an orphaned child
    await process.wait()


def log_tail(started: Started, chars: int = 4000) -> str:
    return started.log_path.read_text(errors="replace")[-chars:]


async def wait_serving(started: Started, port: int, *, timeout_s: float, processes: int = 1) -> str:
    """Wait until the server at `port` answers a completion; return its model name. With
    `processes` > 1 (`serve --processes N`: the kernel hands each connection to any of them),
    also until `/metrics` shows every process ready, or a first request may find a process
    whose engine has not registered yet."""
    with trio.move_on_after(timeout_s):
        model = await _poll(started, port, _model_name)
        await _poll(started, port, lambda connection: _completes(connection, model))
        if processes > 1:
            await _poll(started, port, lambda connection: _all_ready(connection, processes))
        return model
    raise ServerFailed(f"not serving after {timeout_s:g} s:\n{log_tail(started)}")


_T = TypeVar("_T")


async def _poll(
    started: Started, port: int, attempt: Callable[[Http1Connection], Awaitable[_T | None]]
) -> _T:
    while True:
        if started.process.returncode is not None:
            raise ServerFailed(f"exited with {started.process.returncode}:\n{log_tail(started)}")
        try:
            connection = await Http1Connection.connect(LOOPBACK, port)
            try:
                result = await attempt(connection)
            finally:
                await connection.aclose()
            if result is not None:
                return result
        except (OSError, Http1Error, msgspec.DecodeError, KeyError):
            pass
        await trio.sleep(POLL_S)


async def fetch_model_name(host: str, port: int) -> str:
    """The first model a running server lists at /v1/models."""
    connection = await Http1Connection.connect(host, port)
    try:
        name = await _model_name(connection)
    finally:
        await connection.aclose()
    if name is None:
        raise ServerFailed(f"http://{host}:{port}/v1/models lists no model")
    return name


async def _model_name(connection: Http1Connection) -> str | None:
    status, body = await connection.get("/v1/models")
    if status != 200:
        return None
    models = msgspec.json.decode(body)["data"]
    return str(models[0]["id"]) if models else None


async def _completes(connection: Http1Connection, model: str) -> bool | None:
    body = msgspec.json.encode(
        {"model": model, "prompt": "warm up", "max_tokens": 2, "ignore_eos": True}
    )
    status = await connection.post("/v1/completions", body, on_data=lambda _, __: None)
    return True if status == 200 else None


async def _all_ready(connection: Http1Connection, processes: int) -> bool | None:
    status, body = await connection.get("/metrics")
    if status != 200:
        return None
    ready = [
        line
        for line in body.decode().splitlines()
        if line.startswith("smg_trio_ready{") and line.endswith(" 1.0")
    ]
    return True if len(ready) >= processes else None


def python_module(module: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", module, *arguments]


def reference_engine_command(
    handshake: str,
    *,
    model_path: Path,
    step_ms: float,
    max_batch: int = 512,
    replay_file: Path | None = None,
    counts_file: Path | None = None,
) -> list[str]:
    """Our reference vLLM EngineCore; with `counts_file`, the counted variant."""
    engine = EngineCommand(
        "vllm-zmq",
        handshake=handshake,
        model_path=model_path,
        step_ms=step_ms,
        max_batch=max_batch,
        mode=Mode.RANDOM if replay_file is None else Mode.REPLAY,
        replay_file=replay_file,
        log_level=None if counts_file is not None else "WARNING",  # counted_engine has no such flag
    )
    if counts_file is not None:
        return python_module(
            "bench", "counted_engine", "--counts-file", str(counts_file), *engine.flags()
        )
    return engine.argv()


# The gateway's logging flags in every run; `scenarios --gateway-logs json` turns on its request
# log (one JSON line per request, at INFO), to measure what it costs (bench/RESULTS.md).
QUIET_GATEWAY_LOGS: Final = ("--log-level", "WARNING")
JSON_GATEWAY_LOGS: Final = ("--log-level", "INFO", "--log-format", "json")
gateway_log_flags: tuple[str, ...] = QUIET_GATEWAY_LOGS


def smg_trio_command(port: int, worker: str, model_path: Path, processes: int = 1) -> list[str]:
    """`worker`: a `RUNTIME+WIRE://HOST:PORT` spec, e.g. `vllm+zmq://127.0.0.1:27937`;
    `processes` > 1: `--processes N` (docs/processes.md)."""
    several = ("--processes", str(processes)) if processes > 1 else ()
    return python_module(
        "smg_trio",
        "serve",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--model-path",
        str(model_path),
        "--worker",
        worker,
        *several,
        *gateway_log_flags,
    )


def smg_command(
    smg_bin: Path, port: int, worker_url: str, model_path: Path, *, backend: str | None = "vllm"
) -> list[str]:
    """`worker_url`: `ipc://...` (ZMQ: `backend` names the engine, smg cannot detect it) or
    `grpc://HOST:PORT` (`backend` None: smg asks the engine)."""
    return [
        str(smg_bin),
        "launch",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--prometheus-host",
        LOOPBACK,
        "--prometheus-port",
        str(free_port()),
        *(() if backend is None else ("--backend", backend)),
        "--worker-urls",
        worker_url,
        "--model-path",
        str(model_path),
        "--policy",
        "round_robin",
        "--health-check-interval-secs",
        "5",
        "--shutdown-grace-period-secs",
        "1",
        "--log-level",
        "warn",
    ]


def vllm_headless_command(venv: Path, model_path: Path, rpc_port: int) -> list[str]:
    return [
        str(venv / "bin" / "vllm"),
        "serve",
        str(model_path),
        "--headless",
        "--data-parallel-size",
        "1",
        "--data-parallel-size-local",
        "1",
        "--data-parallel-address",
        LOOPBACK,
        "--data-parallel-rpc-port",
        str(rpc_port),
        *VLLM_FLAGS,
    ]


def vllm_grpc_command(venv: Path, model_path: Path, port: int) -> list[str]:
    """vLLM's gRPC engine server (the smg-grpc-servicer plugin), its KV-event publisher pinned
    to a free loopback port (by default it listens on every interface)."""
    kv_events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://{LOOPBACK}:{free_port()}",
    }
    return [
        str(venv / "bin" / "vllm"),
        "serve",
        str(model_path),
        "--grpc",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--kv-events-config",
        msgspec.json.encode(kv_events).decode(),
        *VLLM_FLAGS,
    ]


def vllm_http_command(venv: Path, model_path: Path, port: int) -> list[str]:
    return [
        str(venv / "bin" / "vllm"),
        "serve",
        str(model_path),
        "--served-model-name",
        "tiny",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        *VLLM_FLAGS,
    ]


VLLM_ENV: Final = {"VLLM_CPU_KVCACHE_SPACE": "1"}
