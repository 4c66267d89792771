"""I/O. `smg-trio demo`: the real server in front of the embedded reference vLLM EngineCore.

It runs `serve` with one `vllm+zmq` worker on a free handshake port, starts the reference
EngineCore as a child process that dials that port exactly as `vllm serve --headless` would,
waits until the engine is ready, and prints a curl line and a WebSocket example. The engine
replays a fixed text containing the word STOP, so a request with `stop: ["STOP"]` shows the
router-side stop: the text ends before it, finish_reason is "stop", and the engine request is
aborted at once (the engine counters printed by `--once` show it).

- Interactive: serve until Ctrl-C (or SIGTERM); everything stops within ~2 s: the HTTP server
  drains for at most `GRACEFUL_SHUTDOWN_S`, the child gets SIGTERM, then SIGKILL if it lingers.
- `--once`: send the example requests over real HTTP/1.1 (trio + h11, no SDK), print the
  answers and the engine counters, exit 0 when the stop worked (1 otherwise).
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import h11
import trio

from smg_trio.engines.launch import EngineCommand
from smg_trio.errors import ConfigError
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving, open_shutdown_signal, serve
from smg_trio.serving.worker_specs import WorkerSpec

ENGINE_READY_TIMEOUT_S: Final = 30.0
REQUEST_TIMEOUT_S: Final = 30.0
ENGINE_EXIT_GRACE_S: Final = 0.5
READY_POLL_S: Final = 0.02
ENGINE_STEP_MS: Final = 10.0  # slow enough to watch the tokens arrive in a terminal
STOP_WORD: Final = "STOP"
REPLAY_TEXT: Final = (
    "Tokens stream from the engine, through the stop scanner, to you. "
    "Everything after the word STOP is generated but never shown, and the engine is told "
    "to abort at once. STOP You should not see this sentence."
)
PROMPT: Final = "Tell me how the gateway works."


@dataclass(frozen=True)
class DemoOptions:
    model_path: Path
    host: str
    port: int
    once: bool = False


def chat_body(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "stop": [STOP_WORD],
        "stream_options": {"include_usage": True},
    }


def completion_body(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "Once upon a time", "n": 2, "max_tokens": 12}


def engine_command(handshake_address: str, model_path: Path, replay: Path) -> list[str]:
    return EngineCommand(
        "vllm-zmq",
        handshake=handshake_address,
        model_path=model_path,
        replay_file=replay,
        step_ms=ENGINE_STEP_MS,
    ).argv()


def instructions(base_url: str, ws_url: str, model: str) -> str:
    curl = shlex.join(
        [
            "curl",
            "-N",
            "--http2-prior-knowledge",
            f"{base_url}/v1/chat/completions",
            "-H",
            "content-type: application/json",
            "-d",
            json.dumps(chat_body(model)),
        ]
    )
    # The same stop as the curl body, so both examples end their text before STOP.
    websocket = shlex.join(
        [sys.executable, "-m", "smg_trio.client", ws_url, PROMPT, "--stop", STOP_WORD]
    )
    return (
        f"smg-trio gateway on {base_url} (HTTP/1.1 and h2c), WebSocket on {ws_url}\n\n"
        f"Streaming chat completion with a stop string (drop --http2-prior-knowledge for "
        f"HTTP/1.1):\n  {curl}\n\n"
        f"The same over the WebSocket protocol:\n  {websocket}\n\n"
    )


async def run_demo(options: DemoOptions, out: TextIO = sys.stdout) -> int:
    config = GatewayConfig(
        model_path=options.model_path,
        workers=(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0"),),
        host=options.host,
        port=options.port,
    )
    stop = trio.Event()
    config_error: ConfigError | None = None
    code = 1
    # The engine is stopped once the gateway has shut down, so the gateway never sees it die.
    engines: list[trio.Process] = []
    with tempfile.TemporaryDirectory(prefix="smgt-demo-") as tmp, open_shutdown_signal() as signal:
        replay = Path(tmp) / "replay.txt"
        replay.write_text(REPLAY_TEXT, encoding="utf-8")
        async with _stopped_at_exit(engines), trio.open_nursery() as nursery:
            signal_scope = trio.CancelScope()

            async def stop_on_signal() -> None:
                with signal_scope:
                    await signal()
                    stop.set()

            nursery.start_soon(stop_on_signal)
            try:
                serving: Serving = await nursery.start(
                    partial(serve, config, shutdown_trigger=stop.wait)
                )
                code = await _run_with_engine(serving, replay, options, stop, out, engines)
            except ConfigError as exc:
                config_error = exc  # raised bare below, not wrapped by the nursery
            finally:
                stop.set()
                signal_scope.cancel()
    if config_error is not None:
        raise config_error
    return code


async def _run_with_engine(
    serving: Serving,
    replay: Path,
    options: DemoOptions,
    stop: trio.Event,
    out: TextIO,
    engines: list[trio.Process],
) -> int:
    """Start the engine (into `engines`, which the caller stops), wait for it, then serve."""
    gateway = serving.gateway
    command = engine_command(serving.worker_addresses[0], gateway.model.path, replay)
    process = await trio.lowlevel.open_process(command)
    engines.append(process)
    if not await _wait_ready(serving, process, stop):
        out.write("the reference engine did not become ready\n")
        return 1
    host = "127.0.0.1" if options.host in ("0.0.0.0", "::") else options.host
    http_host = f"[{host}]" if ":" in host else host
    base_url = f"http://{http_host}:{serving.port}"
    model = gateway.prompt_model.name
    out.write(instructions(base_url, f"ws://{http_host}:{serving.port}/v1/ws", model))
    out.flush()
    if options.once:
        return await run_scripted_requests(serving, host, model, out)
    out.write("Serving until Ctrl-C.\n")
    out.flush()
    await stop.wait()
    return 0


@asynccontextmanager
async def _stopped_at_exit(processes: list[trio.Process]) -> AsyncIterator[None]:
    """Stop every process in `processes` on leaving, however the block ends."""
    try:
        yield
    finally:
        for process in processes:
            await _stop_process(process)


async def _wait_ready(serving: Serving, process: trio.Process, stop: trio.Event) -> bool:
    with trio.move_on_after(ENGINE_READY_TIMEOUT_S):
        while not serving.gateway.ready:
            if stop.is_set() or process.poll() is not None:
                return False
            await trio.sleep(READY_POLL_S)
        return True
    return False


async def _stop_process(process: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        if process.poll() is None:
            process.terminate()
            with trio.move_on_after(ENGINE_EXIT_GRACE_S):
                await process.wait()
        if process.poll() is None:
            process.kill()
            await process.wait()


async def run_scripted_requests(serving: Serving, host: str, model: str, out: TextIO) -> int:
    """The example requests over HTTP/1.1; 0 when every answer was right."""
    port = serving.port
    ok = True
    with trio.fail_after(REQUEST_TIMEOUT_S):
        out.write(f"### POST /v1/chat/completions {json.dumps(chat_body(model))}\n")
        events: list[bytes] = []
        status = await http_request(
            host,
            port,
            "POST",
            "/v1/chat/completions",
            json.dumps(chat_body(model)).encode(),
            on_data=partial(_echo, out, events),
        )
        text, finish = _chat_outcome(b"".join(events))
        ok &= status == 200 and STOP_WORD not in text and finish == "stop"
        out.write(f"\nassembled text: {text!r}\nfinish_reason: {finish}\n\n")

        out.write(f"### POST /v1/completions {json.dumps(completion_body(model))}\n")
        body: list[bytes] = []
        status = await http_request(
            host,
            port,
            "POST",
            "/v1/completions",
            json.dumps(completion_body(model)).encode(),
            on_data=body.append,
        )
        ok &= status == 200
        out.write(json.dumps(json.loads(b"".join(body)), indent=2) + "\n\n")

        await trio.sleep(0.05)  # let the engine act on the abort before reading its counters
        for worker in serving.gateway.pool.workers:
            call_utility = getattr(worker.backend, "call_utility", None)
            if call_utility is not None:
                counters = await call_utility("smg_trio_counters")
                out.write(f"engine counters: {json.dumps(counters)}\n")
    out.write("demo OK\n" if ok else "demo FAILED\n")
    return 0 if ok else 1


def _echo(out: TextIO, events: list[bytes], data: bytes) -> None:
    events.append(data)
    out.write(data.decode("utf-8", errors="replace"))
    out.flush()


def _chat_outcome(stream: bytes) -> tuple[str, str | None]:
    """The content text and the last finish_reason of an SSE chat completion stream."""
    text: list[str] = []
    finish = None
    for event in stream.split(b"\n\n"):
        payload = event.removeprefix(b"data: ").strip()
        if not payload or payload == b"[DONE]":
            continue
        for choice in json.loads(payload).get("choices", []):
            text.append(choice.get("delta", {}).get("content") or "")
            finish = choice.get("finish_reason") or finish
    return "".join(text), finish


async def http_request(
    host: str,
    port: int,
    method: str,
    target: str,
    body: bytes,
    *,
    on_data: Callable[[bytes], None],
    headers: Sequence[tuple[str, str]] = (),
) -> int:
    """One HTTP/1.1 request on a fresh connection; body bytes go to `on_data` as they arrive."""
    connection = h11.Connection(h11.CLIENT)
    request_headers = [
        ("host", f"{host}:{port}"),
        ("connection", "close"),
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        *headers,
    ]
    async with await trio.open_tcp_stream(host, port) as stream:
        outgoing = connection.send(
            h11.Request(method=method, target=target, headers=request_headers)
        )
        outgoing += connection.send(h11.Data(data=body)) or b""
        outgoing += connection.send(h11.EndOfMessage()) or b""
        await stream.send_all(outgoing or b"")
        status = 0
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                on_data(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return status


def main_demo(options: DemoOptions) -> int:
    return trio.run(run_demo, options)
