"""I/O. The HTTP layer's floor: servers that stream completion-shaped SSE chunks with no gateway
behind them, so a load run shows what the HTTP server and the event loop cost by themselves.

    python -m bench http_floor --server hypercorn --port 18655 --step-ms 20
    python -m bench http_floor --server raw --port 18656 --step-ms 20

Both answer `GET /v1/models` and stream `POST /v1/completions` like a gateway would: one chunk
of one token (" w") per engine step, then a usage chunk and `data: [DONE]`. One ticker task
wakes every open stream at once each step, as one engine message wakes every stream of a
gateway (step 0: a chunk per scheduler pass). Nothing is tokenized, detokenized or decoded
beyond reading `max_tokens`: what the servers cost per chunk is the floor under any gateway
built on the same pieces.

- `hypercorn`: an ASGI app served by hypercorn on trio, configured as `smg-trio serve` is
  (HTTP/1.1 and h2c);
- `raw`: HTTP/1.1 written by hand on trio sockets (keep-alive, content-length bodies, chunked
  responses): trio's own cost with no HTTP library at all. It is a measuring instrument, not a
  server for clients: no pipelining, no chunked request bodies, no HTTP/2.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

import hypercorn.config
import hypercorn.trio
import msgspec
import trio

from harness.ports import LOOPBACK

MODEL: Final = "floor"
MODELS_BODY: Final = (
    b'{"object":"list","data":[{"id":"floor","object":"model","owned_by":"bench"}]}'
)
READ_BYTES: Final = 65536
MAX_HEAD_BYTES: Final = 65536

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Request(msgspec.Struct):
    max_tokens: int = 16


class Ticker:
    """Wakes every waiting stream at once, every `step_s` (0: at the next scheduler pass)."""

    def __init__(self, step_s: float) -> None:
        self._step_s = step_s
        self._event = trio.Event()

    async def run(self) -> None:
        if self._step_s <= 0:
            return
        while True:
            await trio.sleep(self._step_s)
            event, self._event = self._event, trio.Event()
            event.set()

    async def wait(self) -> None:
        if self._step_s <= 0:
            await trio.lowlevel.checkpoint()
        else:
            await self._event.wait()


class ChunkShapes:
    """The SSE events of one response, shaped like an OpenAI completion stream."""

    def __init__(self, index: int) -> None:
        head = b'{"id":"cmpl-%032x","object":"text_completion","created":1764460000,' % index
        head += b'"model":"floor","choices":[{"index":0,'
        self.token = b"data: " + head + b'"text":" w","logprobs":null,"finish_reason":null}]}\n\n'
        self._head = head

    def end(self, tokens: int) -> bytes:
        usage = b'"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}' % (
            tokens,
            tokens + 1,
        )
        final = self._head + b'"text":"","logprobs":null,"finish_reason":"length"}],' + usage
        return b"data: " + final + b"}\n\ndata: [DONE]\n\n"


def requested_tokens(body: bytes) -> int:
    try:
        return max(1, msgspec.json.decode(body, type=_Request).max_tokens)
    except msgspec.DecodeError:
        return _Request().max_tokens


class FloorApp:
    """The ASGI app hypercorn serves."""

    def __init__(self, ticker: Ticker) -> None:
        self._ticker = ticker
        self._served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await request_body(scope, receive, send)
        if body is None:
            return
        if scope["path"] == "/v1/models":
            await _send_whole(send, 200, b"application/json", MODELS_BODY)
            return
        if scope["path"] != "/v1/completions":
            await _send_whole(send, 404, b"application/json", b'{"error":"not found"}')
            return
        tokens = requested_tokens(body)
        self._served += 1
        shapes = ChunkShapes(self._served)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(tokens):
            await self._ticker.wait()
            await send({"type": "http.response.body", "body": shapes.token, "more_body": True})
        await send({"type": "http.response.body", "body": shapes.end(tokens), "more_body": False})


async def request_body(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """An HTTP request's whole body; None for anything else (the lifespan protocol served)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    if scope["type"] != "http":
        return None
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


async def _send_whole(send: Send, status: int, content_type: bytes, body: bytes) -> None:
    headers = [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def serve_hypercorn(port: int, ticker: Ticker) -> None:
    config = hypercorn.config.Config()
    config.bind = [f"{LOOPBACK}:{port}"]
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await hypercorn.trio.serve(FloorApp(ticker), config)  # type: ignore[arg-type]


class RawConnection:
    """One keep-alive HTTP/1.1 connection of the `raw` server."""

    def __init__(self, stream: trio.SocketStream, ticker: Ticker) -> None:
        self._stream = stream
        self._ticker = ticker
        self._buffer = bytearray()

    async def serve(self, served: list[int]) -> None:
        while True:
            request = await self.read_request()
            if request is None:
                return
            head, body = request
            if head.startswith(b"GET /v1/models "):
                await self._stream.send_all(whole_response(MODELS_BODY))
                continue
            tokens = requested_tokens(body)
            served[0] += 1
            shapes = ChunkShapes(served[0])
            await self._stream.send_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(tokens):
                await self._ticker.wait()
                await self._stream.send_all(_chunk(shapes.token))
            await self._stream.send_all(_chunk(shapes.end(tokens)) + b"0\r\n\r\n")

    async def read_request(self) -> tuple[bytes, bytes] | None:
        """The next request's head (request line and fields) and body; None once the client
        left or sent a head this instrument does not read."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES or not await self._fill():
                return None
        head = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self._buffer) < length:
            if not await self._fill():
                return None
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return head, body

    async def _fill(self) -> bool:
        data = await self._stream.receive_some(READ_BYTES)
        self._buffer += data
        return bool(data)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def whole_response(body: bytes) -> bytes:
    """A `200` JSON response with `body`, as HTTP/1.1 bytes."""
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def serve_raw(port: int, ticker: Ticker) -> None:
    served = [0]

    async def handle(stream: trio.SocketStream) -> None:
        # The client left, or sent what this instrument does not parse: drop the connection.
        async with stream:
            with contextlib.suppress(
                trio.BrokenResourceError, trio.ClosedResourceError, ValueError
            ):
                await RawConnection(stream, ticker).serve(served)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await trio.serve_tcp(handle, port, host=LOOPBACK)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench http_floor", description=__doc__)
    parser.add_argument("--server", choices=("hypercorn", "raw"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--step-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    ticker = Ticker(args.step_ms / 1000)
    serve = serve_hypercorn if args.server == "hypercorn" else serve_raw
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve, args.port, ticker)
    return 0
