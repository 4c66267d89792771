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

import trio

from smg_trio.errors import ClientError, ClientGone
from smg_trio.frontends.http_limits import HttpLimits
from smg_trio.frontends.responses import Receive
from smg_trio.memory_budget import Reservation


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
    chunks: list[bytes] = []
    size = 0
    # One cancel scope for both bounds: before each read its deadline is the nearer of the
    # whole body's and this read's.
    whole_body_by = trio.current_time() + limits.body_timeout_s
    with trio.CancelScope() as bound:
        while True:
            bound.deadline = min(whole_body_by, trio.current_time() + limits.body_idle_s)
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > max_body_bytes:
                raise body_too_large(max_body_bytes)
            reservation.grow(size - reservation.bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    stalled = "was not complete in time" if trio.current_time() >= whole_body_by else "stalled"
    raise ClientError(
        f"the request body {stalled} (received {size} bytes)", status=408, code="request_timeout"
    )


def body_too_large(limit: int) -> ClientError:
    return ClientError(
        f"the request body is larger than {limit} bytes", status=413, code="request_too_large"
    )
