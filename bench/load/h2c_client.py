"""I/O. The load generator's HTTP/2 client: cleartext with prior knowledge (h2c), many concurrent
streams on one trio connection, over the `h2` state machine.

    async with open_h2c_connection("127.0.0.1", port) as connection:
        async with connection.post("/v1/completions", body) as response:
            status = await response.status()
            async for data in response:      # DATA payloads as they arrive
                ...

- One reader task feeds every received byte to `h2`, hands each stream's events to its
  unbounded channel and acknowledges DATA at once: the bench reads as fast as it can, so flow
  control never throttles the server (windows are raised to 16 MiB to keep WINDOW_UPDATEs few).
- Writes go through one lock; `h2` state changes are synchronous, so what is queued is flushed
  in order.
- `post` waits until the server's SETTINGS allow another concurrent stream (hypercorn allows
  100), so callers may ask for more streams than the server admits at once, and sends the body
  within the server's flow-control windows (64 KiB for the whole connection until the server
  reads and acknowledges: a hundred 1 KB bodies at once exceed it).
- Leaving a response before its end resets the stream (RST_STREAM CANCEL).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, Self

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

WINDOW_BYTES: Final = 16 * 1024 * 1024
READ_BYTES: Final = 256 * 1024


class H2cError(Exception):
    """The server reset the stream, or the connection ended before the response did."""


class H2cResponse:
    """One stream's response: `status()` waits for the headers; iterate for the body's DATA."""

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        self.ended = False
        self._events_send, self._events_receive = trio.open_memory_channel[
            h2.events.Event | H2cError
        ](math.inf)
        self._status: int | None = None

    def deliver(self, event: h2.events.Event | H2cError) -> None:
        self._events_send.send_nowait(event)

    async def status(self) -> int:
        while self._status is None:
            event = await self._next_event()
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers or ())
                self._status = int(headers[b":status"])
        return self._status

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        await self.status()
        while True:
            event = await self._next_event()
            if isinstance(event, h2.events.DataReceived):
                return event.data or b""
            if isinstance(event, h2.events.StreamEnded):
                self.ended = True
                raise StopAsyncIteration

    async def _next_event(self) -> h2.events.Event:
        if self.ended:
            raise H2cError("the response has ended")
        event = await self._events_receive.receive()
        if isinstance(event, H2cError):
            self.ended = True
            raise event
        if isinstance(event, h2.events.StreamReset):
            self.ended = True
            raise H2cError(f"the server reset the stream (error code {event.error_code})")
        return event


class H2cConnection:
    """One h2c connection; see the module docstring."""

    def __init__(self, stream: trio.SocketStream, authority: str) -> None:
        self._stream = stream
        self._authority = authority.encode()
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self._write_lock = trio.StrictFIFOLock()
        self._responses: dict[int, H2cResponse] = {}
        self._settings_received = trio.Event()
        self._slot_freed = trio.Event()
        self._window_opened = trio.Event()
        self._failure: H2cError | None = None

    @property
    def open_streams(self) -> int:
        return len(self._responses)

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def start(self, nursery: trio.Nursery) -> None:
        self._h2.initiate_connection()
        self._h2.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW_BYTES,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        self._h2.increment_flow_control_window(WINDOW_BYTES - 65535)
        await self._flush()
        nursery.start_soon(self._read)
        await self._settings_received.wait()

    @asynccontextmanager
    async def post(
        self, path: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()
    ) -> AsyncIterator[H2cResponse]:
        while self._failure is None and (
            self._h2.open_outbound_streams >= self._h2.remote_settings.max_concurrent_streams
        ):
            await self._slot_freed.wait()
        if self._failure is not None:
            raise self._failure
        stream_id = self._h2.get_next_available_stream_id()
        request_headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", self._authority),
            (b":path", path.encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *((name.encode(), value.encode()) for name, value in headers),
        ]
        response = H2cResponse(stream_id)
        self._responses[stream_id] = response
        try:
            self._h2.send_headers(stream_id, request_headers)
            await self._send_body(stream_id, body)
            yield response
        finally:
            del self._responses[stream_id]
            if not response.ended and self._failure is None:
                with trio.CancelScope(shield=True):
                    # The server may have ended the stream already, its END_STREAM read by the
                    # connection but not yet by this response's consumer (one cancelled at the
                    # time cap, say): h2 then refuses the reset (StreamClosedError), which
                    # once counted as an error of the gateway's; there is nothing to cancel.
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                    await self._flush()
            self._slot_freed.set()
            self._slot_freed = trio.Event()

    async def _send_body(self, stream_id: int, body: bytes) -> None:
        """DATA within the server's flow-control windows (waiting for WINDOW_UPDATEs)."""
        sent = 0
        while True:
            window = min(
                self._h2.local_flow_control_window(stream_id),
                self._h2.max_outbound_frame_size,
                len(body) - sent,
            )
            if window > 0 or sent == len(body):
                end = sent + window == len(body)
                self._h2.send_data(stream_id, body[sent : sent + window], end_stream=end)
                sent += window
                await self._flush()
                if end:
                    return
            else:
                self.raise_if_failed()
                await self._window_opened.wait()

    async def _read(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(READ_BYTES)
                if not data:
                    raise H2cError("the server closed the connection")
                for event in self._h2.receive_data(data):
                    self._dispatch(event)
                await self._flush()
        except (H2cError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(exc if isinstance(exc, H2cError) else H2cError(f"connection lost: {exc}"))

    def _dispatch(self, event: h2.events.Event) -> None:
        match event:
            case h2.events.RemoteSettingsChanged():
                self._settings_received.set()
                self._slot_freed.set()  # the stream limit may have risen
                self._slot_freed = trio.Event()
                self._window_opened.set()  # and the initial window
                self._window_opened = trio.Event()
            case h2.events.WindowUpdated():
                self._window_opened.set()
                self._window_opened = trio.Event()
            case h2.events.DataReceived(stream_id=stream_id, flow_controlled_length=length):
                self._h2.acknowledge_received_data(length or 0, stream_id)
                self._deliver(stream_id, event)
            case (
                h2.events.ResponseReceived(stream_id=stream_id)
                | h2.events.StreamEnded(stream_id=stream_id)
                | h2.events.StreamReset(stream_id=stream_id)
            ):
                self._deliver(stream_id, event)
            case h2.events.ConnectionTerminated(error_code=code):
                self._fail(H2cError(f"the server ended the connection (GOAWAY {code})"))
            case _:
                pass

    def _deliver(self, stream_id: int | None, event: h2.events.Event) -> None:
        response = self._responses.get(stream_id) if stream_id is not None else None
        if response is not None:
            response.deliver(event)

    def _fail(self, failure: H2cError) -> None:
        if self._failure is None:
            self._failure = failure
        for response in self._responses.values():
            response.deliver(failure)
        self._settings_received.set()
        self._slot_freed.set()
        self._window_opened.set()

    async def _flush(self) -> None:
        async with self._write_lock:
            outgoing = self._h2.data_to_send()
            if outgoing and self._failure is None:
                try:
                    await self._stream.send_all(outgoing)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self._fail(H2cError(f"connection lost: {exc}"))


@asynccontextmanager
async def open_h2c_connection(host: str, port: int) -> AsyncIterator[H2cConnection]:
    """Connect, exchange SETTINGS, and run the reader until the block is left."""
    async with await trio.open_tcp_stream(host, port) as stream, trio.open_nursery() as nursery:
        connection = H2cConnection(stream, f"{host}:{port}")
        await connection.start(nursery)
        connection.raise_if_failed()
        try:
            yield connection
        finally:
            nursery.cancel_scope.cancel()
