"""I/O. What `/v1/responses` asks of the response store (docs/client-apis.md §3.3): the stored
conversation a `previous_response_id` continues (read before the body is prepared), keeping a
finished response when its request said `store` (OpenAI's default: true), and
`GET`/`DELETE /v1/responses/{id}`.

A response is kept once it is whole and before the client hears it ended: `StoringSink` stands
in front of the client's sink and, on the non-streaming body or the stream's last event
(`response.completed` / `response.incomplete`), writes it and only then sends it, so a client
that reads the end can fetch it at once. When the write fails, the client gets the store's 503
instead of that end (its request did not do what it asked). Failed responses are not kept.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from smg_trio.core.api_dialect import split_named_events
from smg_trio.core.endpoint_renderers import response_id
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientError, GatewayError
from smg_trio.responses.store.stores import ResponseStore, StoredResponse
from smg_trio.sink import ClientSink, ForwardingSink
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_api import decode_head
from smg_trio.wire.responses_objects import DeletedResponse, ResponseSettings

_decode = msgspec.json.decode


class ResponseNotFound(ClientError):
    """An id no stored response has: vLLM's 404 (message, type and param)."""

    def __init__(self, response_id: str, param: str = "response_id") -> None:
        super().__init__(
            f"Response with id '{response_id}' not found.",
            status=404,
            code="not_found",
            param=param,
        )

    @property
    def error_type(self) -> str:
        return "invalid_request_error"


class ResponsesService:
    """The store's side of `/v1/responses`; `store` None: this gateway keeps nothing."""

    def __init__(self, store: ResponseStore | None) -> None:
        self.store = store

    def _required(self, param: str) -> ResponseStore:
        if self.store is None:
            raise ClientError(
                "this gateway keeps no responses (start it with --response-store)", param=param
            )
        return self.store

    async def history(self, body: bytes) -> list[Any]:
        """The stored items a body's `previous_response_id` continues ([] without one)."""
        previous = decode_head(body).previous_response_id
        if previous is None:
            return []
        stored = await self._required("previous_response_id").get(previous)
        if stored is None:
            raise ResponseNotFound(previous, "previous_response_id")
        items: list[Any] = _decode(stored.conversation)
        return items

    def storing(self, plan: GeneratePlan, sink: ClientSink) -> ClientSink:
        """`sink`, or a sink that keeps the response first when the request asked."""
        settings = plan.responses
        if settings is None or not settings.store:
            return sink
        return StoringSink(sink, self._required("store"), settings, response_id(plan))

    async def retrieve(self, response_id: str) -> bytes:
        stored = await self._required("response_id").get(response_id)
        if stored is None:
            raise ResponseNotFound(response_id)
        return stored.response

    async def delete(self, response_id: str) -> bytes:
        if not await self._required("response_id").delete(response_id):
            raise ResponseNotFound(response_id)
        return JSON_ENCODER.encode(DeletedResponse(response_id))


class StoringSink(ForwardingSink):
    """A `ClientSink` that keeps the finished response before the client hears its end."""

    def __init__(
        self, sink: ClientSink, store: ResponseStore, settings: ResponseSettings, rid: str
    ) -> None:
        super().__init__(sink)
        self._store = store
        self._settings = settings
        self._id = rid

    async def send_body(self, body: bytes) -> None:
        if await self._kept(_decode(body)):
            await self._sink.send_body(body)

    async def end_stream(self, end: StreamEnd) -> None:
        last = end.payloads[-1] if end.payloads else b""
        response = None
        for name, data in split_named_events(last):
            if name in (b"response.completed", b"response.incomplete"):
                response = _decode(data)["response"]
        if response is None or await self._kept(response):
            await self._sink.end_stream(end)

    async def _kept(self, response: dict[str, Any]) -> bool:
        """Write `response` with its conversation; False (the client told) when that failed."""
        conversation = [*_decode(self._settings.conversation), *response.get("output", ())]
        stored = StoredResponse(
            id=self._id,
            created_at=int(response.get("created_at", time.time())),
            response=JSON_ENCODER.encode(response),
            conversation=JSON_ENCODER.encode(conversation),
        )
        try:
            await self._store.put(stored)
        except GatewayError as error:
            await self._sink.fail(error)
            return False
        return True
