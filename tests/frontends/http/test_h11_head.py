"""`h11_chunked_head` (frontends.http.hypercorn_seam): the one pass that stands in for h11's `send`
of a `200` response head gives, for any fields and any request h11 read, exactly what h11's
own `send` gave: the same bytes, the same state after it (the body's framing, keep-alive, the
next cycle), the same bytes for the body and its end; or it declines and h11 frames the head
(docs/performance.md §2.1). And `server_fields`, hypercorn's `date` and `server` made once a
second: the same fields."""

from __future__ import annotations

import time

import h11
from hypercorn.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.frontends.http.h11_seam import h11_chunked_head
from smg_trio.frontends.http.hypercorn_seam import server_fields

# A response head of ours: our app's fields (any case), hypercorn's `date` and `server`, and
# the fields h11 rewrites or moves.
NAMES = (
    b"content-type",
    b"Content-Type",
    b"cache-control",
    b"x-accel-buffering",
    b"x-request-id",
    b"date",
    b"server",
    b"connection",
    b"Connection",
    b"content-length",
    b"Transfer-Encoding",
    b"host",
    b"bad name",
    b"",
)
VALUE = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(str.encode),
    st.binary(max_size=12),  # control characters, CR LF, obs-text
    st.sampled_from([b"close", b"keep-alive", b"12", b"chunked", b"a\tb", b" padded "]),
)
FIELD = st.tuples(st.sampled_from(NAMES), VALUE)
REQUEST_HEADERS = st.lists(
    st.sampled_from(
        [
            (b"host", b"example"),
            (b"connection", b"close"),
            (b"connection", b"keep-alive"),
            (b"content-length", b"2"),
            (b"expect", b"100-continue"),
        ]
    ),
    max_size=3,
    unique_by=lambda field: field[0],
)


def served(method: bytes, version: bytes, headers: list[tuple[bytes, bytes]]) -> h11.Connection:
    """A server connection that read one request and its body."""
    connection = h11.Connection(h11.SERVER)
    body = b"{}" if any(name == b"content-length" for name, _ in headers) else b""
    fields = b"".join(b"%s: %s\r\n" % field for field in headers)
    connection.receive_data(b"%s / HTTP/%s\r\n%b\r\n%b" % (method, version, fields, body))
    for _ in range(4):  # Request, (Data,) EndOfMessage
        if isinstance(connection.next_event(), h11.EndOfMessage):
            break
    return connection


def state(connection: h11.Connection) -> tuple[object, ...]:
    return (
        connection.our_state,
        connection.their_state,
        connection._cstate.keep_alive,
        type(connection._writer),
    )


def h11_send(connection: h11.Connection, fields: list[tuple[bytes, bytes]]) -> bytes | None:
    try:
        return connection.send(h11.Response(status_code=200, headers=fields))
    except h11.LocalProtocolError:
        return None


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from([b"POST", b"GET", b"HEAD", b"CONNECT"]),
    st.sampled_from([b"1.1", b"1.0"]),
    REQUEST_HEADERS,
    st.lists(FIELD, max_size=7),
)
def test_a_head_is_framed_as_h11_frames_it(
    method: bytes,
    version: bytes,
    request_headers: list[tuple[bytes, bytes]],
    fields: list[tuple[bytes, bytes]],
) -> None:
    if version == b"1.1" and not any(name == b"host" for name, _ in request_headers):
        request_headers = [(b"host", b"example"), *request_headers]
    ours, theirs = (
        served(method, version, request_headers),
        served(method, version, request_headers),
    )
    head = h11_chunked_head(ours, fields)
    expected = h11_send(theirs, fields)
    if head is None:  # declined, nothing done: h11's `send` frames it
        assert h11_send(ours, fields) == expected
    else:
        assert head == expected
    assert state(ours) == state(theirs)
    if head is not None:  # the body and its end, then the next cycle, as after h11's head
        for event in (h11.Data(data=b"data: 1\n\n"), h11.EndOfMessage()):
            assert ours.send(event) == theirs.send(event)
        ours.start_next_cycle()
        theirs.start_next_cycle()
        assert state(ours) == state(theirs)


def test_the_common_head_is_ours() -> None:
    # A plain POST kept alive over HTTP/1.1, with the fields of a stream's head: not declined.
    connection = served(b"POST", b"1.1", [(b"host", b"example"), (b"content-length", b"2")])
    fields = [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"x-request-id", b"abc"),
        (b"date", b"Tue, 08 Dec 2026 00:00:00 GMT"),
        (b"server", b"hypercorn-h11"),
    ]
    head = h11_chunked_head(connection, fields)
    assert head == (
        b"HTTP/1.1 200 \r\ncontent-type: text/event-stream; charset=utf-8\r\nx-request-id: abc\r\n"
        b"date: Tue, 08 Dec 2026 00:00:00 GMT\r\nserver: hypercorn-h11\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    assert connection.our_state is h11.SEND_BODY


def test_the_server_fields_are_hypercorns_of_the_same_second() -> None:
    config = Config()
    for protocol in ("h11", "h2"):
        before = int(time.time())
        fields = server_fields(config, protocol)
        expected = config.response_headers(protocol)
        if int(time.time()) == before:  # (a second boundary between the two: nothing to compare)
            assert fields == expected
        assert server_fields(config, protocol) is fields or int(time.time()) != before
    quiet = Config()
    quiet.include_server_header = False  # another config: its own fields, not the first's
    assert [name for name, _ in server_fields(quiet, "h11")] == [b"date"]
