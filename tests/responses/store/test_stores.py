"""The response store's contract, the same for SQLite and PostgreSQL (docs/client-apis.md
§3.3): put/get/delete round trips (any text, hypothesis), a put replaces, concurrent calls stay
within the pool's bound, and a closed store refuses. PostgreSQL runs only with
`SMG_TRIO_POSTGRES=1`, against a server the test starts itself (postgres_server.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smg_trio.responses.store.pool import StoreUnavailable
from smg_trio.responses.store.stores import (
    ResponseStore,
    StoredResponse,
    default_store_url,
    open_response_store,
)
from tests.responses.store.postgres_server import postgres_server

TEST_TIMEOUT_S: Final = 30.0
POSTGRES: Final = os.environ.get("SMG_TRIO_POSTGRES") == "1"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(not POSTGRES, reason="set SMG_TRIO_POSTGRES=1"),
            ],
        ),
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    if request.param == "sqlite":
        async with open_response_store(f"sqlite:///{tmp_path / 'r.sqlite3'}") as opened:
            yield opened
        return
    async with postgres_server() as url, open_response_store(url) as opened:
        yield opened


def stored(response_id: str, text: str = "hello") -> StoredResponse:
    response = msgspec.json.encode({"id": response_id, "output_text": text})
    return StoredResponse(response_id, 1_700_000_000, response, msgspec.json.encode([text]))


async def test_round_trip_replace_and_delete(store: ResponseStore) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        assert await store.get("resp_a") is None
        await store.put(stored("resp_a"))
        assert await store.get("resp_a") == stored("resp_a")
        await store.put(stored("resp_a", "again"))  # the same id: replaced, not duplicated
        assert await store.get("resp_a") == stored("resp_a", "again")
        assert await store.delete("resp_a") is True
        assert await store.delete("resp_a") is False
        assert await store.get("resp_a") is None


async def test_concurrent_calls(store: ResponseStore) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            for index in range(40):
                nursery.start_soon(store.put, stored(f"resp_{index}", f"text {index}"))
        got = [await store.get(f"resp_{index}") for index in range(40)]
    assert got == [stored(f"resp_{index}", f"text {index}") for index in range(40)]


async def test_a_closed_store_refuses(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with open_response_store(f"sqlite:///{tmp_path / 'r.sqlite3'}") as opened:
            await opened.put(stored("resp_a"))
        with pytest.raises(StoreUnavailable):
            await opened.get("resp_a")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(), response_id=st.text(min_size=1, max_size=64))
def test_any_text_round_trips_through_sqlite(tmp_path: Path, text: str, response_id: str) -> None:
    async def main() -> StoredResponse | None:
        async with open_response_store(f"sqlite:///{tmp_path / 'h.sqlite3'}") as opened:
            await opened.put(stored(response_id, text))
            return await opened.get(response_id)

    assert trio.run(main) == stored(response_id, text)


def test_the_default_store_is_in_the_user_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/data/home")
    assert default_store_url() == "sqlite:////data/home/smg-trio/responses.sqlite3"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert default_store_url() == "sqlite:////home/someone/.local/share/smg-trio/responses.sqlite3"
