"""I/O. `bench.floors.ttft_floor`'s connections without hypercorn: hand-written HTTP/1.1, or h11 and
h2 (prior-knowledge h2c) on trio sockets, a task per connection and one per h2 request.

Measuring instruments, not servers for clients: no timeouts, limits or error answers, and h2
sends without checking the flow-control window (the bench's responses are far below the
65,535-byte default).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import h2.config
import h2.connection
import h2.events
import h11
import trio

from bench.floors.http_floor import RawConnection, Ticker, whole_response

READ_BYTES: Final = 65536
SSE_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
ChunkWrite = Callable[[bytes, bool], Awaitable[None]]  # (chunk, last)


class Relay(Protocol):
    def models_body(self) -> bytes: ...

    async def relay(self, body: bytes, write: ChunkWrite) -> None: ...


class RawSseResponse:
    """One chunked SSE response over HTTP/1.1: the head leaves with the first chunk."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._head = SSE_HEAD

    async def write(self, data: bytes, last: bool) -> None:
        framed = b"%s%x\r\n%s\r\n" % (self._head, len(data), data)
        self._head = b""
        await self._stream.send_all(framed + b"0\r\n\r\n" if last else framed)


async def serve_raw(stream: trio.SocketStream, relay: Relay) -> None:
    """HTTP/1.1 by hand (`bench.floors.http_floor`'s reader)."""
    connection = RawConnection(stream, Ticker(0.0))
    while (request := await connection.read_request()) is not None:
        head, body = request
        if head.startswith(b"GET /v1/models "):
            await stream.send_all(whole_response(relay.models_body()))
            continue
        await relay.relay(body, RawSseResponse(stream).write)


class H11Response:
    """One response framed by h11: the head leaves with the first chunk."""

    def __init__(self, stream: trio.SocketStream, connection: h11.Connection) -> None:
        self._stream = stream
        self._connection = connection
        self._started = False

    async def write(self, data: bytes, last: bool) -> None:
        framed = b""
        if not self._started:
            headers = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]
            framed = self._connection.send(h11.Response(status_code=200, headers=headers)) or b""
            self._started = True
        framed += self._connection.send(h11.Data(data=data)) or b""
        if last:
            framed += self._connection.send(h11.EndOfMessage()) or b""
        await self._stream.send_all(framed)


async def serve_h11_or_h2(stream: trio.SocketStream, relay: Relay) -> None:
    """h2c with prior knowledge (the connection preface first), else HTTP/1.1."""
    first = await stream.receive_some(READ_BYTES)
    if first.startswith(b"PRI * HTTP/2.0"):
        await H2Floor(stream, relay).serve(first)
    elif first:
        await serve_h11(stream, relay, first)


async def serve_h11(stream: trio.SocketStream, relay: Relay, first: bytes) -> None:
    """HTTP/1.1 parsed and framed by h11 (the sans-IO core under hypercorn's)."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(first)
    while True:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(READ_BYTES))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return  # closed, or a PAUSED this instrument never causes
        assert request is not None
        if request.target == b"/v1/models":
            models = relay.models_body()
            headers = [("content-type", "application/json"), ("content-length", str(len(models)))]
            framed = connection.send(h11.Response(status_code=200, headers=headers)) or b""
            framed += connection.send(h11.Data(data=models)) or b""
            await stream.send_all(framed + (connection.send(h11.EndOfMessage()) or b""))
        else:
            await relay.relay(bytes(body), H11Response(stream, connection).write)
        connection.start_next_cycle()


class H2Floor:
    """One h2c connection: the h2 state machine fed by one reader, a task per request."""

    def __init__(self, stream: trio.SocketStream, relay: Relay) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self._connection = h2.connection.H2Connection(config=config)
        self._stream = stream
        self._relay = relay
        self._send_lock = trio.Lock()
        self._paths: dict[int, bytes] = {}
        self._bodies: dict[int, bytearray] = {}

    async def serve(self, first: bytes) -> None:
        self._connection.initiate_connection()
        data = first
        async with trio.open_nursery() as nursery:
            while data:
                for event in self._connection.receive_data(data):
                    self._on_event(event, nursery)
                await self._flush()
                data = await self._stream.receive_some(READ_BYTES)
            nursery.cancel_scope.cancel()

    def _on_event(self, event: h2.events.Event, nursery: trio.Nursery) -> None:
        if isinstance(event, h2.events.RequestReceived) and event.stream_id is not None:
            headers = dict(event.headers or ())
            self._paths[event.stream_id] = bytes(headers.get(b":path", b""))
            self._bodies[event.stream_id] = bytearray()
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            self._bodies[event.stream_id] += event.data or b""
            length = event.flow_controlled_length or 0
            self._connection.acknowledge_received_data(length, event.stream_id)
        if isinstance(event, h2.events.StreamEnded) and event.stream_id is not None:
            nursery.start_soon(self._respond, event.stream_id)

    async def _respond(self, stream_id: int) -> None:
        path, body = self._paths.pop(stream_id), bytes(self._bodies.pop(stream_id))
        if path == b"/v1/models":
            head = [(b":status", b"200"), (b"content-type", b"application/json")]
            self._connection.send_headers(stream_id, head)
            self._connection.send_data(stream_id, self._relay.models_body(), end_stream=True)
            await self._flush()
            return
        started = False

        async def write(data: bytes, last: bool) -> None:
            nonlocal started
            if not started:
                head = [(b":status", b"200"), (b"content-type", b"text/event-stream")]
                self._connection.send_headers(stream_id, head)
                started = True
            self._connection.send_data(stream_id, data, end_stream=last)
            await self._flush()

        await self._relay.relay(body, write)

    async def _flush(self) -> None:
        async with self._send_lock:
            if data := self._connection.data_to_send():
                await self._stream.send_all(data)
