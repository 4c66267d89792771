"""I/O. The `ClientSink` of one response on a Responses WebSocket lane
(`frontends/responses_socket.py`; docs/client-apis.md §3.4): the SSE stream's events one per
frame through the socket's outbox, numbered once as they are framed
(`responses_socket_events.LaneDialect`), and exactly one end per response."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final, assert_never

import trio

from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import GatewayError
from smg_trio.frontends.responses_socket_events import LaneDialect, cancelled_event, error_event
from smg_trio.frontends.sink_state import ErrorForm, SinkLifecycle, SinkState, Step
from smg_trio.frontends.websocket_sender import FrameOutbox
from smg_trio.handoff import Taken

TERMINAL_GRACE_S: Final = 1.0
"""How long a response's end may wait for room in the socket's outbox once it began, shielded."""


class LaneSink:
    """The ClientSink of one response on a lane (its state per `frontends.sink_state`).

    Every frame is numbered once, as it is framed, and waits in `_pending` until the sender
    took it: a send cut short (a cancel, the deadline) leaves the rest there, and whatever ends
    the response sends them first, so the client never sees a gap in `sequence_number`. Once
    the frames of an end are pending, that end is the response's end (`ended` turns true when
    they were all taken); an error arriving meanwhile only finishes it.
    """

    def __init__(self, outbox: FrameOutbox, stream_id: str | None, scope: trio.CancelScope) -> None:
        self._outbox = outbox
        self._stream_id = stream_id
        self._scope = scope
        self._dialect = LaneDialect(stream_id)
        self._lifecycle = SinkLifecycle()
        self._pending: deque[bytes] = deque()  # framed, not yet taken by the sender
        self._ending = False  # the pending frames hold the response's end
        self.ended = False
        self.last_payload = b""  # the renderer's last payload: the response's end event

    def gone_before_engine(self) -> bool:
        return self._scope.cancel_called

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self._lifecycle.chunks()
        self._pending.extend(self._dialect.websocket_frames(0, payloads))
        await self._send_pending()

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        """Framed here once; what the sender has no room for waits for `send_chunks`."""
        if self._lifecycle.state is not SinkState.STREAMING or self._pending:
            return Taken.REFUSED
        taken, rest = self._outbox.take_frames_now(self._dialect.websocket_frames(0, payloads))
        self._pending.extend(rest)
        return Taken.ALL if taken is Taken.ALL else Taken.PART

    async def send_body(self, body: bytes) -> None:
        raise RuntimeError("a response on a socket is always streamed")

    async def end_stream(self, end: StreamEnd) -> None:
        if self._lifecycle.end() is Step.NOTHING:
            return
        if end.payloads:
            self.last_payload = end.payloads[-1]
        # Once begun, the end goes out whole (a drain's or deadline's cancel must not leave
        # the create without its terminal); bounded for a client that stopped reading.
        with trio.move_on_after(TERMINAL_GRACE_S, shield=True):
            await self._end(self._dialect.websocket_frames(0, end.payloads))

    async def fail(self, error: GatewayError) -> None:
        form = self._lifecycle.fail()
        if form is ErrorForm.DROPPED and not self.ended:
            form = ErrorForm.FINAL_EVENT  # an end cut short: the create still needs its end
        match form:
            case ErrorForm.WHOLE_RESPONSE:
                await self._end([error_event(error, self._stream_id)])
            case ErrorForm.FINAL_EVENT:
                await self._end(self._dialect.failure_frames(error))
            case ErrorForm.DROPPED:
                pass
            case _:
                assert_never(form)

    async def cancelled(self) -> None:
        """End a response its client cancelled (`response.cancel`)."""
        self._lifecycle.fail()
        await self._end(self._dialect.cancelled_frames() or [cancelled_event(self._stream_id)])

    async def _end(self, frames: list[bytes]) -> None:
        """The pending frames, then `frames` as the response's end unless the pending frames
        already hold one."""
        await self._send_pending()
        if self._ending:
            return
        self._ending = True
        self._pending.extend(frames)
        await self._send_pending()

    async def _send_pending(self) -> None:
        pending = self._pending
        while pending:
            await self._outbox.send_frame(pending[0])
            pending.popleft()
        if self._ending:
            self.ended = True
