"""`read_body` over a trio memory channel's `receive`, as hypercorn's trio worker hands it: a
body already queued is taken without waiting; one still arriving is awaited within the bounds;
a stalled one is a 408 (autojump clock)."""

from __future__ import annotations

from typing import Final

import pytest
import trio
import trio.testing

from smg_trio.errors import ClientError, ClientGone
from smg_trio.frontends.http.asgi_types import Message
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.frontends.request_body import read_body
from smg_trio.request.memory_budget import MemoryBudget

TEST_TIMEOUT_S: Final = 5.0
LIMITS: Final = HttpLimits(body_timeout_s=10.0, body_idle_s=2.0)


def queued(*messages: Message) -> trio.MemoryReceiveChannel[Message]:
    send, receive = trio.open_memory_channel[Message](10)
    for message in messages:
        send.send_nowait(message)
    return receive


async def read(channel: trio.MemoryReceiveChannel[Message], max_body_bytes: int = 100) -> bytes:
    with MemoryBudget(1 << 20).reserve() as reservation:
        body = await read_body(
            channel.receive, {}, reservation, max_body_bytes=max_body_bytes, limits=LIMITS
        )
        assert reservation.bytes == len(body)
        return body


async def test_a_queued_body_is_taken_without_a_checkpoint() -> None:
    # Inside a cancelled scope, any checkpoint would raise: none is taken.
    with trio.CancelScope() as scope:
        scope.cancel()
        body = await read(
            queued(
                {"type": "http.request", "body": b'{"a":', "more_body": True},
                {"type": "http.request", "body": b"1}", "more_body": True},
                {"type": "http.request", "body": b"", "more_body": False},
            )
        )
    assert body == b'{"a":1}'


async def test_a_body_still_arriving_is_awaited() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        send, receive = trio.open_memory_channel[Message](10)
        send.send_nowait({"type": "http.request", "body": b"ab", "more_body": True})
        async with trio.open_nursery() as nursery:

            async def rest() -> None:
                await trio.sleep(0.01)
                send.send_nowait({"type": "http.request", "body": b"cd", "more_body": False})

            nursery.start_soon(rest)
            assert await read(receive) == b"abcd"


async def test_limits_hold_on_the_queued_path_too() -> None:
    with pytest.raises(ClientError, match="larger than 3 bytes"):
        await read(queued({"type": "http.request", "body": b"abcd", "more_body": False}), 3)
    with pytest.raises(ClientGone):
        await read(queued({"type": "http.disconnect"}))


async def test_a_stalled_body_is_a_408(autojump_clock: trio.testing.MockClock) -> None:
    channel = queued({"type": "http.request", "body": b"ab", "more_body": True})
    start = trio.current_time()
    with pytest.raises(ClientError, match="stalled") as caught:
        await read(channel)
    assert caught.value.status == 408
    assert trio.current_time() - start == pytest.approx(LIMITS.body_idle_s)
