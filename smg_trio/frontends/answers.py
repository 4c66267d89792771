"""I/O. Complete (non-streaming) HTTP responses over ASGI: JSON bodies and OpenAI error JSON.

Every error a client sees before the first byte of a response is OpenAI's error object with the
error's status, plus an `x-error-code` header carrying the same code, so a proxy or a log line can
classify failures without parsing the body. This module also names the ASGI callable types the
front ends share (defined with the HTTP server, `frontends/http/asgi_types.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import trio

from smg_trio.core.api_dialect import OPENAI, ApiDialect
from smg_trio.errors import GatewayError, Overloaded
from smg_trio.frontends.http.asgi_types import Header, Receive, Scope, Send

ERROR_CODE_HEADER: Final = b"x-error-code"
JSON_CONTENT_TYPE: Final = (b"content-type", b"application/json")
CONNECTION_CLOSE: Final = (b"connection", b"close")


def client_address(scope: Mapping[str, object]) -> str:
    """The peer as `host:port` for logs (`-` when the server does not say)."""
    client = scope.get("client")
    if isinstance(client, tuple | list) and len(client) == 2:
        return f"{client[0]}:{client[1]}"
    return "-"


def http_transport(scope: Mapping[str, object]) -> str:
    """The metrics' transport label of an HTTP scope: `h2` or `http1`."""
    return "h2" if scope.get("http_version") == "2" else "http1"


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """A scope's headers by name."""
    # ASGI servers give lower-case names; a repeated header keeps its last value.
    return {bytes(name).lower(): bytes(value) for name, value in scope["headers"]}


async def send_json(
    send: Send,
    status: int,
    body: bytes,
    headers: Iterable[Header] = (),
    *,
    content_type: bytes = JSON_CONTENT_TYPE[1],
) -> None:
    """A whole response (JSON unless `content_type` says otherwise): start and body in one go
    (the body is never streamed)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(
    send: Send,
    error: GatewayError,
    headers: Iterable[Header] = (),
    *,
    dialect: ApiDialect = OPENAI,
) -> None:
    """The error in the API's shape (OpenAI error JSON unless `dialect` says otherwise) with its
    status and its code in `x-error-code` (and, for a 429 from admission control,
    `Retry-After`: docs/routing.md §5)."""
    extra = [(ERROR_CODE_HEADER, error.code.encode()), *headers]
    if isinstance(error, Overloaded):
        extra.append((b"retry-after", str(error.retry_after_s).encode()))
    await send_json(send, dialect.error_status(error), dialect.error_body(error), extra)


async def send_error_discarding_body(
    receive: Receive,
    send: Send,
    error: GatewayError,
    headers: Iterable[Header] = (),
    *,
    dialect: ApiDialect = OPENAI,
    http1: bool = False,
) -> None:
    """Answer a request whose body was not read, discarding (never storing) what still arrives.

    hypercorn hands body chunks to the app through a small bounded queue and closes the stream
    by queueing one more message; an app that stops reading mid-body would leave that put
    blocked and the response stuck. Reading while the answer goes out keeps it moving.

    Over HTTP/1.x (`http1`), a body still arriving when the answer goes out means hypercorn
    closes the connection after it, so the answer says `Connection: close` (RFC 9112 §9.6):
    a client must not send its next request on it. A body already all queued is read first,
    and the connection stays open.
    """
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(discard_request_body, receive, ended)
        if http1:
            await trio.lowlevel.checkpoint()  # the discarder takes what is already queued
            if not ended.is_set():
                headers = [*headers, CONNECTION_CLOSE]
        await send_error(send, error, headers, dialect=dialect)
        nursery.cancel_scope.cancel()


async def discard_request_body(receive: Receive, ended: trio.Event | None = None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            if ended is not None:
                ended.set()
            return


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """The ASGI lifespan protocol with nothing to start or stop: acknowledge both."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
