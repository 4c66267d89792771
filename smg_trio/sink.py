"""I/O protocol. Where one request's output goes: `ClientSink` (an SSE response, a WebSocket
stream, a Responses run's event log) and `ForwardingSink`, the base of the sinks that change
one thing on the way and forward the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import GatewayError
from smg_trio.handoff import Taken


class ClientSink(Protocol):
    """Where one request's output goes (an SSE response, a WebSocket stream)."""

    def gone_before_engine(self) -> bool:
        """Asked once, right before the engine ADD: whether the client already left (then
        nothing is sent to the engine for it)."""
        ...

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        """Streaming payloads, in order (as one write where the transport allows); none: only
        finish what `send_chunks_now` began. Raises ClientGone when the client left."""
        ...

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        """`send_chunks` without waiting (the hand-off's `take_now`, smg_trio/handoff.py):
        ALL, sent; PART, the payloads are framed and the sink holds what did not go out, which
        `send_chunks(())` finishes before anything else; REFUSED, nothing framed or sent (the
        stream is not open, or a gone client, whose next `send_chunks` raises). Never raises."""
        ...

    async def send_body(self, body: bytes) -> None:
        """The whole non-streaming response."""
        ...

    async def end_stream(self, end: StreamEnd) -> None:
        """The closing payloads, then the transport's end marker built from `end`."""
        ...

    async def fail(self, error: GatewayError) -> None:
        """End the response with `error` in whatever form its state allows."""
        ...


class ForwardingSink:
    """A `ClientSink` that hands everything to `sink`: the base of sinks that do something on
    the way (keep the finished response, cache it) and override just that."""

    def __init__(self, sink: ClientSink) -> None:
        self._sink = sink

    def gone_before_engine(self) -> bool:
        return self._sink.gone_before_engine()

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        await self._sink.send_chunks(payloads)

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        return self._sink.send_chunks_now(payloads)

    async def send_body(self, body: bytes) -> None:
        await self._sink.send_body(body)

    async def end_stream(self, end: StreamEnd) -> None:
        await self._sink.end_stream(end)

    async def fail(self, error: GatewayError) -> None:
        await self._sink.fail(error)
