"""The event log's contract, the same for SQLite and PostgreSQL (docs/client-apis.md §3.5):
a run begins once per id, appends are numbered and read back after any number, the window
keeps the last events, a cancel is asked once, a stale run is ended by one process only, and
the retention drops an ended run's events. PostgreSQL runs only with `SMG_TRIO_POSTGRES=1`."""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from smg_trio.core.run_events import INCOMPLETE, SHUTDOWN_REASON, ending
from smg_trio.responses.store.event_log import Run
from smg_trio.responses.store.stores import ResponseStore
from tests.responses.store.test_stores import store  # noqa: F401 (the fixture)

TEST_TIMEOUT_S: Final = 30.0
QUEUED: Final = b'{"id":"resp_a","status":"queued","output":[]}'


def events(first: int, count: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"response.output_text.delta", b'{"delta":"%d","sequence_number":%d}' % (n, n))
        for n in range(first, first + count)
    ]


async def test_append_and_read_after_any_number(store: ResponseStore) -> None:  # noqa: F811
    log = store.events
    with trio.fail_after(TEST_TIMEOUT_S):
        assert await log.begin("resp_a", "me", background=True, response=QUEUED, now=1.0)
        assert not await log.begin("resp_a", "other", background=True, response=QUEUED, now=1.0)
        await log.append(
            "resp_a", 0, events(0, 2), status="in_progress", response=QUEUED, now=2.0, ended=True
        )
        # An ended run's id may be taken again (its events go with it).
        assert await log.begin("resp_a", "me", background=True, response=QUEUED, now=1.0)
        await log.append("resp_a", 0, events(0, 3), status="in_progress", response=QUEUED, now=2.0)
        await log.append("resp_a", 3, events(3, 2), status="in_progress", response=QUEUED, now=3.0)
        run, after_1, first = await log.events_after("resp_a", 1, 100)
        _, limited, _ = await log.events_after("resp_a", -1, 2)
        unknown = await log.events_after("resp_b", -1, 10)
    assert run is not None
    assert (run.status, run.next_seq, run.ended, run.background) == ("in_progress", 5, False, True)
    assert [event.seq for event in after_1] == [2, 3, 4]
    assert after_1[0].data == b'{"delta":"2","sequence_number":2}'
    assert [event.seq for event in limited] == [0, 1]
    assert first == 0
    assert unknown == (None, [], None)


async def test_the_window_keeps_the_last_events(store: ResponseStore) -> None:  # noqa: F811
    log = store.events
    with trio.fail_after(TEST_TIMEOUT_S):
        await log.begin("resp_a", "me", background=True, response=QUEUED, now=1.0)
        for batch in range(5):
            await log.append(
                "resp_a",
                batch * 10,
                events(batch * 10, 10),
                status="in_progress",
                response=QUEUED,
                now=2.0,
                keep=16,
            )
        _, kept, first = await log.events_after("resp_a", -1, 100)
    assert first == 34
    assert [event.seq for event in kept] == list(range(34, 50))


async def test_cancel_is_asked_once_and_seen_by_the_owner(store: ResponseStore) -> None:  # noqa: F811
    log = store.events
    with trio.fail_after(TEST_TIMEOUT_S):
        await log.begin("resp_a", "me", background=True, response=QUEUED, now=1.0)
        assert await log.beat("me", 2.0) == []
        assert await log.request_cancel("resp_a")
        assert await log.beat("me", 3.0) == ["resp_a"]
        assert await log.beat("someone else", 3.0) == []
        await log.append("resp_a", 0, [], status="cancelled", response=QUEUED, now=4.0, ended=True)
        assert not await log.request_cancel("resp_a")
        assert await log.beat("me", 5.0) == []


async def test_a_stale_run_is_ended_once(store: ResponseStore) -> None:  # noqa: F811
    log = store.events
    with trio.fail_after(TEST_TIMEOUT_S):
        await log.begin("resp_a", "dead", background=True, response=QUEUED, now=1.0)
        await log.begin("resp_b", "alive", background=True, response=QUEUED, now=1.0)
        await log.append("resp_a", 0, events(0, 2), status="in_progress", response=QUEUED, now=2.0)
        await log.beat("alive", 50.0)

        def end(run: Run) -> tuple[bytes, bytes, str, bytes]:
            name, data, response = ending(run.response, INCOMPLETE, SHUTDOWN_REASON)
            return name, data, INCOMPLETE, response

        async with trio.open_nursery() as nursery:  # two processes find it at once
            found: list[list[str]] = []

            async def sweep() -> None:
                found.append(await log.end_stale(40.0, end, 60.0))

            nursery.start_soon(sweep)
            nursery.start_soon(sweep)
        run, tail, _ = await log.events_after("resp_a", 1, 10)
        alive = await log.run("resp_b")
    assert sorted(found) == [[], ["resp_a"]]
    assert run is not None
    assert run.ended
    assert run.status == INCOMPLETE
    assert [event.name for event in tail] == [b"response.incomplete"]
    ended = msgspec.json.decode(tail[0].data)
    assert ended["sequence_number"] == 2
    assert ended["response"]["incomplete_details"] == {"reason": SHUTDOWN_REASON}
    assert alive is not None
    assert not alive.ended


async def test_retention_drops_ended_runs_events(store: ResponseStore) -> None:  # noqa: F811
    log = store.events
    with trio.fail_after(TEST_TIMEOUT_S):
        for run_id in ("resp_a", "resp_b"):
            await log.begin(run_id, "me", background=True, response=QUEUED, now=1.0)
            await log.append(
                run_id, 0, events(0, 3), status="in_progress", response=QUEUED, now=2.0
            )
        await log.append("resp_a", 3, [], status="completed", response=QUEUED, now=10.0, ended=True)
        await log.expire(20.0)
        _, gone, _ = await log.events_after("resp_a", -1, 10)
        _, kept, _ = await log.events_after("resp_b", -1, 10)
        assert await store.delete("resp_b")
        assert await log.run("resp_b") is None
    assert gone == []
    assert len(kept) == 3
