"""I/O. Worker and engine figures read from the backends' own counts at scrape time.

The backends already count what is in flight, which engines are ready and which died
(`Backend.statistics()`); this collector turns one snapshot per worker into gauges when
`/metrics` is scraped, so nothing is updated on the request path (docs/observability.md §1).

Routing's own view of each worker (circuit breaker state, requests routed, failures, retries
before the first byte, routable or not) comes from `WorkerPool.snapshot`, read at the same
scrape. `WorkerStateSource` is the hook for any further per-worker state (`families(workers)`),
registered with the `GatewayMetrics` that builds this collector.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from smg_trio.routing.workers import Worker, WorkerPool


class WorkerStateSource(Protocol):
    """More per-worker figures (e.g. routing's breaker state), read at scrape time."""

    def families(self, workers: Sequence[Worker]) -> Iterable[Metric]: ...


class WorkerStateCollector(Collector):
    """Per worker and per engine: readiness, in-flight counts, deaths (see the module doc)."""

    def __init__(self, pool: WorkerPool, extra_sources: Iterable[WorkerStateSource] = ()) -> None:
        self._pool = pool
        self._extra_sources = tuple(extra_sources)

    def collect(self) -> Iterator[Metric]:
        workers = self._pool.workers
        ready = GaugeMetricFamily(
            "smg_trio_ready", "1 while at least one worker is ready (what /health reports)"
        )
        ready.add_metric([], 1.0 if self._pool.ready else 0.0)
        yield ready
        by_worker = ["worker", "runtime", "wire", "served_model"]
        worker_ready = GaugeMetricFamily(
            "smg_trio_worker_ready", "1 while the worker has a ready engine", labels=by_worker
        )
        in_flight = GaugeMetricFamily(
            "smg_trio_worker_in_flight",
            "Engine requests sent to the worker and not yet finished or aborted",
            labels=by_worker,
        )
        streams = GaugeMetricFamily(
            "smg_trio_worker_open_streams", "Client streams open on the worker", labels=by_worker
        )
        protocol_errors = CounterMetricFamily(
            "smg_trio_worker_protocol_errors",
            "Engine messages the worker's backend could not decode and dropped",
            labels=by_worker,
        )
        deaths = CounterMetricFamily(
            "smg_trio_worker_engine_deaths",
            "Times an engine of the worker was declared dead (sentinel, silence, lost connection)",
            labels=by_worker,
        )
        by_engine = ["worker", "engine"]
        engine_ready = GaugeMetricFamily(
            "smg_trio_engine_ready", "1 while the engine (rank) takes requests", labels=by_engine
        )
        engine_dead = GaugeMetricFamily(
            "smg_trio_engine_dead",
            "1 once the engine was declared dead (sentinel, silence watchdog, lost connection)",
            labels=by_engine,
        )
        engine_in_flight = GaugeMetricFamily(
            "smg_trio_engine_in_flight", "Engine requests in flight on the engine", labels=by_engine
        )
        # What the engine itself last reported, where its wire carries it (EngineStatus.load).
        running = GaugeMetricFamily(
            "smg_trio_engine_running_requests",
            "Requests the engine reported running (its scheduler's count)",
            labels=by_engine,
        )
        waiting = GaugeMetricFamily(
            "smg_trio_engine_waiting_requests",
            "Requests the engine reported waiting (its scheduler's queue)",
            labels=by_engine,
        )
        kv_usage = GaugeMetricFamily(
            "smg_trio_engine_kv_cache_usage_ratio",
            "Share of KV cache blocks in use, as the engine reported it (0 to 1)",
            labels=by_engine,
        )
        # The engine's own prefix-cache counters (vLLM ZMQ `prefix_cache_stats`), summed here
        # from its deltas: vLLM's `prefix_cache_queries` / `_hits` (docs/routing.md §9.5).
        cache_families = {
            name: CounterMetricFamily(
                f"smg_trio_engine_prefix_cache_{name}", text, labels=by_engine
            )
            for name, text in _PREFIX_CACHE_COUNTERS
        }
        for worker in workers:
            stats = worker.backend.statistics()
            labels = [worker.name, stats.runtime.value, stats.wire.value, worker.model]
            worker_ready.add_metric(labels, 1.0 if stats.ready else 0.0)
            in_flight.add_metric(labels, float(stats.in_flight))
            streams.add_metric(labels, float(stats.open_streams))
            protocol_errors.add_metric(labels, float(stats.protocol_errors))
            deaths.add_metric(labels, float(stats.engine_deaths))
            for engine in stats.engines:
                engine_labels = [worker.name, str(engine.index)]
                engine_ready.add_metric(engine_labels, 1.0 if engine.ready else 0.0)
                engine_dead.add_metric(engine_labels, 0.0 if engine.dead_reason is None else 1.0)
                engine_in_flight.add_metric(engine_labels, float(engine.in_flight))
                if engine.load is not None:
                    running.add_metric(engine_labels, float(engine.load.running))
                    waiting.add_metric(engine_labels, float(engine.load.waiting))
                    kv_usage.add_metric(engine_labels, engine.load.kv_cache_usage)
                if engine.prefix_cache is not None:
                    for name, family in cache_families.items():
                        value = getattr(engine.prefix_cache, name)
                        family.add_metric(engine_labels, float(value))
        yield from (worker_ready, in_flight, streams, protocol_errors, deaths)
        yield from (engine_ready, engine_dead, engine_in_flight, running, waiting, kv_usage)
        yield from cache_families.values()
        yield from self._routing_families()
        for source in self._extra_sources:
            yield from source.families(workers)

    def _routing_families(self) -> Iterator[Metric]:
        """Routing's view of each worker (docs/routing.md §4, §7), from `WorkerPool.snapshot`."""
        breaker = GaugeMetricFamily(
            "smg_trio_worker_circuit_breaker_state",
            "The worker's circuit breaker: 0 closed, 1 half open (a probe is out), 2 open",
            labels=["worker"],
        )
        routable = GaugeMetricFamily(
            "smg_trio_worker_routable",
            "1 while the worker is a candidate for new requests (ready, breaker not open, "
            "not being removed)",
            labels=["worker"],
        )
        routed = CounterMetricFamily(
            "smg_trio_worker_requests",
            "Requests the gateway routed to the worker",
            labels=["worker"],
        )
        failures = CounterMetricFamily(
            "smg_trio_worker_failures",
            "Requests that failed on the worker in a way that counts against it (the breaker's)",
            labels=["worker"],
        )
        retries = CounterMetricFamily(
            "smg_trio_worker_retries",
            "Requests that failed on the worker before their first byte and went to another",
            labels=["worker"],
        )
        for row in self._pool.snapshot(_breaker_clock()):
            breaker.add_metric([row.id], _BREAKER_VALUES.get(row.breaker, 0.0))
            routable.add_metric([row.id], 1.0 if row.routable else 0.0)
            routed.add_metric([row.id], float(row.requests))
            failures.add_metric([row.id], float(row.failures))
            retries.add_metric([row.id], float(row.retries))
        yield from (breaker, routable, routed, failures, retries)


_BREAKER_VALUES = {"closed": 0.0, "half_open": 1.0, "open": 2.0}
_PREFIX_CACHE_COUNTERS = (
    ("queries", "Prompt tokens the engine looked up in its prefix cache (vLLM's count)"),
    ("hits", "Of those, the tokens it found cached (vLLM's count)"),
    ("requests", "Requests the engine admitted after a prefix-cache lookup"),
    ("preempted_requests", "Preempted requests the engine looked up again"),
    ("preempted_queries", "Prompt tokens looked up again for preempted requests"),
    ("preempted_hits", "Of those, the tokens found cached"),
    ("resets", "Times the engine reported its prefix cache reset (reset_prefix_cache)"),
)


def _breaker_clock() -> float:
    """The breakers' clock (trio's): scrapes run on the event loop. Outside it (a registry read
    by a plain thread or test), 0 reads every breaker as it was last set."""
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0
