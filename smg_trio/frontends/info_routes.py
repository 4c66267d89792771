"""I/O. The GET routes answered from the gateway's own state, without an engine or a body.

    GET  /health, /readiness  → 200 while ready to take requests (a worker ready, not
                                draining), else 503 with the reason (docs/resilience.md §4)
    GET  /liveness            → 200 while the process serves at all
    GET  /metrics             → Prometheus text (observability.metrics)
    GET  /v1/models           → the served model names (served_models.py)
    GET  /version             → `{"version": smg-trio's}`, as vLLM's (docs/client-apis.md §4)

Each also answers HEAD. The probes and `/metrics` are never behind the API key (`OPEN_PATHS`):
orchestrators' probes and scrapers carry no key, and vLLM leaves them open too.
"""

from __future__ import annotations

from typing import Final

import smg_trio
from smg_trio.frontends.metrics_app import METRICS_PATH, send_metrics
from smg_trio.frontends.responses import Send, send_json
from smg_trio.gateway import Gateway

HEALTH_PATH: Final = "/health"
READINESS_PATH: Final = "/readiness"
LIVENESS_PATH: Final = "/liveness"
# Orchestrators' probes (docs/resilience.md §4): never behind the API key.
PROBE_PATHS: Final = (HEALTH_PATH, READINESS_PATH, LIVENESS_PATH)
OPEN_PATHS: Final = (*PROBE_PATHS, METRICS_PATH)
MODELS_PATH: Final = "/v1/models"
# vLLM's `GET /version` shape, with our own version: the server answering is smg-trio, whatever
# engine runs behind it (docs/client-apis.md §4).
VERSION_PATH: Final = "/version"
VERSION_BODY: Final = b'{"version":"' + smg_trio.__version__.encode() + b'"}'
INFO_ROUTE_METHODS: Final[dict[str, tuple[str, ...]]] = {
    MODELS_PATH: ("GET", "HEAD"),
    VERSION_PATH: ("GET", "HEAD"),
    **dict.fromkeys(PROBE_PATHS, ("GET", "HEAD")),
    METRICS_PATH: ("GET", "HEAD"),
}
HEALTHY_BODY: Final = b'{"status":"ok"}'


async def answer_info(gateway: Gateway, path: str, send: Send) -> None:
    """The answer of one of `INFO_ROUTE_METHODS`' paths."""
    if path == LIVENESS_PATH:
        await send_json(send, 200, HEALTHY_BODY)
    elif path in PROBE_PATHS:
        await _health(gateway, send)
    elif path == METRICS_PATH:
        await send_metrics(send, gateway.metrics)
    elif path == MODELS_PATH:
        await send_json(send, 200, gateway.models.body())
    elif path == VERSION_PATH:
        await send_json(send, 200, VERSION_BODY)
    else:
        raise ValueError(f"{path} is not an info route")


async def _health(gateway: Gateway, send: Send) -> None:
    if gateway.ready:
        await send_json(send, 200, HEALTHY_BODY)
    else:
        reason = gateway.unready_reason().encode()
        await send_json(send, 503, b'{"status":"unavailable","reason":"' + reason + b'"}')
