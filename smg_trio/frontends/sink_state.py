"""Pure. The one state table of a client sink, shared by the SSE response and the WebSocket stream:
what each call does in each state, and what an error becomes.

    IDLE ──chunks──▶ STREAMING ──end / fail──▶ CLOSED
      │                                           ▲
      └────────────── body / end / fail ──────────┘

    state      chunks                 body         end                 fail(error)
    IDLE       open, send; STREAMING  send; CLOSED open, end; CLOSED   WHOLE_RESPONSE; CLOSED
    STREAMING  send                   (a bug)      end; CLOSED         FINAL_EVENT; CLOSED
    CLOSED     (a bug)                (a bug)      nothing             DROPPED

- "open" sends what starts a stream (SSE: the `200 text/event-stream` head; a WebSocket stream
  has no head).
- WHOLE_RESPONSE: nothing went out, so the error is the response (SSE: its HTTP status with
  OpenAI error JSON; WebSocket: the id's error frame).
- FINAL_EVENT: the stream is open, so the error ends it (SSE: `data: {"error": ...}` then
  `data: [DONE]`; WebSocket: the id's error frame).
- DROPPED: the response is over; the error has nowhere to go.
The state moves before the sink sends anything: a send that was cancelled half-way is never
started again, and an error after it is dropped instead of written into a broken response.
A client that left is the sink's own business (it raises `ClientGone` or sends nothing).
"""

from __future__ import annotations

import enum
from typing import assert_never


class SinkState(enum.Enum):
    IDLE = "idle"  # nothing sent: an error can still be the whole response
    STREAMING = "streaming"  # the stream is open: an error is its final event
    CLOSED = "closed"


class Step(enum.Enum):
    """What the sink sends for `chunks` and `end`."""

    OPEN_AND_SEND = "open_and_send"  # start the stream first
    SEND = "send"
    NOTHING = "nothing"


class ErrorForm(enum.Enum):
    """What the sink sends for `fail(error)`."""

    WHOLE_RESPONSE = "whole_response"
    FINAL_EVENT = "final_event"
    DROPPED = "dropped"


class SinkLifecycle:
    """The current state of one sink; each method moves it per the table and says what to send."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = SinkState.IDLE

    def chunks(self) -> Step:
        match self.state:
            case SinkState.IDLE:
                self.state = SinkState.STREAMING
                return Step.OPEN_AND_SEND
            case SinkState.STREAMING:
                return Step.SEND
            case SinkState.CLOSED:
                raise RuntimeError("chunks after the response was closed")
            case _:
                assert_never(self.state)

    def body(self) -> None:
        if self.state is not SinkState.IDLE:
            raise RuntimeError(f"a whole body in state {self.state.value}")
        self.state = SinkState.CLOSED

    def end(self) -> Step:
        match self.state:
            case SinkState.IDLE:
                self.state = SinkState.CLOSED
                return Step.OPEN_AND_SEND
            case SinkState.STREAMING:
                self.state = SinkState.CLOSED
                return Step.SEND
            case SinkState.CLOSED:
                return Step.NOTHING
            case _:
                assert_never(self.state)

    def fail(self) -> ErrorForm:
        match self.state:
            case SinkState.IDLE:
                self.state = SinkState.CLOSED
                return ErrorForm.WHOLE_RESPONSE
            case SinkState.STREAMING:
                self.state = SinkState.CLOSED
                return ErrorForm.FINAL_EVENT
            case SinkState.CLOSED:
                return ErrorForm.DROPPED
            case _:
                assert_never(self.state)
