"""The HTTP-floor instruments serve what the load generator measures: both floor servers stream
`max_tokens` one-token chunks with usage over HTTP/1.1 (and hypercorn's over h2c), on one
keep-alive connection, and the comparison table prices a token against the hypercorn floor."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from bench.floor_compare import cpu_table, floor_target
from bench.load_scenarios import LoadPlan, measure
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
