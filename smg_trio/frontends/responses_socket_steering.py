"""Pure. Steering on a Responses WebSocket (`response.steer`; docs/client-apis.md §3.4): the
input a steer may carry, its events, and what becomes of accepted input when the response it
targets ends.

No engine takes input into a running generation, so a steered response is never cut short: it
runs to its end, and then

- ended `response.completed` with no call for the client to answer: an automatic successor on
  the same lane, before anything waiting there: the target's own create with `input` the
  steers' input (in submission order) and `previous_response_id` the target
  (`successor_body`); its `response.created` is the commit point, as OpenAI's;
- ended `response.completed` with function calls: `response.steer.pending`
  (`waiting_for_required_input`, a `function_call_output` stub per call), and the input waits
  for the client's create on that lane continuing the target, in front of its input
  (`PendingSteers`, `with_queued_input`);
- any other end (incomplete, failed, cancelled): `response.steer.failed`, the input handed back.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.openai_responses import JSON_ENCODER

MAX_STEERS_PER_RESPONSE: Final = 16
MAX_PENDING_PARENTS: Final = 32
"""Responses of one socket whose steering input waits for the client's tool results."""

_encode = JSON_ENCODER.encode
_MESSAGE_FIELDS: Final = frozenset({"type", "role", "content"})


class QueuedSteer(msgspec.Struct, frozen=True):
    """An accepted steer: its id, the input as sent (handed back on failure), as items."""

    id: str
    input: Any
    items: list[dict[str, Any]]


def steer_items(value: Any) -> list[dict[str, Any]]:
    """The input items of a steer's `input`: a string, or user messages whose content is a
    string or `input_text` parts (OpenAI's rule; images and files: this gateway is text-only).
    Raises the `invalid_input` error naming what is wrong."""
    if isinstance(value, str) and value:
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _invalid("`input` is a non-empty string or a non-empty list of user messages")
    for index, item in enumerate(value):
        if (
            not isinstance(item, dict)
            or item.keys() - _MESSAGE_FIELDS
            or item.get("type", "message") != "message"
            or item.get("role") != "user"
            or not _text_content(item.get("content"))
        ):
            raise _invalid(f"input[{index}]: steering takes user messages with text content only")
    return [dict(item, type="message") for item in value]


def _text_content(content: Any) -> bool:
    if isinstance(content, str):
        return True
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(part, dict)
            and part.get("type") == "input_text"
            and isinstance(part.get("text"), str)
            for part in content
        )
    )


def _invalid(message: str) -> ClientError:
    return ClientError(message, code="invalid_input", param="input")


def _lane_tail(stream_id: str | None) -> bytes:
    return b"}" if stream_id is None else b',"stream_id":' + _encode(stream_id) + b"}"


def accepted_event(steer_id: str, previous: str, stream_id: str | None) -> bytes:
    body = {
        "type": "response.steer.accepted",
        "sequence_number": 0,
        "steer": {"id": steer_id, "previous_response_id": previous},
    }
    return _encode(body)[:-1] + _lane_tail(stream_id)


def pending_event(
    steer_id: str, previous: str, required: list[dict[str, Any]], stream_id: str | None
) -> bytes:
    body = {
        "type": "response.steer.pending",
        "sequence_number": 0,
        "reason": "waiting_for_required_input",
        "required_input": required,
        "steer": {"id": steer_id, "previous_response_id": previous},
    }
    return _encode(body)[:-1] + _lane_tail(stream_id)


def failed_event(
    previous: str,
    steer_input: Any,
    code: str,
    message: str,
    stream_id: str | None,
    steer_id: str | None = None,
) -> bytes:
    """`response.steer.failed`: the input handed back with why it cannot be committed (its
    steer id once one was given)."""
    steer: dict[str, Any] = {"previous_response_id": previous, "input": steer_input}
    if steer_id is not None:
        steer["id"] = steer_id
    body = {
        "type": "response.steer.failed",
        "sequence_number": 0,
        "error": {"type": "invalid_request_error", "code": code, "message": message},
        "steer": steer,
    }
    return _encode(body)[:-1] + _lane_tail(stream_id)


def required_input(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A `function_call_output` stub for each function call of a finished response."""
    return [
        {"type": "function_call_output", "call_id": item["call_id"], "name": item["name"]}
        for item in response.get("output", ())
        if item.get("type") == "function_call"
    ]


def successor_body(
    body: dict[str, Any], previous: str, steers: list[QueuedSteer]
) -> dict[str, Any]:
    """The automatic successor's create: the target's own settings, continuing it with the
    steers' input."""
    items = [item for steer in steers for item in steer.items]
    return {**body, "input": items, "previous_response_id": previous}


def with_queued_input(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """`body` with steering input that waited for it in front of its own input."""
    own = body.get("input", [])
    if isinstance(own, str):
        own = [{"type": "message", "role": "user", "content": own}]
    if not isinstance(own, list):  # a wrong type: left for the body's decoder to refuse
        return body
    return {**body, "input": [*items, *own]}


class PendingSteers:
    """Steering input waiting for the client's continuation of a response, by lane and
    response; the oldest dropped past `MAX_PENDING_PARENTS` (its client never continued)."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[tuple[str | None, str], list[dict[str, Any]]] = OrderedDict()

    def add(self, stream_id: str | None, parent: str, items: list[dict[str, Any]]) -> None:
        self._waiting.setdefault((stream_id, parent), []).extend(items)
        while len(self._waiting) > MAX_PENDING_PARENTS:
            self._waiting.popitem(last=False)

    def take(self, stream_id: str | None, parent: object) -> list[dict[str, Any]] | None:
        if not isinstance(parent, str):
            return None
        return self._waiting.pop((stream_id, parent), None)
