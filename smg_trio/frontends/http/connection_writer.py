"""I/O. One socket write per scheduling round for everything an h2 connection (or a WebSocket,
over h2 or HTTP/1.1) has pending.

hypercorn's protocols write each piece of output as it is made: over h2 its one send task
frames a stream's DATA and awaits the socket write (a lock, a syscall, two checkpoints) before
it looks at the next stream, and every response head is written by the task that sent it. At
64 streams on one connection that is a syscall per chunk, the largest single cost of a streamed
chunk (docs/performance.md §2). `ConnectionWriter` is instead the writer task every connection
has, through which an h2 connection's and a WebSocket's bytes go:

- The queue is the one hand-off (`smg_trio/handoff.py`): a `Mailbox[bytes]` owned by the
  writer task. `push` appends the bytes and wakes the writer; it returns at once (no
  checkpoint), so h2's send task frames every stream that has data in one pass. Order is the
  order of `push`.
- The writer wakes in the next scheduling round, when every task that ran in this one has
  pushed, and writes all of it at once: to the kernel directly (`write_now`, a non-blocking
  `os.write` on a cleartext socket), and what the kernel did not take with one `send_all`,
  shielded as hypercorn's writes are (a write cut in the middle would corrupt the byte stream).
- Memory is bounded: past `HIGH_WATER_BYTES` queued, `push` waits until the writer took the
  queue, which is the backpressure hypercorn's awaited write gave (a client that stops reading
  parks its producers, as before). `push_nowait` (a request's own task framing its DATA, no
  await) is taken only below the mark (`takes_now`); past it the caller falls back to `push`.
- `write_through` is the hand-off's `offer`: while the writer is idle (nothing queued, the
  writer parked or not started), the caller's task writes the bytes to the kernel at once
  (`write_now`) and queues what the kernel did not take; otherwise they are queued. It answers
  `Taken` (ALL, PART with the rest queued, REFUSED: queued whole). The connection's choice for
  an h2 connection with one stream in flight, where the round's batching has nothing to batch.
- `drain` (before hypercorn closes the socket) waits until everything pushed went out, so a
  last response is never cut off; once the writer task ended it writes the queue itself
  (`Mailbox.get_batch_nowait`). `stop` ends the writer after its last write: it queues an
  empty piece, which wakes the writer and writes nothing.
- A plain HTTP/1.1 response never comes here: `HttpConnection.protocol_send`
  (frontends/http/connection.py, which says why: h11 decides keep-alive from how far it read
  the request when the response ends) writes its bytes to the kernel at once from the task
  that has them, and what the kernel did not take by an awaited write under the connection's
  `send_lock` (`write_rest`); so do its direct chunks (`write_chunk_now`, `start_now`,
  `end_now`). This writer's task then idles until the connection closes. An h2c upgrade's 101 is written that
  way too, before the h2 protocol pushes anything here; a WebSocket's frames come here over
  HTTP/1.1 as over h2.
- A failed write (the peer is gone) calls `on_broken` once (hypercorn's `Closed` to the
  protocol, as its own write did) and drops whatever is pushed after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from smg_trio.handoff import Mailbox, Taken

HIGH_WATER_BYTES: Final = 256 * 1024
"""Queued bytes past which `push` waits for the writer: a few h2 windows' worth."""


class ConnectionWriter:
    """The writer task of one connection's byte stream: an h2 connection's or a WebSocket's
    (see the module doc)."""

    __slots__ = (
        "_broken",
        "_mailbox",
        "_on_broken",
        "_running",
        "_stopped",
        "_stream",
        "_taken",
        "_write_now",
        "_writing",
        "_written",
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
        self._mailbox: Mailbox[bytes] = Mailbox(size_of=len)
        self._taken = trio.lowlevel.ParkingLot()  # producers, waiting below the high water
        self._written = trio.lowlevel.ParkingLot()  # `drain`, waiting for the last write
        self._writing = False  # a write (the writer's or `drain`'s) is under way
        self._running = False  # the writer task is in `run`
        self._stopped = False
        self._broken = False

    async def push(self, data: bytes) -> None:
        """Queue `data` for the next write; waits only past the high water mark."""
        self.push_nowait(data)
        while self._mailbox.queued_size() > HIGH_WATER_BYTES and not self._broken:
            await self._taken.park()

    @property
    def takes_now(self) -> bool:
        """Whether `push_nowait` may queue more: below the high water mark, not broken."""
        return self._mailbox.queued_size() <= HIGH_WATER_BYTES and not self._broken

    def push_nowait(self, data: bytes) -> None:
        """`push` without its wait, for a caller that asked `takes_now` first (the queue then
        passes the high water mark by this one piece at most). Dropped once the peer is gone."""
        if not self._broken:
            self._mailbox.put_nowait(data)

    def write_through(self, data: bytes) -> Taken:
        """`data` written to the kernel at once by the caller while the writer is idle, the rest
        queued for it; else queued whole (the hand-off's `offer`): for a connection with one
        stream in flight, where waiting for the next round batches nothing and costs the
        response's first bytes a scheduling round (docs/performance.md §2). Never waits; ALL
        (dropped) once the peer is gone."""
        if self._broken:
            return Taken.ALL
        return self._mailbox.offer(data, self._take_now)

    def _take_now(self, data: bytes) -> tuple[Taken, bytes]:
        """The hand-off's `take_now`: what the kernel takes of `data` without waiting."""
        write_now = self._write_now
        if write_now is None:  # TLS: only the writer's awaited write
            return Taken.REFUSED, data
        rest = write_now(data)
        if not rest:
            return Taken.ALL, b""
        return (Taken.REFUSED if len(rest) == len(data) else Taken.PART), rest

    async def drain(self) -> None:
        """Wait until everything pushed so far was written (or the connection broke)."""
        mailbox = self._mailbox
        while not self._broken:
            if self._writing or (self._running and not mailbox.empty()):
                await self._written.park()
            elif self._running:
                return  # nothing queued, no write under way
            else:
                try:  # no writer task (any more): write it here
                    batch = mailbox.get_batch_nowait()
                except trio.WouldBlock:
                    return
                await self._write(batch)

    def stop(self) -> None:
        """End the writer once the queue is written (the connection is closing)."""
        self._stopped = True
        self._mailbox.put_nowait(b"")  # wakes the writer; writes nothing

    async def run(self) -> None:
        """The writer task: until `stop`, write whatever was queued, one write at a time."""
        self._running = True
        mailbox = self._mailbox
        try:
            while not self._broken:
                await self._write(await mailbox.get_batch())
                if self._stopped and mailbox.empty():
                    return
        finally:
            self._running = False
            self._written.unpark_all()

    async def _write(self, batch: list[bytes]) -> None:
        """One write of a batch just taken from the mailbox."""
        if self._taken:
            self._taken.unpark_all()  # the queue is below the high water mark again
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        self._writing = True
        try:
            if self._write_now is not None and data:  # (empty: `stop`'s wake-up)
                data = self._write_now(data)
            if data:  # the kernel's buffer is full, TLS, or a failing socket: trio's write
                with trio.CancelScope(shield=True):
                    await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._broken = True
            with contextlib.suppress(trio.WouldBlock):
                self._mailbox.get_batch_nowait()  # dropped: nobody reads them any more
            if self._mailbox.owner_parked():  # `drain` was writing: the writer task ends too
                self._mailbox.put_nowait(b"")
            self._taken.unpark_all()
            await self._on_broken()
        finally:
            self._writing = False
            if self._broken or self._mailbox.empty():
                self._written.unpark_all()
