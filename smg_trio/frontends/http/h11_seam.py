"""I/O. The seam's HTTP/1.1 half (docs/http.md §6): every touch of hypercorn's `H11Protocol` and
h11's internals for a plain cleartext HTTP/1.1 request, its stream's head and its end
(docs/performance.md §2.1). The names relied on are in `hypercorn_seam.INTERNALS`, checked by
the same test; nothing else in the package touches them."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Final

import h11
from hypercorn.config import Config
from hypercorn.protocol.events import Request, StreamClosed
from hypercorn.protocol.h11 import STREAM_ID, H11Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
from hypercorn.utils import build_and_validate_headers

from smg_trio.frontends.http.hypercorn_seam import (
    awaits_response_head,
    response_head_sent,
    server_fields,
)


class SeamH11Protocol(H11Protocol):
    """hypercorn's H11Protocol, reading a plain request's fields once: hypercorn reads them three
    times (to check for an upgrade, to choose the stream, to copy them for the scope), decoding,
    stripping and lowering every name, which h11 hands over lowered and stripped already. A
    request naming `Upgrade` (h2c, WebSocket) or h2's preface takes hypercorn's own steps."""

    _fields: list[tuple[bytes, bytes]] | None = None  # the plain request's, from the check

    async def _check_protocol(self, event: h11.Request) -> None:
        fields = list(event.headers)
        if event.method == b"PRI" or any(name == b"upgrade" for name, _ in fields):
            self._fields = None
            await super()._check_protocol(event)
        else:
            self._fields = fields  # (hypercorn's check finds nothing to do with these)

    async def _create_stream(self, request: h11.Request) -> None:
        fields, self._fields = self._fields, None
        if fields is None or self.config.h11_pass_raw_headers:
            await super()._create_stream(request)
            return
        # No `Upgrade`: hypercorn's choice is an HTTP stream, and its scope gets these fields.
        self.stream = stream = HTTPStream(
            self.app,
            self.config,
            self.context,
            self.task_group,
            self.ssl,
            self.client,
            self.server,
            self.stream_send,
            STREAM_ID,
        )
        await stream.handle(
            Request(
                stream_id=STREAM_ID,
                headers=fields,
                http_version=request.http_version.decode(),
                method=request.method.decode("ascii").upper(),
                raw_path=request.target,
                state=self.connection_state,
            )
        )
        self.keep_alive_requests += 1
        await self.context.mark_request()


def h11_in_chunked_body(protocol: H11Protocol) -> bool:
    """The HTTP/1.1 connection is sending a chunked response body (not HTTP/1.0's, which has
    no chunked framing), as hypercorn's h11 connection knows."""
    connection = protocol.connection
    return connection.our_state is h11.SEND_BODY and connection.their_http_version == b"1.1"


_TOKEN: Final = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
"""A field name (RFC 9110 §5.1, a token)."""
_FIELD_VALUE: Final = re.compile(rb"(?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?")
"""A field value (RFC 9110 §5.5) without control characters: h11 takes more; what this refuses
takes h11's own path, so the bytes are h11's either way."""
_FRAMING_FIELDS: Final = frozenset(
    (b"content-length", b"transfer-encoding", b"connection", b"host")
)
"""Fields h11 rewrites or moves in a response head: a head with one takes h11's own path."""
_CHUNKED: Final = (b"Transfer-Encoding", b"chunked")  # as h11 adds it (`set_comma_header`)


def h11_response_head(
    protocol: H11Protocol, config: Config, headers: Sequence[tuple[bytes, bytes]]
) -> bytes | None:
    """The bytes of a `200` head for the HTTP/1.1 request `protocol` is serving, framed by its
    h11 connection as hypercorn's H11Protocol frames one (the connection then expects the
    body); None, nothing framed, unless the request awaits its response head over HTTP/1.1
    and the stream is an HTTP one that has not begun its response."""
    stream = protocol.stream
    connection = protocol.connection
    if (
        not isinstance(stream, HTTPStream)
        or not awaits_response_head(stream)
        or connection.our_state is not h11.SEND_RESPONSE
        or connection.their_http_version != b"1.1"  # 1.0: no chunked framing
    ):
        return None
    fields = [*build_and_validate_headers(headers), *server_fields(config, "h11")]
    if protocol.keep_alive_requests >= config.keep_alive_max_requests:
        fields.append((b"connection", b"close"))
    try:
        head = h11_chunked_head(connection, fields)
        if head is None:
            head = connection.send(h11.Response(status_code=200, headers=fields))
    except h11.LocalProtocolError:
        return None  # the client broke the protocol: hypercorn's path sends nothing either
    response_head_sent(stream, headers)
    return head


def h11_chunked_head(connection: h11.Connection, fields: list[tuple[bytes, bytes]]) -> bytes | None:
    """h11's `send` of a `200` head with `fields`, for the common head: a chunked body on a
    kept-alive HTTP/1.1 connection, answering neither HEAD nor CONNECT, of valid fields of
    which h11 rewrites none. h11 would check every field four times over (the head, its two
    framing rewrites, the head again) and add `Transfer-Encoding: chunked` last; this checks
    each once, moves h11's state with the head h11 would have made, and writes its bytes as
    h11 would (tests/frontends/http/test_h11_head.py holds them equal). None, nothing done,
    for any other head (h11's `send` then frames it)."""
    if (
        not connection._cstate.keep_alive
        or connection._request_method in (b"HEAD", b"CONNECT")
        or any(
            name.lower() in _FRAMING_FIELDS
            or _TOKEN.fullmatch(name) is None
            or _FIELD_VALUE.fullmatch(value) is None
            for name, value in fields
        )
    ):
        return None
    event = h11.Response(status_code=200, headers=[*fields, _CHUNKED], _parsed=True)
    try:
        connection._process_event(connection.our_role, event)
    except BaseException:
        connection._process_error(connection.our_role)  # as h11's `send` does
        raise
    return b"HTTP/1.1 200 \r\n%b%s: %s\r\n\r\n" % (
        b"".join(b"%s: %s\r\n" % field for field in fields),
        *_CHUNKED,
    )


def h11_body_end(protocol: H11Protocol) -> tuple[HTTPStream, bytes] | None:
    """The stream and the bytes ending the chunked `200` body the HTTP/1.1 connection is sending (its last,
    empty chunk), framed by its h11 connection, which then expects the next request; None,
    nothing framed, unless an HTTP stream's ordinary response (not to HEAD, no trailers) is in
    its chunked body over HTTP/1.1."""
    stream = protocol.stream
    if (
        not isinstance(stream, HTTPStream)
        or stream.closed
        or stream.state is not ASGIHTTPState.RESPONSE
        or stream.response.get("trailers", False)
        or stream.scope["method"] == "HEAD"
        or not h11_in_chunked_body(protocol)
    ):
        return None
    try:
        return stream, protocol.connection.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return None  # (h11's connection is in an error state: hypercorn's path ends it)


async def response_ended(stream: HTTPStream) -> None:
    """What hypercorn's `HTTPStream._send_closed` does after it sent the body's end, for an end
    framed by `h11_body_end` and written past it: the stream closed, its access log line, then
    `StreamClosed` to the protocol (which recycles the connection for the next request). As
    hypercorn's, also when the write found the client gone meanwhile."""
    stream.state = ASGIHTTPState.CLOSED
    await stream.config.log.access(stream.scope, stream.response, time.time() - stream.start_time)
    await stream.send(StreamClosed(stream_id=stream.stream_id))
