"""I/O. The GET routes answered from the gateway's own state, without an engine or a body.

    GET  /health, /readiness  → 200 while ready to take requests (a worker ready, not
                                draining), else 503 with the reason (docs/resilience.md §4)
    GET  /liveness            → 200 while the process serves at all
    GET  /metrics             → Prometheus text (observability.metrics)
    GET  /v1/models           → the served model names (request/served_models.py)
    GET  /version             → `{"version": smg-trio's}`, as vLLM's (docs/client-apis.md §4)

Each also answers HEAD (the route table, request/routes.py, declares the paths and methods).
The probes and `/metrics` are never behind the API key (their routes are `open`): orchestrators'
probes and scrapers carry no key, and vLLM leaves them open too.
"""

from __future__ import annotations

from typing import Final

import smg_trio
from smg_trio.frontends.answers import send_json
from smg_trio.frontends.http.asgi_types import Send
from smg_trio.frontends.metrics_app import send_metrics
from smg_trio.request.gateway import Gateway
from smg_trio.request.routes import RouteKind
from smg_trio.tenancy.api_keys import Tenant

# vLLM's `GET /version` shape, with our own version: the server answering is smg-trio, whatever
# engine runs behind it (docs/client-apis.md §4).
VERSION_BODY: Final = b'{"version":"' + smg_trio.__version__.encode() + b'"}'
HEALTHY_BODY: Final = b'{"status":"ok"}'


async def answer_info(
    gateway: Gateway, kind: RouteKind, send: Send, tenant: Tenant | None = None
) -> None:
    """The answer of a route of one of the `INFO_KINDS` (request/routes.py); `/v1/models`
    lists only the models `tenant` may use (docs/fleet.md §4)."""
    match kind:
        case RouteKind.LIVENESS:
            await send_json(send, 200, HEALTHY_BODY)
        case RouteKind.HEALTH:
            await _health(gateway, send)
        case RouteKind.METRICS:
            await send_metrics(send, gateway.metrics)
        case RouteKind.MODELS:
            await send_json(send, 200, gateway.models.body(tenant))
        case RouteKind.VERSION:
            await send_json(send, 200, VERSION_BODY)
        case _:
            raise ValueError(f"{kind} is not an info route")


async def _health(gateway: Gateway, send: Send) -> None:
    if gateway.ready:
        await send_json(send, 200, HEALTHY_BODY)
    else:
        reason = gateway.unready_reason().encode()
        await send_json(send, 503, b'{"status":"unavailable","reason":"' + reason + b'"}')
