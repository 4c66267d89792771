"""I/O. A WebSocket's send side (`frontends/websocket.py`): one sender task owns it, and every
request and the receive loop hand it whole frames through a small bounded channel
(`FrameOutbox`), so a slow client holds back only this socket's own requests."""

from __future__ import annotations

from typing import Final

import trio
from hypercorn.typing import ASGISendCallable

from smg_trio.errors import ClientGone
from smg_trio.handoff import Taken

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
