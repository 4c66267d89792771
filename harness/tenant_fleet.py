"""I/O. N gateway replicas as real `smg_trio serve` processes, each with its own reference
engine, sharing tenant limits through one Redis (docs/fleet.md), and a request burst spread
across them: what tests/e2e/test_tenants.py and `python -m bench tenant_fleet` stand on.

    async with open_fleet(tmp_dir, keys_file, state_url, replicas=2) as fleet:
        statuses = await burst(fleet.base_urls, key, duration_s=3.0)

Leaving kills every process it started by its PID, shielded, and waits for them.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx
import trio

from harness.ports import free_port
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path

READY_S: Final = 60.0
REPLAY: Final = "Fleet replies are short. " * 8
RUNNING: Final = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")


@dataclass
class Fleet:
    base_urls: list[str] = field(default_factory=list)
    processes: list[trio.Process] = field(default_factory=list)
    logs: list[bytearray] = field(default_factory=list)  # each gateway's stderr


async def _gateway_port(process: trio.Process, log: bytearray) -> int:
    assert process.stderr is not None
    while (match := RUNNING.search(log)) is None:
        data = await process.stderr.receive_some(65536)
        if not data:
            raise RuntimeError(f"a gateway ended before serving: {log.decode(errors='replace')}")
        log += data
    return int(match.group(1))


async def _drain(process: trio.Process, log: bytearray) -> None:
    """Keep reading a gateway's stderr (its warnings) so it never blocks on a full pipe."""
    assert process.stderr is not None
    while data := await process.stderr.receive_some(65536):
        log += data
        del log[:-65536]


@asynccontextmanager
async def open_fleet(
    folder: Path, api_keys: Path, state_url: str | None, *, replicas: int = 2
) -> AsyncIterator[Fleet]:
    replay = folder / "fleet-replay.txt"
    replay.write_text(REPLAY, encoding="utf-8")
    fleet = Fleet()
    async with trio.open_nursery() as nursery:
        try:
            for _ in range(replicas):
                worker_port = free_port()
                argv = [
                    sys.executable, "-m", "smg_trio", "serve",
                    "--model-path", str(demo_model_path()), "--port", "0",
                    "--worker", f"vllm+zmq://127.0.0.1:{worker_port}",
                    "--api-keys", str(api_keys),
                    *(() if state_url is None else ("--state-url", state_url)),
                ]  # fmt: skip
                gateway = await trio.lowlevel.open_process(argv, stderr=subprocess.PIPE)
                fleet.processes.append(gateway)
                log = bytearray()
                fleet.logs.append(log)
                with trio.fail_after(READY_S):
                    port = await _gateway_port(gateway, log)
                nursery.start_soon(_drain, gateway, log)
                engine = EngineCommand(
                    "vllm-zmq", handshake=f"tcp://127.0.0.1:{worker_port}", replay_file=replay
                )
                fleet.processes.append(
                    await trio.lowlevel.open_process(
                        engine.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                )
                fleet.base_urls.append(f"http://127.0.0.1:{port}")
            async with httpx.AsyncClient() as client:
                with trio.fail_after(READY_S):
                    for url in fleet.base_urls:
                        await _until_healthy(client, url)
            yield fleet
        finally:
            with trio.CancelScope(shield=True):
                for process in fleet.processes:
                    process.kill()
                    await process.wait()
            nursery.cancel_scope.cancel()


async def _until_healthy(client: httpx.AsyncClient, url: str) -> None:
    while (await client.get(f"{url}/health")).status_code != 200:  # noqa: ASYNC110
        await trio.sleep(0.05)  # the engine is dialling: no event to wait on from here


def chat(max_tokens: int = 1) -> dict[str, object]:
    return {  # no `model`: the served one
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


@dataclass
class Burst:
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    refusal: httpx.Response | None = None  # the first 429, to read its headers and body
    slowest_s: float = 0.0  # the longest any answer took: how late the last could be admitted


async def burst(
    base_urls: Sequence[str], key: str, *, duration_s: float, concurrency: int = 8
) -> Burst:
    """As many chat requests as `concurrency` clients can send in `duration_s`, round robin
    over the replicas; the count of each HTTP status, and the first 429."""
    result = Burst()
    headers = {"authorization": f"Bearer {key}"}
    deadline = trio.current_time() + duration_s
    body = chat()

    async def client_loop(offset: int) -> None:
        async with httpx.AsyncClient(headers=headers, timeout=30) as client:
            i = offset
            while trio.current_time() < deadline:
                url = base_urls[i % len(base_urls)]
                i += 1
                sent = trio.current_time()
                response = await client.post(f"{url}/v1/chat/completions", json=body)
                result.slowest_s = max(result.slowest_s, trio.current_time() - sent)
                result.statuses[response.status_code] += 1
                if response.status_code == 429 and result.refusal is None:
                    result.refusal = response

    async with trio.open_nursery() as nursery:
        for offset in range(concurrency):
            nursery.start_soon(client_loop, offset)
    return result
