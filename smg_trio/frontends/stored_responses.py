"""I/O. `GET` and `DELETE /v1/responses/{id}`: a stored response as it was sent, or OpenAI's
deletion object; an unknown id is vLLM's 404 (docs/client-apis.md §3.3). Behind the API key
like every API path."""

from __future__ import annotations

from smg_trio.frontends.answers import send_json
from smg_trio.frontends.http.asgi_types import Send
from smg_trio.request.routes import path_id
from smg_trio.responses.store.service import ResponsesService


async def serve_stored_response(
    service: ResponsesService, method: str, path: str, send: Send
) -> None:
    response_id = path_id(path)
    if method == "GET":
        await send_json(send, 200, await service.retrieve(response_id))
    else:  # DELETE (the only other method its route takes)
        await send_json(send, 200, await service.delete(response_id))
