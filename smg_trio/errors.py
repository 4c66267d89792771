"""Pure. The whole exception vocabulary of the gateway, grouped by who is at fault.

`ClientError` renders as OpenAI error JSON with its HTTP status; backend errors carry the status
the front end should use when they surface before the first byte. Foreign exceptions (zmq,
grpclib, h2, msgspec) are translated into these at the seam that catches them.
"""

from __future__ import annotations

from http import HTTPStatus


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_type(self) -> str:
        """OpenAI's `type` field: invalid_request_error for 400, else from the status phrase."""
        if self.status == 400:
            return "invalid_request_error"
        if self.status == 500:
            return "internal_error"
        try:
            phrase = HTTPStatus(self.status).phrase
        except ValueError:
            return "internal_error"
        name = phrase.lower().replace(" ", "_").replace("-", "_")
        return name if name.endswith("_error") else name + "_error"


class ClientError(GatewayError):
    """The request is at fault. `param` names the offending parameter when there is one."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        code: str = "invalid_request_parameters",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


class UnsupportedRuntime(GatewayError):
    """A worker's runtime is unspecified or has no adapter for its wire. Never defaulted."""

    status = 500
    code = "unsupported_runtime"


class ConfigError(GatewayError):
    """Startup configuration is wrong (bad flag, unreadable model directory). Startup only."""

    status = 500
    code = "config_error"


class BackendError(GatewayError):
    """The engine side failed. Subclasses say how."""

    status = 500
    code = "backend_error"


class BackendUnavailable(BackendError):
    """No engine can take the request right now (not connected, not ready, restarting)."""

    status = 503
    code = "backend_unavailable"


class BackendProtocolError(BackendError):
    """The engine sent something we cannot understand (bad msgpack, unexpected frame)."""

    status = 502
    code = "backend_protocol_error"


class EngineDead(BackendError):
    """The engine died or went silent while requests were in flight."""

    status = 503
    code = "engine_dead"


class EngineRejected(BackendError):
    """The engine refused or failed one request; `reason` is the engine's own words."""

    code = "worker_stream_failed"

    def __init__(self, reason: str, *, status: int = 500) -> None:
        super().__init__(f"engine rejected the request: {reason}")
        self.reason = reason
        self.status = status


class Overloaded(GatewayError):
    """Admission control turned the request away (docs/routing.md §5): 429 with Retry-After."""

    status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RateLimited(Overloaded):
    """A tenant's budget turned the request away (docs/fleet.md §2): OpenAI's 429, whose
    `type` names the limit (`requests` or `tokens`) and whose code is `rate_limit_exceeded`."""

    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: int, kind: str) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.kind = kind

    @property
    def error_type(self) -> str:
        return self.kind


class RequestTimeout(GatewayError):
    """The request outlived its deadline (the gateway's request timeout)."""

    status = 504
    code = "request_timeout"


class ClientGone(Exception):  # a signal, not an error
    """The client went away (closed connection, RST_STREAM, WebSocket close or cancel)."""


class Draining(BackendUnavailable):
    """The gateway is shutting down: no new request, and a running one past the drain timeout."""

    code = "draining"

    def __init__(self, message: str = "the gateway is shutting down; retry on another") -> None:
        super().__init__(message)
