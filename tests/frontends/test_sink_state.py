"""The sink state table every front end shares: each call in each state, and what an error
becomes (the SSE and WebSocket tests check the bytes each form turns into)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from smg_trio.frontends.sink_state import ErrorForm, SinkLifecycle, SinkState, Step


def in_state(state: SinkState) -> SinkLifecycle:
    lifecycle = SinkLifecycle()
    match state:
        case SinkState.IDLE:
            pass
        case SinkState.STREAMING:
            lifecycle.chunks()
        case SinkState.CLOSED:
            lifecycle.end()
    assert lifecycle.state is state
    return lifecycle


@pytest.mark.parametrize(
    ("state", "call", "answer", "after"),
    [
        (SinkState.IDLE, SinkLifecycle.chunks, Step.OPEN_AND_SEND, SinkState.STREAMING),
        (SinkState.STREAMING, SinkLifecycle.chunks, Step.SEND, SinkState.STREAMING),
        (SinkState.IDLE, SinkLifecycle.end, Step.OPEN_AND_SEND, SinkState.CLOSED),
        (SinkState.STREAMING, SinkLifecycle.end, Step.SEND, SinkState.CLOSED),
        (SinkState.CLOSED, SinkLifecycle.end, Step.NOTHING, SinkState.CLOSED),
        (SinkState.IDLE, SinkLifecycle.fail, ErrorForm.WHOLE_RESPONSE, SinkState.CLOSED),
        (SinkState.STREAMING, SinkLifecycle.fail, ErrorForm.FINAL_EVENT, SinkState.CLOSED),
        (SinkState.CLOSED, SinkLifecycle.fail, ErrorForm.DROPPED, SinkState.CLOSED),
        (SinkState.IDLE, SinkLifecycle.body, None, SinkState.CLOSED),
    ],
)
def test_each_call_moves_the_state_and_says_what_to_send(
    state: SinkState,
    call: Callable[[SinkLifecycle], Step | ErrorForm | None],
    answer: Step | ErrorForm | None,
    after: SinkState,
) -> None:
    lifecycle = in_state(state)
    assert call(lifecycle) is answer
    assert lifecycle.state is after


@pytest.mark.parametrize(
    ("state", "call"),
    [
        (SinkState.CLOSED, SinkLifecycle.chunks),
        (SinkState.STREAMING, SinkLifecycle.body),
        (SinkState.CLOSED, SinkLifecycle.body),
    ],
)
def test_sending_into_a_finished_response_is_a_bug(
    state: SinkState, call: Callable[[SinkLifecycle], object]
) -> None:
    lifecycle = in_state(state)
    with pytest.raises(RuntimeError):
        call(lifecycle)
    assert lifecycle.state is state


def test_an_error_is_answered_once() -> None:
    lifecycle = SinkLifecycle()
    lifecycle.chunks()
    assert [lifecycle.fail(), lifecycle.fail()] == [ErrorForm.FINAL_EVENT, ErrorForm.DROPPED]
