"""I/O. The HTTP response of one generation request: a server-sent-event stream or a JSON body.

`SseResponse` is the request layer's `ClientSink` over ASGI `send`. Its state follows the table
every sink shares (`frontends.sink_state`), which also decides what an error becomes:

- IDLE: nothing went out, so an error is an HTTP status with OpenAI error JSON.
- STREAMING: `200 text/event-stream` went out; an error is a final `data: {"error": ...}`
  event, always followed by `data: [DONE]` and the end of the body.
- CLOSED: nothing more is sent.

hypercorn never raises when sending to a client that left (it advertises ASGI 2.1), so the
only news of a vanished client is `http.disconnect` from `receive()`. `respond` runs the
request beside a watcher of `receive()`: on disconnect it marks the response gone (every later
`send_chunks` raises `ClientGone`) and cancels the request's scope at once, which leaves the
backend stream and aborts the engine request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, assert_never

import trio

from smg_trio.core.render import SSE_DONE, sse, sse_error
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientGone, GatewayError
from smg_trio.frontends.responses import Receive, Send, send_error, send_json
from smg_trio.frontends.sink_state import ErrorForm, SinkLifecycle, SinkState, Step

logger = logging.getLogger(__name__)

KEEPALIVE_COMMENT: Final = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, proxies with idle timeouts see bytes (resilience.md §5)."""
SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # reverse proxies must not buffer a token stream
]


class SseResponse:
    """A `ClientSink` writing one HTTP response through ASGI `send` (see the module doc)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lifecycle = SinkLifecycle()
        self._client_gone = False
        self.quiet = False  # the keep-alive scan's flag (lifecycle.py); cleared per chunk

    @property
    def state(self) -> SinkState:
        return self._lifecycle.state

    @property
    def client_gone(self) -> bool:
        return self._client_gone

    def mark_client_gone(self) -> None:
        self._client_gone = True

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        if self._client_gone:
            raise ClientGone
        self.quiet = False
        if self._lifecycle.chunks() is Step.OPEN_AND_SEND:
            await self._start_stream()
        body = b"".join(map(sse, payloads))
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def send_body(self, body: bytes) -> None:
        if self._client_gone:
            raise ClientGone
        self._lifecycle.body()
        await send_json(self._send, 200, body)

    async def end_stream(self, end: StreamEnd) -> None:
        if self._client_gone:
            return
        step = self._lifecycle.end()
        match step:
            case Step.OPEN_AND_SEND:
                await self._start_stream()
            case Step.SEND:
                pass
            case Step.NOTHING:
                return
            case _:
                assert_never(step)
        tail = b"".join(map(sse, end.payloads)) + SSE_DONE
        await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    async def fail(self, error: GatewayError) -> None:
        """End the response with `error` in whatever form the current state allows."""
        if self._client_gone:
            return
        form = self._lifecycle.fail()
        match form:
            case ErrorForm.WHOLE_RESPONSE:
                await send_error(self._send, error)
            case ErrorForm.FINAL_EVENT:
                tail = sse_error(error) + SSE_DONE
                await self._send({"type": "http.response.body", "body": tail, "more_body": False})
            case ErrorForm.DROPPED:
                pass
            case _:
                assert_never(form)

    async def keep_alive(self) -> None:
        """A comment line on a silent stream; opens the stream first during a long prefill
        (only streaming requests get keep-alives, so the response would be a stream anyway)."""
        if self._client_gone or self._lifecycle.state is SinkState.CLOSED:
            return
        if self._lifecycle.chunks() is Step.OPEN_AND_SEND:
            await self._start_stream()
        await self._send(
            {"type": "http.response.body", "body": KEEPALIVE_COMMENT, "more_body": True}
        )

    async def _start_stream(self) -> None:
        await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})


async def respond(
    handle: Callable[[SseResponse], Awaitable[None]], receive: Receive, send: Send
) -> SseResponse:
    """Run `handle` with a fresh response, cancelled the moment the client disconnects.

    A GatewayError from `handle` ends the response (status or final event); any other exception
    is a bug: logged with its traceback, and the client gets a 500 or a final error event.
    """
    response = SseResponse(send)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_disconnect, receive, response, nursery.cancel_scope)
        try:
            await handle(response)
        except GatewayError as error:
            await response.fail(error)
        except Exception:
            logger.exception("unexpected error while serving a generation request")
            await response.fail(GatewayError("internal error while serving the request"))
        nursery.cancel_scope.cancel()
    return response


async def _watch_disconnect(
    receive: Receive, response: SseResponse, scope: trio.CancelScope
) -> None:
    # The request body was read already; anything but a disconnect (hypercorn may repeat an
    # empty end-of-body message) is ignored, and the loop goes on until the client leaves.
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            response.mark_client_gone()
            scope.cancel()
            return
