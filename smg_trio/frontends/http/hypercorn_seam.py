"""I/O. The one seam between our HTTP front end and hypercorn, h2 and h11: every touch of their
internals is here, or in its HTTP/1.1 half (`frontends/http/h11_seam.py`), and nowhere else
(docs/http.md §6).

hypercorn is our server: its protocols (`H11Protocol`, `H2Protocol`, `HTTPStream`, `WSStream`)
parse, frame and run the ASGI app; our worker (`frontends/http/connection.py`, in place of
hypercorn's `TCPServer`) owns each socket. What we change of theirs, and why it pays (figures
and commands: docs/http.md §6; a touch that buys neither 0.1 ms of first-token time nor 3 % of
CPU per streamed token, and fixes nothing, is not kept):

- `RefusingH2Connection` (h2's `_receive_headers_frame`, `_decode_headers`, `_closed_streams`):
  a stream past the concurrency limit is refused alone, not the whole connection (correctness).
- `SeamH2Protocol` (hypercorn's `H2Protocol`): `_handle_events` screened first (rapid reset,
  shutdown; correctness and security); `_send_data` tracked and `_flush`, `stream_buffers`,
  `StreamBuffer._complete` read, so a stream's DATA and END_STREAM are framed by the task that
  has them (64 h2c streams: +15 % and +8 % tokens per CPU-second); the stream table that drops
  DATA for an answered stream (correctness); `priority` as round robin (-7.5 % instructions
  per request at 64 streams).
- The response head past ASGI (`HTTPStream.state`, `.response`; h11's head for hypercorn's
  `H11Protocol`; `build_and_validate_headers`): the head leaves with the first chunk, in one
  write (one stream's first token: -0.40 ms over HTTP/1.1, -0.26 ms over h2c).
- A plain HTTP/1.1 request and its stream's head and end with fewer of hypercorn's and h11's
  layers (docs/performance.md §2.1): `SeamH11Protocol` reads a request's fields once where
  hypercorn reads them three times; `h11_chunked_head` frames a stream's `200` head in one
  pass and moves h11's state by its `_process_event` (h11's `send` checks every field four
  times); `server_fields` makes hypercorn's `date` and `server` once a second; `h11_body_end`
  and `response_ended` end a body in one write with its last chunk and then take hypercorn's
  own end steps (`HTTPStream._send_closed`'s). Together about -7 % instructions per 1-token
  HTTP/1.1 request.
- `write_to_kernel_now`: a write past trio's stream and hypercorn's awaited write, by the task
  that has the bytes, with no checkpoint (64 HTTP/1.1 streams: x1.30 tokens per CPU-second;
  -2.1 % instructions per request for the connection's writer).
- `http_stream_of` (the `HTTPStream` behind an app's `send`), `memory_channel_of` (the channel
  behind hypercorn's app queue): the direct chunk path above; messages queued without a
  scheduling round (-3.3 % instructions per request); a request body already queued read
  without awaiting `receive` (-2.9 % h2c, -3.3 % HTTP/1.1 instructions per 1-token request).

`INTERNALS` lists every name relied on, with its signature; `missing_internals()` checks them
against the installed libraries (tests/frontends/http/test_hypercorn_seam.py), so a version bump that
moves one fails `make test`, not production. pyproject.toml pins each library's minor version.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Final

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import trio
from h2.stream import StreamClosedBy
from hpack.exceptions import HPACKError
from hypercorn.config import Config
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
from hypercorn.typing import HTTPResponseStartEvent
from hypercorn.utils import build_and_validate_headers
from hyperframe.frame import Frame, HeadersFrame, RstStreamFrame


@dataclass(frozen=True, slots=True)
class Internal:
    """One internal name we rely on: `module`'s `path` (`Class.attribute` or a function), with
    the parameters it must take (None: an attribute, checked by name only)."""

    module: str
    path: str
    parameters: tuple[str, ...] | None = None

    def problem(self) -> str | None:
        """Why the installed library no longer offers it as we use it; None when it does."""
        try:
            target: Any = import_module(self.module)
            for part in self.path.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError):
            return f"{self.module}.{self.path} is gone"
        if self.parameters is None:
            return None
        try:
            found = tuple(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            return f"{self.module}.{self.path} is no longer a function"
        if found != self.parameters:
            return f"{self.module}.{self.path} takes {found}, not {self.parameters}"
        return None


INTERNALS: Final = (
    Internal("h2.connection", "H2Connection._receive_headers_frame", ("self", "frame")),
    Internal("h2.connection", "_decode_headers", ("decoder", "encoded_header_block")),
    Internal("hypercorn.protocol.h2", "H2Protocol._handle_events", ("self", "events")),
    Internal("hypercorn.protocol.h2", "H2Protocol._send_data", ("self", "stream_id")),
    Internal("hypercorn.protocol.h2", "H2Protocol._flush", ("self",)),
    Internal("hypercorn.protocol.h2", "H2Protocol.stream_send", ("self", "event")),
    Internal("hypercorn.protocol.h2", "StreamBuffer.__init__", ("self", "event_class")),
    Internal("hypercorn.protocol.http_stream", "HTTPStream.app_send", ("self", "message")),
    Internal("hypercorn.protocol.http_stream", "ASGIHTTPState.REQUEST"),
    Internal("hypercorn.protocol.http_stream", "ASGIHTTPState.RESPONSE"),
    Internal("hypercorn.protocol.http_stream", "ASGIHTTPState.CLOSED"),
    Internal("hypercorn.protocol.http_stream", "HTTPStream._send_closed", ("self",)),
    Internal(
        "hypercorn.trio.task_group",
        "TaskGroup.spawn_app",
        ("self", "app", "config", "scope", "send"),
    ),
    Internal("hypercorn.config", "Config.response_headers", ("self", "protocol")),
    Internal("hypercorn.protocol.h11", "H11Protocol._check_protocol", ("self", "event")),
    Internal("hypercorn.protocol.h11", "H11Protocol._create_stream", ("self", "request")),
    Internal("h11", "Connection._process_event", ("self", "role", "event")),
    Internal("h11", "Connection._process_error", ("self", "role")),
    Internal("hypercorn.utils", "build_and_validate_headers", ("headers",)),
)
"""Every internal the seam relies on (the instance attributes it reads besides these, such as
`_closed_streams`, `highest_inbound_stream_id`, `StreamBuffer._complete`, h11's
`Connection._cstate.keep_alive` and `Connection._request_method`, are checked on live objects by
the tests)."""


def missing_internals() -> list[str]:
    """What the installed hypercorn, h2 and h11 no longer offer of `INTERNALS`."""
    return [problem for internal in INTERNALS if (problem := internal.problem()) is not None]


class RefusingH2Connection(h2.connection.H2Connection):
    """h2's server connection, refusing (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2) a stream
    over the concurrency limit, where h2 raises TooManyStreamsError and hypercorn then ends the
    connection with every stream on it (docs/http.md §3)."""

    def _receive_headers_frame(
        self, frame: HeadersFrame
    ) -> tuple[list[Frame], list[h2.events.Event]]:
        try:
            return super()._receive_headers_frame(frame)
        except h2.exceptions.TooManyStreamsError:
            return self._refuse_stream(frame), []

    def _refuse_stream(self, frame: HeadersFrame) -> list[Frame]:
        # The header block must still go through the HPACK decoder: the client's encoder
        # already counted it, and skipping it would corrupt every later header block.
        try:
            h2.connection._decode_headers(self.decoder, frame.data)
        except HPACKError as exc:
            raise h2.exceptions.ProtocolError(f"bad header block: {exc}") from exc
        # The stream now counts as seen and as closed by our reset, so frames the client had in
        # flight on it (DATA, its own RST) are answered per stream, not as connection errors.
        self.highest_inbound_stream_id = max(self.highest_inbound_stream_id, frame.stream_id)
        self._closed_streams[frame.stream_id] = StreamClosedBy.SEND_RST_STREAM
        refusal = RstStreamFrame(frame.stream_id)
        refusal.error_code = h2.errors.ErrorCodes.REFUSED_STREAM
        return [refusal]


class SeamH2Protocol(H2Protocol):
    """hypercorn's H2Protocol with what our subclass (`frontends/http/h2_protocol.py`) needs of its
    internals under public names: `screen_events` before hypercorn handles a read's events,
    `sending_stream` (the stream hypercorn's send task is inside), `flush`, `body_queued`,
    `forget_ended_stream`."""

    sending_stream: int | None = None

    async def screen_events(self, events: list[h2.events.Event]) -> list[h2.events.Event] | None:
        """The events hypercorn is to handle of one read; None: none (the connection ends)."""
        return events

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        screened = await self.screen_events(events)
        if screened is not None:
            await super()._handle_events(screened)

    async def _send_data(self, stream_id: int) -> None:
        self.sending_stream = stream_id
        try:
            await super()._send_data(stream_id)
        finally:
            self.sending_stream = None

    async def flush(self) -> None:
        """Hand h2's pending output to the connection (hypercorn's `_flush`)."""
        await self._flush()

    def body_queued(self, stream_id: int) -> bool | None:
        """Whether hypercorn's sender holds body (or the body's end) of the stream; None when
        the sender no longer knows the stream."""
        buffer = self.stream_buffers.get(stream_id)
        if buffer is None:
            return None
        return bool(buffer.buffer) or buffer._complete

    def forget_ended_stream(self, stream_id: int) -> None:
        """Drop the stream's send state once its END_STREAM was framed past the sender, as the
        sender does after it frames one."""
        del self.stream_buffers[stream_id]
        self.priority.remove_stream(stream_id)


def http_stream_of(send: Callable[..., object]) -> HTTPStream | None:
    """The hypercorn stream whose `app_send` is `send`, if it is one."""
    stream = getattr(send, "__self__", None)
    return stream if isinstance(stream, HTTPStream) else None


def memory_channel_of(
    method: Callable[..., object],
) -> trio.MemorySendChannel[Any] | trio.MemoryReceiveChannel[Any] | None:
    """The trio memory channel `method` is bound to (hypercorn's trio worker queues an app's
    messages on one), if it is."""
    channel = getattr(method, "__self__", None)
    if isinstance(channel, trio.MemorySendChannel | trio.MemoryReceiveChannel):
        return channel
    return None


def awaits_response_head(stream: HTTPStream) -> bool:
    """The stream's app has not begun its response (hypercorn's HTTPStream state)."""
    return not stream.closed and stream.state is ASGIHTTPState.REQUEST


def response_head_sent(stream: HTTPStream, headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Record on hypercorn's HTTPStream a `200` head sent past its `app_send`, as `app_send`
    records one (the rest of the response, its end and the access log read it there)."""
    message: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": 200,
        "headers": headers,
    }
    stream.response = message
    stream.state = ASGIHTTPState.RESPONSE


def h2_head_fields(
    config: Config, headers: Iterable[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """A `200` head's fields as hypercorn's H2Protocol sends them."""
    return [
        (b":status", b"200"),
        *build_and_validate_headers(headers),
        *server_fields(config, "h2"),
    ]


_SERVER_FIELDS: dict[tuple[Config, str, int], list[tuple[bytes, bytes]]] = {}


def server_fields(config: Config, protocol: str) -> list[tuple[bytes, bytes]]:
    """`config.response_headers(protocol)`, the fields hypercorn adds to every response head
    (`date`, to the second, and `server`), made once a second per config and protocol instead
    of once per response."""
    key = (config, protocol, int(time.time()))
    fields = _SERVER_FIELDS.get(key)
    if fields is None:
        if len(_SERVER_FIELDS) > 8:
            _SERVER_FIELDS.clear()  # last second's, and other configs' (tests run several)
        fields = _SERVER_FIELDS[key] = config.response_headers(protocol)
    return fields


def write_to_kernel_now(sock: trio.socket.SocketType, data: bytes) -> bytes:
    """Write what the kernel takes of `data` now, on a cleartext socket trio owns; return the
    rest (all of it on a closed or failing socket: the awaited write then reports it)."""
    fd = sock.fileno()  # -1 once closed: never a number another socket reuses
    if fd < 0:
        return data
    try:
        sent = os.write(fd, data)
    except OSError:  # EAGAIN: the kernel's buffer is full; EPIPE/ECONNRESET: peer gone
        return data
    return data[sent:]
