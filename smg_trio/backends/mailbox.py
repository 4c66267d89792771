"""I/O. The per-request coalescing mailbox between the shared engine reader and one request.

The engine's output socket is read by ONE task that demultiplexes messages to requests. That
task must never wait on a single slow request (a slow client would stall every other stream),
so it hands items over with `put_nowait`, which only appends. The request's consumer takes
everything that accumulated since its last call in one `get_batch`, so a consumer that falls
behind sees fewer, larger batches instead of slowing the producer.

Memory is NOT bounded here, on purpose: the caller bounds it. One engine request produces at
most `max_tokens` outputs (plus a final one), so a mailbox holds at most that many items, and
the request nursery closes the stream when it ends. A mailbox used for anything unbounded needs
its own limit in front of it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    """A snapshot for debugging and tests."""

    queued: int
    """Items put and not yet taken by `get_batch`."""
    closed: bool
    """`close()` was called (items may still be queued)."""
    consumer_waiting: bool
    """A task is parked in `get_batch`."""


class Mailbox(Generic[T]):
    """Coalescing hand-off to one consumer; producers never block.

    Any number of producer tasks may call `put_nowait` (it is synchronous, so it never
    interleaves with another call); one consumer task calls `get_batch`.

    After `close()`, queued items are still delivered first; then `get_batch` raises
    `trio.EndOfChannel`, or the error given to `close` (every call raises the same instance,
    e.g. `EngineDead`). `put_nowait` after `close` raises `trio.ClosedResourceError`: it is a
    demultiplexing bug, never a consequence of a slow consumer.
    """

    __slots__ = ("_closed", "_error", "_items", "_waiting_consumer")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiting_consumer = trio.lowlevel.ParkingLot()
        self._closed = False
        self._error: BaseException | None = None

    def put_nowait(self, item: T) -> None:
        """Append `item` and wake the consumer if it is parked. O(1), never blocks."""
        if self._closed:
            raise trio.ClosedResourceError("put_nowait on a closed mailbox")
        self._items.append(item)
        if self._waiting_consumer:
            self._waiting_consumer.unpark()

    def empty(self) -> bool:
        """Nothing queued (the consumer may still be handling its last batch)."""
        return not self._items

    def consumer_idle(self) -> bool:
        """Nothing queued and the consumer parked in `get_batch`: everything put was taken and
        handled (a producer may then act in its place without overtaking anything)."""
        return not self._items and bool(self._waiting_consumer)

    def close(self, error: BaseException | None = None) -> None:
        """No more items. With `error`, the consumer gets it instead of `trio.EndOfChannel`.

        Idempotent: a second close keeps the first close's error.
        """
        if self._closed:
            return
        self._closed = True
        self._error = error
        self._waiting_consumer.unpark_all()

    async def get_batch(self) -> list[T]:
        """Everything queued since the last call, oldest first; waits while empty.

        Never returns an empty list. Cancelled while waiting, no item is lost: the next call
        returns it.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._items:
            # Yield once per batch so a busy stream cannot starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()
        while not self._items:
            if self._closed:
                if self._error is not None:
                    raise self._error
                raise trio.EndOfChannel
            await self._waiting_consumer.park()
        batch = list(self._items)
        self._items.clear()
        return batch

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            queued=len(self._items),
            closed=self._closed,
            consumer_waiting=bool(self._waiting_consumer),
        )

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> list[T]:
        """`async for batch in mailbox` ends cleanly on `trio.EndOfChannel`."""
        try:
            return await self.get_batch()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
