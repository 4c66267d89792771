"""I/O. One open request's view of an engine backend (ZMQ or gRPC): the per-request mailbox the
backend's reader side fills, and the side the request consumes.

The reader calls the `deliver`/`end`/`fail` methods, which never block: a slow consumer only
makes its own mailbox grow (bounded by max_tokens), and on its next call it receives everything
that piled up, with consecutive token deltas of a choice merged into one event. This is the one
place events are merged (`coalesce`, once per batch).

The request layer takes them a batch at a time (`async for batch in stream.batches()`) and
hands each batch to the response assembler as it is. `async for event in stream` yields the same
events one by one, for code that wants them singly (backend tests, benchmarks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import trio

from smg_trio.backends.mailbox import Mailbox
from smg_trio.neutral.events import EngineEvent, coalesce


class EventBatches:
    """`async for batch in stream.batches()`: each batch coalesced, never empty."""

    __slots__ = ("_mailbox",)

    def __init__(self, mailbox: Mailbox[EngineEvent]) -> None:
        self._mailbox = mailbox

    def __aiter__(self) -> EventBatches:
        return self

    async def __anext__(self) -> Sequence[EngineEvent]:
        try:
            batch = await self._mailbox.get_batch()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        return coalesce(batch)


class EngineEventStream:
    """The events of one `open_stream` block; iterate it once, by batch or by event."""

    def __init__(self, engine_request_ids: tuple[str, ...]) -> None:
        self.engine_request_ids = engine_request_ids
        """The engine-side ids of the choices, in choice order (for logs and tests)."""
        self._mailbox: Mailbox[EngineEvent] = Mailbox()
        self._batches = EventBatches(self._mailbox)
        self._pending: deque[EngineEvent] = deque()
        self._closed = False

    def batches(self) -> EventBatches:
        """Everything delivered since the previous batch, merged; ends or fails as told."""
        return self._batches

    def __aiter__(self) -> EngineEventStream:
        return self

    async def __anext__(self) -> EngineEvent:
        if not self._pending:
            self._pending.extend(await self._batches.__anext__())
        return self._pending.popleft()

    @property
    def closed(self) -> bool:
        """No more events will be delivered (ended, failed or left)."""
        return self._closed

    def deliver(self, event: EngineEvent) -> None:
        if not self._closed:
            self._mailbox.put_nowait(event)

    def end(self) -> None:
        """Every choice finished: the iteration ends after the queued events."""
        self._closed = True
        self._mailbox.close()

    def fail(self, error: BaseException) -> None:
        """The iteration raises `error` after the queued events; later events are dropped."""
        self._closed = True
        self._mailbox.close(error)
