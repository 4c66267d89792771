"""I/O. The gateway's own view of a `python -m bench run`: `/metrics` read before and after the
run (and scraped every half second during it), differenced and printed beside the client's view.

- Counters: requests answered 200 and completion tokens, the deltas over the run. They must
  equal the bench's own counts (completed requests, `usage.completion_tokens`).
- Medians of the gateway's TTFT, inter-token and end-to-end histograms over the run, by linear
  interpolation inside the bucket (as PromQL's `histogram_quantile`). The gateway's TTFT starts
  once the body was read and ends at the first engine token, so it can only be smaller than
  the client's, which adds the HTTP round trip, the first chunk's rendering and its write.
- Scrape times while the load runs: what a Prometheus scrape costs under load (< 50 ms wanted,
  docs/observability.md §1), beside a `/health` request timed the same way (a fresh connection
  each), the floor any request meets on that loop and machine at that moment.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import trio
from prometheus_client.parser import text_string_to_metric_families

from bench.load.http1_client import Http1Connection
from bench.load.stats import RunSummary, percentile

SCRAPE_EVERY_S: Final = 0.5
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def _get(host: str, port: int, path: str) -> tuple[int, bytes]:
    connection = await Http1Connection.connect(host, port)
    try:
        return await connection.get(path)
    finally:
        await connection.aclose()


async def scrape(host: str, port: int) -> Samples:
    status, body = await _get(host, port, "/metrics")
    if status != 200:
        raise SystemExit(f"bench: GET /metrics answered {status}: is this an smg-trio gateway?")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


@dataclass
class ScrapeTimes:
    """How long each scrape, and each `/health` beside it, took while the load ran."""

    seconds: list[float] = field(default_factory=list)
    health_seconds: list[float] = field(default_factory=list)

    async def keep_scraping(self, host: str, port: int) -> None:
        while True:
            started = time.perf_counter()
            await scrape(host, port)
            self.seconds.append(time.perf_counter() - started)
            started = time.perf_counter()
            await _get(host, port, "/health")
            self.health_seconds.append(time.perf_counter() - started)
            await trio.sleep(SCRAPE_EVERY_S)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())

    def summed(samples: Samples) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)

    return summed(after) - summed(before)


def histogram_median(before: Samples, after: Samples, name: str) -> float | None:
    """The median over the run of histogram `name` (all label sets), in seconds."""
    buckets: dict[float, float] = {}
    for samples, sign in ((after, 1.0), (before, -1.0)):
        for (n, labels), value in samples.items():
            if n == f"{name}_bucket":
                bound = float(dict(labels)["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sign * value
    return _interpolated(sorted(buckets.items()), 0.5)


def _interpolated(cumulative: Iterable[tuple[float, float]], quantile: float) -> float | None:
    points = list(cumulative)
    if not points or points[-1][1] <= 0:
        return None
    rank = quantile * points[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in points:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return None


def side_by_side(summary: RunSummary, before: Samples, after: Samples, scrapes: ScrapeTimes) -> str:
    """A markdown table: the client's figures and the gateway's over the same run."""

    def ms(seconds: float | None) -> str:
        return "—" if seconds is None else f"{seconds * 1000:.1f}"

    def client_ms(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    requests = delta(before, after, "smg_trio_requests_total", status="200")
    tokens = delta(before, after, "smg_trio_completion_tokens_total")
    rows = [
        ("requests completed (200)", str(summary.completed), f"{requests:.0f}"),
        ("completion tokens", str(summary.output_tokens), f"{tokens:.0f}"),
        (
            "TTFT p50 ms",
            client_ms(summary.ttft.p50_ms),
            ms(histogram_median(before, after, "smg_trio_time_to_first_token_seconds")),
        ),
        (
            "ITL p50 ms",
            client_ms(summary.itl.p50_ms),
            ms(histogram_median(before, after, "smg_trio_inter_token_latency_seconds")),
        ),
        (
            "E2E p50 ms",
            client_ms(summary.e2e.p50_ms),
            ms(histogram_median(before, after, "smg_trio_e2e_request_latency_seconds")),
        ),
        (
            "scrapes during the run: count, p50 / max ms",
            "",
            f"{len(scrapes.seconds)}, {ms(percentile(scrapes.seconds, 50))} / "
            f"{ms(max(scrapes.seconds, default=None))}",
        ),
        (
            "GET /health beside each scrape: p50 / max ms",
            "",
            f"{ms(percentile(scrapes.health_seconds, 50))} / "
            f"{ms(max(scrapes.health_seconds, default=None))}",
        ),
    ]
    lines = ["| figure | client (bench) | gateway (/metrics) |", "|---|---:|---:|"]
    lines += [f"| {name} | {client} | {gateway} |" for name, client, gateway in rows]
    return "\n".join(lines)
