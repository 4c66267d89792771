"""I/O. The gateway's Prometheus metrics: one registry per gateway, every name `smg_trio_*`.

Figures and labels are listed in docs/observability.md §1. Everything here is updated per
request (at its start and at its end, from its `RequestRecord`) or per WebSocket socket and
stream, never per token: the per-batch figures (inter-token gaps) are kept in the record while
the request runs and observed once it ended. Worker and engine figures are not updated at all:
`WorkerStateCollector` reads the backends' own counts when `/metrics` is scraped.

Labels stay low-cardinality: endpoint (the served paths), transport (http1, h2, ws), worker (the
configured specs), served_model (the served models' keys, never a client's unknown name: docs/fleet.md
§4), status (an HTTP status code), code (the error codes the gateway defines), finish reason
and abort cause.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from smg_trio.observability.process_metrics import multiprocess_exposition
from smg_trio.observability.request_record import NO_WORKER, ROUTER_STOP, RequestRecord
from smg_trio.observability.worker_collector import WorkerStateCollector, WorkerStateSource
from smg_trio.routing.workers import WorkerPool

EXPOSITION_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST.encode("ascii")
# Latency buckets resolving 1 ms to 60 s (docs/observability.md §1).
LATENCY_BUCKETS: Final = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
)  # fmt: skip
# Inter-token gaps are short: finer below 100 ms, up to 10 s.
INTER_TOKEN_BUCKETS: Final = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class GatewayMetrics:
    """The registry and its metric objects; `requests_started`/`request_finished` per request."""

    def __init__(
        self, pool: WorkerPool | None = None, extra_sources: Iterable[WorkerStateSource] = ()
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        by_route = ("endpoint", "transport")
        self.requests = Counter(
            "smg_trio_requests",
            "Requests answered, by endpoint, transport and HTTP status "
            "(499: the client left first, or the gateway was draining)",
            (*by_route, "status"),
            registry=r,
        )
        self.errors = Counter(
            "smg_trio_request_errors",
            "Requests that ended with an error, by its code",
            (*by_route, "code"),
            registry=r,
        )
        # Gauges say how several processes add up (docs/observability.md §6); one process
        # ignores it.
        self.in_flight = Gauge(
            "smg_trio_requests_in_flight",
            "Requests being served now",
            by_route,
            registry=r,
            multiprocess_mode="livesum",
        )
        by_worker = ("endpoint", "served_model", "worker")
        self.ttft = Histogram(
            "smg_trio_time_to_first_token_seconds",
            "From the request's arrival (body read) to its first engine token",
            by_worker,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "smg_trio_inter_token_latency_seconds",
            "Gap between engine batches divided by the batch's tokens; one sample per batch",
            ("served_model", "worker"),
            buckets=INTER_TOKEN_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "smg_trio_e2e_request_latency_seconds",
            "From the request's arrival to its last byte handed to the transport",
            by_worker,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "smg_trio_request_queue_time_seconds",
            "From the request's arrival to its engine requests being sent "
            "(decode, template, tokenize, pick a worker)",
            by_worker,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "smg_trio_prompt_tokens", "Prompt tokens of finished requests", by_worker, registry=r
        )
        self.completion_tokens = Counter(
            "smg_trio_completion_tokens",
            "Completion tokens of finished requests (as their usage reports them)",
            by_worker,
            registry=r,
        )
        self.model_requests = Counter(
            "smg_trio_model_requests",
            "Requests answered, by the served model they asked for (its key; none: no served "
            "model was picked, e.g. an unknown one) and HTTP status",
            ("served_model", "status"),
            registry=r,
        )
        self.finishes = Counter(
            "smg_trio_finished_choices",
            "Choices finished, by finish reason",
            ("endpoint", "finish_reason"),
            registry=r,
        )
        self.aborts = Counter(
            "smg_trio_request_aborts",
            "Requests left before their engine finished, by cause "
            "(client_gone, router_stop, deadline, drain)",
            ("cause",),
            registry=r,
        )
        self.migrations = Counter(
            "smg_trio_migrations",
            "Requests moved to another worker mid-stream, by the failure's code "
            "(docs/resilience.md §9)",
            ("reason",),
            registry=r,
        )
        self.migration_resume = Histogram(
            "smg_trio_migration_resume_seconds",
            "From a worker's failure to the first token of the worker the request moved to",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.websocket_connections = Gauge(
            "smg_trio_websocket_connections",
            "WebSocket connections open",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.websocket_streams = Gauge(
            "smg_trio_websocket_streams",
            "Requests running on WebSocket connections",
            registry=r,
            multiprocess_mode="livesum",
        )
        # Responses that outlive their connection (docs/client-apis.md §3.5).
        self.response_runs = Gauge(
            "smg_trio_response_runs",
            "Responses generating apart from their connection, by kind (background, "
            "resumable) and status (queued, in_progress)",
            ("kind", "status"),
            registry=r,
            multiprocess_mode="livesum",
        )
        self.response_runs_ended = Counter(
            "smg_trio_response_runs_ended",
            "Responses that ran apart from their connection, by kind and final status",
            ("kind", "status"),
            registry=r,
        )
        self.response_streams = Counter(
            "smg_trio_response_streams",
            "Streams of a response's event log served, by how they began (first: the "
            "creating request's own; resumed: `GET ...?stream=true`) and where its events "
            "came from (memory: a run of this process; log: the store, for another "
            "process's run or an ended one)",
            ("start", "source"),
            registry=r,
        )
        self._routes: dict[tuple[str, str, str, str], _RouteChildren] = {}
        self.worker_state = None if pool is None else WorkerStateCollector(pool, extra_sources)
        if self.worker_state is not None:
            r.register(self.worker_state)
        self.multiprocess_dir: str | None = None
        """Set when several processes serve the port: the exposition is all of theirs
        (observability/process_metrics.py); `worker_state` is then mirrored there."""

    def exposition(self) -> bytes:
        """The text exposition of every metric (what `/metrics` answers)."""
        if self.multiprocess_dir is not None:
            return multiprocess_exposition(self.multiprocess_dir)
        return generate_latest(self.registry)

    def request_started(self, record: RequestRecord) -> None:
        self._route(record.endpoint, record.transport, record.worker, "").in_flight.inc()

    def _route(self, endpoint: str, transport: str, worker: str, model: str) -> _RouteChildren:
        # `labels()` validates and locks on every call; a request's children are looked up once
        # per route instead (a handful of routes per gateway).
        key = (endpoint, transport, worker, model)
        children = self._routes.get(key)
        if children is None:
            children = self._routes[key] = _RouteChildren(self, endpoint, transport, worker, model)
        return children

    def request_rejected(self, endpoint: str, transport: str, status: int, code: str) -> None:
        """An HTTP request refused before it reached the gateway (auth, route, body size)."""
        self.requests.labels(endpoint, transport, str(status)).inc()
        self.errors.labels(endpoint, transport, code).inc()

    def request_finished(self, record: RequestRecord, ended: float) -> None:
        """Observe everything of `record`, which ended at `ended` (perf_counter)."""
        endpoint, transport = record.endpoint, record.transport
        # In flight was counted under the route the request started on (no worker yet).
        self._route(endpoint, transport, NO_WORKER, "").in_flight.dec()
        route = self._route(endpoint, transport, record.worker, record.model or NO_WORKER)
        if record.status == 200:
            route.served.inc()
            route.model_served().inc()
        else:
            status = str(record.status)
            self.requests.labels(endpoint, transport, status).inc()
            self.model_requests.labels(record.model or NO_WORKER, status).inc()
        if record.error_code is not None:
            self.errors.labels(endpoint, transport, record.error_code).inc()
        if record.abort_cause is not None:
            self.aborts.labels(record.abort_cause).inc()
        for reason in record.finish_reasons:
            route.finished(reason).inc()
        if record.prompt_tokens:
            route.prompt_tokens.inc(record.prompt_tokens)
        if record.completion_tokens:
            route.completion_tokens.inc(record.completion_tokens)
        if record.sent is not None:
            route.queue.observe(record.sent - record.arrived)
        if record.first_token is not None:
            route.ttft.observe(record.first_token - record.arrived)
        if record.inter_token_gaps:
            observe_all(route.inter_token, record.inter_token_gaps)
        if record.migrations:
            for reason in record.migrations:
                self.migrations.labels(reason).inc()
            for seconds in record.resume_s:
                self.migration_resume.observe(seconds)
        if record.error_code is None and record.abort_cause in (None, ROUTER_STOP):
            route.e2e.observe(ended - record.arrived)


def observe_all(child: Histogram, values: Sequence[float]) -> None:
    """Observe every one of `values` on a labelled histogram: the same buckets, count and sum as
    one `observe` each, with one locked update per bucket touched instead of per value (a
    request's inter-token samples are one per engine batch; tests/observability holds this to
    `observe`). It reads prometheus-client's child internals (`_upper_bounds`, `_buckets`,
    `_sum`), which its public API has no bulk form of."""
    bounds = child._upper_bounds
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bucket with value <= bound
    child._sum.inc(math.fsum(values))
    buckets = child._buckets
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)


class _RouteChildren:
    """The labelled children one (endpoint, transport, worker, model) route updates per
    request."""

    def __init__(
        self, metrics: GatewayMetrics, endpoint: str, transport: str, worker: str, model: str
    ) -> None:
        self._metrics = metrics
        self._endpoint = endpoint
        self.in_flight = metrics.in_flight.labels(endpoint, transport)
        self.served = metrics.requests.labels(endpoint, transport, "200")
        self.prompt_tokens = metrics.prompt_tokens.labels(endpoint, model, worker)
        self.completion_tokens = metrics.completion_tokens.labels(endpoint, model, worker)
        self.queue = metrics.queue.labels(endpoint, model, worker)
        self.ttft = metrics.ttft.labels(endpoint, model, worker)
        self.e2e = metrics.e2e.labels(endpoint, model, worker)
        self.inter_token = metrics.inter_token.labels(model, worker)
        self._finishes: dict[str, Counter] = {}
        self._model = model
        self._model_served: Counter | None = None

    def model_served(self) -> Counter:
        """Its served model's count of 200s, made on the first (an in-flight route, whose model
        is "", never shows one)."""
        child = self._model_served
        if child is None:
            child = self._model_served = self._metrics.model_requests.labels(self._model, "200")
        return child

    def finished(self, reason: str) -> Counter:
        child = self._finishes.get(reason)
        if child is None:
            child = self._finishes[reason] = self._metrics.finishes.labels(self._endpoint, reason)
        return child
