"""Pure. The events of OpenAI's Responses WebSocket mode (`GET /v1/responses` upgraded;
docs/client-apis.md §3.4): the client's `response.create`, `response.steer` and our
`response.cancel` read from a text frame, and the server's events as bytes.

`frontends/responses_socket.py` runs the protocol; this module only spells it:

- a create's body is the HTTP body of `POST /v1/responses` less the envelope (`type`,
  `stream_id`), with `stream: true` (a socket always streams; `stream: false` and
  `background: true` are refused naming the field, never ignored);
- a response's events are the SSE stream's, each one frame holding the event's JSON with its
  `sequence_number` and, on a named lane, the lane's `stream_id` (`LaneDialect`);
- an error is OpenAI's WebSocket error event, `{"type":"error","status":S,"error":{...}}`:
  under the create's lane when it ends a create, with `"stream_id": null` when it ends none (a
  malformed frame, a cancel that found nothing), so it can never be taken for a response's end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.core.api_dialect import named_event
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.errors import ClientError, GatewayError
from smg_trio.wire.decode_errors import read_decode_error
from smg_trio.wire.openai_responses import JSON_ENCODER

CREATE: Final = "response.create"
CANCEL: Final = "response.cancel"
STEER: Final = "response.steer"
STREAM_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]{1,256}")
"""A lane's name as the openai SDK checks it: 1–256 ASCII letters, digits, `_`, `-`, `.`."""

_encode = JSON_ENCODER.encode
_decode = msgspec.json.decode
_decode_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def event_error(
    message: str, code: str, *, param: str | None = None, status: int = 400
) -> ClientError:
    return ClientError(message, status=status, code=code, param=param)


class Create(msgspec.Struct, frozen=True):
    """A `response.create`: its lane (None: the default lane) and its body as a dict."""

    stream_id: str | None
    body: dict[str, Any]


class Cancel(msgspec.Struct, frozen=True):
    """Our `response.cancel`: the running response of a lane, or the one with `response_id`."""

    stream_id: str | None
    response_id: str | None


class Steer(msgspec.Struct, frozen=True):
    """A `response.steer`: the response it targets and its input, echoed in the answer."""

    previous_response_id: str
    input: Any


class Refused(msgspec.Struct, frozen=True):
    """A frame that is none of the above, or a create without a valid lane: it opens no
    response, and its error goes with `"stream_id": null`."""

    error: ClientError


ClientEvent = Create | Cancel | Steer | Refused


def read_event(text: str) -> ClientEvent:
    """The client event a text frame carries (the caller checked its nesting depth)."""
    try:
        event = _decode(text)
    except msgspec.ValidationError as exc:  # JSON, but a number past float range (1e400)
        member = _member_out_of_range(text)
        return Refused(
            event_error(
                f"{member or 'the frame'}: {read_decode_error(exc).text}",
                "invalid_value",
                param=member,
            )
        )
    except msgspec.DecodeError as exc:
        return Refused(event_error(f"the frame is not valid JSON: {exc}", "invalid_json"))
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return Refused(
            event_error(
                "an event is a JSON object with a string `type`", "invalid_event", param="type"
            )
        )
    kind = event.pop("type")
    if kind == CREATE:
        return _create(event)
    if kind == CANCEL:
        return _cancel(event)
    if kind == STEER:
        return _steer(event)
    return Refused(
        event_error(
            f"unknown event type {kind!r}: send {CREATE}, {STEER} or {CANCEL}",
            "unknown_event",
            param="type",
        )
    )


def _member_out_of_range(text: str) -> str | None:
    """The top-level member whose value holds the number no float holds (the create's field,
    as the HTTP body's decoder names it: issue 45), or None when the frame is no object."""
    try:
        members = _decode_members(text)
    except msgspec.DecodeError:
        return None
    for name, raw in members.items():
        try:
            _decode(raw)
        except msgspec.DecodeError:
            return name
    return None


def _lane(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and STREAM_ID_PATTERN.fullmatch(value):
        return value
    raise event_error(
        "`stream_id` is 1 to 256 ASCII letters, digits, '_', '-' or '.'",
        "invalid_stream_id",
        param="stream_id",
    )


def _create(event: dict[str, Any]) -> ClientEvent:
    try:
        lane = _lane(event.pop("stream_id", None))
    except ClientError as error:
        return Refused(error)
    return Create(lane, event)


def create_body(body: dict[str, Any]) -> bytes:
    """The `POST /v1/responses` body of a create: streamed. Raises the 400 for `stream: false`
    and `background: true` (a socket's response is a foreground stream)."""
    stream = body.get("stream")
    if stream is not None and stream is not True:
        raise event_error(
            "`stream` is implicit on a WebSocket: leave it out (or true)",
            "invalid_value",
            param="stream",
        )
    background = body.pop("background", None)
    if background is not None and background is not False:
        raise event_error(
            "`background` is not supported over WebSocket",
            "unsupported_parameter",
            param="background",
        )
    body["stream"] = True
    return _encode(body)


def _cancel(event: dict[str, Any]) -> ClientEvent:
    unknown = sorted(set(event) - {"stream_id", "response_id"})
    if unknown:
        return Refused(
            event_error(
                f"unknown field {unknown[0]!r} in {CANCEL}", "unknown_field", param=unknown[0]
            )
        )
    response_id = event.get("response_id")
    if response_id is not None and not isinstance(response_id, str):
        return Refused(
            event_error("`response_id` is a string", "invalid_value", param="response_id")
        )
    try:
        lane = _lane(event.get("stream_id"))
    except ClientError as error:
        return Refused(error)
    return Cancel(lane, response_id)


def _steer(event: dict[str, Any]) -> ClientEvent:
    previous = event.get("previous_response_id")
    if not isinstance(previous, str) or "input" not in event:
        return Refused(
            event_error(
                f"{STEER} takes `previous_response_id` (a string) and `input`",
                "invalid_input",
                param="previous_response_id" if not isinstance(previous, str) else "input",
            )
        )
    return Steer(previous, event["input"])


def _lane_field(stream_id: str | None) -> bytes:
    return b"" if stream_id is None else b',"stream_id":' + _encode(stream_id)


def _error_object(err: GatewayError) -> dict[str, Any]:
    param = err.param if isinstance(err, ClientError) else None
    return {"type": err.error_type, "code": err.code, "message": err.message, "param": param}


def error_event(err: GatewayError, stream_id: str | None) -> bytes:
    """The error event that ends a create that never began (its lane's, or the default's)."""
    body = {"type": "error", "status": err.status, "error": _error_object(err)}
    return _encode(body)[:-1] + _lane_field(stream_id) + b"}"


def protocol_error_event(err: GatewayError) -> bytes:
    """The error event of a frame that ends no create: `"stream_id": null`."""
    body = {"type": "error", "status": err.status, "error": _error_object(err), "stream_id": None}
    return _encode(body)


def cancelled_event(stream_id: str | None) -> bytes:
    """The end of a create cancelled before its `response.created` went out."""
    return error_event(
        event_error("the client cancelled this response", "cancelled", status=499), stream_id
    )


class LaneDialect(ResponsesDialect):
    """The Responses dialect of one response on a socket lane: each event one frame, its JSON
    numbered and, on a named lane, carrying `stream_id`; failures in the WebSocket shape."""

    __slots__ = ("_tail",)

    def __init__(self, stream_id: str | None) -> None:
        super().__init__()
        self._tail = _lane_field(stream_id) + b"}"

    def websocket_frames(self, stream_id: str | int, payloads: Sequence[bytes]) -> list[bytes]:
        return [data[:-1] + self._tail for _name, data in self._numbered(payloads)]

    def failure_frames(self, err: GatewayError) -> list[bytes]:
        """A failure after the stream began: the numbered error event (WebSocket shape), then
        `response.failed` when `response.created` went out (as the SSE stream's pair)."""
        events = self._failure_events(err)
        error = {"type": "error", "status": err.status, "error": _error_object(err)}
        events[0] = named_event(b"error", _encode(error))
        return self.websocket_frames(0, events)

    def cancelled_frames(self) -> list[bytes] | None:
        """The end of a cancelled response: `response.incomplete` with the response as
        `response.created` announced it, `status: "cancelled"`; None before that event."""
        if self._created is None:
            return None
        response: dict[str, Any] = _decode(self._created)["response"]
        response["status"] = "cancelled"
        response["incomplete_details"] = {"reason": "cancelled"}
        data = _encode({"type": "response.incomplete", "response": response})
        return self.websocket_frames(0, [named_event(b"response.incomplete", data)])
