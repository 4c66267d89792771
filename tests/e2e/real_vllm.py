"""I/O. Real vLLM servers and smg-trio gateways as subprocesses for the opt-in differential
harness (`test_vllm_differential.py`): started once per module, each wait bounded by a deadline,
each process group killed by the PID we started (docs/real-engines.md).

Plain blocking code on purpose: pytest-trio fixtures are per test, and a vLLM start costs
30-45 s on two shared cores, so the module-scoped fixtures that own these processes are sync.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import pytest

VENV: Final = os.environ.get("SMG_TRIO_VLLM_VENV", "")
MODEL: Final = os.environ.get("SMG_TRIO_VLLM_MODEL", "")
SKIP_REASON: Final = "set SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL to run against a real vLLM"
SERVED_NAME: Final = "tiny"
MARKS: Final = (
    pytest.mark.real_engine,
    pytest.mark.skipif(not (VENV and MODEL), reason=SKIP_REASON),
    pytest.mark.timeout(900),  # the first test of a module also waits for the servers
)
"""A real-vLLM module's `pytestmark`: opt-in, skipped without the engine, a long cap."""
MAX_MODEL_LEN: Final = 2048
COMMON_FLAGS: Final = ("--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN))
STARTUP_S: Final = 300.0  # a first start compiles; ready usually after 30-45 s, slower under load
SHUTDOWN_S: Final = 30.0
POLL_S: Final = 1.0
LOG_TAIL_CHARS: Final = 8_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Launched:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]


def launch(
    name: str, command: Sequence[str], log_dir: Path, extra_env: Mapping[str, str] | None = None
) -> Launched:
    """Its own session, so stopping it reaches vLLM's EngineCore child too."""
    log_path = log_dir / f"{name}.log"
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(extra_env or {})}
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            list(command), stdout=log, stderr=log, env=environment, start_new_session=True
        )
    return Launched(name, process, log_path)


def stop(launched: Launched) -> None:
    """SIGTERM the group, give it SHUTDOWN_S, then SIGKILL whatever is left of that group."""
    pid = launched.process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + SHUTDOWN_S
    while launched.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # a hung parent, or an orphaned EngineCore child
    launched.process.wait()  # SIGKILL was sent: this returns promptly


def wait_healthy(watched: Sequence[Launched], base_url: str) -> float:
    """Poll GET /health until 200; fail early, with the logs, if one of `watched` died."""
    started = time.monotonic()
    with httpx.Client(base_url=base_url, timeout=5.0) as client:
        while time.monotonic() - started < STARTUP_S:
            for launched in watched:
                if launched.process.poll() is not None:
                    raise RuntimeError(f"{launched.name} exited:\n{launched.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if client.get("/health").status_code == 200:
                    return time.monotonic() - started
            time.sleep(POLL_S)
    logs = "".join(launched.log_tail() for launched in watched)
    raise RuntimeError(f"{base_url} not healthy after {STARTUP_S} s:\n{logs}")


def vllm_command(*arguments: str) -> list[str]:
    return [str(Path(VENV) / "bin" / "vllm"), "serve", MODEL, *arguments, *COMMON_FLAGS]


def gateway_command(port: int, *workers: str) -> list[str]:
    return [
        *(sys.executable, "-m", "smg_trio", "serve"),
        *("--model-path", MODEL, "--served-model-name", SERVED_NAME),
        *(flag for worker in workers for flag in ("--worker", worker)),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]


def headless_engine(engine_port: int) -> list[str]:
    """A headless vLLM EngineCore that dials the gateway's handshake port (wire.md §A.14)."""
    return vllm_command(
        *("--headless", "--data-parallel-size", "1", "--data-parallel-size-local", "1"),
        *("--data-parallel-address", "127.0.0.1"),
        *("--data-parallel-rpc-port", str(engine_port)),
    )


@contextlib.contextmanager
def running(launched: list[Launched]) -> Iterator[None]:
    try:
        yield
    finally:
        for each in reversed(launched):
            stop(each)


@contextlib.contextmanager
def vllm_http_server(log_dir: Path) -> Iterator[str]:
    """vLLM's own OpenAI server: the reference answers."""
    port = free_port()
    arguments = ("--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port))
    server = launch("vllm-http", vllm_command(*arguments), log_dir)
    with running([server]):
        url = f"http://127.0.0.1:{port}"
        print(f"vLLM HTTP server ready after {wait_healthy([server], url):.1f} s")
        yield url


@contextlib.contextmanager
def smg_trio_in_front_of_vllm(
    wire: str, log_dir: Path, engine_env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """smg-trio serving a real vLLM engine: headless EngineCore over ZMQ, or `--grpc`;
    `engine_env`: the engine's extra environment (e.g. the servicer's SMG_VLLM_MM_PROCESSOR)."""
    port, engine_port = free_port(), free_port()
    launched: list[Launched] = []
    with running(launched):
        if wire == "zmq":
            # The gateway binds the handshake port; the headless engine dials it (wire.md §A.14).
            gateway_worker = f"vllm+zmq://127.0.0.1:{engine_port}"
            launched.append(launch("gateway-zmq", gateway_command(port, gateway_worker), log_dir))
            launched.append(launch("vllm-headless", headless_engine(engine_port), log_dir))
        else:
            kv_events = {
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": f"tcp://127.0.0.1:{free_port()}",  # loopback, not every interface
            }
            engine = vllm_command(
                *("--grpc", "--host", "127.0.0.1", "--port", str(engine_port)),
                *("--kv-events-config", json.dumps(kv_events)),
            )
            launched.append(launch("vllm-grpc", engine, log_dir, engine_env))
            gateway_worker = f"vllm+grpc://127.0.0.1:{engine_port}"
            launched.append(launch("gateway-grpc", gateway_command(port, gateway_worker), log_dir))
        url = f"http://127.0.0.1:{port}"
        print(f"smg-trio over {wire} ready after {wait_healthy(launched, url):.1f} s")
        yield url


@contextlib.contextmanager
def smg_trio_in_front_of_two_vllm_zmq(log_dir: Path) -> Iterator[tuple[str, list[Launched]]]:
    """smg-trio with two vllm+zmq workers, each a headless EngineCore: the gateway's URL and
    the two engines (for a test that kills one, by its process group)."""
    port, engine_ports = free_port(), (free_port(), free_port())
    launched: list[Launched] = []
    with running(launched):
        workers = [f"vllm+zmq://127.0.0.1:{engine_port}" for engine_port in engine_ports]
        launched.append(launch("gateway-zmq", gateway_command(port, *workers), log_dir))
        engines = [
            launch(f"vllm-headless-{index}", headless_engine(engine_port), log_dir)
            for index, engine_port in enumerate(engine_ports)
        ]
        launched.extend(engines)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(launched, url)
        # /health is 200 with one ready worker: wait for both.
        with httpx.Client(base_url=url, timeout=5.0) as client:
            deadline = time.monotonic() + STARTUP_S
            while time.monotonic() < deadline:
                text = client.get("/metrics").text
                ready = [
                    line for line in text.splitlines() if line.startswith("smg_trio_worker_ready")
                ]
                if len(ready) == 2 and all(line.endswith(" 1.0") for line in ready):
                    break
                time.sleep(POLL_S)
        yield url, engines
