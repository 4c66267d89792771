"""I/O. Reading one HTTP request body through ASGI `receive`, within its limits.

- Size: a declared `content-length` over `max_body_bytes` is refused (413) before a byte is
  read; a chunked body is refused as soon as it passes the limit. Nothing is read into memory
  past it.
- Time (docs/http.md §1): bytes must keep arriving — each read waits at most `body_idle_s`, the
  whole body at most `body_timeout_s`; past either, 408 (a dribbling client holds no slot).
- Memory (docs/limits.md §4): the body's bytes are reserved from the gateway's memory budget as
  they are declared or read; past the budget the reservation raises 429.
- A client that leaves while sending raises `ClientGone`.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from smg_trio.errors import ClientError, ClientGone
from smg_trio.frontends.http.asgi_types import Message, Receive
from smg_trio.frontends.http.hypercorn_seam import memory_channel_of
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.request.memory_budget import Reservation


async def read_body(
    receive: Receive,
    headers: dict[bytes, bytes],
    reservation: Reservation,
    *,
    max_body_bytes: int,
    limits: HttpLimits,
) -> bytes:
    """The whole body (see the module doc for what it refuses)."""
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > max_body_bytes:
            raise body_too_large(max_body_bytes)
        reservation.grow(int(declared))
    body = _Body(reservation, max_body_bytes)
    # A small body is usually queued whole before the app runs (it came in the request's
    # packet): taken without waiting, it costs no cancel scope and no scheduling round.
    queued = _queued_reader(receive)
    while queued is not None and (message := queued()) is not None:
        if body.add(message):
            return body.whole()
    # One cancel scope for both bounds: before each read its deadline is the nearer of the
    # whole body's and this read's.
    whole_body_by = trio.current_time() + limits.body_timeout_s
    with trio.CancelScope() as bound:
        while True:
            bound.deadline = min(whole_body_by, trio.current_time() + limits.body_idle_s)
            if body.add(await receive()):
                return body.whole()
    stalled = "was not complete in time" if trio.current_time() >= whole_body_by else "stalled"
    raise ClientError(
        f"the request body {stalled} (received {body.size} bytes)",
        status=408,
        code="request_timeout",
    )


class _Body:
    """The chunks read so far, held within the size limit and the memory reservation."""

    def __init__(self, reservation: Reservation, max_body_bytes: int) -> None:
        self._reservation = reservation
        self._max_body_bytes = max_body_bytes
        self._chunks: list[bytes] = []
        self.size = 0

    def add(self, message: Message) -> bool:
        """Take one `receive` message; True once the body is complete."""
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self._max_body_bytes:
            raise body_too_large(self._max_body_bytes)
        self._reservation.grow(self.size - self._reservation.bytes)
        self._chunks.append(chunk)
        return not message.get("more_body", False)

    def whole(self) -> bytes:
        return b"".join(self._chunks)


def _queued_reader(receive: Receive) -> Callable[[], Message | None] | None:
    """A reader of what is already queued on `receive` (None once nothing is), when `receive`
    is a trio memory channel's, as hypercorn's trio worker hands every app (found through the
    seam, frontends/http/hypercorn_seam.py); else None."""
    channel = memory_channel_of(receive)
    if not isinstance(channel, trio.MemoryReceiveChannel):
        return None

    def read_queued() -> Message | None:
        try:
            message: Message = channel.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return None
        return message

    return read_queued


def body_too_large(limit: int) -> ClientError:
    return ClientError(
        f"the request body is larger than {limit} bytes", status=413, code="request_too_large"
    )
