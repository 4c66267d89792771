"""Pure. The OpenAI Responses API's dialect: named events, each numbered with
`sequence_number` as it is framed (docs/client-apis.md §1, §3.2).

The renderer (core/responses_rendering.py) makes events without numbers; one dialect object
lives for one response, so it counts them here, whichever transport frames them (SSE or the
WebSocket's chunk frames), and the final error events too. The number is spliced in front of
each event's closing brace: per event, one split and a join, never a JSON parse.

A mid-stream failure is OpenAI's pair: an `error` event (`code`, `message`, `param`) and then
`response.failed`, the response as `response.created` announced it with `status: "failed"` and
its `error`. Errors before the first byte are OpenAI's error JSON with the status (the dialect's
default), as vLLM's /v1/responses answers them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from smg_trio.core.api_dialect import NamedEventDialect, named_event, split_named_events
from smg_trio.errors import ClientError, GatewayError
from smg_trio.wire.openai_responses import JSON_ENCODER

_CREATED = b"response.created"
_EVENT_TAIL = b"}\n\n"
_NUMBER = b',"sequence_number":%d}\n\n'
_decode = msgspec.json.decode


class ResponsesDialect(NamedEventDialect):
    """Named events numbered from 0, for one response."""

    __slots__ = ("_created", "_next")

    def __init__(self) -> None:
        self._next = 0
        self._created: bytes | None = None  # the response.created event's data

    def _numbered(self, payloads: Sequence[bytes]) -> Iterator[tuple[bytes, bytes]]:
        for payload in payloads:
            for name, data in split_named_events(payload):
                if self._created is None and name == _CREATED:
                    self._created = data
                number = self._next
                self._next = number + 1
                yield name, data[:-1] + b',"sequence_number":%d}' % number

    def numbered(self, payloads: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
        """Each event's name and numbered data, as the event log keeps them
        (docs/client-apis.md §3.5)."""
        return list(self._numbered(payloads))

    def failure_events(self, err: GatewayError) -> list[bytes]:
        """The events (unnumbered) that end an open stream with `err`."""
        return self._failure_events(err)

    def frame(self, payloads: Sequence[bytes]) -> bytes:
        # The per-token path: every event ends `}\n\n` (JSON data holds no raw newline), so
        # one split finds where each number goes; no event is taken apart.
        out: list[bytes] = []
        number = self._next
        for payload in payloads:
            events = payload.split(_EVENT_TAIL)
            if self._created is None:
                self._remember_created(payload)
            for event in events[:-1]:  # the last piece is the empty tail after the last event
                out.append(event)
                out.append(_NUMBER % number)
                number += 1
        self._next = number
        return b"".join(out)

    def _remember_created(self, payload: bytes) -> None:
        for name, data in split_named_events(payload):
            if name == _CREATED:
                self._created = data

    def end(self, payloads: Sequence[bytes]) -> bytes:
        return self.frame(payloads)

    def stream_error(self, err: GatewayError) -> bytes:
        return self.frame(self._failure_events(err))

    def websocket_frames(self, stream_id: str | int, payloads: Sequence[bytes]) -> list[bytes]:
        numbered = [named_event(name, data) for name, data in self._numbered(payloads)]
        return super().websocket_frames(stream_id, numbered)

    def _failure_events(self, err: GatewayError) -> list[bytes]:
        param = err.param if isinstance(err, ClientError) else None
        code = err.code or err.error_type
        error = JSON_ENCODER.encode(
            {"type": "error", "code": code, "message": err.message, "param": param}
        )
        events = [named_event(b"error", error)]
        if self._created is not None:
            created: dict[str, Any] = _decode(self._created)
            response = created["response"]
            response["status"] = "failed"
            response["error"] = {"code": code, "message": err.message}
            failed = JSON_ENCODER.encode({"type": "response.failed", "response": response})
            events.append(named_event(b"response.failed", failed))
        return events
