"""Pure. The frames of the `/v1/ws` protocol (README.md "WebSocket protocol"): the client's
request and cancel messages as typed structs, and the gateway's terminal and keep-alive frames
as bytes. `frontends/websocket.py` runs the protocol; this module only spells it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Final, TypeVar

import msgspec

from smg_trio.core.api_dialect import OPENAI, ApiDialect
from smg_trio.core.stream_end import ChoiceFinish, StreamEnd
from smg_trio.errors import GatewayError
from smg_trio.wire.openai_responses import JSON_ENCODER, ErrorDetail, Usage
from smg_trio.wire.request_numbers import Int

MAX_ID_LENGTH: Final = 256
# Sent on a stream silent for the keep-alive period (docs/resilience.md §5); `"id": null` so it
# never touches a live id. ASGI has no way to send a WebSocket ping, so it is a frame.
KEEPALIVE_FRAME: Final = b'{"type":"keepalive","id":null}'

StreamId = Annotated[str, msgspec.Meta(max_length=MAX_ID_LENGTH)] | Int


class RequestMessage(msgspec.Struct, frozen=True, tag_field="type", tag="request"):
    id: StreamId
    path: str
    body: msgspec.Raw
    request_id: str | None = None


class CancelMessage(msgspec.Struct, frozen=True, tag_field="type", tag="cancel"):
    id: StreamId


class Envelope(msgspec.Struct, frozen=True):
    """What can be read from a malformed frame to answer under its request id."""

    type: str | None = None
    id: StreamId | None = None


decode_message = msgspec.json.Decoder(RequestMessage | CancelMessage).decode
decode_envelope = msgspec.json.Decoder(Envelope).decode
_Value = TypeVar("_Value")
_decode_id = msgspec.json.Decoder(StreamId).decode
_decode_type = msgspec.json.Decoder(str).decode

# A string (escapes included) or one bracket: the tokens that decide the nesting.
_NESTING_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# What follows a member's key: the colon and a whole string or integer (a number must be
# followed by a delimiter, so a frame cut inside it yields no id).
_MEMBER_VALUE: Final = re.compile(r'\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?=[\s,}]))', re.DOTALL)


def salvaged_envelope(text: str) -> Envelope:
    """The `type` and `id` members of a frame that is not valid JSON, read from the top level
    of the object it opens: a whole string or integer value following its key. What cannot be
    read so is None. A malformed frame is answered under the id read here (README.md
    "WebSocket protocol"); nothing else of the frame is trusted."""
    if not text.lstrip().startswith("{"):
        return Envelope()
    found: dict[str, str] = {}
    depth = 0
    for match in _NESTING_TOKENS.finditer(text):
        token = match.group()
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
            if depth <= 0:
                break  # the top-level object ended
        elif depth == 1 and token in ('"id"', '"type"') and token not in found:
            value = _MEMBER_VALUE.match(text, match.end())
            if value is not None:
                found[token] = value.group(1)
                if len(found) == 2:
                    break
    kind, stream_id = found.get('"type"'), found.get('"id"')
    return Envelope(type=_read(_decode_type, kind), id=_read(_decode_id, stream_id))


def _read(decode: Callable[[str], _Value], value: str | None) -> _Value | None:
    if value is None:
        return None
    try:
        return decode(value)
    except msgspec.DecodeError:
        return None


_encode = JSON_ENCODER.encode


class DoneFrame(msgspec.Struct, frozen=True, tag_field="type", tag="done"):
    """A stream's end: each choice's finish as its chunks reported it, and the stream's usage."""

    id: str | int
    finish: tuple[ChoiceFinish, ...]
    usage: Usage | None
    request_id: str


def done_frame(stream_id: str | int, end: StreamEnd, request_id: str) -> bytes:
    return _encode(DoneFrame(stream_id, end.finish, end.usage, request_id))


def error_frame(
    stream_id: str | int | None,
    err: GatewayError,
    request_id: str | None = None,
    dialect: ApiDialect = OPENAI,
) -> bytes:
    """`{"type":"error","id":ID,"error":{...}}` with the error object of `err` as the request's
    API spells it (OpenAI's unless `dialect` says otherwise), and the request's `request_id`
    when the error ends a request."""
    return (
        b'{"type":"error","id":'
        + _encode(stream_id)
        + _request_id_field(request_id)
        + b'"error":'
        + dialect.error_object(err)
        + b"}"
    )


def response_frame(stream_id: str | int, body: bytes, request_id: str) -> bytes:
    return (
        b'{"type":"response","id":'
        + _encode(stream_id)
        + _request_id_field(request_id)
        + b'"data":'
        + body
        + b"}"
    )


def cancelled_frame(stream_id: str | int, request_id: str) -> bytes:
    detail = ErrorDetail(
        message="the client cancelled this request", type="cancelled", code="cancelled"
    )
    return (
        b'{"type":"error","id":'
        + _encode(stream_id)
        + _request_id_field(request_id)
        + b'"error":'
        + _encode(detail)
        + b"}"
    )


def _request_id_field(request_id: str | None) -> bytes:
    """`,"request_id":"…",` (or just `,`): what follows the id in a terminal frame."""
    if request_id is None:
        return b","
    return b',"request_id":' + _encode(request_id) + b","
