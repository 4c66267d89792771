"""I/O. One socket write per scheduling round for everything an h2 connection has pending.

hypercorn's protocols write each piece of output as it is made: over h2 its one send task
frames a stream's DATA and awaits the socket write (a lock, a syscall, two checkpoints) before
it looks at the next stream, and every response head is written by the task that sent it. At
64 streams on one connection that is a syscall per chunk, the largest single cost of a streamed
chunk (docs/performance.md §2). `ConnectionWriter` is the connection's one writer instead:

- `push` appends the bytes and wakes the writer; it returns at once (no checkpoint), so h2's
  send task frames every stream that has data in one pass. Order is the order of `push`.
- The writer wakes in the next scheduling round, when every task that ran in this one has
  pushed, and writes all of it at once: to the kernel directly (`write_now`, a non-blocking
  `os.write` on a cleartext socket), and what the kernel did not take with one `send_all`,
  shielded as hypercorn's writes are (a write cut in the middle would corrupt the byte stream).
- Memory is bounded: past `HIGH_WATER_BYTES` queued, `push` waits until the writer took the
  queue, which is the backpressure hypercorn's awaited write gave (a client that stops reading
  parks its producers, as before). `push_nowait` (a request's own task framing its DATA, no
  await) is taken only below the mark (`takes_now`); past it the caller falls back to `push`.
- `write_through` writes at once, in the caller's task, what is queued (the caller's bytes
  last) when no write is under way: the connection's choice for an h2 connection with one
  stream in flight, where the round's batching has nothing to batch.
- `drain` (before hypercorn closes the socket) waits until everything pushed went out, so a
  last response is never cut off; `stop` ends the writer after its last write.
- HTTP/1.1 connections keep hypercorn's awaited writes (frontends/http_server.py says why);
  an h2c upgrade's 101 is written that way before the h2 protocol pushes anything here.
- A failed write (the peer is gone) calls `on_broken` once (hypercorn's `Closed` to the
  protocol, as its own write did) and drops whatever is pushed after it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import trio

HIGH_WATER_BYTES: Final = 256 * 1024
"""Queued bytes past which `push` waits for the writer: a few h2 windows' worth."""


class ConnectionWriter:
    """The single writer of one connection's byte stream (see the module doc)."""

    __slots__ = (
        "_broken",
        "_idle",
        "_on_broken",
        "_queue",
        "_queued_bytes",
        "_ready",
        "_running",
        "_stopped",
        "_stream",
        "_taken",
        "_write_now",
        "_writing",
    )

    def __init__(
        self,
        stream: trio.abc.SendStream,
        on_broken: Callable[[], Awaitable[None]],
        write_now: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._stream = stream
        self._write_now = write_now  # what the kernel takes at once (no checkpoint): the rest
        self._on_broken = on_broken
        self._queue: list[bytes] = []
        self._queued_bytes = 0
        self._ready = trio.lowlevel.ParkingLot()  # the writer, waiting for bytes
        self._taken = trio.lowlevel.ParkingLot()  # producers, waiting below the high water
        self._idle = trio.lowlevel.ParkingLot()  # `drain`, waiting for the last write
        self._writing = False
        self._running = False  # the writer task is in `run`
        self._stopped = False
        self._broken = False

    async def push(self, data: bytes) -> None:
        """Queue `data` for the next write; waits only past the high water mark."""
        if self._broken:
            return
        self.push_nowait(data)
        while self._queued_bytes > HIGH_WATER_BYTES and not self._broken:
            await self._taken.park()

    @property
    def takes_now(self) -> bool:
        """Whether `push_nowait` may queue more: below the high water mark, not broken."""
        return self._queued_bytes <= HIGH_WATER_BYTES and not self._broken

    def push_nowait(self, data: bytes) -> None:
        """`push` without its wait, for a caller that asked `takes_now` first (the queue then
        passes the high water mark by this one piece at most)."""
        self._queue.append(data)
        self._queued_bytes += len(data)
        if self._ready:
            self._ready.unpark()

    def write_through(self, data: bytes) -> None:
        """`push_nowait`, then everything queued (`data` last) written to the kernel at once by
        the caller, when no write is under way and the socket allows it: for a connection with
        one stream in flight, where waiting for the next round batches nothing and costs the
        response's first bytes a scheduling round (docs/performance.md §2). What the kernel
        does not take stays queued for the writer, in order."""
        if self._writing or self._write_now is None or self._broken:
            self.push_nowait(data)
            return
        if self._queue:
            self._queue.append(data)
            data = self._take()
        rest = self._write_now(data)
        if rest:  # the kernel's buffer is full or the socket failed: the writer's await
            self.push_nowait(rest)
        else:
            self._idle.unpark_all()

    async def drain(self) -> None:
        """Wait until everything pushed so far was written (or the connection broke)."""
        while (self._queue or self._writing) and not self._broken:
            if self._running or self._writing:
                await self._idle.park()
            else:
                await self._write(self._take())  # no writer task (any more): write it here

    def stop(self) -> None:
        """End the writer once the queue is written (the connection is closing)."""
        self._stopped = True
        self._ready.unpark_all()

    async def run(self) -> None:
        """The writer task: until `stop`, write whatever was queued, one write at a time."""
        self._running = True
        try:
            while not self._broken:
                while not self._queue:
                    if self._stopped or self._broken:
                        return
                    await self._ready.park()
                await self._write(self._take())
        finally:
            self._running = False
            self._idle.unpark_all()

    def _take(self) -> bytes:
        queue = self._queue
        data = queue[0] if len(queue) == 1 else b"".join(queue)
        self._queue = []
        self._queued_bytes = 0
        self._taken.unpark_all()
        return data

    async def _write(self, data: bytes) -> None:
        self._writing = True
        try:
            if self._write_now is not None:
                data = self._write_now(data)
            if data:  # the kernel's buffer is full, TLS, or a failing socket: trio's write
                with trio.CancelScope(shield=True):
                    await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._broken = True
            self._queue = []
            self._queued_bytes = 0
            self._taken.unpark_all()
            self._ready.unpark_all()  # the writer task, if `drain` was the one writing
            await self._on_broken()
        finally:
            self._writing = False
            if not self._queue:
                self._idle.unpark_all()
