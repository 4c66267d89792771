"""Hostile HTTP/2 frame sequences against the gateway (harness/h2_frame_corpus.py, run by
harness/h2_frame_fuzz.py): every mutation at least three times, seeded, over h2c to the
gateway and the reference vLLM EngineCore. Each well-formed request ends (answered, reset, or
its connection closed by GOAWAY), none is answered 5xx or with an internal error event, the
server's frames always parse, and afterwards the gateway serves as before with no engine
request left behind (docs/limits.md §5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from harness.h2_frame_corpus import MUTATIONS, h2_sequences
from harness.h2_frame_fuzz import fuzz_h2
from tests.e2e.live_server import MODEL, LiveServer, live_server

pytestmark = pytest.mark.timeout(180)
SEED: Final = 33
ROUNDS: Final = 3


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, api_key=None, step_ms=0.5) as running:
        yield running


async def test_hostile_frame_sequences_leave_no_request_unanswered(server: LiveServer) -> None:
    sequences = list(h2_sequences(SEED, ROUNDS * len(MUTATIONS), model=MODEL))
    with trio.fail_after(150):
        result = await fuzz_h2(server.port, sequences, concurrency=4)
    assert result.sequences == len(sequences)
    assert result.without_end == []
    assert result.server_errors == 0, result.statuses
    assert result.unparsable == 0
    assert result.statuses[200] > 0  # well-formed requests were answered, not just refused
    assert result.goaways  # and the protocol errors ended their connections
    with trio.fail_after(30):
        assert await server.seconds_until_idle(limit_s=5.0) <= 5.0
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
            )
    assert answer.status_code == 200, answer.text
