"""Fixtures the end-to-end tests share; a module needing another server overrides `server`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.live_server import LiveServer, live_server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    """The gateway in front of the reference vLLM ZMQ engine, on loopback."""
    async with live_server(tmp_path) as running:
        yield running
