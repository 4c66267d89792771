"""EngineEventStream: coalescing never reorders a choice, batches are what piled up (merged
once), and the stream ends or fails as told."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.event_stream import EngineEventStream
from smg_trio.errors import EngineDead
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta, TokenLogprob, coalesce


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
