"""A real gateway for WebSocket tests: the reference vLLM EngineCore as a subprocess (replay mode)
on the real ZMQ wire, a Gateway over our ZMQ backend, and the production HTTP server
(`frontends/http/server.serve_http`: our accept loop over hypercorn's protocols) on a loopback
port serving `/v1/ws` with `handle_websocket` (a minimal ASGI app, independent of serving/serve.py)."""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope

from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.core.finalize import WorkerTarget
from smg_trio.engines.launch import EngineCommand
from smg_trio.frontends.answers import answer_lifespan
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.frontends.http.server import serve_http
from smg_trio.frontends.websocket import handle_websocket
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.request.gateway import Gateway
from smg_trio.routing.workers import RoundRobin, Worker, WorkerPool

REPLAY_TEXT: Final = "Tokens stream from the engine to you. STOP This part is never shown. "
ENGINE_READY_S: Final = 30.0
STEP_MS: Final = 2.0


@dataclass(frozen=True)
class RunningGateway:
    url: str
    gateway: Gateway
    backend: ZmqBackend

    async def counters(self) -> Mapping[str, int]:
        result: Mapping[str, int] = await self.backend.call_utility("smg_trio_counters")
        return result


def websocket_app(gateway: Gateway) -> ASGIFramework:
    """An ASGI app: `/v1/ws` is ours, lifespan is acknowledged, anything else is a 404."""

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)  # type: ignore[arg-type]  # hypercorn's TypedDicts
        elif scope["type"] == "websocket" and scope["path"] == "/v1/ws":
            await handle_websocket(gateway, scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "not found"})
        elif scope["type"] == "http":
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [(b"content-length", b"0")],
                    "trailers": False,
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


@asynccontextmanager
async def running_gateway(
    tmp_path: Path, *, step_ms: float = STEP_MS
) -> AsyncIterator[RunningGateway]:
    model = load_model_dir(demo_model_path())
    replay = tmp_path / "replay.txt"
    replay.write_text(REPLAY_TEXT, encoding="utf-8")
    log_path = tmp_path / "engine.log"
    with log_path.open("wb") as log:
        async with open_zmq_backend(
            runtime=Runtime.VLLM, vocab_size=model.tokenizer.vocab_size
        ) as backend:
            command = EngineCommand(
                "vllm-zmq",
                handshake=f"tcp://127.0.0.1:{backend.handshake_port}",
                step_ms=step_ms,
                replay_file=replay,
            ).argv()
            process = await trio.lowlevel.open_process(command, stdout=log, stderr=log)
            try:
                with trio.fail_after(ENGINE_READY_S):
                    await backend.wait_ready()
                target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
                worker = Worker("vllm+zmq://test", target, backend)
                pool = WorkerPool([worker], RoundRobin())
                gateway = Gateway(model, pool, request_timeout_s=60.0)
                config = Config()
                config.bind = ["127.0.0.1:0"]
                config.accesslog = None
                config.errorlog = None
                async with trio.open_nursery() as nursery:
                    binds: list[str] = await nursery.start(
                        functools.partial(
                            serve_http,
                            ASGIWrapper(websocket_app(gateway)),
                            config,
                            HttpLimits(),
                        )
                    )
                    port = binds[0].rsplit(":", 1)[1]
                    yield RunningGateway(f"ws://127.0.0.1:{port}/v1/ws", gateway, backend)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    process.kill()
                    await process.wait()
                if sys.exc_info()[0] is not None:
                    sys.stderr.write(log_path.read_text(errors="replace"))
