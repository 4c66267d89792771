"""`ResponseRuns` on a real SQLite store, without HTTP (docs/client-apis.md §3.5): a run's
events reach every follower contiguous and in order, whether they come from the run's window
in memory or from the log (a follower far behind, a run longer than the window, one that
already ended), and the log holds what the followers got."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec
import trio
import trio.testing

from smg_trio.core.api_dialect import named_event
from smg_trio.core.responses_items import ResponseItems
from smg_trio.core.stream_end import StreamEnd
from smg_trio.handoff import Taken
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.responses.log_sink import LogSink
from smg_trio.responses.run import LOCAL_WINDOW, OUTPUT_LOG_INTERVAL_S
from smg_trio.responses.runs import HEARTBEAT_S, ResponseRuns
from smg_trio.responses.store.event_log import LoggedEvent
from smg_trio.responses.store.stores import open_response_store

TEST_TIMEOUT_S: Final = 30.0
EVENTS: Final = 3 * LOCAL_WINDOW + 7
RESPONSE: Final = b'{"id":"resp_long","status":"in_progress","output":[]}'


async def test_followers_get_every_event_from_memory_or_the_log(tmp_path: Path) -> None:
    got: dict[str, list[LoggedEvent]] = {"early": [], "late": [], "after": []}
    near_the_end = trio.Event()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            open_response_store(f"sqlite:///{tmp_path / 'r.sqlite3'}") as store,
            trio.open_nursery() as nursery,
        ):
            runs = ResponseRuns(store.events, GatewayMetrics())
            await nursery.start(runs.serve)

            async def generate(sink: LogSink) -> None:
                for number in range(EVENTS):
                    if number == EVENTS - 100:  # the window no longer holds event 6
                        near_the_end.set()
                    data = b'{"type":"response.output_text.delta","delta":"%d"}' % number
                    await sink.send_chunks([named_event(b"response.output_text.delta", data)])
                    if number % 64 == 0:
                        await trio.sleep(0.001)  # lets the flusher and the followers run
                done = b'{"type":"response.completed","response":%s}' % RESPONSE.replace(
                    b"in_progress", b"completed"
                )
                await sink.end_stream(
                    StreamEnd(payloads=(named_event(b"response.completed", done),))
                )

            async def follow(name: str, after: int) -> None:
                async def send(events: list[LoggedEvent]) -> None:
                    got[name].extend(events)
                    await trio.lowlevel.checkpoint()

                tail = await runs.open_tail("resp_long", after)
                assert tail is not None
                await runs.follow(tail, send)

            run = await runs.start("resp_long", RESPONSE, generate, background=True)
            async with trio.open_nursery() as followers:
                followers.start_soon(follow, "early", -1)
                await near_the_end.wait()
                followers.start_soon(follow, "late", 5)  # far behind: from the log first
            await run.done.wait()
            await follow("after", 100)  # the run ended: all from the log
            _, logged, _ = await store.events.events_after("resp_long", -1, 10 * EVENTS)
            ended = await store.events.run("resp_long")
            nursery.cancel_scope.cancel()
    assert [event.seq for event in got["early"]] == list(range(EVENTS + 1))
    assert got["late"] == got["early"][6:]
    assert got["after"] == got["early"][101:]
    assert logged == got["early"]
    assert ended is not None
    assert ended.ended
    assert ended.status == "completed"
    last = msgspec.json.decode(got["early"][-1].data)
    assert last["sequence_number"] == EVENTS
    assert last["type"] == "response.completed"


async def test_caught_up_follower_gets_appends_handed_over_without_gap_or_duplicate(
    tmp_path: Path,
) -> None:
    """A follower that passes `send_now` gets its live events from the run's appends while
    its transport takes them (ALL), catches up in its own task when it does not (REFUSED, or
    PART: the transport holds the rest until `send([])`), and its last event only from its own
    task once the log holds the run ended."""
    answers = [Taken.ALL, Taken.ALL, Taken.REFUSED, Taken.ALL, Taken.PART, Taken.ALL]
    got: list[LoggedEvent] = []
    held: list[LoggedEvent] = []
    by_append = [0]
    ended_in_log_at_end: list[bool] = []
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            open_response_store(f"sqlite:///{tmp_path / 'r.sqlite3'}") as store,
            trio.open_nursery() as nursery,
        ):
            runs = ResponseRuns(store.events, GatewayMetrics())
            await nursery.start(runs.serve)
            follower_parked = trio.Event()

            async def generate(sink: LogSink) -> None:
                await follower_parked.wait()
                for number in range(EVENTS):
                    data = b'{"type":"response.output_text.delta","delta":"%d"}' % number
                    sink.send_chunks_now([named_event(b"response.output_text.delta", data)])
                    if number % 7 == 0:
                        await trio.sleep(0.001)  # the follower's own task catches up
                done = b'{"type":"response.completed","response":%s}' % RESPONSE.replace(
                    b"in_progress", b"completed"
                )
                await sink.end_stream(
                    StreamEnd(payloads=(named_event(b"response.completed", done),))
                )

            async def send(events: list[LoggedEvent]) -> None:
                got.extend(held)
                held.clear()
                got.extend(events)
                if events and events[-1].data.startswith(b'{"type":"response.completed"'):
                    row = await store.events.run("resp_long")
                    ended_in_log_at_end.append(row is not None and row.ended)
                await trio.lowlevel.checkpoint()

            def send_now(events: list[LoggedEvent]) -> Taken:
                answer = answers[(events[0].seq) % len(answers)]
                if answer is Taken.REFUSED:
                    return Taken.REFUSED
                by_append[0] += 1
                if answer is Taken.PART:
                    got.extend(events[:-1])
                    held.extend(events[-1:])
                    return Taken.PART
                got.extend(events)
                return Taken.ALL

            run = await runs.start("resp_long", RESPONSE, generate, background=True)
            tail = await runs.open_tail("resp_long", -1)
            assert tail is not None
            async with trio.open_nursery() as following:
                following.start_soon(runs.follow, tail, send, send_now)
                await trio.testing.wait_all_tasks_blocked()
                assert run.caught_up  # parked at the (empty) run's newest event
                follower_parked.set()
            await run.done.wait()
            nursery.cancel_scope.cancel()
    assert [event.seq for event in got] == list(range(EVENTS + 1))
    assert by_append[0] > EVENTS // 8  # (after a refusal, none until its task caught up)
    assert ended_in_log_at_end == [True]
    assert not held


async def test_the_logs_copy_of_a_running_run_shows_its_output_and_a_cancel_keeps_it(
    tmp_path: Path,
) -> None:
    """Issue 45: another process's retrieve reads the log's copy of the object. While the run
    generates it holds the output so far within a heartbeat (rewritten at most every
    OUTPUT_LOG_INTERVAL_S, not per flush), and a cancel stores what was generated before it,
    the open item `incomplete`."""
    pieces = [f"piece {n} " for n in range(40)]
    all_sent = trio.Event()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            open_response_store(f"sqlite:///{tmp_path / 'r.sqlite3'}") as store,
            trio.open_nursery() as nursery,
        ):
            runs = ResponseRuns(store.events, GatewayMetrics())
            await nursery.start(runs.serve)

            async def generate(sink: LogSink) -> None:
                items = ResponseItems("req")
                created = b'{"type":"response.created","response":%s}' % RESPONSE
                await sink.send_chunks([named_event(b"response.created", created)])
                for piece in pieces:
                    sink.send_chunks_now([items.content(piece)])
                    await trio.sleep(0.001)
                all_sent.set()
                await trio.sleep_forever()  # still generating, as far as anyone can tell

            run = await runs.start("resp_long", RESPONSE, generate, background=True)
            await all_sent.wait()
            assert text_of(run.response) == "".join(pieces)  # this process: at once
            await trio.sleep(HEARTBEAT_S + OUTPUT_LOG_INTERVAL_S)
            running = await store.events.run("resp_long")
            cancelled = await runs.cancel("resp_long")
            stored = await store.events.run("resp_long")
            nursery.cancel_scope.cancel()
    assert running is not None
    assert running.status == "in_progress"
    assert text_of(running.response) == "".join(pieces)
    assert cancelled is not None
    assert stored is not None
    assert stored.response == cancelled
    obj = msgspec.json.decode(cancelled)
    assert obj["status"] == "cancelled"
    assert text_of(cancelled) == "".join(pieces)
    assert obj["output"][0]["status"] == "incomplete"


def text_of(response: bytes) -> str:
    output = msgspec.json.decode(response)["output"]
    return "".join(part["text"] for item in output for part in item["content"])
