"""I/O. Opt-in OpenTelemetry tracing: one span tree per request, exported over OTLP/HTTP
(`--otlp-endpoint`) or, as vLLM's `--otlp-traces-endpoint`, over the protocol its environment
names (OTLP/gRPC by default).

Off unless an endpoint is given: the gateway then has no `RequestTracer`, and the request
path does nothing more than test that it is None (docs/observability.md §4).

When on, a request's root span (`smg_trio.request`, kind SERVER) starts on arrival, as a child
of the client's W3C `traceparent` when one came with the request; its context goes to the
engine in the gRPC metadata (`trace_context`). The phases are built as child spans when the
request ended, from the `RequestRecord`'s timestamps, so nothing is traced per batch or per
token:

    smg_trio.request ─┬─ prepare      arrival → worker picked (decode, template, tokenize)
                      ├─ queue        worker picked → engine requests sent
                      ├─ engine       engine requests sent → last engine token (event: first_token)
                      └─ stream       first engine token → the answer's end

Spans leave through the SDK's `BatchSpanProcessor` (its own thread, bounded queue), never
from the trio loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from smg_trio.backends.trace_context import TraceHeaders
from smg_trio.observability.request_record import RequestRecord

SERVICE_NAME: Final = "smg-trio"
ROOT_SPAN: Final = "smg_trio.request"
_PROPAGATOR: Final = TraceContextTextMapPropagator()


class TracedRequest:
    """One traced request: its root span, the headers carrying it on, and the clock offset
    that turns the record's monotonic times into the wall-clock nanoseconds spans take."""

    __slots__ = ("_wall_minus_perf_ns", "outgoing", "span")

    def __init__(self, span: Span, outgoing: TraceHeaders, wall_minus_perf_ns: int) -> None:
        self.span = span
        self.outgoing = outgoing
        self._wall_minus_perf_ns = wall_minus_perf_ns

    def wall_ns(self, moment: float) -> int:
        """`moment` (a `time.perf_counter()` reading) on the wall clock, in nanoseconds."""
        return self._wall_minus_perf_ns + int(moment * 1e9)


class RequestTracer:
    """Starts each request's root span and, once it ended, builds its phases (module doc)."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer("smg_trio")

    def start(self, headers: Mapping[str, str], record: RequestRecord) -> TracedRequest:
        """The request's root span from its arrival, child of the client's `traceparent` if
        any, and the headers that carry it on to the engine."""
        # One offset per request, so every span of it is placed on one consistent clock.
        offset = time.time_ns() - int(time.perf_counter() * 1e9)
        parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else Context()
        span = self._tracer.start_span(
            ROOT_SPAN,
            context=parent,
            kind=SpanKind.SERVER,
            start_time=offset + int(record.arrived * 1e9),
            attributes={
                "smg_trio.request_id": record.request_id,
                "smg_trio.endpoint": record.endpoint,
                "smg_trio.transport": record.transport,
            },
        )
        outgoing: dict[str, str] = {}
        _PROPAGATOR.inject(outgoing, context=trace.set_span_in_context(span))
        return TracedRequest(span, tuple(outgoing.items()), offset)

    def finish(self, traced: TracedRequest, record: RequestRecord, ended: float) -> None:
        """Build the phase spans from `record` and end the root span at `ended` (perf_counter)."""
        span, wall = traced.span, traced.wall_ns
        within = trace.set_span_in_context(span)
        phases = (
            ("prepare", record.arrived, record.picked),
            ("queue", record.picked, record.sent),
            ("engine", record.sent, record.last_token),
            ("stream", record.first_token, ended),
        )
        for name, start, end in phases:
            if start is None or end is None:
                continue
            child = self._tracer.start_span(name, context=within, start_time=wall(start))
            if name == "engine" and record.first_token is not None:
                child.add_event("first_token", timestamp=wall(record.first_token))
            child.end(end_time=wall(end))
        span.set_attributes(
            {
                "smg_trio.worker": record.worker,
                "http.response.status_code": record.status,
                "smg_trio.prompt_tokens": record.prompt_tokens,
                "smg_trio.completion_tokens": record.completion_tokens,
                "smg_trio.finish_reasons": list(record.finish_reasons),
            }
        )
        if record.abort_cause is not None:
            span.set_attribute("smg_trio.abort_cause", record.abort_cause)
        if record.error_code is not None:
            span.set_status(Status(StatusCode.ERROR, record.error_code))
        span.end(end_time=wall(ended))


def tracer_provider(processor: SpanProcessor) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(processor)
    return provider


OTLP_HTTP: Final = "http/protobuf"
OTLP_GRPC: Final = "grpc"


@contextmanager
def otlp_tracing(endpoint: str, protocol: str = OTLP_HTTP) -> Iterator[RequestTracer]:
    """A tracer exporting to the OTLP `endpoint` over `protocol` (OTLP_HTTP or OTLP_GRPC, in
    clear as vLLM's) for the block; queued spans are flushed (bounded by the exporter's own
    timeout) when it ends."""
    exporter: SpanExporter
    if protocol == OTLP_GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        exporter = GrpcExporter(endpoint=endpoint, insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = tracer_provider(BatchSpanProcessor(exporter))
    try:
        yield RequestTracer(provider)
    finally:
        provider.shutdown()
