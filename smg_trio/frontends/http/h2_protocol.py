"""I/O. HTTP/2 connections that refuse one stream instead of failing all of them, and that shed
a client resetting streams faster than any real client does (docs/http.md §3).

- `StreamRefusingH2Connection` (h2): a HEADERS frame opening a stream beyond our advertised
  SETTINGS_MAX_CONCURRENT_STREAMS is answered RST_STREAM(REFUSED_STREAM) for that stream only
  (RFC 9113 §5.1.2: the client may retry it); h2 itself raises TooManyStreamsError there, which
  hypercorn turns into GOAWAY(PROTOCOL_ERROR) for every stream on the connection.
- `GuardedH2Protocol` (hypercorn): DATA for a stream whose response already ended (a 413 or
  408 answered before the body was complete) is dropped and the upload stopped with
  RST_STREAM(NO_ERROR), where hypercorn raised KeyError and lost the connection. It also counts the client's RST_STREAMs on streams whose request was
  still being served; more than `RAPID_RESET_LIMIT` within `RAPID_RESET_WINDOW_S` is the
  "rapid reset" attack (CVE-2023-44487), answered GOAWAY(ENHANCE_YOUR_CALM) and the connection
  is closed, which cancels its streams and so their engine requests.

Both reach h2's and hypercorn's internals only through `frontends/http/hypercorn_seam.py`.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Final, cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import trio
from hpack.struct import HeaderWeaklyTyped, NeverIndexedHeaderTuple
from hypercorn.events import Closed
from hypercorn.protocol.events import Body, Data, EndBody, EndData
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.protocol.ws_stream import WSStream

from smg_trio.frontends.http.asgi_types import Send
from smg_trio.frontends.http.h2_round_robin import RoundRobinStreams
from smg_trio.frontends.http.hypercorn_seam import (
    RefusingH2Connection,
    SeamH2Protocol,
    awaits_response_head,
    h2_head_fields,
    response_head_sent,
)
from smg_trio.handoff import Taken
from smg_trio.observability.request_ids import REQUEST_ID_HEADER
from smg_trio.wire.hpack_static import StaticTableEncoder

RAPID_RESET_LIMIT: Final = 40
"""Client resets of unfinished streams a connection may make within the window: a client that
cancels a whole batch of concurrent requests stays under it (the default stream limit is 100
and a batch is rarely cancelled twice in a window); an attack passes it within a second."""
RAPID_RESET_WINDOW_S: Final = 10.0
UNINDEXED_RESPONSE_HEADERS: Final = frozenset(
    {REQUEST_ID_HEADER, b"authorization", b"proxy-authorization"}
)
"""Response headers sent as HPACK literals never indexed (RFC 7541 §6.2.3)."""
CONNECTION_SPECIFIC_HEADERS: Final = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"}
)
"""HTTP/1.1 hop-by-hop fields, never sent over HTTP/2 (RFC 9113 §8.2.2)."""


class StreamRefusingH2Connection(RefusingH2Connection):
    """h2's server connection, refusing (not failing on) a stream over the concurrency limit,
    and sending each response's `x-request-id` as a never-indexed field."""

    def send_headers(
        self,
        stream_id: int,
        headers: Iterable[HeaderWeaklyTyped],
        end_stream: bool = False,
        priority_weight: int | None = None,
        priority_depends_on: int | None = None,
        priority_exclusive: bool | None = None,
    ) -> None:
        super().send_headers(
            stream_id,
            outbound_headers(headers),
            end_stream,
            priority_weight,
            priority_depends_on,
            priority_exclusive,
        )


def outbound_headers(headers: Iterable[HeaderWeaklyTyped]) -> list[HeaderWeaklyTyped]:
    """A response's header fields as h2 sends them, in one pass: h2's own outbound
    normalisation and validation (a chain of a dozen generators over every field, a tenth of
    the cost of a response head) are off in our connections' config, and this does what they
    did for the fields hypercorn and our app send (docs/http.md §3): names lowercased, names
    and values stripped of surrounding whitespace, HTTP/1.1 connection fields dropped, and
    request ids and credentials marked never-indexed (RFC 7541 §7.1.3: an intermediary must keep
    them out of its own HPACK tables; our encoder keeps everything out of them anyway,
    wire/hpack_static.py). (h2's validation of a response had nothing to find in ours:
    hypercorn refuses pseudo-fields from the app and adds `:status` itself, and the rest of its
    checks are for requests.)"""
    fields: list[HeaderWeaklyTyped] = []
    for name, value in headers:
        name_bytes = (name.encode() if isinstance(name, str) else name).strip().lower()
        value_bytes = (value.encode() if isinstance(value, str) else value).strip()
        if name_bytes in CONNECTION_SPECIFIC_HEADERS:
            continue
        if name_bytes in UNINDEXED_RESPONSE_HEADERS:
            fields.append(NeverIndexedHeaderTuple(name_bytes, value_bytes))
        else:
            fields.append((name_bytes, value_bytes))
    return fields


class GuardedH2Protocol(SeamH2Protocol):
    """hypercorn's H2Protocol over `StreamRefusingH2Connection`, with the rapid-reset guard."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        stock = self.connection
        # h2's outbound checks are `outbound_headers`' one pass; the inbound ones stay (a
        # client's request is untrusted input).
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        refusing = StreamRefusingH2Connection(config=config)
        refusing.encoder = StaticTableEncoder()  # type: ignore[assignment]  # hpack's, duck-typed
        refusing.DEFAULT_MAX_INBOUND_FRAME_SIZE = stock.DEFAULT_MAX_INBOUND_FRAME_SIZE
        refusing.local_settings = stock.local_settings
        self.connection = refusing
        self.streams = _Streams(self)
        self.priority = RoundRobinStreams()  # type: ignore[assignment]
        self._resets: deque[float] = deque()

    async def screen_events(self, events: list[h2.events.Event]) -> list[h2.events.Event] | None:
        # A stream opened and reset in the same read (the attack's HEADERS + RST_STREAM pair)
        # is not in `self.streams` yet, so this batch's new streams count as unfinished too.
        opened: set[int] = set()
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                opened.add(event.stream_id)
            elif (
                isinstance(event, h2.events.StreamReset)
                and event.remote_reset
                and (event.stream_id in opened or event.stream_id in self.streams)
                and self._too_many_resets()
            ):
                # Streams after this one in the same read are never served: say so.
                self.connection.close_connection(
                    h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, last_stream_id=event.stream_id
                )
                await self.flush()
                await self.send(Closed())
                return None
        if self.context.terminated.is_set():
            # While shutting down, hypercorn resets each new stream, and h2 raises on resetting
            # one the client already reset in the same read (HEADERS + RST_STREAM): skip those.
            return [event for event in events if not self._already_closed(event)]
        return events

    async def stream_send(self, event: StreamEvent) -> None:
        # A body chunk with nothing queued before it and the window open is framed here, by
        # the task that sent it, instead of by hypercorn's send task a round later: one task
        # hop less per chunk, and the first chunk leaves with its response head in one write
        # (docs/performance.md §2). The body's end likewise when nothing is queued (its last
        # chunk and END_STREAM then share a write). Anything else takes hypercorn's queue.
        kind = type(event)
        if kind in (Body, Data) and self.frame_data_now(event.stream_id, event.data):  # type: ignore[attr-defined]
            await self.flush()
            return
        if kind in (EndBody, EndData) and self._end_now(event.stream_id):
            await self.flush()
            return
        await super().stream_send(event)

    def _end_now(self, stream_id: int) -> bool:
        """END_STREAM framed now, and the stream's send state dropped, as hypercorn's send task
        does at a stream's end, when nothing of the stream is queued and that task is not in
        the middle of sending it (it would find the state gone); False: nothing done."""
        if not self._nothing_queued(stream_id) or self.sending_stream == stream_id:
            return False
        try:
            self.connection.end_stream(stream_id)
        except h2.exceptions.ProtocolError:
            return False  # a closed stream: hypercorn's path cleans it up as it always did
        self.forget_ended_stream(stream_id)
        return True

    def _nothing_queued(self, stream_id: int) -> bool:
        """The stream is open in hypercorn's sender with none of its body waiting there."""
        return self.body_queued(stream_id) is False

    def frame_data_now(self, stream_id: int, data: bytes) -> bool:
        """Frame `data` as the stream's next DATA in h2's output if nothing of the stream is
        queued before it and its window takes it whole; False: nothing framed."""
        if not data or not self._nothing_queued(stream_id):
            return False
        try:
            if not self._window_takes(stream_id, data):
                return False
            self.connection.send_data(stream_id, data)
        except h2.exceptions.ProtocolError:
            return False  # a closed stream: hypercorn's path drops it as it always did
        return True

    def _window_takes(self, stream_id: int, data: bytes) -> bool:
        """The stream's window and the peer's frame size take `data` as one DATA frame (h2's
        ProtocolError for a closed stream)."""
        connection = self.connection
        window = connection.local_flow_control_window(stream_id)
        return len(data) <= min(window, connection.max_outbound_frame_size)

    def start_response_now(
        self, stream: HTTPStream, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> bool:
        """A `200` head with `headers` and the body's first chunk `first`, framed now in h2's
        output by the task that has them, if the stream has not started its response and its
        window takes `first` whole; False: nothing framed (the caller then takes the ASGI path,
        where hypercorn does the same in three awaited layers and a task hop later). What
        hypercorn's HTTPStream and H2Protocol do for `http.response.start` is done here, in
        the same order and with the same fields, so the rest of the response (its DATA through
        either path, its end, the access log) finds the stream as hypercorn left it."""
        stream_id = stream.stream_id
        if not first or not awaits_response_head(stream) or not self._nothing_queued(stream_id):
            return False
        connection = self.connection
        try:
            if not self._window_takes(stream_id, first):
                return False
            connection.send_headers(stream_id, h2_head_fields(self.config, headers))
        except h2.exceptions.ProtocolError:
            return False  # the stream closed: hypercorn's path finds it so and sends nothing
        connection.send_data(stream_id, first)  # the checks above are send_data's own
        response_head_sent(stream, headers)
        return True

    def _already_closed(self, event: h2.events.Event) -> bool:
        if not isinstance(event, h2.events.RequestReceived):
            return False
        stream = self.connection.streams.get(event.stream_id)
        return stream is None or stream.closed

    def stop_upload(self, stream_id: int) -> None:
        """The response ended before the request body did: ask the client to stop sending
        (RST_STREAM NO_ERROR, RFC 9113 §8.1); its DATA in flight is still credited back."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)

    def _too_many_resets(self) -> bool:
        now = trio.current_time()
        resets = self._resets
        resets.append(now)
        while resets[0] < now - RAPID_RESET_WINDOW_S:
            resets.popleft()
        return len(resets) > RAPID_RESET_LIMIT


class _FinishedStream:
    """Stands in for a stream whose response already ended (hypercorn forgets it then): body
    bytes the client still sends on it are dropped, and the upload is stopped."""

    idle = True

    def __init__(self, protocol: GuardedH2Protocol, stream_id: int) -> None:
        self._protocol = protocol
        self._stream_id = stream_id

    async def handle(self, event: object) -> None:
        if isinstance(event, Body):
            self._protocol.stop_upload(self._stream_id)


class _Streams(dict[int, "HTTPStream | WSStream"]):
    """hypercorn's stream table. hypercorn looks a stream up by `streams[id]` for every DATA
    frame and raised KeyError (ending the connection, every stream on it) when the client was
    still uploading to a stream already answered, e.g. a 413 or 408 sent before the body ended."""

    def __init__(self, protocol: GuardedH2Protocol) -> None:
        super().__init__()
        self._protocol = protocol

    def __missing__(self, stream_id: int) -> HTTPStream | WSStream:
        return cast("HTTPStream | WSStream", _FinishedStream(self._protocol, stream_id))


class H2StreamChunks:
    """A `DirectChunks` (frontends/http/asgi_types.py) for one h2 stream: a body chunk, and the
    response's head with its first chunk, are framed by the task that has them and handed to
    the connection's writer, without hypercorn's ASGI layers (docs/performance.md §2). All or
    nothing: the rest is never partial."""

    __slots__ = ("_send", "_start_now", "_stream_id", "_write_now")

    def __init__(
        self,
        write_now: Callable[[int, bytes], bool],
        start_now: Callable[[Sequence[tuple[bytes, bytes]], bytes], tuple[Taken, bytes]],
        stream_id: int,
        send: Send,
    ) -> None:
        self._write_now = write_now
        self._start_now = start_now
        self._stream_id = stream_id
        self._send = send

    def start_now(
        self, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]:
        return self._start_now(headers, first)

    def write_chunk_now(self, data: bytes) -> tuple[Taken, bytes]:
        if not data:  # nothing to frame (an empty DATA would be noise, not an end)
            return Taken.ALL, b""
        if self._write_now(self._stream_id, data):
            return Taken.ALL, b""
        return Taken.REFUSED, data

    async def write_rest(self, rest: bytes) -> None:
        await self._send({"type": "http.response.body", "body": rest, "more_body": True})

    async def end_now(self, last: bytes) -> bool:
        """Never here: hypercorn's sender frames the last DATA and END_STREAM in its round."""
        return False
