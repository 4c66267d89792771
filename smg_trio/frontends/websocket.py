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
  carry `"id": null`, so they can never be mistaken for the end of a live stream.
- An id is free again the moment its terminal frame is queued, before the frame is sent.
- `websocket.disconnect` cancels the nursery: every request leaves its backend stream, which
  aborts its engine requests. hypercorn never raises on sending to a closed socket, so the
  receive loop is what notices a vanished client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Final, assert_never

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, WebsocketScope

from smg_trio.core.render import websocket_chunk
from smg_trio.errors import ClientError, ClientGone, GatewayError
from smg_trio.gateway import Gateway
from smg_trio.request import SinkState
from smg_trio.wire.openai_responses import JSON_ENCODER, ErrorDetail, Usage, error_body

logger = logging.getLogger(__name__)

MAX_STREAMS_PER_SOCKET: Final = 256
# Frames waiting for the sender; small, so backpressure reaches the requests quickly.
FRAME_BUFFER: Final = 16
MAX_ID_LENGTH: Final = 256

StreamId = Annotated[str, msgspec.Meta(max_length=MAX_ID_LENGTH)] | int


class RequestMessage(msgspec.Struct, frozen=True, tag_field="type", tag="request"):
    id: StreamId
    path: str
    body: msgspec.Raw


class CancelMessage(msgspec.Struct, frozen=True, tag_field="type", tag="cancel"):
    id: StreamId


class _Envelope(msgspec.Struct, frozen=True):
    """What can be read from a malformed frame to answer under its request id."""

    type: str | None = None
    id: StreamId | None = None


_decode_message = msgspec.json.Decoder(RequestMessage | CancelMessage).decode
_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_encode = JSON_ENCODER.encode


class ChoiceFinish(msgspec.Struct, frozen=True):
    """One choice's ending in a `done` frame; `matched_stop` is what the chunks carried."""

    index: int
    reason: str
    matched_stop: str | int | None


class DoneFrame(msgspec.Struct, frozen=True, tag_field="type", tag="done"):
    id: str | int
    finish: tuple[ChoiceFinish, ...]
    usage: Usage | None


# The parts of any chunk payload (chat, completion, /generate) that say a choice ended.
class _ChoiceView(msgspec.Struct, frozen=True):
    index: int = 0
    finish_reason: str | None = None
    matched_stop: str | int | None = None


class _GenerateFinishView(msgspec.Struct, frozen=True):
    type: str
    matched: str | int | None = None


class _MetaView(msgspec.Struct, frozen=True):
    finish_reason: _GenerateFinishView | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _ChunkView(msgspec.Struct, frozen=True):
    choices: tuple[_ChoiceView, ...] = ()
    usage: Usage | None = None
    meta_info: _MetaView | None = None
    index: int = 0


_decode_chunk_view = msgspec.json.Decoder(_ChunkView).decode
# A chunk that ends nothing says so: JSON escaping keeps this out of any generated text.
_NOTHING_ENDS = b'"finish_reason":null'


class FinishTracker:
    """Collects per-choice finish reasons and usage from the chunk payloads a stream relays."""

    __slots__ = ("_finish", "_generate_tokens", "_prompt_tokens", "_usage")

    def __init__(self) -> None:
        self._finish: dict[int, ChoiceFinish] = {}
        self._usage: Usage | None = None
        self._prompt_tokens: int | None = None
        self._generate_tokens: dict[int, int] = {}

    def observe(self, payload: bytes) -> None:
        if _NOTHING_ENDS in payload:
            return
        view = _decode_chunk_view(payload)
        for choice in view.choices:
            if choice.finish_reason is not None:
                self._finish[choice.index] = ChoiceFinish(
                    choice.index, choice.finish_reason, choice.matched_stop
                )
        if view.usage is not None:
            self._usage = view.usage
        meta = view.meta_info
        if meta is not None and meta.finish_reason is not None:
            reason = meta.finish_reason
            self._finish[view.index] = ChoiceFinish(view.index, reason.type, reason.matched)
            self._prompt_tokens = meta.prompt_tokens
            self._generate_tokens[view.index] = meta.completion_tokens

    def done_frame(self, stream_id: str | int) -> bytes:
        finish = tuple(self._finish[index] for index in sorted(self._finish))
        usage = self._usage
        if usage is None and self._prompt_tokens is not None:
            usage = Usage.of(self._prompt_tokens, sum(self._generate_tokens.values()))
        return _encode(DoneFrame(stream_id, finish, usage))


def error_frame(stream_id: str | int | None, err: GatewayError) -> bytes:
    """`{"type":"error","id":ID,"error":{...}}` with the OpenAI error object of `err`."""
    body = error_body(err)
    assert body.startswith(b'{"error":')  # one object whose only key is "error"
    return b'{"type":"error","id":' + _encode(stream_id) + b"," + body[1:]


def response_frame(stream_id: str | int, body: bytes) -> bytes:
    return b'{"type":"response","id":' + _encode(stream_id) + b',"data":' + body + b"}"


def cancelled_frame(stream_id: str | int) -> bytes:
    detail = ErrorDetail(
        message="the client cancelled this request", type="cancelled", code="cancelled"
    )
    return b'{"type":"error","id":' + _encode(stream_id) + b',"error":' + _encode(detail) + b"}"


def _protocol_error(
    message: str, code: str, *, status: int = 400, param: str | None = None
) -> ClientError:
    return ClientError(message, status=status, code=code, param=param)


class _StreamSink:
    """The ClientSink of one request id: chunk, response, done and error frames."""

    def __init__(self, socket: _Socket, stream_id: str | int, scope: trio.CancelScope) -> None:
        self._socket = socket
        self._id = stream_id
        self._scope = scope
        self._state = SinkState.IDLE
        self._finish = FinishTracker()

    @property
    def state(self) -> SinkState:
        return self._state

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self._state = SinkState.STREAMING
        for payload in payloads:
            self._finish.observe(payload)
            await self._socket.send_frame(websocket_chunk(self._id, payload))

    async def send_body(self, body: bytes) -> None:
        await self.end(response_frame(self._id, body))

    async def close_stream(self, error: GatewayError | None) -> None:
        if error is None:
            await self.end(self._finish.done_frame(self._id))
        else:
            await self.end(error_frame(self._id, error))

    async def end(self, frame: bytes) -> None:
        """Send the terminal frame; the id may be reused as soon as it is queued."""
        self._socket.release(self._id, self._scope)
        await self._socket.send_frame(frame)
        self._state = SinkState.CLOSED


class _Socket:
    """One accepted WebSocket: its live request ids and the way to its sender task."""

    def __init__(
        self,
        gateway: Gateway,
        nursery: trio.Nursery,
        frames_send: trio.MemorySendChannel[bytes],
    ) -> None:
        self._gateway = gateway
        self._nursery = nursery
        self._frames_send = frames_send
        self._streams: dict[str | int, trio.CancelScope] = {}

    async def send_frame(self, frame: bytes) -> None:
        try:
            await self._frames_send.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ClientGone from None

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
                await self.send_frame(error_frame(None, binary))
            else:
                await self._on_text(text)

    async def _on_text(self, text: str) -> None:
        try:
            message = _decode_message(text)
        except msgspec.DecodeError as exc:
            await self._reject_malformed(text, exc)
            return
        match message:
            case RequestMessage(id=stream_id, path=path, body=body):
                await self._start(stream_id, path, bytes(body))
            case CancelMessage(id=stream_id):
                await self._cancel(stream_id)
            case _:
                assert_never(message)

    async def _reject_malformed(self, text: str, exc: msgspec.DecodeError) -> None:
        if not isinstance(exc, msgspec.ValidationError):
            err = _protocol_error(f"the frame is not valid JSON: {exc}", "invalid_json")
            await self.send_frame(error_frame(None, err))
            return
        err = _protocol_error(f"invalid message: {exc}", "invalid_message")
        try:
            envelope = _decode_envelope(text)
        except msgspec.DecodeError:
            envelope = _Envelope()
        # A malformed request still ends its id, unless that id belongs to a live request.
        stream_id = envelope.id
        if envelope.type != "request" or stream_id in self._streams:
            stream_id = None
        await self.send_frame(error_frame(stream_id, err))

    async def _start(self, stream_id: str | int, path: str, body: bytes) -> None:
        if stream_id in self._streams:
            err = _protocol_error(
                f"id {stream_id!r} is already in use by a live request", "duplicate_id", param="id"
            )
            await self.send_frame(error_frame(None, err))
            return
        if len(self._streams) >= MAX_STREAMS_PER_SOCKET:
            err = _protocol_error(
                f"at most {MAX_STREAMS_PER_SOCKET} requests may run at once on one socket",
                "too_many_streams",
                status=429,
            )
            await self.send_frame(error_frame(stream_id, err))
            return
        scope = trio.CancelScope()
        self._streams[stream_id] = scope
        self._nursery.start_soon(self._serve, stream_id, path, body, scope)

    async def _cancel(self, stream_id: str | int) -> None:
        scope = self._streams.pop(stream_id, None)
        if scope is None:
            err = _protocol_error(
                f"cancel for id {stream_id!r}, which names no live request",
                "unknown_id",
                status=404,
                param="id",
            )
            await self.send_frame(error_frame(None, err))
            return
        scope.cancel()

    async def _serve(
        self, stream_id: str | int, path: str, body: bytes, scope: trio.CancelScope
    ) -> None:
        sink = _StreamSink(self, stream_id, scope)
        try:
            with scope:
                try:
                    await self._gateway.handle(path, body, sink)
                except GatewayError as err:  # raised only while nothing was sent
                    await sink.end(error_frame(stream_id, err))
                except ClientGone:
                    raise
                except Exception:
                    # One request's bug must not end the other streams sharing the socket.
                    logger.exception("request %r on a WebSocket failed", stream_id)
                    if sink.state is not SinkState.CLOSED:
                        await sink.end(error_frame(stream_id, GatewayError("internal error")))
            if scope.cancelled_caught and sink.state is not SinkState.CLOSED:
                await self.send_frame(cancelled_frame(stream_id))
        except ClientGone:
            pass
        finally:
            self.release(stream_id, scope)


async def _send_frames(
    frames_receive: trio.MemoryReceiveChannel[bytes], send: ASGISendCallable
) -> None:
    async with frames_receive:
        async for frame in frames_receive:
            await send({"type": "websocket.send", "bytes": None, "text": frame.decode()})


async def handle_websocket(
    gateway: Gateway,
    scope: WebsocketScope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
) -> None:
    """Serve one WebSocket connection of the `/v1/ws` protocol until the client leaves.

    The caller routed `scope` here and did any authentication; nothing in it changes the protocol.
    """
    connect = await receive()
    if connect["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept", "subprotocol": None, "headers": []})
    frames_send, frames_receive = trio.open_memory_channel[bytes](FRAME_BUFFER)
    async with trio.open_nursery() as nursery, frames_send:
        nursery.start_soon(_send_frames, frames_receive, send)
        socket = _Socket(gateway, nursery, frames_send)
        await socket.receive_until_disconnect(receive)
        nursery.cancel_scope.cancel()
