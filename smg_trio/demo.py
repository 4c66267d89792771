"""I/O. `smg-trio demo`: the whole pipeline against the embedded reference vLLM EngineCore.

It starts our ZMQ backend, launches the reference EngineCore as a child process that dials the
backend's handshake port exactly as a real `vllm serve --headless` would, then runs OpenAI
requests through prepare → finalize → the per-request nursery (backend stream, stop scanner,
client writer) and prints what a client would receive. The engine replays a fixed text so the
stop-string handling is visible; its counters show that the router-side stop aborted the engine
request. The HTTP/WebSocket front end is not part of this build yet; the demo prints SSE frames.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO

import trio

from smg_trio.backends.zmq_engine import open_zmq_engine
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.prepare import prepare_chat, prepare_completion
from smg_trio.core.runtime import Runtime, Wire
from smg_trio.errors import GatewayError
from smg_trio.model import ModelDir, load_model_dir
from smg_trio.request import SinkState, run_request
from smg_trio.wire.openai_decode import decode_chat_request, decode_completion_request

ENGINE_READY_TIMEOUT_S: Final = 30.0
REQUEST_TIMEOUT_S: Final = 30.0
ENGINE_EXIT_GRACE_S: Final = 5.0
REPLAY_TEXT: Final = (
    "Tokens stream from the engine, through the stop scanner, to you. "
    "Everything after the word STOP is generated but never shown, and the engine is told "
    "to abort at once. STOP You should not see this sentence."
)


class TerminalSink:
    """A ClientSink that prints SSE frames (or the JSON body) to a text stream."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._state = SinkState.IDLE

    @property
    def state(self) -> SinkState:
        return self._state

    async def send_chunk(self, payload: bytes) -> None:
        self._state = SinkState.STREAMING
        self._out.write(f"data: {payload.decode()}\n\n")
        await trio.lowlevel.checkpoint()

    async def send_body(self, body: bytes) -> None:
        self._state = SinkState.CLOSED
        self._out.write(json.dumps(json.loads(body), indent=2, ensure_ascii=False) + "\n")
        await trio.lowlevel.checkpoint()

    async def close_stream(self, error: GatewayError | None) -> None:
        if error is not None:
            self._out.write(f'data: {{"error": {json.dumps(error.message)}}}\n\n')
        self._out.write("data: [DONE]\n\n")
        self._state = SinkState.CLOSED
        await trio.lowlevel.checkpoint()


def demo_requests(model_name: str) -> list[tuple[str, str, dict[str, object]]]:
    """(title, path, body) for each request the demo sends."""
    return [
        (
            "Streaming chat completion with stop=['STOP'] (the stop spans tokens)",
            "/v1/chat/completions",
            {
                "model": model_name,
                "messages": [{"role": "user", "content": "Tell me how the gateway works."}],
                "stream": True,
                "stop": ["STOP"],
                "stream_options": {"include_usage": True},
            },
        ),
        (
            "Non-streaming completion, n=2, max_tokens=12 (finish_reason 'length')",
            "/v1/completions",
            {"model": model_name, "prompt": "Once upon a time", "n": 2, "max_tokens": 12},
        ),
    ]


async def run_demo(model_dir: ModelDir, *, out: TextIO = sys.stdout, step_ms: float = 2.0) -> int:
    prompt_model = model_dir.prompt_model()
    tokenizer = model_dir.tokenizer
    worker = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ)
    with tempfile.TemporaryDirectory(prefix="smgt-demo-") as tmp:
        replay = Path(tmp) / "replay.txt"
        replay.write_text(REPLAY_TEXT, encoding="utf-8")
        async with (
            open_zmq_engine(
                runtime=Runtime.VLLM, eos_ids=model_dir.eos_ids, vocab_size=tokenizer.vocab_size
            ) as backend,
            trio.open_nursery() as nursery,
        ):
            command = engine_command(
                backend.handshake_port, model_dir.path, replay=replay, step_ms=step_ms
            )
            out.write(f"$ {' '.join(command)}\n")
            process: trio.Process = await nursery.start(trio.run_process, command)
            try:
                with trio.fail_after(ENGINE_READY_TIMEOUT_S):
                    await backend.wait_ready()
                engine = backend.statistics().engines[0]
                out.write(f"engine ready: max_model_len={engine.max_model_len}\n\n")
                for title, path, body in demo_requests(prompt_model.name):
                    out.write(f"### {title}\nPOST {path} {json.dumps(body)}\n\n")
                    raw = json.dumps(body).encode()
                    request_id = uuid.uuid4().hex
                    if path == "/v1/chat/completions":
                        plan = prepare_chat(
                            decode_chat_request(raw),
                            prompt_model,
                            request_id=request_id,
                            now=dt.datetime.now(dt.UTC),
                        )
                    else:
                        plan = prepare_completion(
                            decode_completion_request(raw), prompt_model, request_id=request_id
                        )
                    finalized = finalize(plan, worker, tokenizer)
                    out.write(
                        f"(finalized for vLLM over ZMQ: engine stop_token_ids="
                        f"{list(finalized.requests[0].sampling.stop_token_ids)}, router stops="
                        f"{list(finalized.router_stops)})\n"
                    )
                    with trio.fail_after(REQUEST_TIMEOUT_S):
                        await run_request(
                            plan,
                            finalized,
                            backend,
                            tokenizer,
                            TerminalSink(out),
                            created=int(time.time()),
                        )
                    await trio.sleep(0.05)  # let the engine act on the abort before we ask
                    counters = await backend.call_utility("smg_trio_counters")
                    out.write(f"engine counters: {json.dumps(counters)}\n\n")
            finally:
                process.terminate()
                with trio.move_on_after(ENGINE_EXIT_GRACE_S) as grace:
                    grace.shield = True
                    await process.wait()
                if grace.cancelled_caught:
                    process.kill()
    out.write(
        "Try it yourself: `smg-trio engine vllm-zmq --help` runs the reference engine alone; "
        "`make test` runs the suite.\n"
    )
    return 0


def engine_command(
    handshake_port: int | None, model_path: Path, *, replay: Path, step_ms: float
) -> Sequence[str]:
    return [
        sys.executable,
        "-m",
        "smg_trio",
        "engine",
        "vllm-zmq",
        "--handshake",
        f"tcp://127.0.0.1:{handshake_port}",
        "--model-path",
        str(model_path),
        "--mode",
        "replay",
        "--replay-file",
        str(replay),
        "--step-ms",
        str(step_ms),
    ]


def main_demo(model_path: Path) -> int:
    return trio.run(run_demo, load_model_dir(model_path))
