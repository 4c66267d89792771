"""I/O. The one hand-off between tasks: a coalescing mailbox with one owner, and the producer's
right to do the owner's job itself while the owner is idle (docs/architecture.md §4).

Every queue toward a socket or a request follows the same shape: many producers, one owner
task. The mailboxes and their owners: a request's engine events (`backends/event_stream.py`,
owned by the request's own task, its scanner), a request's payloads (`ChunkWriter` in
`request/nursery.py`, owned by its client writer task), a connection's bytes
(`frontends/http/connection_writer.py`, owned by the connection's writer task) and a ZMQ
backend's outgoing messages (`backends/zmq_input_writer.py`, owned by its input writer task).
(A WebSocket's sender is fed by a bounded trio channel instead, `frontends/websocket_sender.py`:
its backpressure must reach the requests.) Producers never wait: `put_nowait` only appends,
and the owner takes everything that accumulated since its last batch in one `get_batch`, so an
owner that falls behind sees fewer, larger batches instead of slowing its producers.

`offer(item, take_now)` is the "send it now if the owner is idle" step, written once: when the
owner is idle (nothing queued, and it is parked waiting for the next item or not started yet;
not while it handles a batch, nor once cancelled out of its wait), the
producer calls `take_now(item)`, a call that cannot wait, and queues for the owner whatever it
did not take; otherwise the item is queued as it is. Nothing is ever overtaken: a producer acts
only when everything handed over before it has been handled. One answer, `Taken`, says what
went out at once:

- `ALL`: all of it; nothing was queued.
- `PART`: some of it; `take_now`'s rest was queued for the owner, ahead of anything later.
- `REFUSED`: none of it; the item was queued for the owner as it was.

`take_now` returns `(Taken, rest)`; `rest` is what the owner must still do (ignored for ALL).
The producers that offer: a request's step handing payloads to its writer
(`ChunkWriter.hand_over`), a lone h2 stream's framed bytes (`ConnectionWriter.write_through`)
and a new stream's ADDs (`InputWriter.send_adds`). The backend's reader running a request's
step in its place asks `owner_parked` instead (the step must run in the owner's context, so
an owner not started yet does not count). Framing rule (docs/architecture.md §3.2): bytes are
framed once, by the task that takes them on; what `take_now` did not send stays framed in the
rest, so a numbered event can never be framed twice or skipped.

Memory is NOT bounded here, on purpose: the caller bounds it. One engine request produces at
most `max_tokens` outputs (plus a final one), so a mailbox fed by a request holds at most that
many items; a mailbox fed by anything unbounded (a connection's bytes) has its own limit in
front of it (`frontends/http/connection_writer.py`'s high water mark), for which the mailbox keeps
the queued items' total size (`Mailbox(size_of=len)`, `queued_size`): put adds an item's size,
a batch taken resets it.

An owner whose resource outlives its task (a connection's writer: bytes pushed after the task
ended must still go out before the socket closes) has its queue taken without waiting,
`get_batch_nowait`, by whichever task then does its job; that task counts as the owner from
then on (it is not parked, so nobody offers in its place).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


class Taken(enum.Enum):
    """What a hand-off sent at once (see the module doc)."""

    ALL = "all"
    PART = "part"
    REFUSED = "refused"


TakeNow = Callable[[T], tuple[Taken, T]]
"""Send an item without waiting: what went out, and the rest the owner must still do."""


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
    """Coalescing hand-off to one owner; producers never block (see the module doc).

    Any number of producer tasks may call `put_nowait` and `offer` (synchronous, so they never
    interleave with another call); one owner task calls `get_batch` (or iterates).

    After `close()`, queued items are still delivered first; then `get_batch` raises
    `trio.EndOfChannel`, or the error given to `close` (every call raises the same instance,
    e.g. `EngineDead`). `put_nowait` after `close` raises `trio.ClosedResourceError`: it is a
    demultiplexing bug, never a consequence of a slow consumer.
    """

    __slots__ = (
        "_closed",
        "_error",
        "_items",
        "_owner_started",
        "_size",
        "_size_of",
        "_waiting_consumer",
    )

    def __init__(self, size_of: Callable[[T], int] | None = None) -> None:
        self._items: deque[T] = deque()
        self._waiting_consumer = trio.lowlevel.ParkingLot()
        self._closed = False
        self._error: BaseException | None = None
        self._owner_started = False  # the owner has asked for a batch
        self._size_of = size_of
        self._size = 0  # the queued items' total `size_of`

    def put_nowait(self, item: T) -> None:
        """Append `item` and wake the consumer if it is parked. O(1), never blocks."""
        if self._closed:
            raise trio.ClosedResourceError("put_nowait on a closed mailbox")
        self._items.append(item)
        if self._size_of is not None:
            self._size += self._size_of(item)
        if self._waiting_consumer:
            self._waiting_consumer.unpark()

    def offer(self, item: T, take_now: TakeNow[T]) -> Taken:
        """`take_now(item)` by the caller while the owner is idle, the rest queued for the
        owner; else `item` queued as it is (see the module doc). Never waits."""
        if not self.idle():
            self.put_nowait(item)
            return Taken.REFUSED
        taken, rest = take_now(item)
        if taken is not Taken.ALL:
            self.put_nowait(rest)
        return taken

    def empty(self) -> bool:
        """Nothing queued (the consumer may still be handling its last batch)."""
        return not self._items

    def queued_size(self) -> int:
        """The queued items' total size by the mailbox's `size_of` (0 without one)."""
        return self._size

    def idle(self) -> bool:
        """Nothing queued and the owner parked in `get_batch` or not started yet: everything
        put was handled (a producer may then act in its place without overtaking anything)."""
        return not self._items and (bool(self._waiting_consumer) or not self._owner_started)

    def owner_parked(self) -> bool:
        """Nothing queued and the owner parked in `get_batch`: idle, and known to be waiting
        in its own context (a step run for it there reaches a live owner; `idle` also holds
        for an owner not started yet)."""
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
        returns it. The owner counts as idle only while parked here (or before its first call).
        """
        self._owner_started = True
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
        self._size = 0
        return batch

    def get_batch_nowait(self) -> list[T]:
        """`get_batch` without waiting, for a task doing the owner's job in its place (the
        owner task ended); from then on the owner counts as started and not parked, so never
        idle. Raises `trio.WouldBlock` when nothing is queued (once closed, what `get_batch`
        raises)."""
        self._owner_started = True
        if not self._items:
            if self._closed:
                if self._error is not None:
                    raise self._error
                raise trio.EndOfChannel
            raise trio.WouldBlock
        batch = list(self._items)
        self._items.clear()
        self._size = 0
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
