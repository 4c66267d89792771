"""Pure. What the reference engines received, per request id, for tests: the request's sampling
fields exactly as the engine decoded them off its wire, so a test can check that a value the
client sent (a structured-output constraint, a logit bias, ...) reached the engine intact.

A test-only extension: no real engine keeps this and no gateway reads it. The ZMQ engines answer
the `smg_trio_received` utility call with it (`engines.batching`), the gRPC engines the
`EngineCounters.GetReceived` RPC (`protos/smg_trio_engine.proto`). Bounded: the most recent
`RECEIVED_KEPT` requests are kept, so a long benchmark never grows it. Looked up by a part of
the engine request id (`latest`).
"""

from __future__ import annotations

import collections
from typing import Any, Final

RECEIVED_KEPT: Final = 256


class ReceivedLog:
    def __init__(self, kept: int = RECEIVED_KEPT) -> None:
        self._kept = kept
        self._fields: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()

    def record(self, request_id: str, fields: dict[str, Any]) -> None:
        self._fields.pop(request_id, None)
        self._fields[request_id] = fields
        while len(self._fields) > self._kept:
            self._fields.popitem(last=False)

    def latest(self, fragment: str) -> dict[str, Any] | None:
        """The most recent request whose id contains `fragment`: a gateway makes the engine id
        from the client's `x-request-id` plus a random suffix, so a test knows only a part."""
        for request_id in reversed(self._fields):
            if fragment in request_id:
                return self._fields[request_id]
        return None
