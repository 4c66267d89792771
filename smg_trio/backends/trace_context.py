"""Pure. The W3C trace context a request hands to its engine calls: a context variable only.

`Gateway.handle` sets it (with tracing on) in the request's task; a backend that can carry
metadata (gRPC) reads it when it starts the engine calls, in that same task, so no backend
imports OpenTelemetry (docs/observability.md §4). Empty: nothing to propagate.
"""

from __future__ import annotations

import contextvars
from typing import Final

TraceHeaders = tuple[tuple[str, str], ...]

outgoing_trace_headers: Final = contextvars.ContextVar[TraceHeaders](
    "smg_trio_outgoing_trace_headers", default=()
)
