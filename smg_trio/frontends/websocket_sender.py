"""I/O. A WebSocket's send side (`frontends/websocket.py`): one sender task owns it, and every
request and the receive loop hand it whole frames through a small bounded channel
(`FrameOutbox`), so a slow client holds back only this socket's own requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable

from smg_trio.errors import ClientGone
from smg_trio.handoff import Taken
from smg_trio.request.gateway import Gateway
from smg_trio.request.heap import RELEASE_HEAP_AFTER_BYTES

FRAME_BUFFER: Final = 16
"""Frames waiting for the sender; small, so backpressure reaches the requests quickly."""


class FrameOutbox:
    """The way to one socket's sender task: whole frames through its small bounded channel."""

    __slots__ = ("_frames_send",)

    def __init__(self, frames_send: trio.MemorySendChannel[bytes]) -> None:
        self._frames_send = frames_send

    async def send_frame(self, frame: bytes) -> None:
        try:
            await self._frames_send.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ClientGone from None

    def take_frames_now(self, frames: list[bytes]) -> tuple[Taken, list[bytes]]:
        """As many of `frames` as the sender's buffer has room for, in order, without waiting;
        the rest back (all of them when the socket is going: `send_frame` then says so)."""
        send_nowait = self._frames_send.send_nowait
        taken = 0
        try:
            for frame in frames:  # no checkpoint in between
                send_nowait(frame)
                taken += 1
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        if taken == len(frames):
            return Taken.ALL, []
        return (Taken.PART if taken else Taken.REFUSED), frames[taken:]


async def send_frames(
    frames_receive: trio.MemoryReceiveChannel[bytes], send: ASGISendCallable
) -> None:
    # Up to a buffer's worth of queued frames is sent before the next checkpoint, so the
    # connection's writer puts them in one socket write (docs/performance.md §2); bounded, so
    # the streams' own tasks (and new requests' first chunks) get their turn in between.
    async with frames_receive:
        async for first in frames_receive:
            await send({"type": "websocket.send", "bytes": None, "text": first.decode()})
            for _ in range(FRAME_BUFFER - 1):
                try:
                    frame = frames_receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                await send({"type": "websocket.send", "bytes": None, "text": frame.decode()})


class SocketSession(Protocol):
    """One accepted socket's protocol side (`/v1/ws`'s or the Responses WebSocket's)."""

    largest_frame: int  # the largest text frame it received, in bytes

    async def receive_until_disconnect(self, receive: ASGIReceiveCallable) -> None: ...


async def serve_socket(
    gateway: Gateway,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
    open_session: Callable[[trio.Nursery, trio.MemorySendChannel[bytes]], SocketSession],
) -> None:
    """Accept the WebSocket, run its sender task beside the session `open_session` makes (in
    the socket's nursery, with the sender's channel) until the client leaves, and count it."""
    connect = await receive()
    if connect["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept", "subprotocol": None, "headers": []})
    frames_send, frames_receive = trio.open_memory_channel[bytes](FRAME_BUFFER)
    connections = gateway.metrics.websocket_connections
    connections.inc()
    try:
        async with trio.open_nursery() as nursery, frames_send:
            nursery.start_soon(send_frames, frames_receive, send)
            session = open_session(nursery, frames_send)
            await session.receive_until_disconnect(receive)
            nursery.cancel_scope.cancel()
    finally:
        connections.dec()
    # The socket's own large frames (hypercorn's message buffers, the decoded texts) are free
    # only now that it is gone: hand them back too (docs/limits.md §2).
    if session.largest_frame >= RELEASE_HEAP_AFTER_BYTES:
        await gateway.heap_releaser.release()
