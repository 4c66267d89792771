"""I/O. One open request's view of an engine backend (ZMQ or gRPC): the per-request mailbox the
backend's reader side fills, and the `async for` side the request consumes.

The reader calls the `deliver`/`end`/`fail` methods, which never block: a slow consumer only
makes its own mailbox grow (bounded by max_tokens), and on its next call it receives everything
that piled up, with consecutive token deltas of a choice merged into one event.
"""

from __future__ import annotations

from collections import deque

import trio

from smg_trio.backends.mailbox import Mailbox
from smg_trio.neutral.events import EngineEvent, coalesce


class EngineEventStream:
    """The events of one `open_stream` block; iterate it once with `async for`."""

    def __init__(self, engine_request_ids: tuple[str, ...]) -> None:
        self.engine_request_ids = engine_request_ids
        """The engine-side ids of the choices, in choice order (for logs and tests)."""
        self._mailbox: Mailbox[EngineEvent] = Mailbox()
        self._pending: deque[EngineEvent] = deque()
        self._closed = False

    def __aiter__(self) -> EngineEventStream:
        return self

    async def __anext__(self) -> EngineEvent:
        if not self._pending:
            try:
                batch = await self._mailbox.get_batch()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            self._pending.extend(coalesce(batch))
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
