"""The asyncio bridge: one loop thread per process, results and errors into trio, trio cancel
into asyncio cancel (waited for), and the coalescing hand-off whose trio callback never raises."""

from __future__ import annotations

import asyncio
import threading
import time

import outcome
import pytest
import trio
import trio.testing

from smg_trio.backends.asyncio_bridge import (
    LOOP_THREAD_NAME,
    AsyncioBridge,
    TrioHandoff,
    open_asyncio_bridge,
)

CANCEL_LATENCY_BUDGET_S = 0.01


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LOOP_THREAD_NAME]


async def test_run_returns_results_and_raises_errors_from_the_loop_thread() -> None:
    async def where(x: int) -> tuple[int, str]:
        await asyncio.sleep(0)
        return x * 2, threading.current_thread().name

    async def fail() -> None:
        raise KeyError("from asyncio")

    with trio.fail_after(5):
        async with open_asyncio_bridge() as bridge:
            assert await bridge.run(where, 21) == (42, LOOP_THREAD_NAME)
            with pytest.raises(KeyError, match="from asyncio"):
                await bridge.run(fail)


async def test_one_loop_thread_per_process_and_none_left_after_the_last_user() -> None:
    assert loop_threads() == []
    with trio.fail_after(5):
        async with open_asyncio_bridge() as first, open_asyncio_bridge() as second:
            assert first is second
            assert len(loop_threads()) == 1
            assert first.statistics().users == 2
        assert loop_threads() == []
        assert not first.statistics().running
        with pytest.raises(trio.ClosedResourceError):
            await first.run(asyncio.sleep, 0)
        async with open_asyncio_bridge() as third:  # a fresh bridge after the last user left
            assert third is not first
            assert await third.task_count() == 0


@pytest.mark.serial
async def test_trio_cancel_cancels_the_task_and_waits_for_its_cleanup() -> None:
    token = trio.lowlevel.current_trio_token()

    async def forever(started: trio.Event, cancelled_at: list[float]) -> None:
        token.run_sync_soon(started.set)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled_at.append(time.perf_counter())
            await asyncio.sleep(0.02)  # cleanup that takes a while (grpclib's is immediate)
            cancelled_at.append(time.perf_counter())
            raise

    async def run_then_cancel(bridge: AsyncioBridge) -> float:
        started = trio.Event()
        cancelled_at: list[float] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await bridge.run(forever, started, cancelled_at)

            nursery.start_soon(call)
            await started.wait()
            requested = time.perf_counter()
            nursery.cancel_scope.cancel()
        assert len(cancelled_at) == 2, "Cancelled was raised before the task finished"
        return cancelled_at[0] - requested

    with trio.fail_after(5):
        async with open_asyncio_bridge() as bridge:
            latencies = [await run_then_cancel(bridge) for _ in range(5)]
            assert await bridge.task_count() == 0
    assert sorted(latencies)[2] < CANCEL_LATENCY_BUDGET_S, latencies


async def test_a_task_cancelled_before_it_started_still_reports() -> None:
    reported: list[outcome.Outcome[None]] = []
    done = threading.Event()

    def on_done(result: outcome.Outcome[None]) -> None:
        reported.append(result)
        done.set()

    with trio.fail_after(5):
        async with open_asyncio_bridge() as bridge:
            never_started = bridge.start_soon(asyncio.sleep, 3600, on_done=on_done)
            never_started.cancel()
            never_started.cancel()  # idempotent
            await trio.to_thread.run_sync(done.wait)
            assert await bridge.task_count() == 0
    assert len(reported) == 1
    assert isinstance(reported[0], outcome.Error)
    assert isinstance(reported[0].error, asyncio.CancelledError)


async def test_shutdown_cancels_leftover_tasks_and_reports_them() -> None:
    reported: list[outcome.Outcome[None]] = []
    with trio.fail_after(5):
        async with open_asyncio_bridge() as bridge:
            bridge.start_soon(asyncio.sleep, 3600, on_done=reported.append)
            assert await bridge.task_count() == 1
    assert loop_threads() == []
    assert len(reported) == 1
    assert isinstance(reported[0], outcome.Error)


async def test_handoff_coalesces_in_order_with_one_wakeup_per_batch() -> None:
    batches: list[list[int]] = []
    all_arrived = trio.Event()
    items = 10_000

    def deliver(batch: list[int]) -> None:
        batches.append(batch)
        if batch[-1] == items - 1:
            all_arrived.set()

    handoff: TrioHandoff[int] = TrioHandoff(deliver)

    async def produce() -> None:
        for i in range(items):
            handoff.push(i)
            if i % 1000 == 0:
                await asyncio.sleep(0)

    with trio.fail_after(5):
        async with open_asyncio_bridge() as bridge:
            await bridge.run(produce)
            await all_arrived.wait()
    assert [i for batch in batches for i in batch] == list(range(items))
    assert handoff.stats.items == items
    assert handoff.stats.batches == len(batches)
    # Coalescing, not one wake-up per item: idle, ~10 batches arrive; a loaded 2-core machine
    # preempts the producer thread and has seen up to ~150, so the bound leaves room for that.
    assert len(batches) < items / 20, f"{len(batches)} wake-ups for {items} items"


async def test_handoff_callback_never_raises_into_trio() -> None:
    delivered: list[int] = []
    first, second = trio.Event(), trio.Event()

    def deliver(batch: list[int]) -> None:
        if batch == [1]:
            first.set()
            raise RuntimeError("a consumer bug")
        delivered.extend(batch)
        second.set()

    handoff: TrioHandoff[int] = TrioHandoff(deliver)
    with trio.fail_after(5):
        await trio.to_thread.run_sync(handoff.push, 1)
        await first.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert handoff.stats.delivery_errors == 1
        await trio.to_thread.run_sync(handoff.push, 2)  # the run survived and still delivers
        await second.wait()
    assert delivered == [2]
    handoff.close()
    handoff.push(3)  # dropped after close
    await trio.sleep(0.01)
    assert delivered == [2]


async def test_handoff_push_after_its_trio_run_finished_is_dropped() -> None:
    def other_run() -> TrioHandoff[int]:
        async def make() -> TrioHandoff[int]:
            return TrioHandoff(lambda batch: None)

        return trio.run(make)

    with trio.fail_after(5):
        orphan = await trio.to_thread.run_sync(other_run)
    orphan.push(1)  # RunFinishedError is absorbed; the item is dropped
    orphan.push(2)
