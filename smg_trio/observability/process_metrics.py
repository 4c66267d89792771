"""I/O. `/metrics` when several gateway processes serve one port (docs/observability.md §6,
docs/processes.md §5): whichever process answers a scrape shows every process's figures.

- The per-request metrics (counters, histograms, the in-flight and WebSocket gauges) use
  prometheus-client's multiprocess mode: with `PROMETHEUS_MULTIPROC_DIR` set before the process
  starts (the supervisor sets it), each process writes its values to memory-mapped files there,
  and `multiprocess_exposition` merges every file at scrape time (counters and histograms
  summed; the live gauges summed over the processes still running).
- The worker and engine state that `WorkerStateCollector` reads at scrape time exists only in
  the process that holds it, so `mirror_worker_state_forever` copies it into multiprocess
  metrics every `MIRROR_PERIOD_S` (never per request): counts of this process (in flight, open
  streams) are summed; what each process sees for itself (readiness, breakers, an engine taken
  out) keeps a `pid` label; what an engine reported about itself (running, waiting, KV usage)
  is the most recent report; counters are summed, a dead process's share included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

MIRROR_PERIOD_S: Final = 0.5
"""How stale the mirrored worker state may be in a scrape (the probe snapshot's period)."""

GaugeMode = Literal["liveall", "livesum", "livemostrecent"]
_SUMMED: Final = frozenset(
    {"smg_trio_worker_in_flight", "smg_trio_worker_open_streams", "smg_trio_engine_in_flight"}
)
_ENGINE_REPORTS: Final = frozenset(
    {
        "smg_trio_engine_running_requests",
        "smg_trio_engine_waiting_requests",
        "smg_trio_engine_kv_cache_usage_ratio",
    }
)


def gauge_mode(name: str) -> GaugeMode:
    """How one mirrored gauge is merged across processes (see the module doc)."""
    if name in _SUMMED:
        return "livesum"
    if name in _ENGINE_REPORTS:
        return "livemostrecent"
    return "liveall"  # a per-process view: one series per pid


def multiprocess_exposition(directory: str) -> bytes:
    """Every process's metrics, merged from the files in `directory`."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


class WorkerStateMirror:
    """Copies families read from a scrape-time collector into multiprocess metrics."""

    def __init__(self) -> None:
        self._registry = CollectorRegistry()  # never exposed: the files are
        self._gauges: dict[str, Gauge] = {}
        self._counters: dict[str, Counter] = {}
        self._last: dict[tuple[str, tuple[str, ...]], float] = {}

    def copy(self, families: Iterable[Metric]) -> None:
        for family in families:
            if family.type == "gauge":
                self._copy_gauge(family)
            elif family.type == "counter":
                self._copy_counter(family)

    def _copy_gauge(self, family: Metric) -> None:
        gauge = self._gauges.get(family.name)
        for sample in family.samples:
            if gauge is None:
                gauge = self._gauges[family.name] = Gauge(
                    family.name,
                    family.documentation,
                    tuple(sample.labels),
                    registry=self._registry,
                    multiprocess_mode=gauge_mode(family.name),
                )
            child = gauge.labels(*sample.labels.values()) if sample.labels else gauge
            child.set(sample.value)

    def _copy_counter(self, family: Metric) -> None:
        counter = self._counters.get(family.name)
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # `_created` samples: not mirrored
            if counter is None:
                counter = self._counters[family.name] = Counter(
                    family.name, family.documentation, tuple(sample.labels), registry=self._registry
                )
            values = tuple(sample.labels.values())
            key = (family.name, values)
            delta = sample.value - self._last.get(key, 0.0)
            if delta > 0:
                (counter.labels(*values) if values else counter).inc(delta)
                self._last[key] = sample.value


async def mirror_worker_state_forever(
    collector: Collector, period_s: float = MIRROR_PERIOD_S
) -> None:
    """Copy `collector`'s families into the multiprocess files now and every `period_s`."""
    mirror = WorkerStateMirror()
    while True:
        mirror.copy(collector.collect())
        await trio.sleep(period_s)
