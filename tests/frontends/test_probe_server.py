"""`--probe-port` (docs/resilience.md §8): the probes and /metrics answered by a thread of their
own, in milliseconds even while the gateway's event loop is busy, and following the gateway's
state (a stopped engine turns /health to 503 within a publish period or two)."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from smg_trio.frontends.probe_server import PUBLISH_PERIOD_S
from tests.e2e.live_server import live_server

TEST_S = 20.0
BLOCKED_LOOP_S = 0.6


def get(port: int, path: str) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one GET, from a plain thread (never the event loop)."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read(), time.perf_counter() - started
    except urllib.error.HTTPError as error:
        return error.code, error.read(), time.perf_counter() - started


async def test_probes_answer_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    with trio.fail_after(TEST_S):
        async with live_server(tmp_path, probe_port=0) as server:
            port = server.serving.probe_port
            assert port is not None
            await trio.sleep(PUBLISH_PERIOD_S * 2)  # a snapshot with the engine ready
            status, body, _ = await trio.to_thread.run_sync(get, port, "/health")
            assert (status, json.loads(body)) == (200, {"status": "ok"})
            status, body, _ = await trio.to_thread.run_sync(get, port, "/metrics")
            names = {family.name for family in text_string_to_metric_families(body.decode())}
            assert "smg_trio_worker_ready" in names
            assert (await trio.to_thread.run_sync(get, port, "/v1/models"))[0] == 404

            # Hold the event loop's thread (as a saturated loop would, minus the GIL: a probe
            # needs only the GIL, which a busy loop hands over every 5 ms) while probing.
            answers: list[tuple[int, bytes, float]] = []

            def probe_during_the_block() -> None:
                time.sleep(BLOCKED_LOOP_S / 4)
                answers.extend(get(port, path) for path in ("/health", "/liveness", "/metrics"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, probe_during_the_block)
                await trio.sleep(0.05)  # the thread is running
                time.sleep(BLOCKED_LOOP_S)  # noqa: ASYNC251 (blocks the loop on purpose)
            assert [status for status, _, _ in answers] == [200, 200, 200]
            assert max(seconds for _, _, seconds in answers) < 0.1

            # It follows the gateway: the engine gone, /health turns 503.
            await server.stop_engine(signal.SIGKILL)
            with trio.fail_after(2 + 2 * PUBLISH_PERIOD_S):
                while (await trio.to_thread.run_sync(get, port, "/health"))[0] != 503:  # noqa: ASYNC110 (polls another thread)
                    await trio.sleep(0.05)
            assert (await trio.to_thread.run_sync(get, port, "/liveness"))[0] == 200
