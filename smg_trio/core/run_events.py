"""Pure. The vocabulary of responses that outlive their connection (docs/client-apis.md §3.5):
the `GET /v1/responses/{id}` query, the statuses a run goes through, and the events that end
a run the generation did not end itself (cancelled, interrupted, abandoned).

A run's status follows OpenAI's: `queued` (stored, not yet generating), `in_progress`, then one
of `completed`, `incomplete`, `failed`, `cancelled`. The current response object is read from
the lifecycle events the renderer makes (`response.created`, `response.in_progress` and the
endings), its output so far from the events between them (`core/run_output.py`).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qsl

import msgspec

from smg_trio.core.run_output import cut_items
from smg_trio.errors import ClientError
from smg_trio.neutral.validation import INT64_MAX, shown
from smg_trio.wire.openai_responses import JSON_ENCODER

QUEUED: Final = "queued"
IN_PROGRESS: Final = "in_progress"
CANCELLED: Final = "cancelled"
INCOMPLETE: Final = "incomplete"
FAILED: Final = "failed"
ENDED_STATUSES: Final = frozenset({"completed", INCOMPLETE, FAILED, CANCELLED})

LIFECYCLE_EVENTS: Final = frozenset(
    {
        b"response.queued",
        b"response.created",
        b"response.in_progress",
        b"response.completed",
        b"response.incomplete",
        b"response.failed",
        b"response.cancelled",
    }
)
"""The events carrying the whole response object (every other event is a piece of output)."""
TERMINAL_EVENTS: Final = frozenset(
    {b"response.completed", b"response.incomplete", b"response.failed", b"response.cancelled"}
)
CANCELLED_EVENT: Final = b"response.cancelled"
"""Ours: OpenAI documents no event for a cancelled stream; a tail must still end on one."""
INCOMPLETE_EVENT: Final = b"response.incomplete"

# `incomplete_details.reason` of the runs the gateway ended (OpenAI's reasons are the model's).
SHUTDOWN_REASON: Final = "gateway_shutdown"
"""The gateway drained past `--drain-timeout-s`, or died (found by another process)."""
ABANDONED_REASON: Final = "client_disconnected"
"""A resumable stream nobody resumed within `--resume-grace-s`."""

_decode = msgspec.json.decode


class RetrieveQuery(msgspec.Struct, frozen=True):
    """`GET /v1/responses/{id}?stream=true&starting_after=N`."""

    stream: bool = False
    starting_after: int = -1  # -1: from the first event


def parse_retrieve_query(query: bytes) -> RetrieveQuery:
    """The query string → what to answer; every parameter is honoured or a 400 naming it."""
    stream = False
    starting_after: int | None = None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name == "stream":
            stream = _flag(name, value)
        elif name == "starting_after":
            try:
                starting_after = int(value)
            except ValueError:
                raise ClientError(
                    f"starting_after must be an integer, got {value!r}", param=name
                ) from None
            if not 0 <= starting_after <= INT64_MAX:  # a sequence number: a store's int64
                raise ClientError(
                    f"starting_after must be in [0, {INT64_MAX}], got {shown(starting_after)}",
                    param=name,
                )
        elif name == "include_obfuscation":
            if _flag(name, value):
                raise ClientError(
                    "stream obfuscation is not supported: send include_obfuscation=false or "
                    "leave it out",
                    param=name,
                )
        else:  # `include` (logprobs, encrypted reasoning...) and anything else
            raise ClientError(f"{name} is not supported by this gateway's retrieve", param=name)
    if starting_after is not None and not stream:
        raise ClientError(
            "starting_after applies to a stream: add stream=true", param="starting_after"
        )
    return RetrieveQuery(stream, -1 if starting_after is None else starting_after)


def _flag(name: str, value: str) -> bool:
    if value in ("true", "True", "1"):
        return True
    if value in ("false", "False", "0"):
        return False
    raise ClientError(f"{name} must be true or false, got {value!r}", param=name)


def with_status(
    response: bytes,
    status: str,
    reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> bytes:
    """The response object `response` with another status (and `incomplete_details`, or the
    `error` of a failed one: its code and message)."""
    obj: dict[str, Any] = _decode(response)
    obj["status"] = status
    if status in ENDED_STATUSES:  # what was generated stays; an item cut short says so
        cut_items(obj.get("output"))
    if reason is not None:
        obj["incomplete_details"] = {"reason": reason}
    if error is not None:
        obj["error"] = error
    return JSON_ENCODER.encode(obj)


def error_of(data: bytes) -> dict[str, Any]:
    """A response's `error` (code and message) from an `error` event's data."""
    event: dict[str, Any] = _decode(data)
    return {"code": event.get("code"), "message": event.get("message")}


def ending_event(name: bytes, response: bytes) -> bytes:
    """The data (unnumbered) of the lifecycle event `name` carrying `response`."""
    return b'{"type":"' + name + b'","response":' + response + b"}"


def ending(response: bytes, status: str, reason: str | None = None) -> tuple[bytes, bytes, bytes]:
    """A run's last event for `status` the generation did not reach itself: its name, its
    data (unnumbered) and the response object it carries."""
    ended = with_status(response, status, reason)
    name = CANCELLED_EVENT if status == CANCELLED else INCOMPLETE_EVENT
    return name, ending_event(name, ended), ended
