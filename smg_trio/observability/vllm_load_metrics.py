"""I/O. The engines' load under vLLM's own metric names, read at scrape time: what a vLLM user's
dashboards and vLLM's own tests read from `/metrics` (docs/observability.md §1,
docs/vllm-frontend.md §2).

    vllm:num_requests_running, vllm:num_requests_waiting   (gauges, per worker and engine)
    vllm:kv_cache_usage_perc                               (gauge, 0 to 1, as vLLM's)

The figures are the engine's own last report (`EngineStatus.load`: vLLM ZMQ `scheduler_stats`,
sent with every engine step, and once more after the step that leaves it idle, so an aborted
request's share returns to 0). An engine that reported nothing yet shows 0, as vLLM's gauges
start. The same figures are `smg_trio_engine_running_requests` etc. (worker_collector.py),
which are absent until the first report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from smg_trio.routing.workers import Worker


class VllmLoadFamilies:
    """A `WorkerStateSource` (worker_collector.py) for vLLM's three load gauges."""

    def families(self, workers: Sequence[Worker]) -> Iterable[Metric]:
        labels = ["worker", "engine"]
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Requests the engine is running", labels=labels
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Requests waiting in the engine's queue", labels=labels
        )
        usage = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent", labels=labels
        )
        for worker in workers:
            for engine in worker.backend.statistics().engines:
                key = [worker.name, str(engine.index)]
                load = engine.load
                running.add_metric(key, 0.0 if load is None else float(load.running))
                waiting.add_metric(key, 0.0 if load is None else float(load.waiting))
                usage.add_metric(key, 0.0 if load is None else load.kv_cache_usage)
        return (running, waiting, usage)
