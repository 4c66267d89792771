"""I/O. What the ZMQ backend sends on its input ROUTER (ADDs, ABORTs, UTILITY calls, probes),
in the order it was queued.

One task (`write_inputs`) owns the sending direction of the socket: every producer queues with
`put` (never waits) into a coalescing mailbox, and the task sends each batch, waiting where the
socket cannot take a message (high-water mark). One shortcut, for the request path: while that
task is parked with nothing queued, `send_adds` sends a new request's ADDs itself, without
waiting (`send_multipart_nowait`), and queues only what the socket does not take at once. Nothing
is overtaken (the queue is empty) and nothing waits on the socket outside the owner, and the ADD
leaves in the request's own scheduling round instead of the writer's next one
(docs/performance.md §2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import trio

from smg_trio.backends.zmq_engines import EngineSlot, Route
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.backends.zmq_socket import TrioZmqSocket
from smg_trio.errors import BackendError, BackendUnavailable
from smg_trio.handoff import Mailbox, Taken

# Frames from this size on go to libzmq without a copy (pyzmq's own zero-copy threshold).
ZERO_COPY_FROM: Final = 65536

LOST_CONNECTION = "its input connection is gone"


@dataclass(eq=False)
class Outgoing:
    """One message for one engine: `[identity, request type, payload...]`."""

    engine: EngineSlot
    frames: list[bytes]
    add_for: Route | None = None  # an ADD is dropped if its stream left before it went out
    probe: bool = False  # a liveness probe goes out even to an engine marked dead by silence
    sent: trio.Event | None = None  # set once the frames are handed to libzmq (or dropped)


class InputWriter:
    """The sender of one input ROUTER (module doc)."""

    def __init__(self, socket: TrioZmqSocket, registry: EngineRegistry) -> None:
        self._socket = socket
        self._registry = registry
        # Many request tasks put, the writer takes: safe because put_nowait never yields.
        self._outbox: Mailbox[Outgoing] = Mailbox()

    def put(self, item: Outgoing) -> None:
        """Queue `item` for the writer task (never waits)."""
        self._outbox.put_nowait(item)

    def send_adds(self, items: Sequence[Outgoing]) -> None:
        """Send a new stream's ADDs now if the writer is idle and the socket takes them; queue
        the rest, in order."""
        for item in items:
            self._outbox.offer(item, self._take_now)

    async def write_inputs(self) -> None:
        """The owner task: send what is queued, batch by batch, forever."""
        async for batch in self._outbox:
            for item in batch:
                try:
                    await self._send(item)
                finally:
                    if item.sent is not None:
                        item.sent.set()

    def _dropped(self, item: Outgoing) -> bool:
        """Whether `item` must not go out: its engine is dead (a probe may still test one dead
        by silence), or its ADD's stream ended first (nothing to send or abort)."""
        engine = item.engine
        if engine.dead_reason is not None and not (item.probe and engine.revivable):
            return True
        route = item.add_for
        return route is not None and not route.live

    async def _send(self, item: Outgoing) -> None:
        if self._dropped(item):
            return
        if item.add_for is not None:
            item.add_for.add_sent = True  # from here on leaving the stream must ABORT it
        try:
            await self._socket.send_multipart(item.frames, copy=_copied(item.frames))
        except BackendError as exc:
            self._settle(item, exc)
        else:
            self._settle(item, None)

    def _take_now(self, item: Outgoing) -> tuple[Taken, Outgoing]:
        """`_send` without waiting (the hand-off's `take_now`): REFUSED, nothing done, when the
        socket cannot take it now."""
        if self._dropped(item):
            return Taken.ALL, item
        try:
            self._socket.send_multipart_nowait(item.frames, copy=_copied(item.frames))
        except trio.WouldBlock:
            return Taken.REFUSED, item
        except BackendError as exc:
            self._settle(item, exc)
        else:
            self._settle(item, None)
        return Taken.ALL, item

    def _settle(self, item: Outgoing, error: BackendError | None) -> None:
        """After a send was tried: the ADD counts as sent; a probe that went out proves the
        engine's input connected (zmq_clients.py); a failed send declares the engine dead."""
        if item.add_for is not None:
            item.add_for.add_sent = True
        if error is None:
            if item.probe:
                item.engine.probe_delivered = True
        elif isinstance(error, BackendUnavailable):  # ROUTER_MANDATORY: the connection is gone
            self._registry.engine_died(item.engine, LOST_CONNECTION)
        else:
            self._registry.engine_died(item.engine, f"sending to it failed: {error.message}")


def _copied(frames: list[bytes]) -> bool:
    """Whether libzmq takes a copy of the frames (small: cheaper than tracking them) or the
    bytes themselves (an image's tensors, tens of MiB: copying them would hold the event loop
    for milliseconds; `bytes` cannot change while libzmq sends them)."""
    return all(len(frame) < ZERO_COPY_FROM for frame in frames)
