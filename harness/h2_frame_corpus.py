"""Pure. A seeded corpus of hostile HTTP/2 frame sequences (docs/limits.md §5, docs/http.md).

Each sequence is what one h2c connection sends after the client preface and its SETTINGS:
one to three well-formed streaming chat requests, with one mutation drawn from what an
attacker or a broken client sends at the frame layer (RFC 9113): streams on even or reused ids,
frames on idle or closed streams or on stream 0, a CONTINUATION out of place, an interrupted
header block, undecodable HPACK, malformed header lists (uppercase names, connection headers,
a missing pseudo-header, a wrong content-length), self-dependent PRIORITY, zero or overflowing
WINDOW_UPDATEs, invalid SETTINGS, a PING of the wrong size, oversized or truncated frames, bad
padding, unknown frame types, floods of PING/SETTINGS, and rapid open-then-reset bursts
(CVE-2023-44487). Frames are written byte by byte here, not by an h2 library: a library would
refuse to write most of them.

`requests` names the streams that carry a well-formed request: each must end (END_STREAM,
RST_STREAM, or a GOAWAY ending the connection) and none may be answered with a 5xx. The same
seed always gives the same sequences, so a failure names its seed and index.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import hpack

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x6, 0x7, 0x8, 0x9
END_STREAM, END_HEADERS, PADDED, ACK = 0x1, 0x4, 0x8, 0x1
CANCEL: Final = 0x8
CHAT: Final = "/v1/chat/completions"


def chat_body(model: str) -> bytes:
    """A well-formed streaming chat request asking for two tokens."""
    message = {"role": "user", "content": "Hi"}
    return json.dumps(
        {"model": model, "messages": [message], "max_tokens": 2, "stream": True}
    ).encode()


def frame(
    kind: int, flags: int, stream_id: int, payload: bytes, length: int | None = None
) -> bytes:
    """One frame; `length` other than the payload's makes a lying frame header."""
    size = len(payload) if length is None else length
    return (
        struct.pack(">I", size)[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload
    )


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in pairs))


def request_headers(
    authority: str, length: int, extra: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", authority),
        (":path", CHAT),
        ("content-type", "application/json"),
        ("content-length", str(length)),
        *(extra or []),
    ]


@dataclass(frozen=True)
class H2Sequence:
    index: int
    mutation: str
    frames: tuple[bytes, ...]
    requests: tuple[int, ...]  # streams carrying a well-formed request


class _Builder:
    """One connection's frames; shares the client's HPACK encoder state across its header
    blocks, as a real client's would be."""

    def __init__(self, rng: random.Random, authority: str, model: str) -> None:
        self.rng = rng
        self.authority = authority
        self.body = chat_body(model)
        self.encoder = hpack.Encoder()
        self.frames: list[bytes] = []
        self.requests: list[int] = []
        self.next_id = 1
        self.final = False  # the mutation leaves nothing after it readable or owed

    def block(self, headers: list[tuple[str, str]]) -> bytes:
        encoded: bytes = self.encoder.encode(headers)
        return encoded

    def headers(self, extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        return request_headers(self.authority, len(self.body), extra)

    def request(self, stream_id: int | None = None) -> int:
        """A well-formed request on the next odd stream id (or the one given)."""
        sid = self.next_id if stream_id is None else stream_id
        self.next_id = max(self.next_id, sid + 2)
        self.frames.append(frame(HEADERS, END_HEADERS, sid, self.block(self.headers())))
        self.frames.append(frame(DATA, END_STREAM, sid, self.body))
        self.requests.append(sid)
        return sid

    def open_stream(self, extra: list[tuple[str, str]] | None = None, *, end: bool = False) -> int:
        sid = self.next_id
        self.next_id += 2
        flags = END_HEADERS | (END_STREAM if end else 0)
        self.frames.append(frame(HEADERS, flags, sid, self.block(self.headers(extra))))
        return sid


def _even_stream(b: _Builder) -> None:
    b.frames.append(frame(HEADERS, END_HEADERS | END_STREAM, 2, b.block(b.headers())))


def _stream_id_regression(b: _Builder) -> None:
    b.request(7)
    b.frames.append(frame(HEADERS, END_HEADERS, 3, b.block(b.headers())))


def _data_on_idle(b: _Builder) -> None:
    b.frames.append(frame(DATA, END_STREAM, b.next_id + 8, b.body))


def _data_on_zero(b: _Builder) -> None:
    b.frames.append(frame(DATA, 0, 0, b.body))


def _orphan_continuation(b: _Builder) -> None:
    b.frames.append(frame(CONTINUATION, END_HEADERS, b.next_id, b.block([("x-a", "b")])))


def _interrupted_headers(b: _Builder) -> None:
    sid = b.next_id
    b.next_id += 2
    b.frames.append(frame(HEADERS, 0, sid, b.block(b.headers())))
    b.frames.append(frame(PING, 0, 0, bytes(8)))


def _bad_hpack(b: _Builder) -> None:
    junk = bytes(b.rng.getrandbits(8) | 0x80 for _ in range(b.rng.randint(1, 40)))
    b.frames.append(frame(HEADERS, END_HEADERS | END_STREAM, b.next_id, junk))
    b.next_id += 2


def _malformed_headers(b: _Builder) -> None:
    bad = b.rng.choice(
        [
            [("X-Upper", "1")],
            [("connection", "keep-alive")],
            [("te", "gzip")],
            [("content-length", "3")],
        ]
    )
    if bad == [("content-length", "3")]:
        sid = b.next_id
        b.next_id += 2
        headers = [h for h in b.headers() if h[0] != "content-length"] + bad
        b.frames.append(frame(HEADERS, END_HEADERS, sid, b.block(headers)))
        b.frames.append(frame(DATA, END_STREAM, sid, b.body))
        return
    b.open_stream(bad, end=True)


def _missing_path(b: _Builder) -> None:
    sid = b.next_id
    b.next_id += 2
    headers = [h for h in b.headers() if h[0] != ":path"]
    b.frames.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, b.block(headers)))


def _self_priority(b: _Builder) -> None:
    sid = b.request()
    b.frames.append(frame(PRIORITY, 0, sid, struct.pack(">IB", sid, 15)))


def _zero_window_update(b: _Builder) -> None:
    target = b.rng.choice([0, b.request()])
    b.frames.append(frame(WINDOW_UPDATE, 0, target, struct.pack(">I", 0)))


def _window_overflow(b: _Builder) -> None:
    b.request()
    increment = struct.pack(">I", 2**31 - 1)
    b.frames += [frame(WINDOW_UPDATE, 0, 0, increment), frame(WINDOW_UPDATE, 0, 0, increment)]


def _rst_idle(b: _Builder) -> None:
    b.frames.append(frame(RST_STREAM, 0, b.next_id + 20, struct.pack(">I", CANCEL)))


def _bad_settings(b: _Builder) -> None:
    pair = b.rng.choice([(0x2, 2), (0x4, 2**31), (0x5, 100), (0x5, 2**24)])
    b.frames.append(settings(pair))


def _bad_ping(b: _Builder) -> None:
    b.frames.append(frame(PING, 0, 0, bytes(b.rng.choice([0, 7, 9]))))


def _client_goaway(b: _Builder) -> None:
    """A client saying goodbye: the gateway ends the connection (the h2 state machine closes
    on a received GOAWAY, docs/http.md §3), so the requests it had sent are owed nothing."""
    b.requests.clear()
    b.frames.append(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
    b.open_stream(end=True)
    b.final = True


def _unknown_frame(b: _Builder) -> None:
    b.frames.append(frame(0xEE, 0xFF, b.rng.choice([0, 1, 9]), b"\x00" * b.rng.randint(0, 64)))


def _oversized_frame(b: _Builder) -> None:
    sid = b.open_stream()
    b.frames.append(frame(DATA, END_STREAM, sid, bytes(20_000)))


def _truncated_frame(b: _Builder) -> None:
    """A frame that promises more bytes than come: nothing after it can be read as a frame."""
    b.frames.append(frame(DATA, 0, b.open_stream(), b"{", length=100))
    b.final = True


def _bad_padding(b: _Builder) -> None:
    sid = b.open_stream()
    b.frames.append(frame(DATA, PADDED | END_STREAM, sid, bytes((200,)) + b.body[:10]))


def _headers_after_end(b: _Builder) -> None:
    sid = b.request()
    b.frames.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, b.block([("x-trailer", "1")])))


def _cancel_at_once(b: _Builder) -> None:
    sid = b.request()
    b.requests.remove(sid)  # its client ended it: no answer owed
    b.frames.append(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))


def _rapid_reset(b: _Builder) -> None:
    for _ in range(b.rng.randint(20, 200)):
        sid = b.open_stream()
        b.frames.append(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))


def _ping_flood(b: _Builder) -> None:
    b.frames += [frame(PING, 0, 0, struct.pack(">Q", n)) for n in range(b.rng.randint(50, 500))]


def _settings_flood(b: _Builder) -> None:
    b.frames += [settings((0x3, 100)) for _ in range(b.rng.randint(50, 500))]


MUTATIONS: Final[dict[str, Callable[[_Builder], None]]] = {
    "even_stream": _even_stream,
    "stream_id_regression": _stream_id_regression,
    "data_on_idle": _data_on_idle,
    "data_on_zero": _data_on_zero,
    "orphan_continuation": _orphan_continuation,
    "interrupted_headers": _interrupted_headers,
    "bad_hpack": _bad_hpack,
    "malformed_headers": _malformed_headers,
    "missing_path": _missing_path,
    "self_priority": _self_priority,
    "zero_window_update": _zero_window_update,
    "window_overflow": _window_overflow,
    "rst_idle": _rst_idle,
    "bad_settings": _bad_settings,
    "bad_ping": _bad_ping,
    "client_goaway": _client_goaway,
    "unknown_frame": _unknown_frame,
    "oversized_frame": _oversized_frame,
    "truncated_frame": _truncated_frame,
    "bad_padding": _bad_padding,
    "headers_after_end": _headers_after_end,
    "cancel_at_once": _cancel_at_once,
    "rapid_reset": _rapid_reset,
    "ping_flood": _ping_flood,
    "settings_flood": _settings_flood,
}


def h2_sequences(
    seed: int, count: int, *, model: str, authority: str = "127.0.0.1"
) -> Iterator[H2Sequence]:
    """`count` sequences; the mutations take turns, so every one appears in any `count` of at
    least len(MUTATIONS)."""
    rng = random.Random(seed)
    names = list(MUTATIONS)
    for index in range(count):
        name = names[index % len(names)]
        builder = _Builder(rng, authority, model)
        before = rng.randint(0, 2)
        for _ in range(before):
            builder.request()
        MUTATIONS[name](builder)
        if rng.random() < 0.5 and not builder.final:
            builder.request()  # a request after the mutation, if the connection still stands
        yield H2Sequence(index, name, tuple(builder.frames), tuple(builder.requests))
