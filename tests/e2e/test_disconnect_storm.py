"""No engine request outlives its client, whatever mix of disconnects happens at once: the
scaled-down version of `python -m bench disconnect_storm` (bench/RESULTS.md "Disconnect
storm"). The gateway runs in the test's own trio run (its tasks and fds are counted), the
reference vLLM EngineCore dials it, and the engine's own counters say what is still running.

The h2 connections dropped while half their streams are still starting are what once leaked:
hypercorn told the connection's other streams `http.disconnect` from inside a task we then
cancelled (docs/architecture.md §3.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import trio

from bench.disconnect_storm import (
    rapid_reset_adds,
    run_storm,
    storm_target,
)
from bench.storm_clients import Leave

TEST_TIMEOUT_S: Final = 60.0
STEP_MS: Final = 100.0  # fewer tokens than the bench's 20 ms: the storm, not the load, matters
SETTLE_S: Final = 3.0
MIX: Final = {
    Leave.H2_DROP_STARTING: 300,
    Leave.H2_DROP: 20,
    Leave.H2_RST_STREAM: 20,
    Leave.HTTP1_FIN: 5,
    Leave.HTTP1_RST: 5,
    Leave.WS_CANCEL: 10,
    Leave.WS_CLOSE: 10,
}


async def test_a_mixed_disconnect_storm_leaves_no_engine_request_task_or_fd(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with storm_target(STEP_MS, tmp_path) as target:
            baseline, results = await run_storm(target, MIX, rounds=2, settle_s=SETTLE_S)
            counters = await target.counters()
    for result in results:
        assert result.streams == sum(MIX.values())
        assert result.engine_running == 0, result
        assert result.gateway_in_flight == 0, result
        assert (result.tasks, result.fds) <= baseline, (result, baseline)
    # Every stream reached the engine and every one of them was aborted, none finished.
    assert counters["requests_added"] == 2 * sum(MIX.values())
    assert counters["requests_aborted"] == counters["requests_added"]


async def test_a_stream_reset_with_its_request_costs_no_engine_add(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with storm_target(STEP_MS, tmp_path) as target:
            resets, adds = await rapid_reset_adds(target, seconds=1.0)
    assert resets > 100
    assert adds <= resets // 100, f"{adds} engine ADDs for {resets} streams reset at once"
