"""I/O. A request refused before its body was read: the error is its whole answer.

The answer is the error in its path's API (OpenAI's error JSON, or Anthropic's on its paths),
with the headers its status calls for: `Allow` on a 405, `WWW-Authenticate: Bearer` on a 401,
`Retry-After` when the memory budget is exhausted (docs/limits.md §4). The body still arriving
is discarded as the answer goes out (`responses.send_error_discarding_body`).
"""

from __future__ import annotations

from smg_trio.errors import ClientError, GatewayError
from smg_trio.frontends.answers import http_transport, send_error_discarding_body
from smg_trio.frontends.api_paths import dialect_for_path
from smg_trio.frontends.http.asgi_types import Header, Receive, Scope, Send
from smg_trio.request.memory_budget import MemoryBudgetExceeded


class MethodNotAllowed(ClientError):
    """A known path asked with a method it does not take: 405, with the methods it takes."""

    def __init__(self, method: str, path: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"{method} is not allowed on {path}; use {' or '.join(allowed)}",
            status=405,
            code="method_not_allowed",
        )
        self.allowed = allowed


def error_headers(error: GatewayError) -> list[Header]:
    """The headers `error`'s status calls for, beside its JSON."""
    if isinstance(error, MethodNotAllowed):
        return [(b"allow", ", ".join(error.allowed).encode())]
    if error.status == 401:
        return [(b"www-authenticate", b"Bearer")]
    if isinstance(error, MemoryBudgetExceeded):
        return [(b"retry-after", str(error.retry_after_s).encode())]
    return []


async def refuse(
    scope: Scope, receive: Receive, send: Send, error: GatewayError, *headers: Header
) -> None:
    """`error` as the whole answer to a request whose body was not read, in its path's API."""
    dialect, http1 = dialect_for_path(scope["path"]), http_transport(scope) == "http1"
    await send_error_discarding_body(receive, send, error, headers, dialect=dialect, http1=http1)
