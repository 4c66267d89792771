"""EngineEventStream: coalescing never reorders a choice, batches are what piled up (merged
once), and the stream ends or fails as told."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.event_stream import EngineEventStream, InlineBatches
from smg_trio.errors import EngineDead
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta, TokenLogprob, coalesce

TEST_S: Final = 5.0


def finished(choice: int) -> ChoiceFinished:
    return ChoiceFinished(choice, "length", None, 1, 1)


@st.composite
def batches(draw: st.DrawFn) -> list[EngineEvent]:
    """Interleaved events of up to 3 choices; each choice's deltas precede its finish."""
    per_choice: list[list[EngineEvent]] = []
    for choice in range(draw(st.integers(1, 3))):
        deltas: list[EngineEvent] = [
            TokenDelta(choice, tuple(ids))
            for ids in draw(st.lists(st.lists(st.integers(0, 99), min_size=1), max_size=5))
        ]
        per_choice.append(deltas + ([finished(choice)] if draw(st.booleans()) else []))
    order = draw(st.permutations([i for i, events in enumerate(per_choice) for _ in events]))
    cursors = [0] * len(per_choice)
    events = []
    for choice in order:
        events.append(per_choice[choice][cursors[choice]])
        cursors[choice] += 1
    return events


def view(events: Sequence[EngineEvent], choice: int) -> tuple[list[int], bool]:
    tokens: list[int] = []
    done = False
    for event in events:
        if event.choice_index != choice:
            continue
        assert not done, "an event after the choice finished"
        if isinstance(event, TokenDelta):
            tokens += event.token_ids
        else:
            done = True
    return tokens, done


@given(batches())
def test_coalesce_keeps_each_choice_intact_and_merges_its_deltas(events: list[EngineEvent]) -> None:
    merged = coalesce(events)
    for choice in {event.choice_index for event in events}:
        assert view(merged, choice) == view(events, choice)
        deltas = [e for e in merged if isinstance(e, TokenDelta) and e.choice_index == choice]
        assert len(deltas) <= 1


def test_coalesce_keeps_logprobs_only_when_every_delta_has_them() -> None:
    logprob = TokenLogprob(token_id=1, logprob=-0.5)
    with_logprobs = [TokenDelta(0, (1,), (logprob,)), TokenDelta(0, (1,), (logprob,))]
    assert coalesce(with_logprobs) == [TokenDelta(0, (1, 1), (logprob, logprob))]
    mixed = [TokenDelta(0, (1,), (logprob,)), TokenDelta(0, (2,))]
    assert coalesce(mixed) == [TokenDelta(0, (1, 2), None)]


async def test_a_slow_consumer_gets_one_merged_batch_then_the_end() -> None:
    stream = EngineEventStream(("a",))
    for token in range(5):
        stream.deliver(TokenDelta(0, (token,)))
    stream.deliver(finished(0))
    stream.end()
    stream.deliver(TokenDelta(0, (9,)))  # after the end: dropped
    with trio.fail_after(1):
        events = [event async for event in stream]
    assert events == [TokenDelta(0, (0, 1, 2, 3, 4)), finished(0)]


async def test_a_failed_stream_delivers_what_came_before_then_raises() -> None:
    stream = EngineEventStream(("a",))
    stream.deliver(TokenDelta(0, (1,)))
    stream.fail(EngineDead("gone"))
    with trio.fail_after(1):
        assert await stream.__anext__() == TokenDelta(0, (1,))
        with pytest.raises(EngineDead, match="gone"):
            await stream.__anext__()


async def test_batches_are_what_piled_up_merged_once_then_the_end() -> None:
    stream = EngineEventStream(("a", "b"))
    for token in range(3):
        stream.deliver(TokenDelta(0, (token,)))
        stream.deliver(TokenDelta(1, (token,)))
    with trio.fail_after(1):
        batches = stream.batches()
        assert await batches.__anext__() == [TokenDelta(0, (0, 1, 2)), TokenDelta(1, (0, 1, 2))]
        stream.deliver(finished(0))
        stream.deliver(TokenDelta(1, (3,)))
        stream.deliver(finished(1))
        stream.end()
        assert [batch async for batch in batches] == [
            [finished(0), TokenDelta(1, (3,)), finished(1)]
        ]


async def test_batches_fail_after_what_came_before() -> None:
    stream = EngineEventStream(("a",))
    stream.deliver(TokenDelta(0, (1,)))
    stream.fail(EngineDead("gone"))
    with trio.fail_after(1):
        assert await stream.batches().__anext__() == [TokenDelta(0, (1,))]
        with pytest.raises(EngineDead, match="gone"):
            await stream.batches().__anext__()


# --- inline steps: the reader hands a parked consumer's batch to its step --------------------

request_name: ContextVar[str] = ContextVar("request_name", default="reader")


class Step:
    """An inline step that records each batch with the context and task it ran in."""

    def __init__(self, answers: Sequence[bool] = (), error: Exception | None = None) -> None:
        self.answers = list(answers)
        self.error = error
        self.calls: list[tuple[Sequence[EngineEvent], str, trio.lowlevel.Task]] = []

    def __call__(self, batch: Sequence[EngineEvent]) -> bool:
        self.calls.append((batch, request_name.get(), trio.lowlevel.current_task()))
        if self.error is not None:
            raise self.error
        return self.answers.pop(0) if self.answers else True


async def consume(
    stream: EngineEventStream,
    step: Step,
    seen: list[Sequence[EngineEvent]],
    *,
    task_status: trio.TaskStatus[trio.lowlevel.Task] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The request's side: register the step, then loop as request/nursery.py does."""
    request_name.set("request")
    stream.consume_inline(step)
    task_status.started(trio.lowlevel.current_task())
    async for batch in stream.batches():
        seen.append(batch)
        if not step(batch):
            break


@dataclass
class Parked:
    """A stream with inline steps whose consumer (`consume`) waits in `batches()`."""

    inline: InlineBatches
    stream: EngineEventStream
    seen: list[Sequence[EngineEvent]]
    nursery: trio.Nursery
    consumer: trio.lowlevel.Task


@asynccontextmanager
async def parked_consumer(step: Step, *choices: str) -> AsyncIterator[Parked]:
    inline = InlineBatches()
    stream = EngineEventStream(choices or ("a",), inline)
    seen: list[Sequence[EngineEvent]] = []
    async with trio.open_nursery() as nursery:
        consumer = await nursery.start(consume, stream, step, seen)
        await trio.testing.wait_all_tasks_blocked()
        yield Parked(inline, stream, seen, nursery, consumer)


async def test_a_parked_consumers_batch_runs_in_its_context_from_the_readers_task() -> None:
    step = Step()
    with trio.fail_after(TEST_S):
        async with parked_consumer(step, "a", "b") as parked:
            stream, inline = parked.stream, parked.inline
            stream.deliver(TokenDelta(0, (1,)))
            stream.deliver(TokenDelta(1, (5,)))
            stream.deliver(TokenDelta(0, (2,)))
            assert step.calls == []  # held until the reader's flush
            inline.flush()
            ((batch, name, task),) = step.calls
            assert batch == [TokenDelta(0, (1, 2)), TokenDelta(1, (5,))]
            assert name == "request"  # the request's context (its request id, its trace)
            assert task is trio.lowlevel.current_task()
            assert task is not parked.consumer
            statistics = stream.statistics()
            assert statistics.consumer_waiting  # never woken
            assert statistics.queued == 0
            inline.flush()  # nothing held: nothing runs
            assert len(step.calls) == 1
            stream.deliver(finished(0))
            stream.deliver(finished(1))
            stream.end()  # the end takes the mailbox, after what was held
    assert parked.seen == [[finished(0), finished(1)]]


async def test_a_step_returning_false_ends_the_iteration_as_a_break_would() -> None:
    step = Step(answers=[False])
    with trio.fail_after(TEST_S):
        async with parked_consumer(step) as parked:
            parked.stream.deliver(TokenDelta(0, (1,)))
            parked.inline.flush()
        assert parked.stream.closed
        parked.stream.deliver(TokenDelta(0, (2,)))  # after the stop: dropped
        parked.inline.flush()
    assert len(step.calls) == 1
    assert parked.seen == []


async def test_a_step_that_raises_raises_in_the_consumers_loop() -> None:
    step = Step(error=EngineDead("the step failed"))
    with trio.fail_after(TEST_S), pytest.RaisesGroup(pytest.RaisesExc(EngineDead)):
        async with parked_consumer(step) as parked:
            parked.stream.deliver(TokenDelta(0, (1,)))
            parked.inline.flush()  # the reader itself is not failed
    assert parked.seen == []


async def test_a_consumer_that_is_not_parked_gets_the_batch_through_its_mailbox() -> None:
    inline = InlineBatches()
    stream = EngineEventStream(("a",), inline)
    step = Step()
    stream.consume_inline(step)
    stream.deliver(TokenDelta(0, (1,)))
    stream.deliver(TokenDelta(0, (2,)))
    inline.flush()  # the consumer is busy (here: not yet iterating)
    assert step.calls == []
    with trio.fail_after(TEST_S):
        assert await stream.batches().__anext__() == [TokenDelta(0, (1, 2))]


async def test_a_cancelled_consumer_is_not_stepped_for() -> None:
    step = Step()
    with trio.fail_after(TEST_S):
        async with parked_consumer(step) as parked:
            parked.nursery.cancel_scope.cancel()  # as a client disconnect or the deadline
            parked.stream.deliver(TokenDelta(0, (1,)))
            parked.inline.flush()
    assert step.calls == []
    assert parked.stream.statistics().queued == 1


async def test_held_events_come_before_a_failure() -> None:
    step = Step()
    with trio.fail_after(TEST_S), pytest.RaisesGroup(pytest.RaisesExc(EngineDead)):
        async with parked_consumer(step) as parked:
            parked.stream.deliver(TokenDelta(0, (1,)))
            parked.stream.fail(EngineDead("gone"))  # before the reader's flush
            parked.inline.flush()
    assert parked.seen == [[TokenDelta(0, (1,))]]  # through the mailbox, then the error
    assert len(step.calls) == 1  # the loop's own step, not the reader's


async def test_without_inline_batches_a_step_is_never_used() -> None:
    stream = EngineEventStream(("a",))
    step = Step()
    stream.consume_inline(step)
    stream.deliver(TokenDelta(0, (1,)))
    assert stream.statistics().queued == 1
    assert step.calls == []


# --- the fast lane: one choice's plain ids, as the step would get them, without the event ----

LOGPROB: Final = TokenLogprob(token_id=1, logprob=-0.5)


@asynccontextmanager
async def parked_with_lane(step: Step, *choices: str) -> AsyncIterator[Parked]:
    """`parked_consumer` whose consumer also registers a fast lane: the same step, on the
    batch the lane stands for."""
    inline = InlineBatches()
    stream = EngineEventStream(choices or ("a",), inline)
    seen: list[Sequence[EngineEvent]] = []

    def lane(choice: int, token_ids: tuple[int, ...]) -> bool:
        return step([TokenDelta(choice, token_ids)])

    async def consume_with_lane(
        *, task_status: trio.TaskStatus[trio.lowlevel.Task] = trio.TASK_STATUS_IGNORED
    ) -> None:
        request_name.set("request")
        stream.consume_inline(step, lane)
        task_status.started(trio.lowlevel.current_task())
        async for batch in stream.batches():
            seen.append(batch)
            if not step(batch):
                break

    async with trio.open_nursery() as nursery:
        consumer = await nursery.start(consume_with_lane)
        await trio.testing.wait_all_tasks_blocked()
        yield Parked(inline, stream, seen, nursery, consumer)


Delivery = tuple[str, int, tuple[int, ...]]  # ("ids" | "logprobs" | "finish", choice, ids)


@st.composite
def reads(draw: st.DrawFn) -> list[list[Delivery]]:
    """Reads of a reader, each its deliveries to one stream of two choices: plain ids, ids with
    logprobs, and each choice's finish after its ids."""
    done: set[int] = set()
    result = []
    for _ in range(draw(st.integers(1, 6))):
        read: list[Delivery] = []
        for _ in range(draw(st.integers(0, 3))):
            choice = draw(st.integers(0, 1))
            if choice in done:
                continue
            kind = draw(st.sampled_from(["ids", "ids", "ids", "logprobs", "finish"]))
            if kind == "finish":
                done.add(choice)
            ids = tuple(draw(st.lists(st.integers(0, 99), min_size=1, max_size=3)))
            read.append((kind, choice, ids))
        result.append(read)
    return result


def deliver(stream: EngineEventStream, delivery: Delivery, *, lane: bool) -> None:
    """As the in-flight table delivers: plain ids through `deliver_tokens` (the lane's way) or
    as the delta the stream made of them before the lane."""
    kind, choice, ids = delivery
    if kind == "finish":
        stream.deliver(finished(choice))
    elif kind == "logprobs":
        stream.deliver(TokenDelta(choice, ids, (LOGPROB,) * len(ids)))
    elif lane:
        stream.deliver_tokens(choice, ids)
    else:
        stream.deliver(TokenDelta(choice, ids))


@given(reads())
def test_the_fast_lane_steps_exactly_the_batches_of_the_events(
    read_list: list[list[Delivery]],
) -> None:
    async def run(lane: bool) -> tuple[list[Sequence[EngineEvent]], list[Sequence[EngineEvent]]]:
        step = Step()
        opened = parked_with_lane(step, "a", "b") if lane else parked_consumer(step, "a", "b")
        with trio.fail_after(TEST_S):
            async with opened as parked:
                for read in read_list:
                    for delivery in read:
                        deliver(parked.stream, delivery, lane=lane)
                    parked.inline.flush()
                parked.stream.end()
        return [list(batch) for batch, _, _ in step.calls], parked.seen

    assert trio.run(run, True) == trio.run(run, False)


async def test_the_lane_runs_in_the_consumers_context_and_a_second_event_joins_the_step() -> None:
    step = Step()
    with trio.fail_after(TEST_S):
        async with parked_with_lane(step, "a") as parked:
            parked.stream.deliver_tokens(0, (1, 2))
            parked.inline.flush()
            ((batch, name, task),) = step.calls
            assert batch == [TokenDelta(0, (1, 2))]
            assert name == "request"
            assert task is not parked.consumer
            parked.stream.deliver_tokens(0, (3,))
            parked.stream.deliver_tokens(0, (4,))  # a second delta: the step's merged batch
            parked.stream.deliver(finished(0))
            parked.inline.flush()
            assert step.calls[1][0] == [TokenDelta(0, (3, 4)), finished(0)]
            parked.stream.end()


async def test_ids_held_for_the_lane_come_before_an_end_or_a_failure() -> None:
    step = Step()
    with trio.fail_after(TEST_S), pytest.RaisesGroup(pytest.RaisesExc(EngineDead)):
        async with parked_with_lane(step) as parked:
            parked.stream.deliver_tokens(0, (1,))
            parked.stream.fail(EngineDead("gone"))  # before the reader's flush
            parked.inline.flush()
    assert parked.seen == [[TokenDelta(0, (1,))]]


async def test_a_lane_returning_false_or_raising_ends_the_iteration() -> None:
    step = Step(answers=[False])
    with trio.fail_after(TEST_S):
        async with parked_with_lane(step) as parked:
            parked.stream.deliver_tokens(0, (1,))
            parked.inline.flush()
        assert parked.stream.closed
    failing = Step(error=EngineDead("the lane failed"))
    with trio.fail_after(TEST_S), pytest.RaisesGroup(pytest.RaisesExc(EngineDead)):
        async with parked_with_lane(failing) as parked:
            parked.stream.deliver_tokens(0, (1,))
            parked.inline.flush()
