"""`python -m bench http_limits`'s checks still work, tiny, against an in-process gateway with
the reference engine (the full-size run is bench/RESULTS.md "HTTP limits"): each check returns
the figures its section prints, and they show the behaviour docs/http.md promises."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
import trio

from bench import http_limit_checks as checks
from bench.http_limits import section
from tests.e2e.live_server import MODEL, live_server

TEST_TIMEOUT_S: Final = 15.0
LIMITS: Final = {
    "idle_timeout_s": 0.3,
    "body_timeout_s": 0.6,
    "body_idle_s": 0.5,
    "max_websockets": 2,
}


@pytest.mark.serial
async def test_the_http_limit_checks_run_and_show_the_behaviour(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=20, api_key=None, http_limits=LIMITS) as server:
        port = server.port
        with trio.fail_after(TEST_TIMEOUT_S):
            closing = await checks.connection_close(port, MODEL, requests=2)
            idle = await checks.keep_alive_after_generation(
                port, MODEL, connections=3, idle_timeout_s=0.3
            )
            dribbling, _ = await checks.body_dribblers(port, count=3, gap_s=0.2, deadline_s=3)
            streams = await checks.h2_streams(
                port, MODEL, connections=2, per_connection=3, max_tokens=2
            )
            resets = await checks.rapid_reset(port, MODEL, duration_s=0.3)
            storm = await checks.websocket_storm(port, sockets=4, concurrency=4)
    assert closing["failures"] == 0
    assert isinstance(closing["max_s"], float)
    assert closing["max_s"] < 0.1
    assert idle["closed by the keep-alive timer"] == 3
    assert dribbling["answers"] == {"408": 3}
    assert (streams["ok"], streams["errors"]) == (6, {})
    ends = resets["how connections ended"]
    assert isinstance(ends, dict)
    assert set(ends) == {"GOAWAY ENHANCE_YOUR_CALM"}
    assert storm["outcomes"] == {"closed 1013": 2, "served": 2}
    text = section([("Connection: close", closing)], "python -m bench http_limits", 1.0)
    assert "| Connection: close | requests: 2; failures: 0; close after response end: p50" in text
