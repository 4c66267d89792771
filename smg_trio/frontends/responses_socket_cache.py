"""I/O. A Responses WebSocket's connection-local cache (docs/client-apis.md §3.4): the socket's
recent responses, so `previous_response_id` chains on the socket with `store: false` too, as
OpenAI's WebSocket mode does; with `store: true` the store is read on a miss.

`SocketResponses` is the store's side of /v1/responses for the requests of one socket
(the `responses` of each request's `Arrival`, request/arrival.py): `history` looks in the cache first; `storing` puts a
`CachingSink` under the store's `StoringSink`, so a response is cached once it is whole, after
the store kept it (when it was to be kept) and before the client hears its end: a client that
reads the end can chain on it at once, and a response whose store write failed (the client
got the failure instead) is not cached. An id neither cached nor stored is OpenAI's
`previous_response_not_found` (404). The cache holds `MAX_CACHED_RESPONSES` conversations,
the least recently used dropped first; it lives and dies with the socket.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import msgspec

from smg_trio.core.api_dialect import split_named_events
from smg_trio.core.endpoint_renderers import response_id
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientError
from smg_trio.responses.store.service import ResponseNotFound, ResponsesService
from smg_trio.sink import ClientSink, ForwardingSink
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_api import decode_head

MAX_CACHED_RESPONSES: Final = 32
"""Conversations one socket keeps (OpenAI's WebSocket mode accepts 32 named lanes a socket)."""
_decode = msgspec.json.decode
_ENDS: Final = (b"response.completed", b"response.incomplete")


class PreviousResponseNotFound(ClientError):
    """OpenAI's WebSocket error for a `previous_response_id` it cannot resolve."""

    def __init__(self, previous: str) -> None:
        super().__init__(
            f"Previous response with id '{previous}' not found.",
            status=404,
            code="previous_response_not_found",
            param="previous_response_id",
        )


class SocketResponses(ResponsesService):
    """The store's side of /v1/responses for one socket, its recent responses first."""

    def __init__(self, shared: ResponsesService) -> None:
        super().__init__(shared.store)
        self._recent: OrderedDict[str, bytes] = OrderedDict()  # response id → conversation

    def remember(self, rid: str, conversation: bytes) -> None:
        self._recent[rid] = conversation
        self._recent.move_to_end(rid)
        while len(self._recent) > MAX_CACHED_RESPONSES:
            self._recent.popitem(last=False)

    def knows(self, rid: str) -> bool:
        """Whether `rid` is one of the socket's recent finished responses."""
        return rid in self._recent

    async def history(self, body: bytes) -> list[Any]:
        previous = decode_head(body).previous_response_id
        if previous is None:
            return []
        cached = self._recent.get(previous)
        if cached is not None:
            self._recent.move_to_end(previous)
            items: list[Any] = _decode(cached)
            return items
        if self.store is None:
            raise PreviousResponseNotFound(previous)
        try:
            return await super().history(body)
        except ResponseNotFound:
            raise PreviousResponseNotFound(previous) from None

    def storing(self, plan: GeneratePlan, sink: ClientSink) -> ClientSink:
        settings = plan.responses
        if settings is None:
            return sink
        cached = CachingSink(sink, self, settings.conversation, response_id(plan))
        return super().storing(plan, cached)


class CachingSink(ForwardingSink):
    """A `ClientSink` that caches the finished response's conversation before its end goes."""

    def __init__(
        self, sink: ClientSink, cache: SocketResponses, conversation: bytes, rid: str
    ) -> None:
        super().__init__(sink)
        self._cache = cache
        self._conversation = conversation  # the turn's input items, the continued turn's first
        self._id = rid

    async def end_stream(self, end: StreamEnd) -> None:
        last = end.payloads[-1] if end.payloads else b""
        for name, data in split_named_events(last):
            if name in _ENDS:
                output = _decode(data)["response"].get("output", ())
                conversation = [*_decode(self._conversation), *output]
                self._cache.remember(self._id, JSON_ENCODER.encode(conversation))
        await self._sink.end_stream(end)
