"""I/O. `GET` and `DELETE /v1/responses/{id}`: a stored response as it was sent, or OpenAI's
deletion object; an unknown id is vLLM's 404 (docs/client-apis.md §3.3). Behind the API key
like every API path."""

from __future__ import annotations

from typing import Final

from smg_trio.errors import ClientError
from smg_trio.frontends.responses import Send, send_json
from smg_trio.response_store.service import ResponsesService

STORED_RESPONSE_PREFIX: Final = "/v1/responses/"
STORED_RESPONSE_METHODS: Final = ("GET", "DELETE")


def is_stored_response_path(path: str) -> bool:
    """`/v1/responses/{id}` (one path segment after the prefix)."""
    rest = path.removeprefix(STORED_RESPONSE_PREFIX)
    return rest != path and bool(rest) and "/" not in rest


async def serve_stored_response(
    service: ResponsesService, method: str, path: str, send: Send
) -> None:
    response_id = path.removeprefix(STORED_RESPONSE_PREFIX)
    if method == "GET":
        await send_json(send, 200, await service.retrieve(response_id))
    elif method == "DELETE":
        await send_json(send, 200, await service.delete(response_id))
    else:
        raise ClientError(
            f"{method} is not allowed on {path}; use GET or DELETE",
            status=405,
            code="method_not_allowed",
        )
