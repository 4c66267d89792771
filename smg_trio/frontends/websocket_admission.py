"""I/O. Which WebSocket front end serves a connection, and whether it may open at all.

    GET /v1/ws (WebSocket)         → frontends.websocket (our multiplexed protocol)
    GET /v1/responses (WebSocket)  → frontends.responses_socket (OpenAI's Responses WebSocket mode)

- A socket on any other path, or without the API key (when one is configured), is closed with
  1008 before it is accepted; its key names the tenant of its every request (docs/fleet.md §2).
- Each front end is imported on first use: HTTP-only deployments need none of them. One that
  cannot be imported is logged and its socket closed with 1011.
- At most `max_websockets` WebSockets are open at once; one more is accepted and closed at once
  with 1013 "try again later" (docs/http.md §2).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final, cast

from smg_trio.errors import ClientError
from smg_trio.frontends.answers import header_map
from smg_trio.frontends.caller_auth import CallerAuth
from smg_trio.frontends.http.asgi_types import Receive, Scope, Send
from smg_trio.request.gateway import Gateway
from smg_trio.request.routes import (
    RESPONSES_WEBSOCKET_PROTOCOL,
    WEBSOCKET_PROTOCOL,
    websocket_protocol,
)
from smg_trio.tenancy.api_keys import Tenant

logger = logging.getLogger(__name__)

WEBSOCKET_POLICY_VIOLATION: Final = 1008
WEBSOCKET_INTERNAL_ERROR: Final = 1011
WEBSOCKET_TRY_AGAIN_LATER: Final = 1013

# Each WebSocket protocol (its paths: the route table's `websocket`) and the module serving it
# (its `handle_websocket`), imported on first use.
WEBSOCKET_MODULES: Final = {
    WEBSOCKET_PROTOCOL: "smg_trio.frontends.websocket",
    RESPONSES_WEBSOCKET_PROTOCOL: "smg_trio.frontends.responses_socket",
}

WebSocketHandler = Callable[[Gateway, Scope, Receive, Send, Tenant | None], Awaitable[None]]


class WebSocketAdmission:
    """The gateway's WebSocket connections: routed to their front end, counted, capped."""

    def __init__(self, gateway: Gateway, auth: CallerAuth, max_websockets: int) -> None:
        self.gateway = gateway
        self._auth = auth
        self._max_websockets = max_websockets
        self.open_websockets = 0

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One WebSocket connection's ASGI scope, from its first message to its close."""
        protocol = websocket_protocol(scope["path"])
        module = None if protocol is None else WEBSOCKET_MODULES[protocol]
        if module is None:
            await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
            return
        try:
            tenant = self._auth.tenant_of(header_map(scope))
        except ClientError:
            await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
            return
        handler = _websocket_handler(module)
        if handler is None:
            await send({"type": "websocket.close", "code": WEBSOCKET_INTERNAL_ERROR})
            return
        if self.open_websockets >= self._max_websockets:
            await _refuse_websocket(receive, send)
            return
        self.open_websockets += 1
        try:
            await handler(self.gateway, scope, receive, send, tenant)
        finally:
            self.open_websockets -= 1


def _websocket_handler(name: str) -> WebSocketHandler | None:
    # Imported on first use: the WebSocket front ends are optional for HTTP-only deployments.
    try:
        module = importlib.import_module(name)
    except ImportError:
        logger.exception("the WebSocket front end is not available")
        return None
    return cast(WebSocketHandler, module.handle_websocket)


async def _refuse_websocket(receive: Receive, send: Send) -> None:
    # A close before the accept would be an HTTP 403; accepting first lets the client read
    # the code: 1013 "try again later" (RFC 6455 §7.4.1 registry).
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send(
        {
            "type": "websocket.close",
            "code": WEBSOCKET_TRY_AGAIN_LATER,
            "reason": "the server is at its WebSocket limit",
        }
    )
