"""I/O. One client connection under our accept loop (`frontends/http/server.py`): our worker in
place of hypercorn's TCPServer, driving hypercorn's protocols (`frontends/http/protocol_switch.py`)
with shielded bookkeeping, a header timer, a writer task per connection for an h2
connection's or a WebSocket's bytes (`frontends/http/connection_writer.py`; a plain HTTP/1.1
response is written by the task that has its bytes, its awaited writes under `send_lock`), and
the writes that go past hypercorn's ASGI layers: an HTTP/1.1 chunk, an h2 stream's DATA, a
response's head with its first chunk, and an HTTP/1.1 body's last chunk with its end
(docs/performance.md §2, §2.1, §3; docs/http.md). Everything it needs of hypercorn's internals
comes through `frontends/http/hypercorn_seam.py` and `h11_seam.py`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from functools import partial
from typing import Final

import hypercorn.config
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import parse_socket_addr

from smg_trio.frontends.http.asgi_types import DIRECT_CHUNKS_KEY, DirectChunks, Send
from smg_trio.frontends.http.client_disconnect import DisconnectTaskGroup, ReadProgress
from smg_trio.frontends.http.connection_refusal import Stream
from smg_trio.frontends.http.connection_writer import ConnectionWriter
from smg_trio.frontends.http.h2_protocol import GuardedH2Protocol, H2StreamChunks
from smg_trio.frontends.http.h11_seam import (
    h11_body_end,
    h11_in_chunked_body,
    h11_response_head,
    response_ended,
)
from smg_trio.frontends.http.hypercorn_seam import http_stream_of, write_to_kernel_now
from smg_trio.frontends.http.idle_timer import IdleTimer
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.frontends.http.protocol_switch import ProtocolSwitch
from smg_trio.handoff import Taken

MAX_RECV: Final = 2**16  # bytes asked of the socket per read (hypercorn's worker reads as much)
REST_S: Final = 300.0  # bound on writing what the kernel did not take at once (write_rest)
LINGER_S: Final = 0.5  # the most a closing socket reads (and drops) before the close
BOOKKEEPING_S: Final = 1.0
"""Bound on the shielded per-connection bookkeeping (close a socket, start a timer)."""


class HttpConnection:
    """One connection: hypercorn's protocol for it, our writes, shielded bookkeeping, and a
    header timer (HTTP/1.1: once a request head starts arriving, it must end within
    `header_timeout_s`)."""

    def __init__(
        self,
        app: AppWrapper,
        config: hypercorn.config.Config,
        context: WorkerContext,
        state: ConnectionState,
        limits: HttpLimits,
        stream: Stream,
    ) -> None:
        self.app = app
        self.config = config
        self.context = context
        self.state = state
        self.stream = stream
        self.protocol: ProtocolSwitch
        self.send_lock = trio.Lock()  # one awaited write at a time
        self._limits = limits
        self._between_requests = True
        self._timer_s = limits.idle_timeout_s
        # Every write of this connection, coalesced per scheduling round (docs/performance.md §2).
        self._writer = ConnectionWriter(stream, self._write_failed, self._write_now)
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._idle = IdleTimer()  # the keep-alive and header timer (frontends/http/idle_timer.py)
        self._read = ReadProgress()  # for rapid-reset checks (frontends/http/client_disconnect.py)
        # Cleartext HTTP/1.1 is in a chunked response body, as `write_chunk_now` found: h11's
        # state is read for a response's first direct chunk, not for every one. Only hypercorn
        # moves that state, always inside `protocol.handle` (reading) or right before an event
        # to `protocol_send` (writing, closing, recycling), so both clear this.
        self._chunking = False

    async def run(self) -> None:
        stream: Stream = self.stream
        if isinstance(stream, trio.SSLStream):
            try:
                with trio.fail_after(self.config.ssl_handshake_timeout):
                    await stream.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError):
                await self._close_stream()
                return
            alpn = stream.selected_alpn_protocol()
            sock = stream.transport_stream.socket
        else:
            alpn = "http/1.1"
            sock = stream.socket
        try:
            client = parse_socket_addr(sock.family, sock.getpeername())
            server = parse_socket_addr(sock.family, sock.getsockname())
            async with DisconnectTaskGroup(self._read) as task_group:
                task_group.spawn(self._writer.run)
                self.protocol = ProtocolSwitch(
                    (
                        self.app,
                        self.config,
                        self.context,
                        task_group,
                        # Per connection: the app finds this connection's chunk writer here.
                        ConnectionState({**self.state, DIRECT_CHUNKS_KEY: self}),
                        isinstance(stream, trio.SSLStream),
                        client,
                        server,
                        self.protocol_send,
                    ),
                    h2=alpn == "h2",
                )
                await self.protocol.initiate()
                self._idle.expire_in(self._timer_s)
                task_group.spawn(self._idle.run, self.context.terminated.wait, self._idle_close)
                await self._read_client()
        except OSError:
            pass
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + BOOKKEEPING_S):
                await self._close_stream()

    async def protocol_send(self, event: Event) -> None:
        self._chunking = False  # hypercorn moved h11's state before telling us (see __init__)
        if isinstance(event, Updated):
            self._between_requests = event.idle
            self._timer_s = self._limits.idle_timeout_s
            if event.idle:
                self._idle.expire_in(self._timer_s)
            else:
                self._idle.stop()
            return
        if isinstance(event, RawData):
            protocol = self.protocol.protocol
            if isinstance(protocol, H11Protocol) and not isinstance(protocol.stream, WSStream):
                # One response at a time, and h11 decides keep-alive from how far it read the
                # request when the response ends: a write returning before its bytes went out
                # closed connections under the client's next request. So the bytes go out here,
                # to the kernel at once, the rest by hypercorn's write (docs/performance.md §2).
                unsent = self._write_now(event.data)
                if not unsent:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    return
                await self.write_rest(unsent)
                return
            await self._writer.push(event.data)  # written shielded, with the round's others
            return
        # Closing the socket must happen even when the app that sent its last message is being
        # cancelled (docs/http.md §1).
        with trio.CancelScope(shield=True, deadline=trio.current_time() + BOOKKEEPING_S):
            if isinstance(event, Closed):
                await self._writer.drain()  # the last response goes out before the close
                await self._close_stream()
                await self._handle(Closed())

    def write_chunk_now(self, data: bytes) -> tuple[Taken, bytes]:
        """`data` as one chunk of the HTTP/1.1 body in progress, past hypercorn and h11 (whose
        chunked framing keeps no state), answered as a hand-off's `take_now`: ALL; PART with
        what the kernel did not take, for `write_rest`; REFUSED, nothing sent, unless cleartext
        HTTP/1.1 is in a chunked body with no write under way (then the caller sends through
        ASGI)."""
        if not data:  # an empty chunk would end the body
            return Taken.ALL, b""
        sock = self._socket
        if sock is None or self.send_lock.locked():
            return Taken.REFUSED, data
        if not self._chunking:  # decided once per response (`_chunking`'s comment)
            protocol = self.protocol.protocol
            if (
                not isinstance(protocol, H11Protocol)
                or isinstance(protocol.stream, WSStream)
                or not h11_in_chunked_body(protocol)
            ):
                return Taken.REFUSED, data
            self._chunking = True
        # Framed as a chunk now: what the kernel does not take is the rest, never refused.
        rest = write_to_kernel_now(sock, b"%x\r\n%b\r\n" % (len(data), data))
        return (Taken.PART, rest) if rest else (Taken.ALL, b"")

    def start_now(
        self, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]:
        """The response's `200` head and its first chunk of body `first` in one write, past
        hypercorn and ASGI, answered as `write_chunk_now` answers; REFUSED, nothing sent, unless
        cleartext HTTP/1.1 is waiting for this request's response head with no write under way.
        The seam's `h11_response_head` does hypercorn's steps for `http.response.start`, so the
        rest of the response finds the stream as hypercorn leaves it."""
        protocol = self.protocol.protocol
        if (
            not first
            or self._socket is None
            or not isinstance(protocol, H11Protocol)
            or self.send_lock.locked()
        ):
            return Taken.REFUSED, first
        head = h11_response_head(protocol, self.config, headers)
        if head is None:
            return Taken.REFUSED, first
        rest = self._write_now(head + b"%x\r\n%b\r\n" % (len(first), first))
        return (Taken.PART, rest) if rest else (Taken.ALL, b"")

    async def end_now(self, last: bytes) -> bool:
        """The response's last chunk of body `last` (none if empty) and the body's end in one
        write, past hypercorn's two h11 events and two writes; then hypercorn's own steps for a
        response's end (the access log, the connection recycled or closed). False, nothing
        done, unless cleartext HTTP/1.1 is in a chunked body with no write under way (then the
        caller ends the response through ASGI)."""
        protocol = self.protocol.protocol
        if self._socket is None or self.send_lock.locked() or not isinstance(protocol, H11Protocol):
            return False
        ending = h11_body_end(protocol)
        if ending is None:
            return False
        self._chunking = False  # h11 is done with this response (see __init__)
        stream, end = ending
        rest = self._write_now(b"%x\r\n%b\r\n%b" % (len(last), last, end) if last else end)
        if rest:
            await self.write_rest(rest)
        await response_ended(stream)
        return True

    def chunks_for(self, send: Send) -> DirectChunks | None:
        """The direct chunk writer of the response `send` (hypercorn's ASGI send) belongs to:
        this connection over HTTP/1.1, the response's own stream over h2; None otherwise."""
        protocol = self.protocol.protocol
        if isinstance(protocol, H11Protocol):
            return self
        stream = http_stream_of(send)
        if isinstance(protocol, GuardedH2Protocol) and stream is not None:
            return H2StreamChunks(
                partial(self._write_h2_now, protocol),
                partial(self._start_h2_now, protocol, stream),
                stream.stream_id,
                send,
            )
        return None

    def _write_h2_now(self, protocol: GuardedH2Protocol, stream_id: int, data: bytes) -> bool:
        """`data` framed as the stream's DATA, now: written at once when the stream is the
        connection's only one and the writer is idle (`ConnectionWriter.write_through`, the
        hand-off's `offer`), else queued for the writer's round; False (nothing done) when it
        must wait (window, queued bytes) or the protocol switched."""
        if not self._h2_takes_now(protocol) or not protocol.frame_data_now(stream_id, data):
            return False
        self._hand_h2_output(protocol)
        return True

    def _start_h2_now(
        self,
        protocol: GuardedH2Protocol,
        stream: HTTPStream,
        headers: Sequence[tuple[bytes, bytes]],
        first: bytes,
    ) -> tuple[Taken, bytes]:
        """The stream's `200` head and first DATA framed and handed on as `_write_h2_now` does
        (in one write, for a lone stream): ALL; REFUSED, nothing done, when either must wait."""
        if not self._h2_takes_now(protocol) or not protocol.start_response_now(
            stream, headers, first
        ):
            return Taken.REFUSED, first
        self._hand_h2_output(protocol)
        return Taken.ALL, b""

    def _h2_takes_now(self, protocol: GuardedH2Protocol) -> bool:
        return self.protocol.protocol is protocol and self._writer.takes_now

    def _hand_h2_output(self, protocol: GuardedH2Protocol) -> None:
        framed = protocol.connection.data_to_send()
        if len(protocol.streams) == 1:  # nothing to batch with: out now (performance.md §2)
            self._writer.write_through(framed)  # whatever it answers, the writer has the rest
        else:
            self._writer.push_nowait(framed)

    async def write_rest(self, rest: bytes) -> None:
        """What `_write_now` left, by hypercorn's write, shielded from its lock on (a cancel must
        not cut the bytes in two); a peer reading nothing for `REST_S` is closed."""
        with trio.move_on_after(REST_S, shield=True) as bound:
            async with self.send_lock:
                try:
                    await self.stream.send_all(rest)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    await self._write_failed()
        if bound.cancelled_caught:
            await self._write_failed()

    def _write_now(self, data: bytes) -> bytes:
        """Write what the kernel takes of `data` now; return the rest (all of it for TLS, under
        an awaited write, or on a failing socket: hypercorn's write then reports the failure)."""
        if self._socket is None or self.send_lock.locked():
            return data
        return write_to_kernel_now(self._socket, data)

    async def _write_failed(self) -> None:
        """The peer is gone (a write failed): what hypercorn's own write did then."""
        await self._handle(Closed())

    async def _handle(self, event: Event) -> None:
        """`event` to hypercorn's protocol, which may move h11's state meanwhile."""
        self._chunking = False
        try:
            await self.protocol.handle(event)
        finally:
            self._chunking = False

    async def _read_client(self) -> None:
        while True:
            try:
                data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            if data and self._between_requests and isinstance(self.protocol.protocol, H11Protocol):
                # The first bytes of a request head: the keep-alive timer becomes the header one.
                self._between_requests = False
                self._timer_s = self._limits.header_timeout_s
                self._idle.expire_in(self._timer_s)
            self._read.start()
            try:
                await self._handle(RawData(bytes(data)))
            finally:
                self._read.finish()
            if not data:
                break
        await self._handle(Closed())
        # hypercorn leaves the idle timer running after the client left, which kept the socket
        # (and a slot under the connection cap) for up to the keep-alive time.
        self._idle.end()
        self._writer.stop()

    async def _idle_close(self) -> None:
        """The idle (or header) time passed, or the server is shutting down: close."""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + BOOKKEEPING_S):
            await self._handle(Closed())
            await self.stream.aclose()

    async def _close_stream(self) -> None:
        """End our side of the connection, then close the socket (a gone peer or TLS without
        EOF ends nothing more). In between, a bounded lingering read: closing a socket with
        unread bytes in it makes the kernel send a reset, which can destroy what we sent last
        (an h2 GOAWAY, a last response) before the client read it (docs/http.md §3)."""
        with contextlib.suppress(
            trio.BrokenResourceError, trio.BusyResourceError, trio.ClosedResourceError
        ):
            if isinstance(self.stream, trio.SocketStream):
                await self.stream.send_eof()
                with trio.move_on_after(LINGER_S):
                    while await self.stream.receive_some(MAX_RECV):
                        pass
        await self.stream.aclose()
