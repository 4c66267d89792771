"""`smg-trio serve --processes 2` serving two models as a user runs it (docs/fleet.md §4,
docs/processes.md): `--model NAME=DIR` twice, a worker naming the second model, one reference
engine per model started with its own folder; both processes load both models, every request
reaches its model's engine whichever process takes it, and each request line says its model."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from harness.ports import free_port
from smg_trio.model.folder import demo_model_path
from tests.e2e.live_server import engine_command
from tests.e2e.models_server import HARMONY_MODEL

TEST_TIMEOUT_S: Final = 90.0  # a cap against hangs: a supervisor, two processes, two engines
TEXTS: Final = {"demo": "Demo engine says hi. ", "harmony": "Harmony engine answers. "}
REQUESTS: Final = 16


class Log:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.changed = trio.Event()

    async def read(self, process: trio.Process) -> None:
        assert process.stderr is not None
        pending = b""
        while data := await process.stderr.receive_some(65536):
            *complete, pending = (pending + data).split(b"\n")
            self.lines.extend(json.loads(line) for line in complete if line.strip())
            self.changed.set()
            self.changed = trio.Event()

    async def until(self, done: Any) -> Any:
        while (found := done(self.lines)) is None:
            await self.changed.wait()
        return found


def port_of(lines: list[dict[str, Any]]) -> int | None:
    for line in lines:
        if (match := re.search(r"Running on http://127.0.0.1:(\d+)", line["message"])) is not None:
            return int(match.group(1))
    return None


def both_registered(lines: list[dict[str, Any]]) -> bool | None:
    """Each process has both workers' engines (2 registrations or recoveries each)."""
    ready = re.compile(r"engine 0 (registered|answers this process)")
    counts = [0, 0]
    for line in lines:
        if ready.search(line["message"]) and line.get("gateway_process") in (0, 1):
            counts[line["gateway_process"]] += 1
    return True if min(counts) >= 2 else None


async def test_two_processes_serve_two_models(tmp_path: Path) -> None:
    ports = {"demo": free_port(), "harmony": free_port()}
    command = [
        *(sys.executable, "-m", "smg_trio", "serve", "--port", "0"),
        *("--model", f"demo={demo_model_path()}", "--model", f"harmony={HARMONY_MODEL}"),
        *("--worker", f"vllm+zmq://127.0.0.1:{ports['demo']}"),
        *("--worker", f"vllm+zmq://127.0.0.1:{ports['harmony']}?model=harmony"),
        *("--processes", "2", "--log-format", "json", "--drain-timeout-s", "5"),
    ]
    log = Log()
    children: list[trio.Process] = []
    with trio.fail_after(TEST_TIMEOUT_S):
        try:
            gateway = await trio.lowlevel.open_process(command, stderr=-1)
            children.append(gateway)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(log.read, gateway)
                port = await log.until(port_of)
                with (tmp_path / "engines.log").open("wb") as engines_log:
                    for name, folder in (("demo", demo_model_path()), ("harmony", HARMONY_MODEL)):
                        replay = tmp_path / f"{name}.txt"
                        replay.write_text(TEXTS[name] * 20, encoding="utf-8")
                        argv = [
                            *engine_command(f"tcp://127.0.0.1:{ports[name]}", replay, 2.0),
                            *("--model-path", str(folder)),
                        ]
                        children.append(
                            await trio.lowlevel.open_process(
                                argv, stdout=engines_log, stderr=engines_log
                            )
                        )
                await log.until(both_registered)
                answers: list[tuple[str, str]] = []

                async def one(model: str) -> None:
                    # A connection of its own, so connections spread over both processes.
                    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                        body = {"model": model, "prompt": "Hi", "max_tokens": 3}
                        reply = await client.post("/v1/completions", json=body, timeout=20)
                    assert reply.status_code == 200, reply.text
                    answers.append((model, reply.json()["choices"][0]["text"]))

                async with trio.open_nursery() as requests:
                    for index in range(REQUESTS):
                        requests.start_soon(one, ("demo", "harmony")[index % 2])
                for model, text in answers:
                    assert TEXTS[model].startswith(text.lstrip()), (model, text)

                def request_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
                    found = [line for line in lines if line["logger"] == "smg_trio.requests"]
                    return found if len(found) >= REQUESTS else None

                lines = await log.until(request_lines)
                assert {line["gateway_process"] for line in lines} == {0, 1}
                assert sorted(line["model"] for line in lines) == sorted(m for m, _ in answers)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                for child in children:
                    child.kill()
                    await child.wait()
