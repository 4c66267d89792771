"""I/O. The HTTP response of one generation request: a server-sent-event stream or a JSON body.

`SseResponse` is the request layer's `ClientSink` over ASGI `send`. Its state decides what an
error becomes:

    IDLE ──send_chunks─▶ STREAMING ──close_stream──▶ CLOSED
      │                                                ▲
      └──────send_body (200 JSON) / fail (error JSON)──┘

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
from typing import Final

import trio

from smg_trio.core.render import SSE_DONE, sse, sse_error
from smg_trio.errors import ClientGone, GatewayError
from smg_trio.frontends.responses import Receive, Send, send_error, send_json
from smg_trio.request import SinkState

logger = logging.getLogger(__name__)

SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # reverse proxies must not buffer a token stream
]


class SseResponse:
    """A `ClientSink` writing one HTTP response through ASGI `send` (see the module doc)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._state = SinkState.IDLE
        self._client_gone = False

    @property
    def state(self) -> SinkState:
        return self._state

    @property
    def client_gone(self) -> bool:
        return self._client_gone

    def mark_client_gone(self) -> None:
        self._client_gone = True

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        if self._client_gone:
            raise ClientGone
        if self._state is SinkState.CLOSED:
            raise RuntimeError("send_chunks after the response was closed")
        if self._state is SinkState.IDLE:
            await self._start_stream()
        body = b"".join(map(sse, payloads))
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def send_body(self, body: bytes) -> None:
        if self._client_gone:
            raise ClientGone
        if self._state is not SinkState.IDLE:
            raise RuntimeError(f"send_body in state {self._state.value}")
        self._state = SinkState.CLOSED
        await send_json(self._send, 200, body)

    async def close_stream(self, error: GatewayError | None) -> None:
        if self._client_gone or self._state is SinkState.CLOSED:
            return
        if self._state is SinkState.IDLE:
            if error is not None:
                await self.fail(error)
                return
            await self._start_stream()
        tail = SSE_DONE if error is None else sse_error(error) + SSE_DONE
        self._state = SinkState.CLOSED
        await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    async def fail(self, error: GatewayError) -> None:
        """End the response with `error` in whatever form the current state allows."""
        if self._client_gone:
            return
        match self._state:
            case SinkState.IDLE:
                self._state = SinkState.CLOSED
                await send_error(self._send, error)
            case SinkState.STREAMING:
                await self.close_stream(error)
            case SinkState.CLOSED:
                pass

    async def _start_stream(self) -> None:
        # The state moves first: once the start may have gone out, a second one must not.
        self._state = SinkState.STREAMING
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
