"""vLLM's part in `vllm serve`'s front-end hook, played without vLLM (docs/vllm-frontend.md §1):
bind the HTTP socket (not listening) and the engines' input and output listeners (AF_UNIX,
listening), start reference vLLM EngineCores that connect to them with no handshake, as vLLM's
engines do, and run `smg-trio frontend ...` with the three fds, as vLLM's
`RustFrontendProcessManager` does; then close our copies of the engine listeners, as vLLM does."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path

MODEL: Final = str(demo_model_path())
STEP_MS: Final = 5.0


@dataclass
class PlayedVllm:
    """The front end we ran, its engines, its port and its stderr as it comes."""

    frontend: trio.Process
    engines: list[trio.Process]
    port: int
    stderr: bytearray = field(default_factory=bytearray)
    uds: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}" if self.uds is None else "http://localhost"

    def client(self) -> httpx.AsyncClient:
        transport = None if self.uds is None else httpx.AsyncHTTPTransport(uds=str(self.uds))
        return httpx.AsyncClient(base_url=self.url, transport=transport)

    async def read_stderr(self) -> None:
        assert self.frontend.stderr is not None
        while data := await self.frontend.stderr.receive_some(65536):
            self.stderr += data


def frontend_argv(
    fds: tuple[int, int, int], args: Mapping[str, Any], engine_count: int = 1
) -> list[str]:
    """`smg-trio frontend ...` as vLLM 0.32 spells it (vllm/v1/utils.py)."""
    listen, inputs, outputs = fds
    return [
        *(sys.executable, "-m", "smg_trio", "frontend", "--listen-fd", str(listen)),
        *("--input-listener-fd", str(inputs), "--output-listener-fd", str(outputs)),
        *("--engine-start-index", "0", "--engine-count", str(engine_count)),
        *("--data-parallel-size", str(engine_count)),
        *("--args-json", json.dumps(dict(args), sort_keys=True)),
    ]


def vllm_args(**extra: Any) -> dict[str, Any]:
    """An `--args-json` as vLLM sends it for `vllm serve MODEL --host 127.0.0.1 ...`."""
    return {
        "model": MODEL,
        "model_tag": MODEL,
        "host": "127.0.0.1",
        "engine_ready_timeout_secs": 600,
        "http_timeout_keep_alive": 5,
        "profiler_config": {"active_iterations": 5, "profiler": None},
        **extra,
    }


@asynccontextmanager
async def played_vllm(
    tmp_path: Path,
    args: Mapping[str, Any],
    *,
    engine_count: int = 1,
    replay: Path | None = None,
    wait_healthy: bool = True,
    uds: Path | None = None,
    engine_flags: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[PlayedVllm]:
    """The front end serving `engine_count` reference engines; every process killed on leaving.
    With `uds`, the HTTP socket is an AF_UNIX one bound there (vLLM's `--uds`); `engine_flags`
    go to every engine, `env` (added to ours) to the front end, as `vllm serve` passes its own."""
    with ExitStack() as stack:
        if uds is None:
            http = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            http.bind(("127.0.0.1", 0))  # bound, not listening: the front end listens
            port = http.getsockname()[1]
        else:
            http = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            http.bind(str(uds))
            port = 0
        listeners = []
        for name in ("in", "out"):
            listener = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            listener.bind(str(tmp_path / f"{name}.sock"))
            listener.listen()
            listeners.append(listener)
        addresses = (f"ipc://{tmp_path / 'in.sock'}", f"ipc://{tmp_path / 'out.sock'}")
        log = stack.enter_context((tmp_path / "engines.log").open("wb"))
        engines: list[trio.Process] = []
        frontend = None
        try:
            for index in range(engine_count):
                command = EngineCommand(
                    "vllm-zmq",
                    data_addresses=addresses,
                    engine_index=index,
                    replay_file=replay,
                    step_ms=STEP_MS,
                    extra=engine_flags,
                )
                engines.append(
                    await trio.lowlevel.open_process(command.argv(), stdout=log, stderr=log)
                )
            fds = (http.fileno(), listeners[0].fileno(), listeners[1].fileno())
            frontend = await trio.lowlevel.open_process(
                frontend_argv(fds, args, engine_count),
                pass_fds=fds,
                stderr=-1,
                env=None if env is None else {**os.environ, **env},
            )
            for listener in listeners:  # vLLM closes its copies once the front end runs
                listener.close()
            played = PlayedVllm(frontend, engines, port, uds=uds)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(played.read_stderr)
                if wait_healthy:
                    await until_healthy(played)
                yield played
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                for process in (frontend, *engines):
                    if process is not None and process.returncode is None:
                        process.kill()
                        await process.wait()


async def until_healthy(played: PlayedVllm) -> None:
    """Until every engine registered (the front end logs it) and /health answers 200; the
    caller bounds the wait."""
    async with played.client() as client:
        while True:
            if b"engine(s) ready" in played.stderr:
                try:
                    if (await client.get("/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
            await trio.sleep(0.05)
