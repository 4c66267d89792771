"""I/O. The multiplexed WebSocket endpoint `GET /v1/ws`: many generation streams on one socket.

The protocol is documented in README.md ("WebSocket protocol"). Shape of one socket:

    receive loop ──start──▶ per-request tasks (one nursery, a cancel scope per id)
         │                        │ sinks
         └── protocol errors ──▶ frames channel (bounded) ──▶ sender task ──▶ ASGI send

- One task (the sender) owns the socket's send side. Request sinks and the receive loop hand it
  whole frames through a small bounded channel, so a slow client holds back this socket's own
  requests (their engine tokens coalesce in their backend mailboxes) and nothing else.
- Every request id gets exactly one terminal frame: `done`, `response` or `error`. An error
  frame with a non-null id always ends that id's request; errors about frames that concern no
  live request (malformed JSON, a binary frame, a duplicate id, a cancel for an unknown id)
  carry `"id": null`, so they can never be mistaken for the end of a live stream. A frame too
  deep to decode is answered the same way, its id read from its top level (docs/limits.md §3);
  no frame, however malformed, closes the socket.
- An id is free again the moment its terminal frame is queued, before the frame is sent.
- `websocket.disconnect` cancels the nursery: every request leaves its backend stream, which
  aborts its engine requests. hypercorn never raises on sending to a closed socket, so the
  receive loop is what notices a vanished client.
- Every request on the socket has a gateway request id: the request frame's optional
  `request_id` (checked like the `x-request-id` header) or a fresh one. It is the request's
  id in the gateway, its engine requests and its log line, and every terminal frame of the
  request (`done`, `response`, `error`) carries it as `request_id` (docs/observability.md §3).
- The metrics count the open sockets and the requests running on them (transport `ws`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final, assert_never

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, WebsocketScope

from smg_trio.core.api_dialect import ApiDialect
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientError, ClientGone, GatewayError
from smg_trio.frontends.answers import client_address
from smg_trio.frontends.api_paths import dialect_for_path
from smg_trio.frontends.sink_state import ErrorForm, SinkLifecycle, SinkState, Step
from smg_trio.frontends.websocket_frames import (
    KEEPALIVE_FRAME,
    CancelMessage,
    Envelope,
    RequestMessage,
    cancelled_frame,
    decode_envelope,
    decode_message,
    done_frame,
    error_frame,
    response_frame,
    salvaged_envelope,
)
from smg_trio.frontends.websocket_sender import FrameOutbox, serve_socket
from smg_trio.handoff import Taken
from smg_trio.observability.request_ids import request_id_from_header
from smg_trio.request.arrival import Arrival
from smg_trio.request.gateway import Gateway
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.wire.decode_errors import read_decode_error
from smg_trio.wire.json_depth import MAX_JSON_DEPTH, JsonTooDeep, json_depth_exceeds, shallow_json

logger = logging.getLogger(__name__)

MAX_STREAMS_PER_SOCKET: Final = 256
TERMINAL_GRACE_S: Final = 1.0
"""How long an id's end may wait for room in the socket's outbox once it began, shielded."""
WEBSOCKET_TRANSPORT: Final = "ws"


def _protocol_error(
    message: str, code: str, *, status: int = 400, param: str | None = None
) -> ClientError:
    return ClientError(message, status=status, code=code, param=param)


class _StreamSink:
    """The ClientSink of one request id: chunk, response, done and error frames.

    Its state follows the table every sink shares (`frontends.sink_state`); on a WebSocket an
    error is the id's error frame in either open state. `ended` turns true once the id's
    terminal frame is queued (a cancelled send leaves it false, so the id still gets one).
    """

    def __init__(
        self,
        outbox: FrameOutbox,
        stream_id: str | int,
        scope: trio.CancelScope,
        request_id: str,
        dialect: ApiDialect,
        release: Callable[[str | int, trio.CancelScope], None],
    ) -> None:
        self._outbox = outbox
        self._release = release
        self._id = stream_id
        self._dialect = dialect  # the request path's API: chunk frames and errors
        self.request_id = request_id
        self._scope = scope
        self._lifecycle = SinkLifecycle()
        self.ended = False
        self.quiet = (
            False  # the keep-alive scan's flag (request/live_requests.py); cleared per chunk
        )
        self._framed: list[bytes] = []  # framed by `send_chunks_now`, not yet with the sender

    def gone_before_engine(self) -> bool:
        """Cancelled (a cancel frame, or the socket went away) before reaching the engine."""
        return self._scope.cancel_called

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self.quiet = False
        self._lifecycle.chunks()  # a WebSocket stream has no head to open
        await self._send_framed()
        for frame in self._dialect.websocket_frames(self._id, payloads):
            await self._outbox.send_frame(frame)

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        """The hand-off's `take_now` (smg_trio/handoff.py): the payloads are framed here, once,
        and what the sender's buffer has no room for is kept framed for `send_chunks`, never
        framed again (the Responses API numbers its events as they are framed)."""
        if self._lifecycle.state is not SinkState.STREAMING or self._framed:
            return Taken.REFUSED
        self.quiet = False
        taken, self._framed = self._outbox.take_frames_now(
            self._dialect.websocket_frames(self._id, payloads)
        )
        return Taken.ALL if taken is Taken.ALL else Taken.PART

    async def _send_framed(self) -> None:
        """The frames `send_chunks_now` framed and the sender had no room for, first."""
        framed, self._framed = self._framed, []
        for frame in framed:
            await self._outbox.send_frame(frame)

    async def send_body(self, body: bytes) -> None:
        self._lifecycle.body()
        await self._end(response_frame(self._id, body, self.request_id))

    async def end_stream(self, end: StreamEnd) -> None:
        if self._lifecycle.end() is Step.NOTHING:
            return
        # Once begun, the id's end goes out whole: a cancel arriving meanwhile (the drain's,
        # the deadline's) must not leave the id without its terminal frame (docs/resilience.md
        # §4). Bounded: a socket whose client stopped reading gets its end from `fail`.
        with trio.move_on_after(TERMINAL_GRACE_S, shield=True):
            await self._send_framed()
            for frame in self._dialect.websocket_frames(self._id, end.payloads):
                await self._outbox.send_frame(frame)
            await self._end(done_frame(self._id, end, self.request_id))

    async def fail(self, error: GatewayError) -> None:
        form = self._lifecycle.fail()
        if form is ErrorForm.DROPPED and not self.ended:
            form = ErrorForm.FINAL_EVENT  # an end cut short: the id still needs its terminal
        match form:
            case ErrorForm.WHOLE_RESPONSE | ErrorForm.FINAL_EVENT:
                await self._send_framed()
                await self._end(error_frame(self._id, error, self.request_id, self._dialect))
            case ErrorForm.DROPPED:
                pass
            case _:
                assert_never(form)

    async def keep_alive(self) -> None:
        if not self.ended:
            await self._outbox.send_frame(KEEPALIVE_FRAME)

    async def _end(self, frame: bytes) -> None:
        """Send the terminal frame; the id may be reused as soon as it is queued."""
        self._release(self._id, self._scope)
        await self._outbox.send_frame(frame)
        self.ended = True


class _StreamsSocket:
    """One accepted WebSocket: its live request ids and the way to its sender task."""

    def __init__(
        self,
        gateway: Gateway,
        nursery: trio.Nursery,
        frames_send: trio.MemorySendChannel[bytes],
        client: str,
        tenant: Tenant | None,
    ) -> None:
        self._gateway = gateway
        self._client = client
        self._tenant = tenant  # its API key's (docs/fleet.md §2): every request is charged
        self._nursery = nursery
        self.outbox = FrameOutbox(frames_send)
        self._streams: dict[str | int, trio.CancelScope] = {}
        self.largest_frame = 0

    def release(self, stream_id: str | int, scope: trio.CancelScope) -> None:
        if self._streams.get(stream_id) is scope:
            del self._streams[stream_id]

    async def receive_until_disconnect(self, receive: ASGIReceiveCallable) -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive":
                continue
            text = message.get("text")
            if text is None:
                binary = _protocol_error(
                    "binary frames are not part of this protocol; send text", "unsupported_frame"
                )
                await self.outbox.send_frame(error_frame(None, binary))
            else:
                await self._on_text(text)

    async def _on_text(self, text: str) -> None:
        self.largest_frame = max(self.largest_frame, len(text))
        # The frame wraps its body one level down: a body within the limit passes here and is
        # checked (and answered under its id) by the gateway's decoder (docs/limits.md §3).
        if json_depth_exceeds(text, MAX_JSON_DEPTH + 1):
            await self._reject_too_deep(text)
            return
        try:
            message = decode_message(text)
        except msgspec.DecodeError as exc:
            await self._reject_malformed(text, exc)
            return
        match message:
            case RequestMessage(id=stream_id, path=path, body=body, request_id=request_id):
                await self._start(stream_id, path, bytes(body), request_id)
            case CancelMessage(id=stream_id):
                await self._cancel(stream_id)
            case _:
                assert_never(message)

    async def _reject_too_deep(self, text: str) -> None:
        envelope = _envelope_of(shallow_json(text))
        await self.outbox.send_frame(
            error_frame(self._unlive_request_id(envelope), JsonTooDeep(MAX_JSON_DEPTH))
        )

    def _unlive_request_id(self, envelope: Envelope) -> str | int | None:
        """The id a refused frame's error goes under: the id it names, unless it is a cancel
        (which never opens an id) or that id belongs to a live request (whose terminal frame
        is still to come); else null. So every id a client sends in a frame that could start
        a request ends in exactly one terminal frame, however malformed the frame."""
        stream_id = envelope.id
        if envelope.type == "cancel" or stream_id in self._streams:
            return None
        return stream_id

    async def _reject_malformed(self, text: str, exc: msgspec.DecodeError) -> None:
        if isinstance(exc, msgspec.ValidationError):
            where = read_decode_error(exc).path or None  # `id` beyond int64 names `id`
            err = _protocol_error(f"invalid message: {exc}", "invalid_message", param=where)
        else:
            err = _protocol_error(f"the frame is not valid JSON: {exc}", "invalid_json")
        await self.outbox.send_frame(error_frame(self._unlive_request_id(_envelope_of(text)), err))

    async def _start(
        self, stream_id: str | int, path: str, body: bytes, client_request_id: str | None
    ) -> None:
        if stream_id in self._streams:
            err = _protocol_error(
                f"id {stream_id!r} is already in use by a live request", "duplicate_id", param="id"
            )
            await self.outbox.send_frame(error_frame(None, err))
            return
        if len(self._streams) >= MAX_STREAMS_PER_SOCKET:
            err = _protocol_error(
                f"at most {MAX_STREAMS_PER_SOCKET} requests may run at once on one socket",
                "too_many_streams",
                status=429,
            )
            await self.outbox.send_frame(error_frame(stream_id, err))
            return
        try:
            request_id = request_id_from_header(client_request_id, param="request_id")
        except ClientError as err:
            await self.outbox.send_frame(error_frame(stream_id, err))
            return
        scope = trio.CancelScope()
        self._streams[stream_id] = scope
        self._nursery.start_soon(self._serve, stream_id, path, body, scope, request_id)

    async def _cancel(self, stream_id: str | int) -> None:
        scope = self._streams.pop(stream_id, None)
        if scope is None:
            err = _protocol_error(
                f"cancel for id {stream_id!r}, which names no live request",
                "unknown_id",
                status=404,
                param="id",
            )
            await self.outbox.send_frame(error_frame(None, err))
            return
        scope.cancel()

    async def _serve(
        self,
        stream_id: str | int,
        path: str,
        body: bytes,
        scope: trio.CancelScope,
        request_id: str,
    ) -> None:
        sink = _StreamSink(
            self.outbox, stream_id, scope, request_id, dialect_for_path(path), self.release
        )
        streams = self._gateway.metrics.websocket_streams
        streams.inc()
        try:
            with scope:
                try:
                    # One yield first: the socket's reader hands over a cancel frame that came
                    # in the same read as the request, so it costs no ADD (rapid reset).
                    await trio.lowlevel.checkpoint()
                    arrival = Arrival(
                        request_id=request_id,
                        transport=WEBSOCKET_TRANSPORT,
                        client=self._client,
                        tenant=self._tenant,
                    )
                    await self._gateway.handle(path, body, sink, arrival)
                except GatewayError as err:  # raised only while nothing was sent
                    await sink.fail(err)
                except ClientGone:
                    raise
                except Exception:
                    # One request's bug must not end the other streams sharing the socket.
                    logger.exception("request %r on a WebSocket failed", stream_id)
                    await sink.fail(GatewayError("internal error"))
            if scope.cancelled_caught and not sink.ended:
                await self.outbox.send_frame(cancelled_frame(stream_id, request_id))
        except ClientGone:
            pass
        finally:
            streams.dec()
            self.release(stream_id, scope)


def _envelope_of(text: str) -> Envelope:
    """A refused frame's `type` and `id`: decoded when it is JSON with a usable `type` and
    `id`, else what can be read from the top level of the object it opens
    (`salvaged_envelope`)."""
    try:
        return decode_envelope(text)
    except msgspec.DecodeError:
        return salvaged_envelope(text)


async def handle_websocket(
    gateway: Gateway,
    scope: WebsocketScope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
    tenant: Tenant | None = None,
) -> None:
    """Serve one WebSocket connection of the `/v1/ws` protocol until the client leaves.

    The caller routed `scope` here and did any authentication; nothing in it changes the protocol.
    `tenant` (its API key's) is charged for each of its requests.
    """
    await serve_socket(
        gateway,
        receive,
        send,
        lambda nursery, frames: _StreamsSocket(
            gateway, nursery, frames, client_address(scope), tenant
        ),
    )
