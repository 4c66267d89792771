"""I/O. What one request leaves for operators, however it ends (docs/observability.md §2).

`Gateway.handle` observes every request it serves with `observed_request`: a `RequestRecord` is
opened on arrival, filled by the request's nursery once per engine batch, and handed to the
metrics, the request log line and (with tracing on) its trace when the request ends.

- The request id (the client's `x-request-id`, else a fresh one) is set as the current request
  id for the log lines of the request (`request_ids`) while it is observed, and the trace
  context it carries toward the engines (`trace_context`) while it is traced.
- How it ended is read from what left it: a GatewayError is its failure; a cancel alone is an
  abort (the client gone, or the drain) unless the whole answer had been handed over; anything
  else is an internal error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Protocol

import trio

from smg_trio.backends.trace_context import outgoing_trace_headers
from smg_trio.errors import GatewayError
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.observability.request_ids import current_request_id
from smg_trio.observability.request_log import log_request
from smg_trio.observability.request_record import CLIENT_GONE, DRAIN, RequestRecord
from smg_trio.request.arrival import Arrival
from smg_trio.request.endpoints import HANDLED_PATHS
from smg_trio.request.live_requests import LiveRequests

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on (docs/observability.md §4)
    from smg_trio.observability.tracing import RequestTracer

# The endpoint label of any other path (a WebSocket request may name anything).
OTHER_ENDPOINT: Final = "other"


class Observers(Protocol):
    """What observes requests: the gateway's, read when a request starts and when it ends."""

    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def tracer(self) -> RequestTracer | None: ...  # --otlp-endpoint; None: nothing traced
    @property
    def log_requests(self) -> bool: ...  # --log-requests: bodies and texts in the log line
    @property
    def max_log_len(self) -> int | None: ...  # --max-log-len: characters of each; None: all
    @property
    def live_requests(self) -> LiveRequests: ...


@contextmanager
def observed_request(
    observers: Observers, path: str, body: bytes, arrival: Arrival
) -> Iterator[RequestRecord]:
    """The record of the request `body` to `path`, observed until the block ends.

    The arrival's `transport` (http1, h2, ws) and `client` (the peer's address) label its
    metrics and its log line; its `trace_headers` (the client's `traceparent`, `tracestate`)
    parent its trace when tracing is on."""
    token = current_request_id.set(arrival.request_id)
    endpoint = path if path in HANDLED_PATHS else OTHER_ENDPOINT
    record = RequestRecord(
        arrival.request_id,
        endpoint,
        arrival.transport,
        arrival.client,
        keeps_text=observers.log_requests,
    )
    observers.metrics.request_started(record)
    tracer = observers.tracer
    if tracer is not None:
        traced = tracer.start(arrival.trace_headers or {}, record)
        trace_token = outgoing_trace_headers.set(traced.outgoing)
    try:
        yield record
    except BaseException as exc:
        _record_exit(record, exc, draining=observers.live_requests.draining)
        raise
    finally:
        ended = time.perf_counter()
        observers.metrics.request_finished(record, ended)
        log_request(record, ended, with_text=_logged_text(observers, body, record))
        if tracer is not None:
            tracer.finish(traced, record, ended)
            outgoing_trace_headers.reset(trace_token)
        current_request_id.reset(token)


def _record_exit(record: RequestRecord, exc: BaseException, *, draining: bool) -> None:
    """What an exception leaving the request says about it, on its record."""
    if isinstance(exc, GatewayError):
        record.failed(exc)
    elif _is_cancellation(exc):
        # After the whole answer was handed to the transport, a cancel (the client closing
        # as the last bytes went) ends nothing: the request was served.
        if record.abort_cause is None and not record.answered:
            record.aborted(DRAIN if draining else CLIENT_GONE)
    else:
        record.failed(GatewayError("internal error"))


def _logged_text(
    observers: Observers, body: bytes, record: RequestRecord
) -> dict[str, object] | None:
    if not observers.log_requests:
        return None
    texts = list(record.texts) if record.texts is not None else []
    request_body = body.decode("utf-8", "replace")
    limit = observers.max_log_len
    if limit is not None:  # vLLM's --max-log-len: the body and each output cut at it
        request_body = request_body[:limit]
        texts = [text[:limit] for text in texts]
    return {"request_body": request_body, "completion_texts": texts}


def _is_cancellation(exc: BaseException) -> bool:
    """`trio.Cancelled`, alone or as the only kind in a group (a nursery's strict groups)."""
    if isinstance(exc, BaseExceptionGroup):
        _, others = exc.split(trio.Cancelled)
        return others is None
    return isinstance(exc, trio.Cancelled)
