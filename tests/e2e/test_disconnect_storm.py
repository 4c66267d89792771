"""No engine request outlives its client, whatever mix of disconnects happens at once: the
scaled-down version of `python -m bench disconnect_storm` (bench/RESULTS.md "Disconnect
storm"). The gateway runs in the command's own process (its tasks and fds are counted), the reference
vLLM EngineCore dials it, and the engine's own counters say what is still running.

The h2 connections dropped while half their streams are still starting are what once leaked:
hypercorn told the connection's other streams `http.disconnect` from inside a task we then
cancelled (docs/architecture.md §3.1)."""

from __future__ import annotations

import re
from typing import Final

from tests.bench.bench_command import command_output

TIMEOUT_S: Final = 90.0
STEP_MS: Final = 100.0  # fewer tokens than the bench's 20 ms: the storm, not the load, matters
ROUNDS: Final = 2
MIX: Final = {
    "h2-drop-starting": 300,
    "h2-drop": 20,
    "h2-rst-stream": 20,
    "http1-fin": 5,
    "http1-rst": 5,
    "ws-cancel": 10,
    "ws-close": 10,
}


async def test_a_mixed_storm_leaves_no_engine_request_task_or_fd_and_resets_cost_no_adds() -> None:
    text = await command_output(
        "disconnect_storm",
        "--mix",
        ",".join(f"{kind}={count}" for kind, count in MIX.items()),
        "--rounds",
        str(ROUNDS),
        "--step-ms",
        f"{STEP_MS:g}",
        "--settle-s",
        "3",
        "--rapid-reset-s",
        "1",
        timeout_s=TIMEOUT_S,
    )
    rounds = re.findall(
        r"round \d+: (\d+) streams left; engine running (\d+), gateway in flight (\d+), "
        r"tasks \d+, fds \d+, settled in [\d.]+ s (\w+)",
        text,
    )
    assert len(rounds) == ROUNDS, text
    for streams, running, in_flight, verdict in rounds:
        assert int(streams) == sum(MIX.values())
        assert (running, in_flight, verdict) == ("0", "0", "ok")  # tasks and fds at baseline
    # Every stream reached the engine and every one of them was aborted, none finished.
    engine = re.search(r"engine: (\d+) requests added, (\d+) aborted", text)
    assert engine is not None, text
    assert int(engine.group(1)) == ROUNDS * sum(MIX.values())
    assert engine.group(2) == engine.group(1)
    # A stream reset with its request costs no engine ADD.
    reset = re.search(r"rapid reset 1 s: (\d+) streams reset, (\d+) ADDs", text)
    assert reset is not None, text
    resets, adds = int(reset.group(1)), int(reset.group(2))
    assert resets > 40  # a loaded machine (load 12) got 73 in the second; a quiet one ~10x that
    assert adds <= resets // 100, f"{adds} engine ADDs for {resets} streams reset at once"
