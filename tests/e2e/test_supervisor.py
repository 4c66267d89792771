"""`smg-trio serve --processes 2` as a user runs it, in front of the reference vLLM EngineCore
(docs/processes.md): connections spread over both processes, each answers the same greedy
text, `/metrics` on either adds both up, killing one process (by its pid) loses only its own
streams and the supervisor starts it again, SIGTERM drains both, no process outlives a killed
supervisor; a TokenSpeed ZMQ worker is refused with exit 2."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from harness.ports import free_port
from smg_trio.cli import main
from smg_trio.model.folder import demo_model_path
from tests.e2e.live_server import engine_command, write_replay

# A cap against hangs, not a bound: a supervisor, two gateway processes and an engine start
# within it; at load 25 the first 16 completions were still running at 40 s.
TEST_TIMEOUT_S: Final = 90.0
STEP_MS: Final = 5.0
STARTED: Final = re.compile(r"gateway process (\d+) started \(pid (\d+)\)")
GREEDY: Final = {"prompt": "The gateway", "max_tokens": 8, "temperature": 0.0}
KILL_STREAMS: Final = 16  # SO_REUSEPORT hashes: all on one process has odds 2 in 65,536
LONG: Final = {"prompt": "The gateway", "max_tokens": 300, "ignore_eos": True, "stream": True}


@dataclass
class Supervised:
    """The supervisor's process, its JSON log lines as they come, and its engine."""

    process: trio.Process
    engine: trio.Process | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)
    port: int = 0

    async def read_log(self) -> None:
        assert self.process.stderr is not None
        pending = b""
        while data := await self.process.stderr.receive_some(65536):
            *complete, pending = (pending + data).split(b"\n")
            self.lines.extend(json.loads(line) for line in complete if line.strip())
            self.changed.set()
            self.changed = trio.Event()

    async def line_matching(self, pattern: re.Pattern[str], after: int = 0) -> re.Match[str]:
        while True:
            for line in self.lines[after:]:
                if (match := pattern.search(line["message"])) is not None:
                    return match
            await self.changed.wait()

    def pids(self) -> dict[int, int]:
        """The latest pid of each gateway process, from the supervisor's lines."""
        pids = {}
        for line in self.lines:
            if (match := STARTED.search(line["message"])) is not None:
                pids[int(match.group(1))] = int(match.group(2))
        return pids

    def served_by(self) -> list[int]:
        """For each request line so far, the gateway process that served it."""
        return [
            line["gateway_process"] for line in self.lines if line["logger"] == "smg_trio.requests"
        ]


@asynccontextmanager
async def supervised(tmp_path: Path) -> AsyncIterator[Supervised]:
    handshake_port = free_port()
    command = [
        *(sys.executable, "-m", "smg_trio", "serve", "--model-path", str(demo_model_path())),
        *("--worker", f"vllm+zmq://127.0.0.1:{handshake_port}", "--port", "0"),
        *("--processes", "2", "--log-format", "json", "--drain-timeout-s", "10"),
    ]
    process = await trio.lowlevel.open_process(command, stderr=-1)
    running = Supervised(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(running.read_log)
            port = await running.line_matching(re.compile(r"Running on http://127.0.0.1:(\d+)"))
            running.port = int(port.group(1))
            replay = write_replay(tmp_path, "Tokens stream from the engine to you. " * 40)
            argv = engine_command(f"tcp://127.0.0.1:{handshake_port}", replay, STEP_MS)
            with (tmp_path / "engine.log").open("wb") as log:  # the engine has its own copy
                running.engine = await trio.lowlevel.open_process(argv, stdout=log, stderr=log)
            await until_both_ready(running)
            yield running
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            for child in (process, running.engine):
                if child is not None:
                    child.kill()
                    await child.wait()


async def until_both_ready(running: Supervised) -> None:
    """Until each process logged its engine as registered (or recovered and answering)."""
    ready = re.compile(r"engine 0 (registered|answers this process)")
    while True:
        serving = {
            line.get("gateway_process")
            for line in running.lines
            if ready.search(line["message"]) is not None
        }
        if {0, 1} <= serving:
            return
        await running.changed.wait()


async def completion(port: int, body: dict[str, object]) -> str:
    """One request on a connection of its own (so connections can spread)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        response = await client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    text: str = response.json()["choices"][0]["text"]
    return text


async def stream(port: int, started: trio.Semaphore) -> str:
    """A long stream on a connection of its own; `started` is released at its first bytes."""
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
        client.stream("POST", "/v1/completions", json=LONG) as response,
    ):
        assert response.status_code == 200
        body = ""
        async for text in response.aiter_text():
            if not body:
                started.release()
            body += text
    return body


async def test_two_processes_share_the_port_and_drain_on_sigterm(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with supervised(tmp_path) as running:
            texts: list[str] = []

            async def one() -> None:
                texts.append(await completion(running.port, GREEDY))

            async with trio.open_nursery() as nursery:
                for _ in range(16):
                    nursery.start_soon(one)
            assert len(set(texts)) == 1
            assert texts[0]
            while len(running.served_by()) < 16:
                await running.changed.wait()
            assert set(running.served_by()) == {0, 1}  # connections spread
            await metrics_add_up(running, 16)

            streams: list[str] = []
            started = trio.Semaphore(0)

            async def one_stream() -> None:
                streams.append(await stream(running.port, started))

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(one_stream)
                for _ in range(4):
                    await started.acquire()  # 300 tokens take 1.5 s: all are running
                running.process.send_signal(signal.SIGTERM)
            assert all(s.rstrip().endswith("data: [DONE]") for s in streams)  # drained whole
            assert await running.process.wait() == 0


@pytest.mark.serial  # a real-time bound (docs/architecture.md §8.1)
async def test_killing_one_process_loses_only_its_streams_and_it_comes_back(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with supervised(tmp_path) as running:
            victim = running.pids()[1]
            finished: list[str] = []
            broken: list[BaseException] = []
            started = trio.Semaphore(0)

            async def one_stream() -> None:
                try:
                    finished.append(await stream(running.port, started))
                except httpx.HTTPError as exc:
                    broken.append(exc)

            async with trio.open_nursery() as nursery:
                for _ in range(KILL_STREAMS):
                    nursery.start_soon(one_stream)
                for _ in range(KILL_STREAMS):
                    await started.acquire()  # 300 tokens take 1.5 s: all are running
                os.kill(victim, signal.SIGKILL)
            assert broken, "the killed process had streams"
            assert finished, "the other process's streams finished"
            assert all(s.rstrip().endswith("data: [DONE]") for s in finished)
            while running.pids()[1] == victim:
                await running.changed.wait()
            await until_back(running)

            # A killed supervisor passes no signal on: its processes find it gone and leave.
            gateways = list(running.pids().values())
            running.process.kill()
            with trio.fail_after(3.0):
                while any(map(alive, gateways)):  # noqa: ASYNC110 (polls the processes)
                    await trio.sleep(0.05)


async def metrics_add_up(running: Supervised, requests: int) -> None:
    """`/metrics` on either process counts both processes' requests (docs/observability.md §6):
    the per-request counter from the shared files, the routed count from the worker state
    each process mirrors every 0.5 s, and readiness once per process (a `pid` label)."""
    served = re.compile(
        r'smg_trio_requests_total\{endpoint="/v1/completions",status="200",'
        r'transport="http1"\} (\S+)'
    )
    routed = re.compile(r'smg_trio_worker_requests_total\{worker="w1"\} (\S+)')
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{running.port}") as client:
        with trio.fail_after(3.0):
            while True:
                metrics = (await client.get("/metrics")).text
                counts = [re.search(pattern, metrics) for pattern in (served, routed)]
                if all(c is not None and float(c.group(1)) == requests for c in counts):
                    break
                await trio.sleep(0.1)
    ready = re.findall(r'smg_trio_worker_ready\{pid="(\d+)",', metrics)
    assert sorted(map(int, ready)) == sorted(running.pids().values())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def until_back(running: Supervised) -> None:
    """The restarted process took the engine back; requests on both processes answer alike."""
    await running.line_matching(re.compile(r"engine 0 answers this process"))
    texts = {await completion(running.port, GREEDY) for _ in range(6)}
    assert len(texts) == 1


def test_a_tokenspeed_zmq_worker_is_refused_with_several_processes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            *("serve", "--model-path", str(demo_model_path()), "--processes", "2"),
            *("--worker", "tokenspeed+zmq://127.0.0.1:27937"),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "tokenspeed+zmq://127.0.0.1:27937" in error
    assert "--processes" in error
