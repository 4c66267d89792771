"""I/O. The KV index's figures at scrape time (docs/routing.md §9.3): entries per worker, and how
many stores it skipped, could not place or evicted to stay under its bound. A
`WorkerStateSource`: read when /metrics is scraped, nothing on the request path."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from smg_trio.routing.kv_index import KvIndex
from smg_trio.routing.vocabulary import Worker


class KvIndexFamilies:
    def __init__(self, index: KvIndex) -> None:
        self._index = index

    def families(self, workers: Sequence[Worker]) -> Iterable[Metric]:
        return self._families(workers)

    def _families(self, workers: Sequence[Worker]) -> Iterator[Metric]:
        blocks = GaugeMetricFamily(
            "smg_trio_kv_index_blocks",
            "KV blocks the worker's engine reported cached, as the kv_events index holds them",
            labels=["worker"],
        )
        for worker in workers:
            blocks.add_metric([worker.name], float(self._index.blocks_of(worker.name)))
        yield blocks
        stats = self._index.statistics()
        for name, value, text in (
            ("evicted", stats.evicted, "Index entries dropped to stay under its bound"),
            ("skipped_events", stats.skipped_events, "Stores a plain prompt could never hit"),
            ("orphan_blocks", stats.orphan_blocks, "Stored blocks whose parent was unknown"),
            ("cleared", stats.cleared, "Times a worker's blocks were all dropped"),
        ):
            family = CounterMetricFamily(f"smg_trio_kv_index_{name}", text)
            family.add_metric([], float(value))
            yield family
