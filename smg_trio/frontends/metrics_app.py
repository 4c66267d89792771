"""I/O. The ASGI application of `--metrics-port`, and the `/metrics` answer both ports give.

The exposition is rendered inline (a few ms), so a scrape never waits behind the streams
(docs/observability.md §1).
"""

from __future__ import annotations

from typing import Final

from smg_trio.errors import ClientError
from smg_trio.frontends.answers import (
    answer_lifespan,
    http_transport,
    send_error_discarding_body,
    send_json,
)
from smg_trio.frontends.http.asgi_types import Receive, Scope, Send
from smg_trio.observability.metrics import EXPOSITION_CONTENT_TYPE, GatewayMetrics
from smg_trio.request.routes import METRICS_PATH

WEBSOCKET_POLICY_VIOLATION: Final = 1008


async def send_metrics(send: Send, metrics: GatewayMetrics) -> None:
    """The Prometheus text exposition; rendered inline (a few ms), so a scrape never waits
    behind the streams (docs/observability.md §1)."""
    await send_json(send, 200, metrics.exposition(), content_type=EXPOSITION_CONTENT_TYPE)


class MetricsApp:
    """The ASGI application of `--metrics-port`: `GET /metrics` and nothing else."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
        elif scope["path"] == METRICS_PATH and scope["method"] in ("GET", "HEAD"):
            await send_metrics(send, self._metrics)
        else:
            error = ClientError(
                f"this port serves only GET {METRICS_PATH}", status=404, code="not_found"
            )
            http1 = http_transport(scope) == "http1"
            await send_error_discarding_body(receive, send, error, http1=http1)
