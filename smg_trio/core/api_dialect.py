"""Pure. How one client API frames a stream and spells an error (docs/client-apis.md §1).

A request's renderer makes the payloads; its dialect, picked by the request's path before
anything is read, turns them into bytes on the connection:

- `OpenAIDialect` (chat, completions, /generate): a payload is one JSON chunk, sent as
  `data: <payload>` events; the stream ends with `data: [DONE]`; errors are OpenAI's error
  object; a WebSocket chunk frame carries the payload as `data`.
- `NamedEventDialect` (APIs whose events have names: Anthropic Messages, OpenAI Responses): a
  payload is one or more whole SSE events `event: NAME\\ndata: JSON\\n\\n` (`named_event`), sent
  as they are; no `[DONE]`; a mid-stream error is the dialect's own error event; over the
  WebSocket each event is one chunk frame with its name in `event`.

A dialect object lives for one response (`frontends.api_paths.dialect_for_path` makes a fresh one), so a dialect
may keep per-stream state (the Responses API numbers its events).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from smg_trio.core.render import SSE_DONE, sse, websocket_chunk
from smg_trio.errors import GatewayError
from smg_trio.wire.openai_responses import JSON_ENCODER, error_body

_EVENT_PREFIX: Final = b"event: "
_DATA_PREFIX: Final = b"\ndata: "
_EVENT_END: Final = b"\n\n"

_encode = JSON_ENCODER.encode


def named_event(name: bytes, data: bytes) -> bytes:
    """One named server-sent event. `data` is one line of JSON (msgspec escapes newlines)."""
    return _EVENT_PREFIX + name + _DATA_PREFIX + data + _EVENT_END


def split_named_events(payload: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (name, data) of each whole event in `payload` (made by `named_event`)."""
    start = 0
    end = len(payload)
    while start < end:
        stop = payload.index(_EVENT_END, start)
        name_end = payload.index(_DATA_PREFIX, start, stop)
        yield (
            payload[start + len(_EVENT_PREFIX) : name_end],
            payload[name_end + len(_DATA_PREFIX) : stop],
        )
        start = stop + len(_EVENT_END)


class OpenAIDialect:
    """OpenAI's streams and errors (see the module doc); the default of every path."""

    __slots__ = ()

    def frame(self, payloads: Sequence[bytes]) -> bytes:
        """SSE bytes of a batch of renderer payloads."""
        return b"".join(map(sse, payloads))

    def end(self, payloads: Sequence[bytes]) -> bytes:
        """SSE bytes of a stream's last payloads and its end marker."""
        return b"".join(map(sse, payloads)) + SSE_DONE

    def stream_error(self, err: GatewayError) -> bytes:
        """The SSE bytes that end an open stream with `err`."""
        return sse(self.error_body(err)) + SSE_DONE

    def error_status(self, err: GatewayError) -> int:
        """The HTTP status of `err` as a whole response."""
        return err.status

    def error_body(self, err: GatewayError) -> bytes:
        """`err` as a whole response body: `{"error": {...}}`."""
        return error_body(err)

    def error_object(self, err: GatewayError) -> bytes:
        """The object under `error` in `error_body` (what a WebSocket error frame carries)."""
        body = self.error_body(err)
        assert body.startswith(b'{"error":')  # one object whose only key is "error"
        return body[len(b'{"error":') : -1]

    def websocket_frames(self, stream_id: str | int, payloads: Sequence[bytes]) -> list[bytes]:
        """One `{"type":"chunk","id":ID,"data":PAYLOAD}` frame per payload."""
        return [websocket_chunk(stream_id, payload) for payload in payloads]


class NamedEventDialect(OpenAIDialect):
    """Named events (see the module doc). Subclasses spell errors their API's way."""

    __slots__ = ()

    def frame(self, payloads: Sequence[bytes]) -> bytes:
        return b"".join(payloads)

    def end(self, payloads: Sequence[bytes]) -> bytes:
        return b"".join(payloads)

    def stream_error(self, err: GatewayError) -> bytes:
        return named_event(b"error", self.error_body(err))

    def websocket_frames(self, stream_id: str | int, payloads: Sequence[bytes]) -> list[bytes]:
        """One `{"type":"chunk","id":ID,"event":NAME,"data":DATA}` frame per event."""
        head = b'{"type":"chunk","id":' + _encode(stream_id) + b',"event":"'
        return [
            head + name + b'","data":' + data + b"}"
            for payload in payloads
            for name, data in split_named_events(payload)
        ]


ApiDialect = OpenAIDialect
"""Every dialect is an `OpenAIDialect` or a subclass of it."""

OPENAI: Final = OpenAIDialect()
