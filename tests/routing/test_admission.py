"""Admission control (docs/routing.md §5): the limit, the bounded FIFO queue, 429 after the queue
timeout with Retry-After; on trio's autojump clock."""

from __future__ import annotations

import trio
import trio.testing

from smg_trio.errors import Overloaded
from smg_trio.routing.admission import Admission

CAP_S = 30.0


async def test_past_the_limit_requests_queue_then_get_429_after_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admission = Admission(2, max_queue=2, queue_timeout_s=1.5)
    admitted: list[tuple[int, float]] = []
    refused: list[tuple[int, float, int]] = []
    hold = trio.Event()

    async def request(index: int) -> None:
        try:
            async with admission.admitted():
                admitted.append((index, trio.current_time()))
                await hold.wait()
        except Overloaded as error:
            refused.append((index, trio.current_time(), error.retry_after_s))

    with trio.fail_after(CAP_S):
        async with trio.open_nursery() as nursery:
            for index in range(6):
                nursery.start_soon(request, index)
                await trio.testing.wait_all_tasks_blocked()
            assert (admission.running, admission.waiting) == (2, 2)
            await trio.sleep(2.0)
            hold.set()
    assert admitted == [(0, 0.0), (1, 0.0)]
    # 4 and 5 found the queue full at once; 2 and 3 waited out the 1.5 s queue timeout.
    assert sorted(refused) == [(2, 1.5, 2), (3, 1.5, 2), (4, 0.0, 2), (5, 0.0, 2)]
    assert (admission.running, admission.waiting, admission.rejected) == (0, 0, 4)


async def test_a_freed_slot_goes_to_the_longest_waiting_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admission = Admission(1, max_queue=4, queue_timeout_s=10.0)
    order: list[int] = []

    async def request(index: int) -> None:
        async with admission.admitted():
            order.append(index)
            await trio.sleep(1.0)

    with trio.fail_after(CAP_S):
        async with trio.open_nursery() as nursery:
            for index in range(4):
                nursery.start_soon(request, index)
                await trio.testing.wait_all_tasks_blocked()
    assert order == [0, 1, 2, 3]
    assert trio.current_time() == 4.0


async def test_a_cancelled_request_frees_its_slot_and_its_queue_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admission = Admission(1, max_queue=1, queue_timeout_s=10.0)

    async def hold_forever() -> None:
        async with admission.admitted():
            await trio.sleep_forever()

    with trio.fail_after(CAP_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_forever)
            nursery.start_soon(hold_forever)
            await trio.testing.wait_all_tasks_blocked()
            assert (admission.running, admission.waiting) == (1, 1)
            nursery.cancel_scope.cancel()
    assert (admission.running, admission.waiting) == (0, 0)


async def test_without_a_limit_everything_is_admitted() -> None:
    admission = Admission(None)
    with trio.fail_after(CAP_S):
        async with admission.admitted(), admission.admitted():
            assert admission.running == 0
