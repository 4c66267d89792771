"""I/O. vLLM's control paths beside its API (docs/vllm-frontend.md §9, §10):

    POST /inference/v1/abort_requests   --enable-scale-out: abort running requests by the ids
                                        their responses carry (200, empty body, known or not)
    POST /v1/.../render, .../derender   --enable-scale-out: not implemented (501); a chat or
                                        completion is rendered to token ids by /tokenize
    POST /collective_rpc                VLLM_SERVER_DEV_MODE=1: a worker method run on every
                                        engine (the EngineCore's `collective_rpc` utility call)

Without `--enable-scale-out` the scale-out paths answer vLLM's 403, and without dev mode
`/collective_rpc` is a 404, as vLLM's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import trio

from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.errors import (
    BackendUnavailable,
    ClientError,
    EngineRejected,
    GatewayError,
    RequestTimeout,
)
from smg_trio.frontends.answers import send_json
from smg_trio.frontends.http.asgi_types import Send
from smg_trio.neutral.runtime import Runtime
from smg_trio.request.gateway import Gateway
from smg_trio.request.routes import RouteKind
from smg_trio.wire.vllm_control import (
    collective_rpc_body,
    decode_abort_request,
    decode_collective_rpc,
)

SCALE_OUT_DISABLED: Final = (
    "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
)
"""vLLM's words (its 403) for a scale-out path without the flag."""

CONTROL_KINDS: Final = frozenset(
    {RouteKind.ABORT_REQUESTS, RouteKind.RENDER, RouteKind.COLLECTIVE_RPC}
)


class VllmControlRoutes:
    """The control paths of one app, as the flags set them."""

    def __init__(self, gateway: Gateway, *, scale_out: bool, dev_mode: bool) -> None:
        self._gateway = gateway
        self.scale_out = scale_out
        self.dev_mode = dev_mode

    def check(self, kind: RouteKind, path: str) -> None:
        """Refuse a control path its flag leaves off, before its body is read."""
        if kind is RouteKind.COLLECTIVE_RPC and not self.dev_mode:
            raise ClientError(f"no route for {path}", status=404, code="not_found")
        if kind is not RouteKind.COLLECTIVE_RPC and not self.scale_out:
            raise ClientError(SCALE_OUT_DISABLED, status=403, code="permission_denied")
        if kind is RouteKind.RENDER:
            raise ClientError(
                f"{path} is not implemented by the smg-trio front end (render a prompt's "
                "token ids with /tokenize, docs/vllm-frontend.md §9)",
                status=501,
                code="not_implemented",
            )

    async def serve(self, kind: RouteKind, body: bytes, send: Send) -> None:
        """Answer a control path `check` let through."""
        if kind is RouteKind.ABORT_REQUESTS:
            self._gateway.live_requests.abort(decode_abort_request(body))
            await send_json(send, 200, b"")
            return
        call = decode_collective_rpc(body)
        backend = self._engines()
        args = (call.method, call.timeout, call.args, call.kwargs)
        # The engine bounds the workers' call with `timeout`; we bound the whole exchange.
        with trio.move_on_after(self._gateway.request_timeout_s) as bounded:
            try:
                values = await backend.call_utility_all("collective_rpc", *args)
            except* GatewayError as group:  # an engine's failure, or its death
                first = group.exceptions[0]
                assert isinstance(first, GatewayError)
                raise first from None
        if bounded.cancelled_caught:
            raise RequestTimeout(
                f"collective_rpc {call.method} did not finish within "
                f"{self._gateway.request_timeout_s:g} s"
            )
        await send_json(send, 200, collective_rpc_body(_first_engines(values)))

    def _engines(self) -> ZmqBackend:
        """The vLLM EngineCores' backend (the front end's one worker)."""
        for worker in self._gateway.pool.workers:
            backend = worker.backend
            if isinstance(backend, ZmqBackend) and backend.runtime is Runtime.VLLM:
                return backend
        raise BackendUnavailable("/collective_rpc needs vLLM EngineCores over ZMQ")


def _first_engines(values: Sequence[Any]) -> Sequence[Any] | None:
    """The first engine's results, as vLLM's front end returns them (each engine of a
    data-parallel group runs the call; the rest are dropped)."""
    first = values[0] if values else None
    if first is None or isinstance(first, list):
        return first
    raise EngineRejected(f"collective_rpc answered {type(first).__name__}, not a list")
