"""IdleTimer: one task whose deadline moves (frontends/http/idle_timer.py), in virtual time."""

from __future__ import annotations

from typing import Final

import trio
import trio.testing

from smg_trio.frontends.http.idle_timer import IdleTimer

TEST_S: Final = 100.0


async def run_timer(
    timer: IdleTimer, terminated: trio.Event, steps: list[tuple[float, str]]
) -> float | None:
    """Run `timer`, applying each (at virtual second, action) step; the virtual time at which it
    expired, or None when it ended without expiring."""
    expired: list[float] = []

    async def on_expiry() -> None:
        expired.append(trio.current_time())

    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run, terminated.wait, on_expiry)
            for at, action in steps:
                await trio.sleep_until(at)
                match action:
                    case "busy":
                        timer.stop()
                    case "idle":
                        timer.expire_in(5.0)
                    case "end":
                        timer.end()
                    case "shutdown":
                        terminated.set()
    return expired[0] if expired else None


async def test_it_expires_after_the_idle_time_counted_from_the_last_move(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timer = IdleTimer()
    timer.expire_in(5.0)
    assert await run_timer(timer, trio.Event(), [(3.0, "idle")]) == 8.0


async def test_stopped_it_never_expires_until_moved_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timer = IdleTimer()
    timer.expire_in(5.0)
    steps = [(1.0, "busy"), (50.0, "idle")]  # busy for 49 s, then idle again
    assert await run_timer(timer, trio.Event(), steps) == 55.0


async def test_ended_it_returns_without_expiring(autojump_clock: trio.testing.MockClock) -> None:
    timer = IdleTimer()
    timer.expire_in(5.0)
    assert await run_timer(timer, trio.Event(), [(2.0, "end")]) is None
    late = IdleTimer()
    late.end()  # the connection closed before the timer's task started
    assert await run_timer(late, trio.Event(), []) is None


async def test_a_shutdown_closes_an_idle_connection_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timer = IdleTimer()
    timer.expire_in(50.0)
    assert await run_timer(timer, trio.Event(), [(7.0, "shutdown")]) == 7.0


async def test_a_shutdown_closes_a_busy_connection_when_its_request_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timer = IdleTimer()
    timer.stop()
    steps = [(7.0, "shutdown"), (30.0, "idle")]  # served until 30 s, then idle: closed at once
    assert await run_timer(timer, trio.Event(), steps) == 30.0


async def test_no_idle_time_means_no_expiry(autojump_clock: trio.testing.MockClock) -> None:
    timer = IdleTimer()
    timer.expire_in(0)
    assert await run_timer(timer, trio.Event(), [(90.0, "end")]) is None
