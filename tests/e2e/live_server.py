"""A real gateway for end-to-end tests: `serve()` on a loopback port picked by the kernel, with
one `vllm+zmq` worker whose handshake port is picked too, and the reference vLLM EngineCore as
a subprocess dialling it (replay mode, so every answer's text is known in advance)."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import msgspec
import trio
import trio_websocket
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionFunctionToolParam

from harness.served_gateway import served_gateway, zmq_gateway_config
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime
from smg_trio.serving.serve import Serving

SHUTDOWN_S: Final = 5.0
API_KEY: Final = "sk-test-key"
STOP: Final = "STOP"
REPLAY_HEAD: Final = (
    "Tokens stream from the engine, through the stop scanner, to you. Everything after the word "
)
# The tail is long so an engine that is not aborted keeps generating for a while (and cycles).
REPLAY_TEXT: Final = REPLAY_HEAD + STOP + " is never shown." + " Filler words follow." * 30
MODEL: Final = "demo_model"
ZMQ_ENGINES: Final = {Runtime.VLLM: "vllm-zmq", Runtime.TOKENSPEED: "tokenspeed-zmq"}


@dataclass
class LiveServer:
    serving: Serving
    processes: list[trio.Process]  # one reference engine per worker
    scheme: str
    api_key: str | None
    step_ms: float
    stop: trio.Event  # set: the server drains and shuts down, as on SIGTERM (engines stay up)

    @property
    def port(self) -> int:
        return self.serving.port

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def backend(self) -> ZmqBackend:
        return self.backend_of(0)

    def backend_of(self, worker: int) -> ZmqBackend:
        backend = self.serving.gateway.pool.workers[worker].backend
        assert isinstance(backend, ZmqBackend)
        return backend

    @property
    def auth(self) -> dict[str, str]:
        return {} if self.api_key is None else {"authorization": f"Bearer {self.api_key}"}

    async def counters(self) -> Mapping[str, int]:
        result: Mapping[str, int] = await self.backend.call_utility("smg_trio_counters")
        return result

    async def seconds_until_idle(self, limit_s: float = 2.0) -> float:
        """How long (polling the engine) until it has no active or waiting request."""
        start = trio.current_time()
        with trio.fail_after(limit_s):
            while True:
                counters = await self.counters()
                if counters["requests_active"] == 0 and counters["requests_waiting"] == 0:
                    return trio.current_time() - start

    async def stop_engine(self, how: signal.Signals) -> None:
        process = self.processes[0]
        process.send_signal(how)
        with trio.fail_after(SHUTDOWN_S):
            await process.wait()


def chat_body(*, stream: object = True, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "How does the gateway work?"}],
        "stream": stream,
    }
    body.update(extra)
    return body


@asynccontextmanager
async def live_server(
    tmp_path: Path,
    *,
    step_ms: float = 2.0,
    api_key: str | None = API_KEY,
    request_timeout_s: float = 30.0,
    max_body_bytes: int = 64 * 1024,
    tls: tuple[Path, Path] | None = None,
    with_engine: bool = True,
    replay_text: str = REPLAY_TEXT,
    workers: int = 1,
    engine_args: Sequence[str] = (),
    served_model_names: tuple[str, ...] = (),
    runtime: Runtime = Runtime.VLLM,
    resilience: Mapping[str, float] | None = None,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    http_limits: Mapping[str, float] = {},
    metrics_port: int | None = None,
    probe_port: int | None = None,
    response_store: str | None = None,
    model_path: Path | None = None,
    stream_interval: int = 1,
    random_engines: bool = False,
    api_keys: Path | None = None,
    state_url: str | None = None,
    config_fields: Mapping[str, Any] | None = None,
) -> AsyncIterator[LiveServer]:
    """`runtime`: the ZMQ engine behind every worker, vLLM's EngineCore or TokenSpeed.
    `resilience`: GatewayConfig's engine_silence_s, drain_timeout_s, keepalive_s;
    `http_limits`: GatewayConfig's HTTP server fields (`idle_timeout_s`, `max_connections`...);
    `response_store`: /v1/responses' store URL (default: a SQLite file in `tmp_path`);
    `model_path`: a model folder instead of the demo model, for the gateway and its engines;
    `random_engines`: the engines in random mode (each token drawn from its whole context)
    instead of replaying `replay_text`; `api_keys`: an `--api-keys` file (tenants), `api_key`
    then being one of its keys, the one `LiveServer.auth` sends; `state_url`: the tenants'
    shared state (`--state-url redis://...`); `config_fields`: any other GatewayConfig fields
    (e.g. the image flags)."""
    config = zmq_gateway_config(
        workers,
        runtime,
        api_key=None if api_keys is not None else api_key,
        api_keys=api_keys,
        state_url=state_url,
        request_timeout_s=request_timeout_s,
        max_body_bytes=max_body_bytes,
        certfile=None if tls is None else tls[0],
        keyfile=None if tls is None else tls[1],
        served_model_names=served_model_names,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        **http_limits,
        metrics_port=metrics_port,
        probe_port=probe_port,
        # Never the user's data dir: a file of the test's own unless the test names one.
        response_store=response_store or f"sqlite:///{tmp_path / 'responses.sqlite3'}",
    )
    config = msgspec.structs.replace(config, stream_interval=stream_interval, **(resilience or {}))
    config = msgspec.structs.replace(config, **(config_fields or {}))
    if model_path is not None:  # the gateway and its engines serve another model folder
        config = msgspec.structs.replace(config, model_path=model_path)
        engine_args = ("--model-path", str(model_path), *engine_args)
    replay = None if random_engines else write_replay(tmp_path, replay_text)
    with engine_log(tmp_path / "engine.log") as log:
        async with served_gateway(config, log) as served:
            if with_engine:
                for address in served.serving.worker_addresses:
                    await served.start_engine(
                        [
                            *engine_command(address, replay, step_ms, ZMQ_ENGINES[runtime]),
                            *engine_args,
                        ]
                    )
                await served.wait_ready(served.serving.gateway.pool.workers)
            scheme = "http" if tls is None else "https"
            yield LiveServer(
                served.serving, served.processes, scheme, api_key, step_ms, served.stop
            )


def demo_model_with_template(folder: Path, chat_template: str) -> Path:
    """A copy of the demo model folder at `folder` whose chat template is `chat_template` (for
    `live_server(model_path=...)`: the demo template refuses tool turns)."""
    shutil.copytree(demo_model_path(), folder)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = chat_template
    config_file.write_text(json.dumps(config))
    return folder


async def websocket_request(
    server: LiveServer, path: str, body: dict[str, Any]
) -> list[dict[str, Any]]:
    """One request over our WebSocket protocol: its frames up to and including the first that
    is not a chunk (the done, response or error frame)."""
    headers = [(name.encode(), value.encode()) for name, value in server.auth.items()]
    frames: list[dict[str, Any]] = []
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{server.port}/v1/ws", extra_headers=headers
    ) as connection:
        await connection.send_message(
            json.dumps({"type": "request", "id": 1, "path": path, "body": body})
        )
        while True:
            frames.append(json.loads(await connection.get_message()))
            if frames[-1]["type"] != "chunk":
                return frames


async def websocket_chat_both_ways(
    server: LiveServer, body: dict[str, Any], tools: list[ChatCompletionFunctionToolParam]
) -> tuple[dict[str, Any], ChatCompletion, ChatCompletion]:
    """`body` over our WebSocket protocol streamed and whole: the stream's done frame, the
    completion the openai SDK's accumulator rebuilds from its chunks, and the whole body's."""
    streamed = await websocket_request(server, "/v1/chat/completions", {**body, "stream": True})
    whole = await websocket_request(server, "/v1/chat/completions", {**body, "stream": False})
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=tools)
    for frame in streamed[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(frame["data"]))
    answer = next(f for f in whole if f["type"] != "chunk")
    completion = ChatCompletion.model_validate(answer.get("data", answer.get("body")))
    return streamed[-1], state.get_final_completion(), completion


def write_replay(tmp_path: Path, text: str) -> Path:
    """The replay file the reference engines read their answers from."""
    replay = tmp_path / "replay.txt"
    replay.write_text(text, encoding="utf-8")
    return replay


@contextmanager
def engine_log(path: Path) -> Iterator[BinaryIO]:
    """The engines' output file; a failing test prints it to stderr (their only trace)."""
    with path.open("wb") as log:
        try:
            yield log
        except BaseException:
            sys.stderr.write(path.read_text(errors="replace"))
            raise


def engine_command(
    handshake_address: str, replay: Path | None, step_ms: float, engine: str = "vllm-zmq"
) -> list[str]:
    """The reference engine's command line: replaying `replay`, or in random mode without one."""
    mode = Mode.RANDOM if replay is None else None
    return EngineCommand(
        engine, handshake=handshake_address, replay_file=replay, step_ms=step_ms, mode=mode
    ).argv()


SseEvent = dict[str, object] | str


def parse_sse(raw: bytes) -> list[SseEvent]:
    """The events of an SSE body: decoded JSON objects, or the literal "[DONE]"."""
    events: list[SseEvent] = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block.removeprefix("data: ")
        events.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
    return events


@dataclass(frozen=True)
class ChatOutcome:
    texts: dict[int, str]
    finishes: dict[int, object]
    matched: dict[int, object]
    usage: object


def chat_outcome(events: list[SseEvent]) -> ChatOutcome:
    """Text, finish_reason and matched_stop per choice, and the usage, of a chat stream."""
    assert events[-1] == "[DONE]"
    texts: dict[int, str] = {}
    finishes: dict[int, object] = {}
    matched: dict[int, object] = {}
    usage: object = None
    for event in events[:-1]:
        assert isinstance(event, dict), event
        assert "error" not in event, event
        usage = event.get("usage") or usage
        for choice in event["choices"]:  # type: ignore[attr-defined]
            index = choice["index"]
            texts[index] = texts.get(index, "") + (choice["delta"].get("content") or "")
            if choice.get("finish_reason") is not None:
                finishes[index] = choice["finish_reason"]
                matched[index] = choice.get("matched_stop")
    return ChatOutcome(texts, finishes, matched, usage)


def openai_client(server: LiveServer) -> OpenAI:
    """The `openai` SDK pointed at `server`, without retries. Tests run this sync client in a
    worker thread: AsyncOpenAI leaves its async generators unexhausted after `[DONE]`, which
    trio reports as a ResourceWarning (an error here)."""
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=20)
