"""The hand-off (smg_trio/handoff.py): the coalescing mailbox's order, coalescing, close semantics,
cancellation and interleavings, and `offer`'s one answer: ALL, PART (the rest queued) or REFUSED
(queued whole), never overtaking what the owner has not handled."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.errors import EngineDead
from smg_trio.handoff import Mailbox, MailboxStatistics, Taken

TEST_TIMEOUT_S = 5


async def test_items_put_before_a_get_arrive_as_one_batch_in_order() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        for item in range(5):
            mailbox.put_nowait(item)
        assert await mailbox.get_batch() == [0, 1, 2, 3, 4]
        mailbox.put_nowait(5)
        assert await mailbox.get_batch() == [5]


async def test_get_batch_waits_while_empty_and_wakes_on_put() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[str] = Mailbox()
        batches: list[list[str]] = []

        async def consume() -> None:
            batches.append(await mailbox.get_batch())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            assert batches == []
            assert mailbox.statistics().consumer_waiting
            assert mailbox.idle()
            mailbox.put_nowait("a")
            assert not mailbox.idle()  # woken, and "a" not yet taken
            mailbox.put_nowait("b")
        assert batches == [["a", "b"]]
        assert not mailbox.idle()  # no consumer parked


async def test_put_nowait_never_blocks_on_a_consumer_that_does_not_read() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        for item in range(100_000):
            mailbox.put_nowait(item)
        assert mailbox.statistics() == MailboxStatistics(
            queued=100_000, closed=False, consumer_waiting=False
        )
        assert await mailbox.get_batch() == list(range(100_000))
        assert mailbox.statistics().queued == 0


async def test_close_delivers_queued_items_then_end_of_channel() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        mailbox.put_nowait(1)
        mailbox.close()
        assert mailbox.statistics() == MailboxStatistics(
            queued=1, closed=True, consumer_waiting=False
        )
        assert await mailbox.get_batch() == [1]
        with pytest.raises(trio.EndOfChannel):
            await mailbox.get_batch()
        with pytest.raises(trio.EndOfChannel):
            await mailbox.get_batch()


async def test_close_with_error_raises_it_after_the_queued_items() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        mailbox.put_nowait(7)
        dead = EngineDead("engine heartbeat lost")
        mailbox.close(dead)
        mailbox.close()  # a later close does not erase the error
        assert await mailbox.get_batch() == [7]
        with pytest.raises(EngineDead) as raised:
            await mailbox.get_batch()
        assert raised.value is dead


async def test_close_wakes_a_waiting_consumer_with_the_error() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        outcome: list[BaseException] = []

        async def consume() -> None:
            try:
                await mailbox.get_batch()
            except EngineDead as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            mailbox.close(EngineDead("gone"))
        assert [str(exc) for exc in outcome] == ["gone"]


def test_put_after_close_is_refused() -> None:
    mailbox: Mailbox[int] = Mailbox()
    mailbox.close()
    with pytest.raises(trio.ClosedResourceError):
        mailbox.put_nowait(1)


async def test_get_batch_cancelled_before_it_starts_takes_nothing() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        mailbox.put_nowait(1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await mailbox.get_batch()
        assert scope.cancelled_caught
        assert await mailbox.get_batch() == [1]


async def test_get_batch_cancelled_while_waiting_loses_nothing() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mailbox.get_batch)
            await trio.testing.wait_all_tasks_blocked()
            assert mailbox.statistics().consumer_waiting
            nursery.cancel_scope.cancel()
        assert not mailbox.statistics().consumer_waiting
        mailbox.put_nowait(2)
        assert await mailbox.get_batch() == [2]


async def test_async_for_yields_batches_until_closed() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        mailbox.put_nowait(1)
        mailbox.put_nowait(2)
        mailbox.close()
        assert [batch async for batch in mailbox] == [[1, 2]]


async def yield_times(count: int) -> None:
    for _ in range(count):
        await trio.lowlevel.checkpoint()


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.integers(), max_size=40),
    producer_yields=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40),
    consumer_yields=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40),
    close_error=st.booleans(),
)
async def test_any_interleaving_delivers_the_put_sequence_exactly(
    items: list[int],
    producer_yields: list[int],
    consumer_yields: list[int],
    close_error: bool,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[int] = Mailbox()
        received: list[int] = []
        batch_sizes: list[int] = []
        ending: list[BaseException] = []

        async def produce() -> None:
            for index, item in enumerate(items):
                await yield_times(producer_yields[index % len(producer_yields)])
                mailbox.put_nowait(item)
            mailbox.close(EngineDead("closed") if close_error else None)

        async def consume() -> None:
            calls = 0
            while True:
                await yield_times(consumer_yields[calls % len(consumer_yields)])
                calls += 1
                try:
                    batch = await mailbox.get_batch()
                except (trio.EndOfChannel, EngineDead) as exc:
                    ending.append(exc)
                    return
                batch_sizes.append(len(batch))
                received.extend(batch)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            nursery.start_soon(produce)

        assert received == items
        assert all(size > 0 for size in batch_sizes)
        assert len(ending) == 1
        assert isinstance(ending[0], EngineDead if close_error else trio.EndOfChannel)


def _kernel(capacity: list[int]) -> tuple[list[bytes], Callable[[bytes], tuple[Taken, bytes]]]:
    """A `take_now` over a socket-like buffer with `capacity[0]` bytes of room."""
    written: list[bytes] = []

    def take_now(data: bytes) -> tuple[Taken, bytes]:
        room = capacity[0]
        if room == 0:
            return Taken.REFUSED, data
        written.append(data[:room])
        capacity[0] = max(0, room - len(data))
        if len(data) <= room:
            return Taken.ALL, b""
        return Taken.PART, data[room:]

    return written, take_now


def test_offer_to_an_idle_owner_answers_all_part_or_refused_and_queues_the_rest() -> None:
    mailbox: Mailbox[bytes] = Mailbox()
    capacity = [5]
    written, take_now = _kernel(capacity)
    assert mailbox.idle()  # not started counts as idle
    assert mailbox.offer(b"abc", take_now) is Taken.ALL
    assert mailbox.empty()
    assert mailbox.offer(b"defg", take_now) is Taken.PART
    assert written == [b"abc", b"de"]
    assert mailbox.statistics().queued == 1  # b"fg", for the owner
    capacity[0] = 100
    # Something is queued: a later offer never overtakes it, whatever room there is.
    assert mailbox.offer(b"h", take_now) is Taken.REFUSED
    assert written == [b"abc", b"de"]


async def test_offer_waits_for_the_owner_to_finish_its_batch() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[bytes] = Mailbox()
        written, take_now = _kernel([0])
        assert mailbox.offer(b"a", take_now) is Taken.REFUSED  # no room: queued whole
        handled: list[list[bytes]] = []
        release = trio.Event()
        answers: list[Taken] = []

        async def owner() -> None:
            async for batch in mailbox:
                handled.append(batch)
                await release.wait()  # the owner is inside its send

        async with trio.open_nursery() as nursery:
            nursery.start_soon(owner)
            await trio.testing.wait_all_tasks_blocked()
            assert handled == [[b"a"]]
            assert not mailbox.idle()  # handling its batch
            _, room = _kernel([100])
            answers.append(mailbox.offer(b"b", room))  # queued: the owner's send is under way
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert handled == [[b"a"], [b"b"]]
            assert mailbox.idle()  # parked, nothing queued
            answers.append(mailbox.offer(b"c", room))
            mailbox.close()
        assert answers == [Taken.REFUSED, Taken.ALL]
        assert handled == [[b"a"], [b"b"]]
        assert written == []


@settings(max_examples=200)
@given(
    offers=st.lists(st.binary(min_size=1, max_size=8), max_size=20),
    rooms=st.lists(st.integers(min_value=0, max_value=10), min_size=20, max_size=20),
)
def test_offered_bytes_arrive_once_and_in_order(offers: list[bytes], rooms: list[int]) -> None:
    """What went out at once followed by what the owner got is exactly the offered bytes."""
    mailbox: Mailbox[bytes] = Mailbox()
    sent_now: list[bytes] = []
    for data, room in zip(offers, rooms, strict=False):
        capacity = [room]
        written, take_now = _kernel(capacity)
        taken = mailbox.offer(data, take_now)
        sent_now.extend(written)
        assert (taken is Taken.ALL) == (b"".join(written) == data)
        assert (taken is Taken.REFUSED) == (not written)
    queued = list(mailbox._items)  # the owner's share, in order
    out = b"".join(sent_now) + b"".join(queued)
    assert out == b"".join(offers)


async def test_an_owner_cancelled_out_of_its_wait_is_not_idle() -> None:
    # Nobody will take what a producer sends "in its place" after the owner left: it is queued.
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[bytes] = Mailbox()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mailbox.get_batch)
            await trio.testing.wait_all_tasks_blocked()
            assert mailbox.idle()
            nursery.cancel_scope.cancel()
        assert not mailbox.idle()
        written, take_now = _kernel([100])
        assert mailbox.offer(b"a", take_now) is Taken.REFUSED
        assert written == []
        assert mailbox.statistics().queued == 1


async def test_size_of_counts_what_is_queued_and_a_taken_batch_resets_it() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        mailbox: Mailbox[bytes] = Mailbox(size_of=len)
        assert mailbox.queued_size() == 0
        written, take_now = _kernel([2])
        assert mailbox.offer(b"fghij", take_now) is Taken.PART  # the rest, b"hij", is queued
        assert written == [b"fg"]
        assert mailbox.queued_size() == 3
        mailbox.put_nowait(b"abc")
        assert mailbox.offer(b"de", take_now) is Taken.REFUSED  # queued whole
        assert mailbox.queued_size() == 8
        assert await mailbox.get_batch() == [b"hij", b"abc", b"de"]
        assert mailbox.queued_size() == 0
        mailbox.put_nowait(b"k")
        assert mailbox.get_batch_nowait() == [b"k"]
        assert mailbox.queued_size() == 0
        unsized: Mailbox[bytes] = Mailbox()
        unsized.put_nowait(b"abc")
        assert unsized.queued_size() == 0


def test_get_batch_nowait_takes_the_queue_in_the_owners_place() -> None:
    # The owner task ended (cancelled out of its wait); another task does its job from then on.
    mailbox: Mailbox[bytes] = Mailbox()
    with pytest.raises(trio.WouldBlock):
        mailbox.get_batch_nowait()
    assert not mailbox.idle()  # the caller is the owner now, and not parked
    written, take_now = _kernel([100])
    assert mailbox.offer(b"a", take_now) is Taken.REFUSED  # queued for whoever takes it
    mailbox.put_nowait(b"b")
    assert mailbox.get_batch_nowait() == [b"a", b"b"]
    assert written == []
    with pytest.raises(trio.WouldBlock):
        mailbox.get_batch_nowait()
    mailbox.put_nowait(b"c")
    mailbox.close(EngineDead("gone"))
    assert mailbox.get_batch_nowait() == [b"c"]  # queued items first, then the close's error
    with pytest.raises(EngineDead):
        mailbox.get_batch_nowait()
    ended: Mailbox[int] = Mailbox()
    ended.close()
    with pytest.raises(trio.EndOfChannel):
        ended.get_batch_nowait()
