"""ConnectionWriter: everything pushed in one scheduling round leaves in one write, in push
order; a producer past the high water mark waits for the writer; `drain` sees the last bytes
out; a broken peer is reported once and later pushes are dropped (docs/performance.md §2)."""

from __future__ import annotations

from typing import Final

import trio
import trio.testing

from smg_trio.frontends.http.connection_writer import HIGH_WATER_BYTES, ConnectionWriter
from smg_trio.handoff import Taken

TEST_TIMEOUT_S: Final = 5.0


class CountedStream(trio.abc.SendStream):
    """trio's memory stream, counting its writes."""

    def __init__(self) -> None:
        self.memory = trio.testing.MemorySendStream()
        self.writes = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        await self.memory.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.memory.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.memory.aclose()

    def get_data_nowait(self) -> bytes:
        return bytes(self.memory.get_data_nowait())


async def not_broken() -> None:
    raise AssertionError("the peer is not gone in this test")


async def test_one_round_of_pushes_is_one_write_in_order() -> None:
    stream = CountedStream()
    broken: list[bool] = []

    async def on_broken() -> None:
        broken.append(True)

    writer = ConnectionWriter(stream, on_broken)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            for index in range(64):  # what h2's send task frames in one pass
                await writer.push(b"frame %d;" % index)
            await writer.drain()
            assert stream.writes == 1
            await writer.push(b"next")
            await writer.drain()
            writer.stop()
    assert stream.writes == 2
    assert stream.get_data_nowait() == b"".join(b"frame %d;" % i for i in range(64)) + b"next"
    assert broken == []


async def test_a_producer_past_the_high_water_mark_waits_for_the_writer() -> None:
    stream = CountedStream()

    writer = ConnectionWriter(stream, not_broken)
    big = b"x" * (HIGH_WATER_BYTES // 2 + 1)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            await writer.push(big)  # below the mark: returns at once, no writer yet
            pushed = trio.Event()

            async def third_push() -> None:
                await writer.push(big)  # past the mark: parks until the writer took the queue
                pushed.set()

            nursery.start_soon(third_push)
            await trio.testing.wait_all_tasks_blocked()
            assert not pushed.is_set()
            assert not writer.takes_now  # queued bytes count, past the mark: h2 DATA waits too
            nursery.start_soon(writer.run)
            await pushed.wait()
            await writer.drain()
            writer.stop()
    assert stream.get_data_nowait() == big * 2


async def test_drain_without_a_writer_task_writes_what_is_left() -> None:
    stream = CountedStream()
    writer = ConnectionWriter(stream, not_broken)
    with trio.fail_after(TEST_TIMEOUT_S):
        writer.stop()
        await writer.run()  # stopped with nothing queued: returns
        await writer.push(b"goodbye")  # e.g. a GOAWAY after the read side ended
        await writer.drain()
    assert stream.get_data_nowait() == b"goodbye"


async def test_a_broken_peer_is_reported_once_and_later_bytes_are_dropped() -> None:
    stream = CountedStream()
    await stream.aclose()
    broken: list[bool] = []

    async def on_broken() -> None:
        broken.append(True)

    writer = ConnectionWriter(stream, on_broken)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await writer.push(b"lost")
            await writer.drain()
            await writer.push(b"dropped")
            await writer.drain()
    assert broken == [True]


async def test_what_the_kernel_takes_at_once_skips_the_stream_and_the_rest_follows_it() -> None:
    stream = CountedStream()
    taken: list[bytes] = []
    room = [12, 0, 1000]  # bytes the "kernel" takes per write: part, none, all

    def write_now(data: bytes) -> bytes:
        took = room.pop(0)
        taken.append(data[:took])
        return data[took:]

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            for piece in (b"first piece of bytes;", b"second;", b"third;"):
                await trio.testing.wait_all_tasks_blocked()
                await writer.push(piece)
                await writer.drain()
            writer.stop()
    assert taken == [b"first piece ", b"", b"third;"]
    assert stream.get_data_nowait() == b"of bytes;second;"
    assert stream.writes == 2  # the third went out whole at once


async def test_write_through_writes_at_once_without_the_writer_while_it_is_idle() -> None:
    # A connection with one stream: a response's first bytes (its head and first DATA) leave in
    # the caller's task, in one write, while the writer is parked with nothing queued; the
    # writer task writes nothing.
    stream = CountedStream()
    taken: list[bytes] = []

    def write_now(data: bytes) -> bytes:
        taken.append(data)
        return b""

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            assert writer.write_through(b"head;first chunk;") is Taken.ALL
            assert taken == [b"head;first chunk;"]  # before any other task ran
            await writer.drain()
            writer.stop()
    assert stream.writes == 0
    assert taken == [b"head;first chunk;"]


async def test_write_through_behind_queued_bytes_queues_and_the_writer_sends_both_at_once() -> None:
    # Bytes pushed earlier and not yet taken (the writer was woken, it has not run): the hand-off
    # never overtakes them, and never writes them from the caller's task either (docs/
    # performance.md §2): the writer's next round writes both, in order, in one write.
    stream = CountedStream()
    taken: list[bytes] = []

    def write_now(data: bytes) -> bytes:
        taken.append(data)
        return b""

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            await writer.push(b"head;")  # queued: the writer takes it next round
            assert writer.write_through(b"first chunk;") is Taken.REFUSED
            assert taken == []
            await writer.drain()
            writer.stop()
    assert stream.writes == 0
    assert taken == [b"head;first chunk;"]


async def test_write_through_leaves_what_the_kernel_did_not_take_to_the_writer_in_order() -> None:
    stream = CountedStream()
    room = [5]  # the kernel takes five bytes, then the writer's awaited write does the rest

    def write_now(data: bytes) -> bytes:
        took = room.pop(0) if room else 0
        return data[took:]

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            assert writer.write_through(b"12345rest;") is Taken.PART  # the rest: the writer's
            # The rest is still queued: this queues behind it.
            assert writer.write_through(b"after;") is Taken.REFUSED
            await writer.drain()
            writer.stop()
    assert stream.get_data_nowait() == b"rest;after;"
    assert stream.writes == 1


async def test_write_through_never_cuts_into_a_write_under_way() -> None:
    # While the writer's awaited write is in progress, write_through only queues: bytes written
    # at once then would land in the middle of the other write's bytes.
    class SlowStream(CountedStream):
        def __init__(self) -> None:
            super().__init__()
            self.release = trio.Event()

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            await self.release.wait()
            await super().send_all(data)

    stream = SlowStream()
    direct: list[bytes] = []

    def write_now(data: bytes) -> bytes:
        direct.append(data)
        return data  # the kernel takes nothing: the writer's awaited write goes on

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await writer.push(b"big write;")
            await trio.testing.wait_all_tasks_blocked()  # the writer is inside send_all
            assert writer.write_through(b"later;") is Taken.REFUSED
            assert direct == [b"big write;"]  # only the writer's own attempt
            stream.release.set()
            await writer.drain()
            writer.stop()
    assert stream.get_data_nowait() == b"big write;later;"


async def test_write_through_answers_what_went_out_at_once() -> None:
    # ALL: the kernel took it all; PART: some, the rest queued for the writer; REFUSED: none
    # (a full kernel buffer, TLS with no direct write, or the writer busy); once the peer is
    # gone, ALL: dropped, nothing left to do.
    stream = CountedStream()
    room = [100, 3, 100, 0]  # bytes the "kernel" takes per direct write, then all
    direct: list[bytes] = []

    def write_now(data: bytes) -> bytes:
        took = room.pop(0) if room else len(data)
        direct.append(data[:took])
        return data[took:]

    writer = ConnectionWriter(stream, not_broken, write_now)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            assert writer.write_through(b"all;") is Taken.ALL
            assert writer.write_through(b"part;") is Taken.PART
            await writer.drain()  # the writer wrote the rest, b"t;"
            assert writer.write_through(b"none;") is Taken.REFUSED
            await writer.drain()
            writer.stop()
    assert direct == [b"all;", b"par", b"t;", b"", b"none;"]  # the writer's: "t;", "none;"
    assert stream.writes == 0

    tls = ConnectionWriter(CountedStream(), not_broken)  # no direct write: the writer's only
    assert tls.write_through(b"x") is Taken.REFUSED

    closed = CountedStream()
    await closed.aclose()
    broken: list[bool] = []

    async def on_broken() -> None:
        broken.append(True)

    gone = ConnectionWriter(closed, on_broken)
    with trio.fail_after(TEST_TIMEOUT_S):
        await gone.push(b"lost")
        await gone.drain()
    assert broken == [True]
    assert gone.write_through(b"dropped") is Taken.ALL
    assert not gone.takes_now
