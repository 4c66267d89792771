"""I/O. The clients of the disconnect storm (bench/hostile/disconnect_storm.py): every way a client can
leave a streaming generation, each opening its streams, waiting until every one of them has
received its first body bytes, then waiting for a shared `go` and leaving all at once.

- HTTP/1.1, one stream per connection: close with FIN, or with RST (SO_LINGER 0).
- h2c: many streams on one connection: RST_STREAM(CANCEL) each (then a clean close), or drop
  the connection with its streams open (TCP RST), either once every stream streams or as soon
  as half of them do (the others' response heads are still going out: the window where
  hypercorn once lost `http.disconnect`s, docs/architecture.md §3.1).
- WebSocket (`/v1/ws`, our multiplexed protocol): a `cancel` frame per stream (then a close
  frame), or a close frame with every stream still open.
- Rapid reset (h2c): HEADERS + DATA immediately followed by RST_STREAM, as fast as the
  connection takes them, for a bounded time; a new connection when the server ends one.

Every socket is on loopback and closed by the code that opened it.
"""

from __future__ import annotations

import enum
import json
import socket
import struct
from typing import Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import trio
import trio_websocket

LOOPBACK: Final = "127.0.0.1"
READ_BYTES: Final = 64 * 1024


class Arrivals:
    """Counts streams that received their first bytes; `all_in` is set when `expected` did."""

    def __init__(self, expected: int, total: Arrivals | None = None) -> None:
        self.expected = expected
        self.count = 0
        self.all_in = trio.Event()
        self._total = total  # also counted there (one kind of client within a round)
        if expected == 0:
            self.all_in.set()

    def arrived(self) -> None:
        self.count += 1
        if self.count >= self.expected:
            self.all_in.set()
        if self._total is not None:
            self._total.arrived()


class Leave(enum.Enum):
    """How a client leaves its streams."""

    HTTP1_FIN = "http1-fin"
    HTTP1_RST = "http1-rst"
    H2_RST_STREAM = "h2-rst-stream"
    H2_DROP = "h2-drop"
    H2_DROP_STARTING = "h2-drop-starting"  # dropped while half its streams are still starting
    WS_CANCEL = "ws-cancel"
    WS_CLOSE = "ws-close"


def generation_body(max_tokens: int) -> bytes:
    """A streaming completion that would run for `max_tokens` engine steps if not aborted."""
    return json.dumps(
        {
            "prompt": "Tell me about the gateway.",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()


def abortive_close(sock: trio.socket.SocketType) -> None:
    """Close with RST instead of FIN: SO_LINGER on with a zero timeout."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def http1_stream(port: int, body: bytes, ready: Arrivals, go: trio.Event, rst: bool) -> None:
    sock = trio.socket.socket()
    try:
        await sock.connect((LOOPBACK, port))
        head = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {LOOPBACK}:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        await sock.send(head + body)
        received = b""
        while b"data: " not in received:
            data = await sock.recv(READ_BYTES)
            if not data:
                raise ConnectionError("the gateway closed before the first event")
            received += data
        ready.arrived()
        await go.wait()
    finally:
        if rst:
            abortive_close(sock)
        else:
            sock.close()


async def h2_streams(
    port: int,
    body: bytes,
    streams: int,
    ready: Arrivals,
    go: trio.Event,
    drop: bool,
    starting: bool = False,
    added: trio.Event | None = None,
) -> None:
    """`streams` streams on one h2c connection, left by RST_STREAM each or by dropping it;
    `starting`: dropped as soon as half of them got their first bytes and `added` is set (the
    engine has every request of the round), without waiting for `go` (the others' responses
    are still starting: their first output is up to an engine step away)."""
    sock = trio.socket.socket()
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    try:
        await sock.connect((LOOPBACK, port))
        stream = trio.SocketStream(sock)
        connection.initiate_connection()
        connection.increment_flow_control_window(2**24)
        ids = []
        for _ in range(streams):
            stream_id = connection.get_next_available_stream_id()
            connection.send_headers(stream_id, _h2_headers(port, len(body)))
            connection.send_data(stream_id, body, end_stream=True)
            ids.append(stream_id)
        await stream.send_all(connection.data_to_send())
        waiting = set(ids)
        while waiting:
            data = await stream.receive_some(READ_BYTES)
            if not data:
                raise ConnectionError("the gateway closed the h2 connection")
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    connection.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
                    if event.stream_id in waiting:
                        waiting.discard(event.stream_id)
                        ready.arrived()
                        if starting and len(waiting) <= streams // 2:
                            for _ in waiting:
                                ready.arrived()
                            if added is not None:
                                await added.wait()
                            return
                elif isinstance(event, h2.events.StreamReset | h2.events.StreamEnded):
                    raise ConnectionError(f"stream {event.stream_id} ended early")
            await stream.send_all(connection.data_to_send())
        await go.wait()
        if not drop:
            for stream_id in ids:
                connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            connection.close_connection()
            await stream.send_all(connection.data_to_send())
    finally:
        if drop:
            abortive_close(sock)
        else:
            sock.close()


def _h2_headers(port: int, length: int) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", f"{LOOPBACK}:{port}".encode()),
        (b":path", b"/v1/completions"),
        (b"content-type", b"application/json"),
        (b"content-length", str(length).encode()),
    ]


async def ws_streams(
    port: int, body: bytes, streams: int, ready: Arrivals, go: trio.Event, cancel: bool
) -> None:
    """`streams` requests on one WebSocket, left by a cancel frame each or by closing it."""
    raw = json.loads(body)
    async with trio_websocket.open_websocket(LOOPBACK, port, "/v1/ws", use_ssl=False) as ws:
        for index in range(streams):
            request = {"type": "request", "id": index, "path": "/v1/completions", "body": raw}
            await ws.send_message(json.dumps(request))
        waiting = set(range(streams))
        while waiting:
            frame = json.loads(await ws.get_message())
            if frame.get("id") in waiting:
                if frame.get("type") != "chunk":
                    raise ConnectionError(f"stream {frame.get('id')} ended early: {frame}")
                waiting.discard(frame["id"])
                ready.arrived()
        await go.wait()
        if cancel:
            for index in range(streams):
                await ws.send_message(json.dumps({"type": "cancel", "id": index}))


async def rapid_reset(port: int, body: bytes, until: float) -> int:
    """HEADERS + DATA then RST_STREAM at once, over and over until trio time `until`; a new
    connection whenever the server ends one. Returns how many streams were reset."""
    resets = 0
    while trio.current_time() < until:
        sock = trio.socket.socket()
        try:
            await sock.connect((LOOPBACK, port))
            stream = trio.SocketStream(sock)
            connection = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding=None)
            )
            connection.initiate_connection()
            await stream.send_all(connection.data_to_send())
            peer = _Peer(stream, connection)
            with trio.move_on_at(until):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(peer.drain, nursery.cancel_scope)
                    while True:
                        while connection.outbound_flow_control_window < len(body):
                            await peer.window_opened.wait()  # the reader applies WINDOW_UPDATEs
                        stream_id = connection.get_next_available_stream_id()
                        connection.send_headers(stream_id, _h2_headers(port, len(body)))
                        connection.send_data(stream_id, body, end_stream=True)
                        connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                        async with peer.lock:
                            await stream.send_all(connection.data_to_send())
                        resets += 1
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except* h2.exceptions.ProtocolError:
            pass  # the server said GOAWAY (or ended the connection): open another one
        finally:
            sock.close()
    return resets


class _Peer:
    """The server side of one rapid-reset connection: what it sent is read (PINGs and SETTINGS
    answered, WINDOW_UPDATEs applied) until it ends the connection."""

    def __init__(self, stream: trio.SocketStream, connection: h2.connection.H2Connection) -> None:
        self.stream = stream
        self.connection = connection
        self.lock = trio.Lock()
        self.window_opened = trio.Event()

    async def drain(self, scope: trio.CancelScope) -> None:
        try:
            while True:
                data = await self.stream.receive_some(READ_BYTES)
                if not data:
                    break
                events = self.connection.receive_data(data)
                async with self.lock:
                    await self.stream.send_all(self.connection.data_to_send())
                if any(isinstance(event, h2.events.WindowUpdated) for event in events):
                    self.window_opened.set()
                    self.window_opened = trio.Event()
                if any(isinstance(event, h2.events.ConnectionTerminated) for event in events):
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError, h2.exceptions.ProtocolError):
            pass
        scope.cancel()
