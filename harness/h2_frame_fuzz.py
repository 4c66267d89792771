"""I/O. Hostile HTTP/2 frame sequences against a gateway (harness/h2_frame_corpus.py): one h2c
connection per sequence, `concurrency` at a time. The client reads while it sends (answering
the server's SETTINGS, decoding every header block so HPACK state stays shared) until every
well-formed request of the sequence ended (END_STREAM, RST_STREAM, or a GOAWAY ending the
connection), the server closed, or the per-connection cap passed.

Counted: answers by status, 5xx, GOAWAY error codes, requests that never ended (each named by
seed index and mutation), frames from the server that did not parse. Used by
`python -m bench hostile_input` (its h2 phase) and by tests/e2e/test_h2_frame_fuzz.py.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import hpack
import trio

from harness.h2_frame_corpus import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    H2Sequence,
    frame,
    settings,
)

CONNECTION_S: Final = 10.0  # one sequence's cap: its requests ask for two tokens each
GRACE_S: Final = 0.2  # after the last request ended, for anything queued behind it
_READ: Final = 65_536


@dataclass
class H2FuzzResult:
    sequences: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0
    goaways: Counter[int] = field(default_factory=Counter)
    requests: int = 0
    without_end: list[str] = field(default_factory=list)
    unparsable: int = 0
    seconds: float = 0.0


class _Reader:
    """The client's view of one connection: what ended, what was answered."""

    def __init__(self, requests: Sequence[int]) -> None:
        self.waiting = set(requests)
        self.decoder = hpack.Decoder()
        self.buffer = b""
        self.block = b""  # a header block awaiting its CONTINUATION
        self.block_stream = 0
        self.statuses: list[int] = []
        self.goaway: int | None = None
        self.replies: list[bytes] = []
        self.internal_errors = 0

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            stream = struct.unpack(">I", self.buffer[5:9])[0] & 0x7FFF_FFFF
            payload = self.buffer[9 : 9 + length]
            self.buffer = self.buffer[9 + length :]
            self._frame(kind, flags, stream, payload)

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            self.replies.append(frame(SETTINGS, ACK, 0, b""))
        elif kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                self.block_stream = stream
                self.block = _unpadded(flags, payload, priority=True)
            else:
                self.block += payload
            if flags & END_HEADERS:
                headers = self.decoder.decode(self.block)
                self.block = b""
                for name, value in headers:
                    if name in (":status", b":status"):
                        self.statuses.append(int(value))
            if flags & END_STREAM:
                self.waiting.discard(stream)
        elif kind == DATA:
            # An error event inside a 200 stream is a server error as much as a 5xx status.
            self.internal_errors += b'"internal_error"' in payload or b'"api_error"' in payload
            if flags & END_STREAM:
                self.waiting.discard(stream)
        elif kind == RST_STREAM:
            self.waiting.discard(stream)
        elif kind == GOAWAY:
            self.goaway = struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else -1
            self.waiting.clear()  # the connection ends: no stream is owed more


def _unpadded(flags: int, payload: bytes, *, priority: bool) -> bytes:
    if flags & PADDED:
        pad = payload[0]
        payload = payload[1 : len(payload) - pad]
    if priority and flags & 0x20:
        payload = payload[5:]
    return payload


async def one_sequence(port: int, sequence: H2Sequence, result: H2FuzzResult) -> None:
    reader = _Reader(sequence.requests)
    result.requests += len(sequence.requests)
    sent_all = trio.Event()
    sending = trio.StrictFIFOLock()  # the frames and the SETTINGS acks share the socket
    with trio.move_on_after(CONNECTION_S):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream, trio.open_nursery() as nursery:

            async def send() -> None:
                try:
                    async with sending:
                        await stream.send_all(PREFACE + settings())
                    for data in sequence.frames:
                        async with sending:
                            await stream.send_all(data)
                except trio.BrokenResourceError:
                    pass  # the server closed the connection: what it answered is read
                sent_all.set()

            nursery.start_soon(send)
            try:
                while True:
                    if sent_all.is_set() and not reader.waiting:
                        with trio.move_on_after(GRACE_S):
                            while data := await stream.receive_some(_READ):
                                reader.feed(data)
                        break
                    data = await stream.receive_some(_READ)
                    if not data:
                        break
                    reader.feed(data)
                    if reader.replies:
                        async with sending:
                            await stream.send_all(b"".join(reader.replies))
                        reader.replies.clear()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # a reset connection: whatever was owed is counted below
            except hpack.HPACKError:
                result.unparsable += 1
            nursery.cancel_scope.cancel()
    result.sequences += 1
    for status in reader.statuses:
        result.statuses[status] += 1
        result.server_errors += status >= 500
    result.server_errors += reader.internal_errors
    if reader.goaway is not None:
        result.goaways[reader.goaway] += 1
    result.without_end += [f"{sequence.index}:{sequence.mutation}:{sid}" for sid in reader.waiting]


async def fuzz_h2(port: int, sequences: Sequence[H2Sequence], concurrency: int = 8) -> H2FuzzResult:
    result = H2FuzzResult()
    start = trio.current_time()

    async def worker(offset: int) -> None:
        for sequence in sequences[offset::concurrency]:
            await one_sequence(port, sequence, result)

    async with trio.open_nursery() as nursery:
        for offset in range(concurrency):
            nursery.start_soon(worker, offset)
    result.seconds = trio.current_time() - start
    return result
