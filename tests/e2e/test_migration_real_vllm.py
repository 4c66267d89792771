"""Opt-in: mid-stream migration against real vLLM engines (docs/resilience.md §9). smg-trio with
two workers, each a headless vLLM EngineCore over ZMQ; greedy streams, then the same streams
again with one engine's process group killed (SIGKILL) once each has a few tokens: every
stream's text must be the unkilled one, byte for byte, with one finish and the same usage.

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_migration_real_vllm.py
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest
import trio

from tests.e2e import real_vllm
from tests.e2e.live_server import chat_outcome, parse_sse
from tests.e2e.real_vllm import SERVED_NAME, Launched

STREAMS: Final = 12  # round robin: six on the engine that is killed
TOKENS: Final = 400  # a tiny model on CPU is fast: long enough that the kill comes mid-way
REQUEST_S: Final = 300.0

pytestmark = list(real_vllm.MARKS)


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Launched]]]:
    with real_vllm.smg_trio_in_front_of_two_vllm_zmq(tmp_path_factory.mktemp("mig")) as both:
        yield both


def body(index: int) -> dict[str, Any]:
    return {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": f"Count from {index} and explain each number."}],
        "temperature": 0,
        "ignore_eos": True,
        "max_tokens": TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def run_streams(
    client: httpx.AsyncClient, chunks_before_kill: list[int] | None, victim: Launched | None
) -> list[tuple[str, list[object], object]]:
    """Every stream's text, finishes and usage; with a victim, it is killed once every stream
    has its `chunks_before_kill` chunks."""
    results: list[tuple[str, list[object], object]] = [("", [], None)] * STREAMS
    seen = [0] * STREAMS

    async def one(index: int) -> None:
        raw = bytearray()
        async with client.stream("POST", "/v1/chat/completions", json=body(index)) as response:
            assert response.status_code == 200
            async for data in response.aiter_raw():
                raw.extend(data)
                seen[index] = raw.count(b"\n\ndata: ")
        outcome = chat_outcome(parse_sse(bytes(raw)))
        results[index] = (outcome.texts[0], list(outcome.finishes.values()), outcome.usage)

    async with trio.open_nursery() as nursery:
        for index in range(STREAMS):
            nursery.start_soon(one, index)
        if victim is not None and chunks_before_kill is not None:
            while any(s < n for s, n in zip(seen, chunks_before_kill, strict=True)):  # noqa: ASYNC110
                await trio.sleep(0.005)
            os.killpg(victim.process.pid, signal.SIGKILL)
    return results


async def test_greedy_streams_go_on_byte_for_byte_when_an_engine_is_killed(
    two_engines: tuple[str, list[Launched]],
) -> None:
    url, engines = two_engines
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_S) as client:
        expected = await run_streams(client, None, None)
        # Each stream at its own position (2..16 chunks) when the engine dies.
        positions = [2 + (index * 5) % 15 for index in range(STREAMS)]
        got = await run_streams(client, positions, engines[0])
        for index, (want, have) in enumerate(zip(expected, got, strict=True)):
            assert have == want, index
            assert have[1] == ["length"]
        metrics = (await client.get("/metrics")).text
    moved = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("smg_trio_migrations_total{")
    )
    assert moved == STREAMS // 2  # every stream of the killed engine, each at its position
