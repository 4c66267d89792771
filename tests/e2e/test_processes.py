"""vLLM EngineCore over ZMQ with two gateway processes as its clients (docs/processes.md §3):
one handshake lists both processes' sockets, each process's requests come back to it, a router
stop on either aborts on the engine within 50 ms, a restarted process takes the engine back
from the registration its sibling kept, and an engine restart reaches both."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from tests.e2e.live_server import REPLAY_HEAD, REPLAY_TEXT, STOP, chat_body, chat_outcome, parse_sse
from tests.e2e.two_processes import GatewayProcess, TwoProcesses, two_processes

TEST_TIMEOUT_S: Final = 30.0
STEP_MS: Final = 5.0
IDLE_WITHIN_S: Final = 0.05  # the acceptance bound, as for one process (test_lifecycle.py)
CHAT: Final = "/v1/chat/completions"
GREEDY: Final = {"max_tokens": 12, "temperature": 0.0}


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[TwoProcesses]:
    async with two_processes(tmp_path, REPLAY_TEXT, STEP_MS) as running:
        yield running


async def chat_text(process: GatewayProcess, **body: object) -> str:
    async with httpx.AsyncClient(base_url=process.base_url) as client:
        response = await client.post(CHAT, json=chat_body(**body))
    outcome = chat_outcome(parse_sse(response.content))
    return outcome.texts[0]


async def seconds_until_idle(process: GatewayProcess, limit_s: float = 2.0) -> float:
    start = trio.current_time()
    with trio.fail_after(limit_s):
        while True:
            counters = await process.counters()
            if counters["requests_active"] == 0 and counters["requests_waiting"] == 0:
                return trio.current_time() - start


async def test_each_process_gets_its_own_outputs_and_the_same_greedy_text(
    setup: TwoProcesses,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        texts = [await chat_text(process, **GREEDY) for process in setup.processes]
        assert texts[0]
        assert texts[1] == texts[0]
        async with trio.open_nursery() as nursery:  # at once: both sockets busy together
            for process in setup.processes:
                for _ in range(3):
                    nursery.start_soon(chat_text, process)
        counters = [await process.counters() for process in setup.processes]
        assert counters[0]["requests_added"] == counters[1]["requests_added"] == 8


@pytest.mark.serial  # a real-time bound (docs/architecture.md §8.1)
async def test_a_router_stop_on_either_process_aborts_on_the_engine(setup: TwoProcesses) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        for process in setup.processes:
            before = dict(await process.counters())
            assert await chat_text(process, stop=[STOP]) == REPLAY_HEAD
            idle_after = await seconds_until_idle(process)
            assert idle_after <= IDLE_WITHIN_S, f"engine busy {idle_after * 1000:.1f} ms after"
            after = await process.counters()
            assert after["requests_aborted"] == before["requests_aborted"] + 1
            assert after["tokens_after_abort"] == 0


@pytest.mark.serial  # a real-time bound (docs/architecture.md §8.1)
async def test_a_restarted_process_takes_the_engine_back(setup: TwoProcesses) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        await setup.stop(1)
        restarted = await setup.start(1)
        with trio.fail_after(3.0):  # the engine reconnects, then answers a probe
            await restarted.backend.wait_ready()
        assert await chat_text(restarted, **GREEDY) == await chat_text(setup.processes[0], **GREEDY)


async def test_an_engine_restart_reaches_both_processes(setup: TwoProcesses) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        engine = setup.engines[0]
        engine.send_signal(signal.SIGKILL)
        await engine.wait()
        for process in setup.processes:
            while process.backend.statistics().ready:  # noqa: ASYNC110 (the backend's own state)
                await trio.sleep(0.01)
        await setup.start_engine()
        await setup.wait_ready()
        texts = [await chat_text(process, **GREEDY) for process in setup.processes]
        assert texts[0]
        assert texts[1] == texts[0]
