"""I/O. Cross-origin browser access (CORS), as vLLM's front end offers it with
`--allowed-origins`, `--allowed-methods`, `--allowed-headers` and `--allow-credentials`
(docs/vllm-frontend.md §2; config `[cors]`): off unless origins are listed.

An ASGI wrapper around the gateway's app, for HTTP requests that carry an `Origin` header:

- a preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here: 200 with the
  allowed origin, methods (`*`: every standard method), headers (`*`: those the browser asked
  for; else the listed ones and the CORS-safelisted ones), credentials and a 600 s max age; or,
  when the origin, the method or a header is not allowed, a 400 error JSON naming which;
- any other request goes to the app, and its answer carries `Access-Control-Allow-Origin` (`*`
  when every origin is allowed and the request sends no cookie, else the origin itself with
  `Vary: Origin`, when it is allowed) and `Access-Control-Allow-Credentials` when set. Such a
  response goes through ASGI `send` (the connection's direct chunk writer, which would bypass
  these headers, is withheld from the app).

Requests without `Origin` (every non-browser client) and WebSockets pass through unchanged.
"""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.frontends.answers import header_map, send_error, send_json
from smg_trio.frontends.http.asgi_types import (
    DIRECT_CHUNKS_KEY,
    AsgiApp,
    Header,
    Message,
    Receive,
    Scope,
    Send,
)

EVERY_METHOD: Final = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
SAFELISTED_HEADERS: Final = frozenset(
    {"accept", "accept-language", "content-language", "content-type"}
)
PREFLIGHT_MAX_AGE_S: Final = 600


class CorsPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Who may call from a browser page of another origin (vLLM's flags, same defaults)."""

    allowed_origins: tuple[str, ...] = ()  # "*": any origin; empty: CORS off
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False


class CorsApp:
    """`app` behind the CORS rules of `policy`."""

    def __init__(self, app: AsgiApp, policy: CorsPolicy) -> None:
        self._app = app
        self._any_origin = "*" in policy.allowed_origins
        self._origins = frozenset(policy.allowed_origins)
        any_method = "*" in policy.allowed_methods
        self._methods = (
            EVERY_METHOD if any_method else tuple(m.upper() for m in policy.allowed_methods)
        )
        self._any_header = "*" in policy.allowed_headers
        self._headers = SAFELISTED_HEADERS | {h.lower() for h in policy.allowed_headers}
        self._credentials = policy.allow_credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope) if scope["type"] == "http" else {}
        origin = headers.get(b"origin")
        if origin is None:
            await self._app(scope, receive, send)
        elif scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            await self._preflight(origin, headers, send)
        else:
            await self._simple(scope, receive, send, origin, cookie=b"cookie" in headers)

    def _allowed(self, origin: bytes) -> bool:
        return self._any_origin or origin.decode("latin-1") in self._origins

    async def _preflight(self, origin: bytes, headers: dict[bytes, bytes], send: Send) -> None:
        method = headers[b"access-control-request-method"].decode("latin-1").upper()
        asked = headers.get(b"access-control-request-headers", b"").decode("latin-1")
        refused = []
        if not self._allowed(origin):
            refused.append("origin")
        if method not in self._methods:
            refused.append("method")
        wanted = {h.strip().lower() for h in asked.split(",") if h.strip()}
        if not self._any_header and not wanted <= self._headers:
            refused.append("headers")
        if refused:
            message = f"CORS preflight refused: this {', '.join(refused)} is not allowed"
            await send_error(send, ClientError(message, status=400, code="cors_refused"))
            return
        answer: list[Header] = [
            *self._origin_headers(origin, explicit=not self._any_origin or self._credentials),
            (b"access-control-allow-methods", ", ".join(self._methods).encode()),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
        ]
        if self._any_header:
            if asked:
                answer.append((b"access-control-allow-headers", asked.encode("latin-1")))
        else:
            listed = ", ".join(sorted(self._headers)).encode()
            answer.append((b"access-control-allow-headers", listed))
        await send_json(send, 200, b"{}", answer)

    async def _simple(
        self, scope: Scope, receive: Receive, send: Send, origin: bytes, *, cookie: bool
    ) -> None:
        added: list[Header] = []
        if self._allowed(origin):
            added = self._origin_headers(origin, explicit=not self._any_origin or cookie)
        elif self._credentials:
            added = [(b"access-control-allow-credentials", b"true")]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *added]}
            await send(message)

        state = scope.get("state")
        if isinstance(state, dict) and DIRECT_CHUNKS_KEY in state:
            bare = {key: value for key, value in state.items() if key != DIRECT_CHUNKS_KEY}
            scope = {**scope, "state": bare}
        await self._app(scope, receive, send_with_cors)

    def _origin_headers(self, origin: bytes, *, explicit: bool) -> list[Header]:
        headers = [(b"access-control-allow-origin", origin if explicit else b"*")]
        if explicit:
            headers.append((b"vary", b"Origin"))
        if self._credentials:
            headers.append((b"access-control-allow-credentials", b"true"))
        return headers
