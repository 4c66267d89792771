"""I/O. The first token's floor: the least a Python gateway on our pieces must do per request.

    python -m bench ttft_floor --server hypercorn|sansio|raw|raw-untokenized --port P --handshake H

A relay with no gateway logic, for `python -m bench ttft_paired --floor` to time beside
`smg-trio serve` and smg: it binds the vLLM EngineCore handshake at `127.0.0.1:H` (our ZMQ
backend, as `serve` does), and answers `POST /v1/completions` by doing only what no gateway
can skip:

1. read the body and decode its `prompt`, `max_tokens` and `ignore_eos` (msgspec);
2. tokenize the prompt (the model's HF tokenizer, as `serve`) and finalize a greedy plan for
   the vLLM ZMQ wire (`smg_trio.core.finalize`, the ADD's fields);
3. send it with `ZmqBackend.open_stream` and write one constant SSE chunk (`" w"`) per engine
   output that carries tokens, then a constant final chunk and `data: [DONE]`.

No chat template, no validation beyond msgspec's, no detokenizing, stop scanning, rendering,
routing policy, metrics or logging. The HTTP side (`--server`):

- `hypercorn`: an ASGI app on hypercorn and trio (HTTP/1.1 and h2c), as `serve` is served;
- `sansio`: h11 for HTTP/1.1 and h2 for prior-knowledge h2c, on trio sockets with no server
  library (`bench.floors.floor_connections`): the sans-IO cores under hypercorn's;
- `raw`: HTTP/1.1 written by hand (keep-alive, content-length bodies only): no HTTP library;
- `raw-untokenized`: `raw` that sends the same ids for every request, 128 one-token words
  tokenized once at start (as long as `ttft_paired`'s prompts): the tokenizer's share, by
  difference.

So, in one `ttft_paired` run: smg-trio minus `floor hypercorn` is our request pipeline beyond
the minimum, `floor hypercorn` minus `floor sansio` is hypercorn's layers, `floor sansio` minus
`floor raw` (over HTTP/1.1) is h11's, `floor raw` minus `floor raw-untokenized` is the
tokenizer's call, and `floor raw-untokenized` against smg (whose path includes its tokenizer)
is what trio and pyzmq with a few lines of Python cost against compiled Rust.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
from collections.abc import Sequence
from typing import Final

import hypercorn.config
import hypercorn.trio
import msgspec
import trio

from bench.floors.floor_connections import ChunkWrite, serve_h11_or_h2, serve_raw
from bench.floors.http_floor import ChunkShapes, Receive, Scope, Send, request_body
from bench.load.workload import prompt_words
from harness.ports import LOOPBACK
from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.model.folder import ModelDir, demo_model_path, load_model_dir
from smg_trio.neutral.events import TokenDelta
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams

READY_S: Final = 60.0
FIXED_WORDS: Final = 128
SERVERS: Final = ("hypercorn", "sansio", "raw", "raw-untokenized")


class _Completion(msgspec.Struct):
    prompt: str
    max_tokens: int = 16
    ignore_eos: bool = False


class FloorRelay:
    """Body in, engine request out, one constant chunk per output back."""

    def __init__(self, backend: ZmqBackend, model: ModelDir, *, tokenize: bool = True) -> None:
        self._backend = backend
        self._model = model
        self._fixed_ids: tuple[int, ...] | None = None
        if not tokenize:  # as many one-token words as the bench's prompts, tokenized once
            words = prompt_words(model.tokenizer, model.tokenizer.vocab_size)[:FIXED_WORDS]
            ids = model.tokenizer.encode("".join(words), add_special_tokens=True)
            self._fixed_ids = tuple(ids)
        self._target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
        self._serials = itertools.count()
        self._decode = msgspec.json.Decoder(_Completion).decode

    @property
    def model_name(self) -> str:
        return self._model.served_name

    def models_body(self) -> bytes:
        listed = {"object": "list", "data": [{"id": self.model_name, "object": "model"}]}
        return msgspec.json.encode(listed)

    def finalized(self, body: bytes, serial: int) -> Finalized:
        request = self._decode(body)
        plan = GeneratePlan(
            request_id=f"floor-{serial}",
            endpoint=Endpoint.COMPLETION,
            model=self._model.served_name,
            prompt_ids=self._prompt_ids(request.prompt),
            sampling=SamplingParams(
                temperature=0.0, max_tokens=request.max_tokens, ignore_eos=request.ignore_eos
            ),
            stream=True,
            stop_spec=StopSpec(),
        )
        return finalize(plan, self._target, self._model.tokenizer)

    def _prompt_ids(self, prompt: str) -> tuple[int, ...]:
        """The prompt's ids; untokenized, the same fixed ids every time."""
        if self._fixed_ids is not None:
            return self._fixed_ids
        return tuple(self._model.tokenizer.encode(prompt, add_special_tokens=True))

    async def relay(self, body: bytes, write: ChunkWrite) -> None:
        """`write` takes each chunk's bytes and whether it is the last (the caller frames it)."""
        serial = next(self._serials)
        shapes = ChunkShapes(serial)
        tokens = 0
        async with self._backend.open_stream(self.finalized(body, serial)) as events:
            async for event in events:
                if isinstance(event, TokenDelta) and event.token_ids:
                    tokens += len(event.token_ids)
                    await write(shapes.token, False)
        await write(shapes.end(tokens), True)


class FloorApp:
    """The relay as the ASGI app hypercorn serves."""

    def __init__(self, relay: FloorRelay) -> None:
        self._relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await request_body(scope, receive, send)
        if body is None:
            return
        if scope["path"] == "/v1/models":
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": self._relay.models_body()})
            return
        headers = [(b"content-type", b"text/event-stream")]
        started = False

        async def write(data: bytes, last: bool) -> None:
            nonlocal started
            if not started:
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                started = True
            await send({"type": "http.response.body", "body": data, "more_body": not last})

        await self._relay.relay(body, write)


async def serve(server: str, port: int, handshake: int) -> None:
    model = load_model_dir(demo_model_path())
    async with open_zmq_backend(
        runtime=Runtime.VLLM,
        handshake_address=f"tcp://{LOOPBACK}:{handshake}",
        vocab_size=model.tokenizer.vocab_size,
    ) as backend:
        with trio.fail_after(READY_S):
            await backend.wait_ready()
        relay = FloorRelay(backend, model, tokenize=server != "raw-untokenized")
        if server == "hypercorn":
            config = hypercorn.config.Config()
            config.bind = [f"{LOOPBACK}:{port}"]
            config.accesslog = None
            await hypercorn.trio.serve(FloorApp(relay), config)  # type: ignore[arg-type]
            return

        async def handle(stream: trio.SocketStream) -> None:
            # The client left, or sent what this instrument does not read: drop the connection.
            async with stream:
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, ValueError
                ):
                    serve_connection = serve_h11_or_h2 if server == "sansio" else serve_raw
                    await serve_connection(stream, relay)

        await trio.serve_tcp(handle, port, host=LOOPBACK)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ttft_floor", description=__doc__)
    parser.add_argument("--server", choices=SERVERS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--handshake", type=int, required=True)
    args = parser.parse_args(argv)
    # As `serve`: HF tokenizers encodes on the calling thread (docs/performance.md §3).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve, args.server, args.port, args.handshake)
    return 0
