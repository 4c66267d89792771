"""Fixtures the end-to-end tests share; a module needing another server overrides `server`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e import real_vllm
from tests.e2e.live_server import LiveServer, live_server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    """The gateway in front of the reference vLLM ZMQ engine, on loopback."""
    async with live_server(tmp_path) as running:
        yield running


@pytest.fixture(scope="module")
def vllm_zmq_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """smg-trio in front of a real vLLM EngineCore over ZMQ, once per module (opt-in modules
    only: `real_vllm.MARKS` skips them without the engine)."""
    with real_vllm.smg_trio_in_front_of_vllm("zmq", tmp_path_factory.mktemp("smg-zmq")) as url:
        yield url
