"""The HTTP-floor instruments serve what the load generator measures: both floor servers stream
`max_tokens` one-token chunks with usage over HTTP/1.1 (and hypercorn's over h2c), on one
keep-alive connection; the comparison table prices a token against the hypercorn floor, and the
split attributes it to the gateway, the HTTP library and the trio floor."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from bench.floor_compare import cpu_table, floor_target, shares
from bench.load_scenarios import LoadPlan, measure
from bench.load_stats import Percentiles, ProcessUsage, RunSummary
from bench.load_transports import TransportName
from bench.load_workload import LengthRange

TEST_TIMEOUT_S = 60.0
WORDS = tuple(f"w{i}" for i in range(50))


@pytest.mark.parametrize("server", ["hypercorn", "raw"])
async def test_floor_server_streams_every_requested_token(server: str, tmp_path: Path) -> None:
    tokens = LengthRange(5, 5)
    plan = LoadPlan((2,), LengthRange(4, 4), tokens, 1, 3, time_cap_s=20.0)
    kinds: tuple[TransportName, ...] = ("http1", "h2c") if server == "hypercorn" else ("http1",)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with floor_target(server, 0.0, tmp_path) as target:
            runs = await measure([(target, kind) for kind in kinds], plan, "floor", WORDS, None)
    for run in runs:
        assert (run.completed, run.errors, run.cancelled) == (3, 0, 0), run.first_error
        assert run.output_tokens == 15  # usage.completion_tokens = max_tokens, per request
        assert run.server is not None  # the floor process was measured
    table = cpu_table(runs)
    assert table.count("\n") == 1 + len(runs)
    if server == "hypercorn":
        assert "| hypercorn floor http1 | c=2 |" in table


def summary(target: str, streams: int, cpu_s: float, tokens: int = 10_000) -> RunSummary:
    none = Percentiles(None, None, None)
    return RunSummary(
        target=target,
        scenario="floor",
        load=f"c={streams}",
        streams=streams,
        sent=10,
        completed=10,
        errors=0,
        cancelled=0,
        wall_s=1.0,
        output_tokens=tokens,
        tokens_per_s=float(tokens),
        ttft=none,
        itl=none,
        e2e=none,
        server=ProcessUsage(cpu_s=cpu_s, peak_rss_mb=30.0),
        client_cpu_s=0.1,
    )


def test_shares_split_a_token_into_gateway_http_library_and_trio_floor() -> None:
    runs = [
        summary("smg-trio http1", 1, 9.0),
        summary("smg-trio http1", 64, 1.8),
        summary("smg-trio h2c", 64, 2.2),
        summary("hypercorn floor http1", 64, 1.3),
        summary("hypercorn floor h2c", 64, 1.8),
        summary("raw trio floor http1", 64, 0.5),
    ]
    assert shares(runs) == [
        "- http1, 64 streams: smg-trio 180 µs = its own work 50 µs + hypercorn 80 µs (vs raw "
        "HTTP/1.1 on trio) + trio, sockets and wake-ups 50 µs",
        "- h2c, 64 streams: smg-trio 220 µs = its own work 40 µs + hypercorn 130 µs (vs raw "
        "HTTP/1.1 on trio) + trio, sockets and wake-ups 50 µs",
    ]
    assert "| smg-trio h2c | c=64 | 10,000 | 2.20 | 220 | 1.22x |" in cpu_table(runs)
