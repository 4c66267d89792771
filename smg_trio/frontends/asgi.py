"""I/O. The gateway's ASGI application (no framework): routing, auth, body limits, JSON errors.

    GENERATE, TOKENS routes                   → Gateway.handle (SSE or JSON)
    HEALTH, LIVENESS, METRICS, MODELS, VERSION → frontends.info_routes (the gateway's own
                                                 state, no engine)
    WORKERS, WORKER                           → frontends.workers_api (admin key)
    STORED_RESPONSE, CANCEL_RESPONSE          → frontends.response_runs_http, stored_responses
    ABORT_REQUESTS, RENDER, COLLECTIVE_RPC    → frontends.vllm_control_routes (vLLM's flags)
    a WebSocket upgrade                       → frontends.websocket_admission

Every path and its methods are declared once, in the route table (`request/routes.py`); this
app dispatches on the route's kind.

- Every answer that is not a generation stream is JSON; every bad input is an OpenAI error
  object with its status (404 unknown path, 405 wrong method, 401 missing or wrong API key,
  413 body too large, 400 bad JSON or parameters; `refusals.py`) and never a traceback. A bug
  becomes a logged 500; `trio.Cancelled` always propagates.
- With an API key configured, every route but the three probes and `/metrics` needs
  `Authorization: Bearer KEY`, or `x-api-key: KEY` as Anthropic's clients send it (vLLM leaves
  health and metrics open too: probes and scrapers carry no key). With `--api-keys FILE`, the
  key must be one of the file's and names the request's tenant, whose budget `Gateway.handle`
  charges (docs/fleet.md §2); a WebSocket's key is its every request's. A missing or unknown
  key is OpenAI's 401 (`invalid_request_error`, code `invalid_api_key`).
- A request refused here (auth, route, method, body size, a bad `x-request-id`) is counted in
  the metrics; every other generation request is counted by `Gateway.handle`
  (docs/observability.md §1).
- A body is read by `request_body.read_body`: within the size limit, the body timeouts and the
  memory budget (413, 408, 429). It must keep arriving (docs/http.md §1): a gap longer than
  `body_idle_s` between two reads, or a body not complete `body_timeout_s` after the head, is a
  408 and the connection closes (the body was not read to its end).
- The content type is not checked: clients send JSON as `application/json`, with a charset,
  as `text/plain`, or with none at all; the body either decodes or is a 400.
- Every HTTP answer (HTTP/1.1 and h2, streams, bodies and errors alike) carries `x-request-id`:
  the client's own, or the one generated for the request (`request_ids`); the same id is the
  request's id in the gateway, its engine requests and its log lines.
- The lifespan scope is answered at once (the backends are opened by `serve` around the app).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from smg_trio.errors import ClientError, ClientGone, GatewayError
from smg_trio.frontends.answers import (
    answer_lifespan,
    client_address,
    header_map,
    http_transport,
    send_json,
)
from smg_trio.frontends.api_paths import dialect_for_path
from smg_trio.frontends.caller_auth import CallerAuth
from smg_trio.frontends.http.asgi_types import Receive, Scope, Send
from smg_trio.frontends.http.client_disconnect import client_disconnect_of
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.frontends.info_routes import answer_info
from smg_trio.frontends.refusals import MethodNotAllowed, error_headers, refuse
from smg_trio.frontends.request_body import read_body
from smg_trio.frontends.response_runs_http import (
    refuse_deleting_a_running_response,
    serve_cancel,
    serve_retrieve,
    serve_run,
)
from smg_trio.frontends.response_started import ResponseStarted
from smg_trio.frontends.sse import respond
from smg_trio.frontends.stored_responses import serve_stored_response
from smg_trio.frontends.vllm_control_routes import CONTROL_KINDS, VllmControlRoutes
from smg_trio.frontends.websocket_admission import WebSocketAdmission
from smg_trio.frontends.workers_api import (
    WorkerAdmin,
    authorize_admin,
    serve_workers,
)
from smg_trio.observability.request_ids import (
    REQUEST_ID_HEADER,
    current_request_id,
    new_request_id,
    request_id_from_header,
)
from smg_trio.request.arrival import DEFAULT_SESSION_HEADER, Arrival
from smg_trio.request.endpoints import RESPONSES_PATH
from smg_trio.request.gateway import Gateway
from smg_trio.request.memory_budget import Reservation
from smg_trio.request.observation import OTHER_ENDPOINT
from smg_trio.request.routes import INFO_KINDS, ROUTES, Route, RouteKind, route_for
from smg_trio.tenancy.api_keys import Tenant, TenantTable
from smg_trio.wire.responses_api import decode_head

logger = logging.getLogger(__name__)


class GatewayApp:
    """The ASGI 3 application serving one `Gateway`."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        api_key: str | None,
        max_body_bytes: int,
        session_header: str = DEFAULT_SESSION_HEADER,
        admin: WorkerAdmin | None = None,
        admin_api_key: str | None = None,
        limits: HttpLimits | None = None,
        tenants: TenantTable | None = None,
        tokenizer_info: bytes | None = None,
        scale_out: bool = False,
        dev_mode: bool = False,
    ) -> None:
        self.gateway = gateway
        self._tokenizer_info = tokenizer_info  # GET /tokenizer_info's body; None: 404
        self._control = VllmControlRoutes(gateway, scale_out=scale_out, dev_mode=dev_mode)
        self._auth = auth = CallerAuth(api_key, tenants)
        self._max_body_bytes = max_body_bytes
        self._session_header = session_header.lower().encode()
        self._admin = admin
        self._admin_key = admin_api_key.encode() if admin_api_key and admin else None
        self._limits = (limits or HttpLimits()).resolved()
        self.websockets = WebSocketAdmission(gateway, auth, self._limits.max_websockets)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match scope["type"]:
            case "http":
                await self._http(scope, receive, send)
            case "websocket":
                await self.websockets.serve(scope, receive, send)
            case "lifespan":
                await answer_lifespan(receive, send)
            case other:
                raise ValueError(f"unknown ASGI scope type {other!r}")

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = header_map(scope).get(REQUEST_ID_HEADER)
        try:
            request_id = request_id_from_header(header)
        except ClientError as error:
            request_id = new_request_id()
            tracked = ResponseStarted(send, request_id)
            self._count_rejected(scope, error)
            await refuse(scope, receive, tracked, error)
            return
        tracked = ResponseStarted(send, request_id)
        token = current_request_id.set(request_id)
        try:
            await self._serve_http(scope, receive, tracked, request_id)
        finally:
            current_request_id.reset(token)

    async def _serve_http(
        self, scope: Scope, receive: Receive, tracked: ResponseStarted, request_id: str
    ) -> None:
        try:
            await self._route(scope, receive, tracked, request_id)
        except ClientGone:
            return
        except GatewayError as error:
            # Raised before `Gateway.handle` (which answers its own errors through the sink).
            self._count_rejected(scope, error)
            if not tracked.started:
                await refuse(scope, receive, tracked, error, *error_headers(error))
        except Exception:
            logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
            if not tracked.started:
                internal = GatewayError("internal error while serving the request")
                await refuse(scope, receive, tracked, internal)

    async def _route(
        self, scope: Scope, receive: Receive, send: ResponseStarted, request_id: str
    ) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        headers = header_map(scope)
        route = route_for(path)
        if route is not None and route.kind in (RouteKind.WORKERS, RouteKind.WORKER):
            await self._workers(route, method, path, headers, receive, send)  # the admin key
            return
        tenant = None if route is not None and route.open else self._auth.tenant_of(headers)
        if route is None:
            raise ClientError(f"no route for {path}", status=404, code="not_found")
        if method not in route.methods:
            raise MethodNotAllowed(method, path, route.methods)
        match route.kind:
            case (
                RouteKind.GENERATE | RouteKind.TOKENS | RouteKind.POOLING
            ):  # first: the common case
                await self._handle(scope, receive, send, headers, request_id, tenant)
            case RouteKind.STORED_RESPONSE if method == "GET":
                # A run's state or stream first (docs/client-apis.md §3.5).
                await serve_retrieve(self.gateway, scope, path, send)
            case RouteKind.STORED_RESPONSE:
                await refuse_deleting_a_running_response(self.gateway, path)
                await serve_stored_response(self.gateway.responses, method, path, send)
            case RouteKind.CANCEL_RESPONSE:
                with self.gateway.memory_budget.reserve() as reservation:
                    body = await self._read_body(receive, headers, reservation)
                if body.strip() not in (b"", b"{}"):  # it takes none: refused, not ignored
                    raise ClientError("POST /v1/responses/{id}/cancel takes no body")
                await serve_cancel(self.gateway, path, send)
            case RouteKind.WEBSOCKET_ONLY:
                raise ClientError(
                    f"{path} speaks WebSocket: send an Upgrade request",
                    status=426,
                    code="upgrade_required",
                )
            case kind if kind in INFO_KINDS:
                await answer_info(self.gateway, kind, send, tenant)
            case kind if kind in CONTROL_KINDS:
                self._control.check(kind, path)
                with self.gateway.memory_budget.reserve() as reservation:
                    body = await self._read_body(receive, headers, reservation)
                await self._control.serve(kind, body, send)
            case RouteKind.TOKENIZER_INFO:
                if self._tokenizer_info is None:  # as vLLM without the flag
                    raise ClientError(f"no route for {path}", status=404, code="not_found")
                await send_json(send, 200, self._tokenizer_info)
            case other:
                raise ValueError(f"no handler for the route kind {other}")

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        send: ResponseStarted,
        headers: dict[bytes, bytes],
        request_id: str,
        tenant: Tenant | None,
    ) -> None:
        path: str = scope["path"]
        session = headers.get(self._session_header)
        # The body's bytes are held from the memory budget from before it is read until the
        # response ends (docs/limits.md §4).
        with self.gateway.memory_budget.reserve() as reservation:
            body = await self._read_body(receive, headers, reservation)
            arrival = Arrival(
                request_id=request_id,
                session_key=None if session is None else session.decode("latin-1"),
                transport=http_transport(scope),
                client=client_address(scope),
                tenant=tenant,
                body_reservation=reservation,
            )
            if path == RESPONSES_PATH:
                head = decode_head(body)
                if head.background or (
                    head.stream and head.store is not False and self.gateway.runs.accepting
                ):
                    await serve_run(
                        self.gateway,
                        scope,
                        send,
                        body,
                        replace(arrival, body_reservation=None),
                        background=head.background is True,
                        stream=head.stream is True,
                    )
                    return
            if self.gateway.tracer is not None:
                arrival = replace(arrival, trace_headers=_trace_headers(scope))
            await respond(
                lambda response: self.gateway.handle(path, body, response, arrival),
                client_disconnect_of(scope),
                send,
                dialect_for_path(path),
                *send.direct_sending(scope),
            )

    async def _workers(
        self,
        route: Route,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        receive: Receive,
        send: Send,
    ) -> None:
        authorize_admin(self._admin_key, headers.get(b"authorization", b""))
        assert self._admin is not None  # an admin key is only kept with an admin
        if method not in route.methods:
            raise MethodNotAllowed(method, path, route.methods)
        body = b""
        if method == "POST":
            with self.gateway.memory_budget.reserve() as reservation:
                body = await self._read_body(receive, headers, reservation)
        await serve_workers(self._admin, method, path, body, send)

    def _count_rejected(self, scope: Scope, error: GatewayError) -> None:
        path = scope["path"]
        endpoint = path if path in ROUTES else OTHER_ENDPOINT
        self.gateway.metrics.request_rejected(
            endpoint, http_transport(scope), error.status, error.code
        )

    async def _read_body(
        self, receive: Receive, headers: dict[bytes, bytes], reservation: Reservation
    ) -> bytes:
        return await read_body(
            receive, headers, reservation, max_body_bytes=self._max_body_bytes, limits=self._limits
        )


def _trace_headers(scope: Scope) -> dict[str, str]:
    """The client's W3C trace context headers (docs/observability.md §4)."""
    headers = header_map(scope)
    return {
        name.decode(): headers[name].decode("latin-1")
        for name in (b"traceparent", b"tracestate")
        if name in headers
    }
