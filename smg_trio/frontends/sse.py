"""I/O. The HTTP response of one generation request: a server-sent-event stream or a JSON body.

`SseResponse` is the request layer's `ClientSink` over ASGI `send`. Its state follows the table
every sink shares (`frontends.sink_state`), which also decides what an error becomes:

- IDLE: nothing went out, so an error is an HTTP status with OpenAI error JSON.
- STREAMING: `200 text/event-stream` went out; an error is a final event (OpenAI's:
  `data: {"error": ...}` then `data: [DONE]`), then the end of the body.
The request's API dialect (`core/api_dialect.py`) frames the events and spells the errors.
- CLOSED: nothing more is sent.

hypercorn never raises when sending to a client that left (it advertises ASGI 2.1), so the
only news of a vanished client is `http.disconnect`, which our task group turns into the
request's `ClientDisconnect` (`frontends.http.client_disconnect`): `respond` registers a callback
that marks the response gone (every later `send_chunks` raises `ClientGone`) and cancels the
request's scope from the next scheduling round, which leaves the backend stream and aborts the
engine request. No task watches `receive`.

Two rules keep that news from being lost or coming too late (docs/architecture.md §3.1):

- The response head (`http.response.start`) is sent shielded, with its own bound. Over h2,
  hypercorn flushes the head from the sending task; when that flush finds the connection gone,
  the same task tells every other stream of the connection `http.disconnect`, one stream at a
  time. Cancelling it there (its own disconnect arrived first) skipped the streams after it:
  their requests never heard of the client leaving, their writers parked forever on a
  connection that no longer drains, and their engine requests ran to max_tokens.
- A disconnect that came before the request registered is kept by the `ClientDisconnect` and
  marks the response gone at registration, and `respond` first waits until the connection's
  reader handled the rest of the packet the request came in (`ClientDisconnect.settled`), so a
  stream reset in that packet (rapid reset) is known to `gone_before_engine`, asked right
  before the engine ADD: it costs no ADD.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Final, TypeAlias, assert_never

import trio

from smg_trio.core.api_dialect import OPENAI, ApiDialect
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientGone, GatewayError
from smg_trio.frontends.answers import send_error, send_json
from smg_trio.frontends.http.asgi_types import (
    DirectChunks,
    Message,
    Send,
)
from smg_trio.frontends.http.client_disconnect import ClientDisconnect
from smg_trio.frontends.sink_state import ErrorForm, SinkLifecycle, SinkState, Step
from smg_trio.handoff import Taken

logger = logging.getLogger(__name__)

KEEPALIVE_COMMENT: Final = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, proxies with idle timeouts see bytes (resilience.md §5)."""
SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # reverse proxies must not buffer a token stream
]
TERMINAL_GRACE_S: Final = 1.0
"""How long a stream's end may take once begun, shielded (`end_stream`)."""
RESPONSE_START_GRACE_S: Final = 300.0
"""How long sending the response head may take, shielded (see the module doc). Long on purpose:
the head waits for the connection's send lock, behind every other stream's writes, and a head
cancelled there is lost from the h2 connection (hypercorn has already taken its bytes), so the
stream's DATA would arrive without HEADERS, a connection error for the client. Under a storm of
thousands of streams on a loaded loop that wait took over 30 s; only a connection whose peer
stopped reading waits longer, and hypercorn's own (shielded) write on it is stuck as long."""


StartNow: TypeAlias = Callable[[Sequence[tuple[bytes, bytes]], bytes], tuple[Taken, bytes]]
"""`DirectChunks.start_now` as the app hands it to a response: with the fields every response of
the request carries (its `x-request-id`) added, and the response marked as begun."""


class SseResponse:
    """A `ClientSink` writing one HTTP response through ASGI `send` (see the module doc)."""

    def __init__(
        self,
        send: Send,
        dialect: ApiDialect = OPENAI,
        direct: DirectChunks | None = None,
        start_now: StartNow | None = None,
    ) -> None:
        self._send = send
        self._direct = direct  # the connection's or h2 stream's chunk writer, for stream chunks
        self._start_now = start_now  # the head and the first chunk without a wait, if allowed
        self._unsent = b""  # what the kernel did not take of a chunk `send_chunks_now` wrote
        # Events `send_chunks_now` framed but could not send: they go first, never framed again
        # (a dialect may number its events as it frames them, core/responses_dialect.py).
        self._framed = b""
        self._dialect = dialect  # how this API frames events and errors (core/api_dialect.py)
        self._lifecycle = SinkLifecycle()
        self._client_gone = False
        self.quiet = (
            False  # the keep-alive scan's flag (request/live_requests.py); cleared per chunk
        )

    @property
    def state(self) -> SinkState:
        return self._lifecycle.state

    @property
    def client_gone(self) -> bool:
        return self._client_gone

    def gone_before_engine(self) -> bool:
        """Whether the client already left (see the module doc)."""
        return self._client_gone

    def mark_client_gone(self) -> None:
        self._client_gone = True

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        direct = self._direct
        if direct is None or self._client_gone or self._unsent or self._framed:
            return Taken.REFUSED
        if not payloads:
            return Taken.ALL  # (as `send_chunks(())`: nothing to send, nothing opened)
        state = self._lifecycle.state
        if state is SinkState.IDLE:
            return self._open_now(payloads)
        if state is not SinkState.STREAMING:
            return Taken.REFUSED
        body = self._dialect.frame(payloads)
        self.quiet = False
        taken, rest = direct.write_chunk_now(body)
        if taken is Taken.ALL:  # the common case
            return taken
        return self._sent_now(body, taken, rest)

    def _open_now(self, payloads: Sequence[bytes]) -> Taken:
        """The stream's head and its first chunk at once, when the connection takes both now
        (cleartext HTTP/1.1 with no write under way; an h2 stream with an open window): the
        first token then waits for no task hop and no awaited head (docs/performance.md §3).
        The state moves once the head went: the send has no checkpoint, nothing can cut it."""
        start_now = self._start_now
        if start_now is None:
            return Taken.REFUSED
        body = self._dialect.frame(payloads)
        self.quiet = False
        taken, rest = start_now(SSE_HEADERS, body)
        if taken is not Taken.REFUSED:
            self._lifecycle.chunks()  # IDLE -> STREAMING
        return self._sent_now(body, taken, rest)

    def _sent_now(self, body: bytes, taken: Taken, rest: bytes) -> Taken:
        """What became of `body`, framed and handed to the connection: refused (then
        `send_chunks(())` sends it as framed, opening the stream if need be), or partly
        taken (`rest`, what the kernel did not take, goes before anything else). Either way
        the sink holds the rest: PART to the request's hand-off."""
        if taken is Taken.REFUSED:
            self._framed = body
            return Taken.PART
        if taken is Taken.PART:
            self._unsent = rest
        return taken

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        if self._client_gone:
            raise ClientGone
        await self._finish_unsent()
        framed = self._framed
        if not payloads and not framed:
            return
        self.quiet = False
        if self._lifecycle.chunks() is Step.OPEN_AND_SEND:
            await self._start_stream()
        self._framed = b""
        body = framed + self._dialect.frame(payloads) if payloads else framed
        if self._direct is not None:
            # Straight to the socket when the connection allows (HTTP/1.1, cleartext): the bytes
            # are out before this returns, in order; the writer's mailbox loop yields per batch.
            taken, rest = self._direct.write_chunk_now(body)
            if taken is Taken.PART:
                await self._direct.write_rest(rest)
            if taken is not Taken.REFUSED:
                return
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def send_body(self, body: bytes) -> None:
        if self._client_gone:
            raise ClientGone
        self._lifecycle.body()
        await send_json(self._send_head_shielded, 200, body)

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
        framed, self._framed = self._framed, b""
        tail = framed + self._dialect.end(end.payloads)
        # Once begun, the stream's end goes out whole: a cancel arriving meanwhile (the
        # drain's, the deadline's) must not cut its last events and `[DONE]` off
        # (docs/resilience.md §4). Bounded for a client that stopped reading.
        with trio.move_on_after(TERMINAL_GRACE_S, shield=True):
            await self._finish_unsent()
            await self._end_body(tail)

    async def fail(self, error: GatewayError) -> None:
        """End the response with `error` in whatever form the current state allows."""
        if self._client_gone:
            return
        form = self._lifecycle.fail()
        match form:
            case ErrorForm.WHOLE_RESPONSE:
                await send_error(self._send_head_shielded, error, dialect=self._dialect)
            case ErrorForm.FINAL_EVENT:
                framed, self._framed = self._framed, b""
                tail = framed + self._dialect.stream_error(error)
                await self._finish_unsent()
                await self._end_body(tail)
            case ErrorForm.DROPPED:
                pass
            case _:
                assert_never(form)

    async def keep_alive(self) -> None:
        """A comment line on a silent stream; opens the stream first during a long prefill
        (only streaming requests get keep-alives, so the response would be a stream anyway)."""
        if (
            self._client_gone
            or self._unsent
            or self._framed
            or self._lifecycle.state is SinkState.CLOSED
        ):
            return  # (with a chunk's rest pending, a comment would land inside the chunk)
        if self._lifecycle.chunks() is Step.OPEN_AND_SEND:
            await self._start_stream()
        await self._send(
            {"type": "http.response.body", "body": KEEPALIVE_COMMENT, "more_body": True}
        )

    async def _finish_unsent(self) -> None:
        """Write the rest of a chunk `send_chunks_now` began, before anything else goes."""
        if self._unsent and self._direct is not None:
            rest, self._unsent = self._unsent, b""
            await self._direct.write_rest(rest)

    async def _end_body(self, tail: bytes) -> None:
        """The body's last bytes and its end: in one write past ASGI where the connection can
        (`DirectChunks.end_now`, docs/performance.md §2.1), else through `send`."""
        direct = self._direct
        if direct is not None and await direct.end_now(tail):
            return
        await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _start_stream(self) -> None:
        await self._send_head_shielded(
            {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
        )

    async def _send_head_shielded(self, message: Message) -> None:
        """`send`, uncancellable for `http.response.start` (see the module doc)."""
        if message["type"] != "http.response.start":
            await self._send(message)
            return
        with trio.move_on_after(RESPONSE_START_GRACE_S, shield=True) as scope:
            await self._send(message)
        if scope.cancelled_caught:  # the connection is wedged: treat the client as gone
            self._client_gone = True
            raise ClientGone


async def respond(
    handle: Callable[[SseResponse], Awaitable[None]],
    disconnect: ClientDisconnect,
    send: Send,
    dialect: ApiDialect = OPENAI,
    direct: DirectChunks | None = None,
    start_now: StartNow | None = None,
) -> SseResponse:
    """Run `handle` with a fresh response, cancelled when `disconnect` fires (module doc).

    A GatewayError from `handle` ends the response (status or final event); any other exception
    is a bug: logged with its traceback, and the client gets a 500 or a final error event.
    """
    response = SseResponse(send, dialect, direct, start_now)
    with trio.CancelScope() as scope:
        disconnect.on_fire(partial(_client_left, response, scope))
        try:
            await disconnect.settled()  # a reset in the request's own packet has fired now
            await handle(response)
        except ClientGone:
            pass  # a send found the client gone: nothing more to say to it
        except GatewayError as error:
            await response.fail(error)
        except Exception:
            logger.exception("unexpected error while serving a generation request")
            await response.fail(GatewayError("internal error while serving the request"))
        finally:
            disconnect.on_fire(None)
    return response


def _client_left(response: SseResponse, scope: trio.CancelScope) -> None:
    if response.state is SinkState.CLOSED:
        return  # after the whole answer (hypercorn tells every ended stream): nothing to stop
    # Possibly inside hypercorn telling every stream of a closed connection: the cancel waits
    # for the next scheduling round (module doc).
    response.mark_client_gone()
    trio.lowlevel.current_trio_token().run_sync_soon(scope.cancel)
