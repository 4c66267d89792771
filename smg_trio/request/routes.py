"""Pure. The route table: every path the gateway serves, with its methods, declared once.

Every listener reads it: the ASGI app (`frontends/asgi.py`) dispatches an HTTP request on its
route's `kind`; a WebSocket upgrade is served on the paths whose route names a
`websocket` protocol; the probe listener of `serve --processes N`
(`frontends/http/probe_server.py`) answers the routes marked `probe`.

    POST /v1/chat/completions, /v1/completions, /generate,    → GENERATE (Gateway.handle)
         /inference/v1/generate, /v1/responses, /v1/messages
    POST /v1/tokenize, /v1/detokenize, /tokenize,             → TOKENS (Gateway.handle, JSON)
         /detokenize, /v1/messages/count_tokens
    POST /v1/embeddings, /pooling, /classify,                 → POOLING (Gateway.handle, JSON)
         /score, /v1/score, /rerank, /v1/rerank, /v2/rerank
    GET  /health, /readiness, /liveness, /metrics,            → info routes (no engine, no body)
         /v1/models, /version (and HEAD)
    GET  /tokenizer_info                                      → vLLM's, when enabled (else 404)
    POST /inference/v1/abort_requests                         → vLLM's scale-out abort (its
                                                                --enable-scale-out; else 403)
    POST /v1/{chat/completions,completions,messages,          → vLLM's scale-out render paths
         responses}/render, /v1/{chat/completions,              (not implemented: 501; without
         completions}/derender                                  the flag 403, as vLLM's)
    POST /collective_rpc                                      → vLLM's dev-mode RPC to the
                                                                engines (else 404)
    GET, POST /workers; DELETE /workers/{id}                  → the workers API (admin key)
    GET, DELETE /v1/responses/{id}; POST .../{id}/cancel      → stored responses and runs
    WebSocket /v1/ws, /v1/responses                           → the WebSocket protocols

A path is one route: exact paths first, then the three with an id segment.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from smg_trio.request.endpoints import (
    GENERATE_PATHS,
    POOLING_PATHS,
    RESPONSES_PATH,
    SCORING_PATHS,
    TOKEN_PATHS,
)


class RouteKind(enum.Enum):
    """What serves a route."""

    GENERATE = "generate"
    """A generation body for `Gateway.handle` (SSE or JSON)."""
    TOKENS = "tokens"
    """A tokenizer body for `Gateway.handle` (JSON)."""
    POOLING = "pooling"
    """A pooling or scoring body for `Gateway.handle` (JSON; docs/pooling.md)."""
    HEALTH = "health"
    """200 while ready to take requests, else 503 with the reason."""
    LIVENESS = "liveness"
    """200 while the process serves at all."""
    METRICS = "metrics"
    """Prometheus text."""
    MODELS = "models"
    """The served models' cards."""
    VERSION = "version"
    """smg-trio's version, in vLLM's shape."""
    WORKERS = "workers"
    """The workers API's collection (admin key)."""
    WORKER = "worker"
    """One worker of the workers API (admin key)."""
    STORED_RESPONSE = "stored_response"
    """A stored (or running) response by id."""
    CANCEL_RESPONSE = "cancel_response"
    """Cancel a background response by id."""
    TOKENIZER_INFO = "tokenizer_info"
    """vLLM's tokenizer configuration (`--enable-tokenizer-info-endpoint`; else 404)."""
    WEBSOCKET_ONLY = "websocket_only"
    """A path served only over WebSocket (over plain HTTP: 426)."""
    ABORT_REQUESTS = "abort_requests"
    """vLLM's scale-out abort of running requests by id (docs/vllm-frontend.md §9)."""
    RENDER = "render"
    """vLLM's scale-out render and derender paths (docs/vllm-frontend.md §9)."""
    COLLECTIVE_RPC = "collective_rpc"
    """vLLM's dev-mode RPC to the engines' workers (docs/vllm-frontend.md §10)."""


INFO_KINDS: Final = frozenset(
    {RouteKind.HEALTH, RouteKind.LIVENESS, RouteKind.METRICS, RouteKind.MODELS, RouteKind.VERSION}
)
"""Answered from the gateway's own state, without an engine or a body."""


@dataclass(frozen=True, slots=True)
class Route:
    """One path's route: what serves it and how it may be asked."""

    kind: RouteKind
    methods: tuple[str, ...]
    open: bool = False
    """Served without an API key (orchestrators' probes and scrapers carry none; vLLM leaves
    them open too)."""
    probe: bool = False
    """Answered by the probe listener too (`serve --processes N`, docs/processes.md)."""
    websocket: str | None = None
    """The WebSocket protocol served on this path after an upgrade, if any."""


HEALTH_PATH: Final = "/health"
READINESS_PATH: Final = "/readiness"
LIVENESS_PATH: Final = "/liveness"
METRICS_PATH: Final = "/metrics"
MODELS_PATH: Final = "/v1/models"
VERSION_PATH: Final = "/version"
TOKENIZER_INFO_PATH: Final = "/tokenizer_info"
WORKERS_PATH: Final = "/workers"
ABORT_REQUESTS_PATH: Final = "/inference/v1/abort_requests"
RENDER_PATHS: Final = (
    *(f"/v1/{api}/render" for api in ("chat/completions", "completions", "messages", "responses")),
    *(f"/v1/{api}/derender" for api in ("chat/completions", "completions")),
)
COLLECTIVE_RPC_PATH: Final = "/collective_rpc"
WEBSOCKET_PATH: Final = "/v1/ws"
STORED_RESPONSE_PREFIX: Final = RESPONSES_PATH + "/"
CANCEL_SUFFIX: Final = "/cancel"

WEBSOCKET_PROTOCOL: Final = "ws"
"""Our own multiplexed protocol (docs/client-apis.md §5)."""
RESPONSES_WEBSOCKET_PROTOCOL: Final = "responses"
"""OpenAI's Responses WebSocket (docs/client-apis.md §3.6)."""

_READ: Final = ("GET", "HEAD")

ROUTES: Final[Mapping[str, Route]] = {
    **{path: Route(RouteKind.GENERATE, ("POST",)) for path in GENERATE_PATHS},
    RESPONSES_PATH: Route(RouteKind.GENERATE, ("POST",), websocket=RESPONSES_WEBSOCKET_PROTOCOL),
    **{path: Route(RouteKind.TOKENS, ("POST",)) for path in TOKEN_PATHS},
    **{path: Route(RouteKind.POOLING, ("POST",)) for path in (*POOLING_PATHS, *SCORING_PATHS)},
    HEALTH_PATH: Route(RouteKind.HEALTH, _READ, open=True, probe=True),
    READINESS_PATH: Route(RouteKind.HEALTH, _READ, open=True, probe=True),
    LIVENESS_PATH: Route(RouteKind.LIVENESS, _READ, open=True, probe=True),
    METRICS_PATH: Route(RouteKind.METRICS, _READ, open=True, probe=True),
    MODELS_PATH: Route(RouteKind.MODELS, _READ),
    VERSION_PATH: Route(RouteKind.VERSION, _READ),
    TOKENIZER_INFO_PATH: Route(RouteKind.TOKENIZER_INFO, _READ),
    WORKERS_PATH: Route(RouteKind.WORKERS, ("GET", "POST")),
    WEBSOCKET_PATH: Route(RouteKind.WEBSOCKET_ONLY, ("GET",), websocket=WEBSOCKET_PROTOCOL),
    ABORT_REQUESTS_PATH: Route(RouteKind.ABORT_REQUESTS, ("POST",)),
    **{path: Route(RouteKind.RENDER, ("POST",)) for path in RENDER_PATHS},
    # Unguarded by the API key, as vLLM's (it guards /v1, /v2, /inference and /cohere only):
    # served with VLLM_SERVER_DEV_MODE=1 alone, a development switch.
    COLLECTIVE_RPC_PATH: Route(RouteKind.COLLECTIVE_RPC, ("POST",), open=True),
}
"""The routes of exact paths."""

WORKER_ROUTE: Final = Route(RouteKind.WORKER, ("DELETE",))
"""`/workers/{id}`."""
STORED_RESPONSE_ROUTE: Final = Route(RouteKind.STORED_RESPONSE, ("GET", "DELETE"))
"""`/v1/responses/{id}`."""
CANCEL_RESPONSE_ROUTE: Final = Route(RouteKind.CANCEL_RESPONSE, ("POST",))
"""`/v1/responses/{id}/cancel`."""


def route_for(path: str) -> Route | None:
    """The route serving `path`, or None (a 404)."""
    route = ROUTES.get(path)
    if route is not None:
        return route
    if path.startswith(WORKERS_PATH + "/"):
        return WORKER_ROUTE
    rest = path.removeprefix(STORED_RESPONSE_PREFIX)
    if rest == path or not rest:
        return None
    if "/" not in rest:
        return STORED_RESPONSE_ROUTE
    run_id = rest.removesuffix(CANCEL_SUFFIX)
    return CANCEL_RESPONSE_ROUTE if run_id != rest and run_id and "/" not in run_id else None


def path_id(path: str) -> str:
    """The id segment of a `/workers/{id}`, `/v1/responses/{id}` or `.../{id}/cancel` path."""
    if path.startswith(WORKERS_PATH + "/"):
        return path.removeprefix(WORKERS_PATH + "/")
    return path.removeprefix(STORED_RESPONSE_PREFIX).removesuffix(CANCEL_SUFFIX)


def websocket_protocol(path: str) -> str | None:
    """The WebSocket protocol served on `path`, or None (the upgrade is refused)."""
    route = ROUTES.get(path)
    return None if route is None else route.websocket


PROBE_ROUTES: Final[Mapping[str, Route]] = {
    path: route for path, route in ROUTES.items() if route.probe
}
"""What the probe listener answers."""
