"""The in-flight table's rules, wire-free: what ends a stream, what leaving aborts, what an
engine's death fails. The backends' conformance suite checks the same over real wires."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from smg_trio.backends.event_stream import EngineEventStream
from smg_trio.backends.in_flight import ABORT_GRACE_S, InFlight, InFlightTable
from smg_trio.errors import BackendUnavailable, EngineDead, EngineRejected
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta

Table = InFlightTable[str, InFlight[str]]


def open_choices(table: Table, engines: Sequence[str]) -> list[InFlight[str]]:
    """One stream with a choice per entry of `engines`, registered in the table."""
    ids: list[str] = []
    for _ in engines:
        ids.append(table.new_engine_request_id("req", ids))
    stream = table.new_stream(tuple(ids))
    requests = []
    for choice, (engine_request_id, engine) in enumerate(zip(ids, engines, strict=True)):
        request = InFlight(
            engine_request_id=engine_request_id,
            choice_index=choice,
            engine=engine,
            stream=stream,
            prompt_tokens=5,
        )
        table.add(request)
        requests.append(request)
    return requests


async def drain(stream: EngineEventStream) -> list[EngineEvent]:
    return [event async for event in stream]


class Aborts:
    """A wire that records what it was asked to abort."""

    def __init__(self, *, hang: bool = False) -> None:
        self.unfinished: list[str] = []
        self._hang = hang

    async def __call__(
        self, _given_up: Sequence[InFlight[str]], unfinished: Sequence[InFlight[str]]
    ) -> None:
        self.unfinished.extend(request.engine_request_id for request in unfinished)
        if self._hang:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()


def test_engine_request_ids_are_unique_among_those_in_flight_and_planned() -> None:
    table: Table = InFlightTable(["e"])
    planned = {table.new_engine_request_id("req", ()) for _ in range(50)}
    assert len(planned) == 50
    assert all(rid.startswith("req-") for rid in planned)
    again = table.new_engine_request_id("req", planned)
    assert again not in planned


async def test_the_stream_ends_once_every_choice_finished() -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["e"])
        first, second = open_choices(table, ["e", "e"])
        first.deliver_tokens((1, 2), None)
        table.end_choice(first, "stop", None, failure="unused")
        assert not first.stream.closed
        assert table.count("e") == 1
        second.deliver_tokens((3,), None)
        table.end_choice(second, "tool_calls", None, failure="unused")
        events = await drain(first.stream)
    finishes = [event for event in events if isinstance(event, ChoiceFinished)]
    assert [(f.choice_index, f.finish_reason, f.completion_tokens) for f in finishes] == [
        (0, "stop", 2),
        (1, "stop", 1),
    ]
    assert [e.token_ids for e in events if isinstance(e, TokenDelta)] == [(1, 2), (3,)]
    assert table.requests == {}
    assert table.count("e") == 0


@pytest.mark.parametrize(
    ("finish_reason", "status", "words"),
    [("abort", 503, "the engine aborted the request"), ("error", 500, "it broke")],
)
async def test_an_abort_or_error_finish_fails_the_stream(
    finish_reason: str, status: int, words: str
) -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["e"])
        (request,) = open_choices(table, ["e"])
        table.end_choice(request, finish_reason, None, failure="it broke")
        with pytest.raises(EngineRejected) as caught:
            await drain(request.stream)
    assert (caught.value.status, caught.value.reason) == (status, words)
    assert not request.live
    assert table.requests == {}


async def test_leaving_early_aborts_only_the_unfinished_choices() -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["e"])
        first, second = open_choices(table, ["e", "e"])
        aborts = Aborts()
        async with table.hold(first.stream, [first, second], aborts) as stream:
            assert table.open_streams == 1
            table.end_choice(first, "length", None, failure="unused")
            async for _ in stream:
                break  # after the first choice's finish
        assert aborts.unfinished == [second.engine_request_id]
        assert table.open_streams == 0
        assert table.requests == {}
        with pytest.raises(trio.ClosedResourceError):
            await drain(stream)


async def test_a_hung_abort_is_given_up_after_the_grace_even_when_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["e"])
        (request,) = open_choices(table, ["e"])
        aborts = Aborts(hang=True)
        started = trio.current_time()
        with trio.move_on_after(0.01):
            async with table.hold(request.stream, [request], aborts):
                await trio.sleep_forever()
        elapsed = trio.current_time() - started
    assert aborts.unfinished == [request.engine_request_id]
    assert ABORT_GRACE_S <= elapsed < ABORT_GRACE_S + 0.5  # shielded, and bounded


async def test_an_engine_death_fails_only_its_streams() -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["a", "b"])
        (on_a,) = open_choices(table, ["a"])
        (on_b,) = open_choices(table, ["b"])
        assert table.fail_engine("a", "gone") == [on_a]
        with pytest.raises(EngineDead, match="gone"):
            await drain(on_a.stream)
    assert not on_b.stream.closed
    assert table.count("b") == 1
    assert table.count("a") == 0


async def test_close_fails_every_stream_and_refuses_new_ones() -> None:
    with trio.fail_after(5):
        table: Table = InFlightTable(["e"])
        (request,) = open_choices(table, ["e"])
        aborts = Aborts()
        await table.close("shutting down", aborts)
        assert aborts.unfinished == [request.engine_request_id]
        with pytest.raises(BackendUnavailable, match="shutting down"):
            await drain(request.stream)


async def test_the_watchdog_reports_a_busy_engine_silent_for_a_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table: Table = InFlightTable(["busy", "idle"])
    silent: list[tuple[str, str]] = []
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(table.watch_silence, 10.0, lambda e, why: silent.append((e, why)))
            await trio.sleep(30)  # idle silence is normal
            assert silent == []
            (request,) = open_choices(table, ["busy"])
            await trio.sleep(5)
            table.heard_from("busy", trio.current_time())
            await trio.sleep(9.5)
            assert silent == []  # heard 9.5 s ago
            await trio.sleep(1.5)
            nursery.cancel_scope.cancel()
    assert silent  # reported on every check until it is declared dead (the backend's job)
    assert set(silent) == {("busy", "no output for 10 s with 1 requests in flight")}
    assert request.live
