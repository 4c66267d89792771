"""The scanner → writer hand-off (`ChunkWriter`, request/nursery.py): what the sink takes at
once goes out from the scanner; anything else, and anything after it, goes through the writer
task, in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import trio

from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import GatewayError
from smg_trio.handoff import Taken
from smg_trio.request.nursery import ChunkWriter

TEST_S = 5.0


class ScriptedSink:
    """A ClientSink whose `send_chunks_now` answers from a script; records every call."""

    def __init__(self, answers: Sequence[Taken]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, tuple[bytes, ...]]] = []
        self.release = trio.Event()
        self.hold_next_send = False

    def gone_before_engine(self) -> bool:
        return False

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        answer = self.answers.pop(0)
        if answer is not Taken.REFUSED:
            self.calls.append(("now", tuple(payloads)))
        return answer

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self.calls.append(("writer", tuple(payloads)))
        if self.hold_next_send:
            self.hold_next_send = False
            await self.release.wait()
        await trio.lowlevel.checkpoint()

    async def send_body(self, body: bytes) -> None:
        raise AssertionError("a stream has no body")

    async def end_stream(self, end: StreamEnd) -> None:
        raise AssertionError("not part of the hand-off")

    async def fail(self, error: GatewayError) -> None:
        raise AssertionError("not part of the hand-off")


async def _idle() -> None:
    await trio.testing.wait_all_tasks_blocked()


IDLE: Final = None
"""In a script: wait until every task is blocked (the writer idle again)."""


async def hand_over(sink: ScriptedSink, script: Sequence[bytes | None]) -> None:
    """Run a ChunkWriter over `sink`: hand each payload of `script` over alone, waiting where
    it says IDLE, then close and wait for the writer to finish."""
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await _idle()
            for step in script:
                if step is IDLE:
                    await _idle()
                else:
                    writer.hand_over([step])
            writer.close()


async def test_taken_now_skips_the_writer_and_refused_goes_through_it() -> None:
    sink = ScriptedSink([Taken.ALL, Taken.REFUSED, Taken.ALL])
    await hand_over(sink, [b"a", IDLE, b"b", IDLE, b"c", IDLE])
    assert sink.calls == [("now", (b"a",)), ("writer", (b"b",)), ("now", (b"c",))]


async def test_a_partly_sent_chunk_is_finished_by_the_writer_before_the_next() -> None:
    sink = ScriptedSink([Taken.PART])
    # b: the writer has not run yet after a, so b is queued, not offered to the sink.
    await hand_over(sink, [b"a", b"b"])
    # `send_chunks` first finishes the rest `send_chunks_now` left, then sends what follows.
    assert sink.calls == [("now", (b"a",)), ("writer", (b"b",))]


async def test_a_partly_sent_chunk_alone_gets_an_empty_send_to_finish_it() -> None:
    sink = ScriptedSink([Taken.PART])
    await hand_over(sink, [b"a", IDLE])
    assert sink.calls == [("now", (b"a",)), ("writer", ())]


async def test_while_the_writer_is_busy_nothing_overtakes_it() -> None:
    sink = ScriptedSink([Taken.REFUSED])  # asked once only: later batches see a busy writer
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await _idle()
            sink.hold_next_send = True
            writer.hand_over([b"a"])
            await _idle()  # the writer is in send_chunks(a), held
            writer.hand_over([b"b"])
            writer.hand_over([b"c"])
            sink.release.set()
            writer.close()
    assert sink.calls == [("writer", (b"a",)), ("writer", (b"b", b"c"))]
    assert sink.answers == []


async def test_a_first_output_before_the_writer_ever_ran_goes_out_at_once() -> None:
    # A fast engine's first output can come before the writer task first ran: nothing is
    # queued and nothing is being sent, so nothing can be overtaken (docs/performance.md §3).
    sink = ScriptedSink([Taken.ALL, Taken.ALL])
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            writer.hand_over([b"first"])  # the writer task has not run yet
            await _idle()
            writer.hand_over([b"second"])
            writer.close()
    assert sink.calls == [("now", (b"first",)), ("now", (b"second",))]


async def test_nothing_goes_out_at_once_while_the_writer_is_sending() -> None:
    sink = ScriptedSink([Taken.REFUSED, Taken.ALL])
    sink.hold_next_send = True
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await _idle()
            writer.hand_over([b"a"])  # refused now: the writer sends it, and is held there
            await _idle()
            writer.hand_over([b"b"])  # the writer is mid-send (nothing queued): b waits
            sink.release.set()
            await _idle()
            writer.hand_over([b"c"])  # idle again
            writer.close()
    assert sink.calls == [("writer", (b"a",)), ("writer", (b"b",)), ("now", (b"c",))]


async def test_a_stream_whose_every_chunk_is_taken_at_once_never_starts_the_writer() -> None:
    sink = ScriptedSink([Taken.ALL, Taken.ALL])
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            writer.starts_in(nursery)
            writer.hand_over([b"a"])
            await _idle()
            writer.hand_over([b"b"])
            await _idle()
            assert nursery.child_tasks == frozenset()
            writer.close()
    assert sink.calls == [("now", (b"a",)), ("now", (b"b",))]


async def test_the_writer_starts_at_the_first_chunk_not_taken_and_keeps_the_order() -> None:
    sink = ScriptedSink([Taken.ALL, Taken.REFUSED, Taken.ALL])
    writer = ChunkWriter(sink)
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            writer.starts_in(nursery)
            writer.hand_over([b"a"])
            writer.hand_over([b"b"])  # refused: the writer is started for it
            writer.hand_over([b"c"])  # the writer has not run yet and b is queued: c waits
            assert len(nursery.child_tasks) == 1
            await _idle()
            writer.hand_over([b"d"])  # the writer idle again: at once
            writer.close()
    assert sink.calls == [("now", (b"a",)), ("writer", (b"b", b"c")), ("now", (b"d",))]
