"""I/O. A small trio-websocket client for the gateway's multiplexed WebSocket protocol (`/v1/ws`).

    async with open_gateway_client("ws://127.0.0.1:8000/v1/ws") as client:
        async with client.stream("/v1/chat/completions", body) as stream:
            async for chunk in stream:       # parsed chunk objects, exactly the SSE payloads
                ...
        stream.finish, stream.usage          # from the `done` frame

- One reader task owns the socket's receive side and hands each frame to its stream's bounded
  channel. A stream nobody reads holds the reader (and so the whole socket) once its channel is
  full: WebSocket has no per-stream flow control, so read what you open, or leave its block,
  which cancels it.
- Leaving a stream's block before its end sends a cancel; the server aborts that request only.
- An `error` frame raises `GatewayClientError` from the iteration; an error frame with id null
  (about no live request) is logged and kept in `protocol_errors`.
- `python -m smg_trio.client ws://127.0.0.1:PORT/v1/ws "prompt" [--stop TEXT ...]` streams one
  chat completion.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final, Self

import msgspec
import trio
import trio_websocket

logger = logging.getLogger(__name__)

STREAM_BUFFER: Final = 64  # frames one stream may have waiting before the reader waits for it
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
CANCEL_SEND_GRACE_S: Final = 1.0
PROTOCOL_ERRORS_KEPT: Final = 100

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


class GatewayClientError(Exception):
    """An `error` frame for a request, or the connection ended before the request did."""

    def __init__(self, error: Mapping[str, Any], stream_id: str | int | None) -> None:
        super().__init__(str(error.get("message", error)))
        self.error = dict(error)
        self.stream_id = stream_id

    @property
    def code(self) -> str | None:
        code = self.error.get("code")
        return code if isinstance(code, str) else None


class GatewayStream:
    """One request on the socket; iterate it for chunk objects (or the one non-stream body)."""

    def __init__(self, client: GatewayClient, stream_id: int, path: str, body: Any) -> None:
        self.id = stream_id
        self.finish: list[dict[str, Any]] | None = None
        self.usage: dict[str, Any] | None = None
        self._client = client
        self._request = _encode({"type": "request", "id": stream_id, "path": path, "body": body})
        self._frames_send, self._frames_receive = trio.open_memory_channel[dict[str, Any]](
            STREAM_BUFFER
        )
        self._sent = False
        self._ended = False
        self._cancelling = False

    async def _start(self) -> None:
        if not self._sent:
            self._sent = True
            self._client._register(self.id, self._frames_send)
            await self._client._send(self._request)

    async def __aenter__(self) -> Self:
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel the request if it has not ended, and stop receiving its frames."""
        if self._sent and not self._ended:
            self._ended = True
            # A closed socket already ended every request on it: nothing left to cancel.
            with (
                trio.move_on_after(CANCEL_SEND_GRACE_S, shield=True),
                contextlib.suppress(GatewayClientError),
            ):
                await self.cancel()
        self._client._forget(self.id, self._frames_send)
        self._frames_receive.close()

    async def cancel(self) -> None:
        """Ask the server to abort this request; the iteration then ends quietly."""
        if not self._sent:
            self._ended = True  # never sent: nothing to cancel on the server
        elif not self._cancelling:
            self._cancelling = True
            await self._client.cancel(self.id)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._ended:
            raise StopAsyncIteration
        await self._start()
        try:
            frame = await self._frames_receive.receive()
        except trio.EndOfChannel:
            self._ended = True
            raise GatewayClientError(
                {"message": "the connection closed before the request ended"}, self.id
            ) from None
        kind = frame.get("type")
        if kind == "chunk":
            data: dict[str, Any] = frame["data"]
            return data
        self._ended = True
        self._client._forget(self.id, self._frames_send)
        if kind == "response":
            body: dict[str, Any] = frame["data"]
            return body
        if kind == "done":
            self.finish = frame.get("finish")
            self.usage = frame.get("usage")
            raise StopAsyncIteration
        error = frame.get("error") or {}
        if self._cancelling and error.get("code") == "cancelled":
            raise StopAsyncIteration
        raise GatewayClientError(error, self.id)


class GatewayClient:
    """Many concurrent streams over one WebSocket; see the module docstring."""

    def __init__(self, connection: trio_websocket.WebSocketConnection) -> None:
        self._connection = connection
        self._ids = itertools.count(1)
        self._streams: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.protocol_errors: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=PROTOCOL_ERRORS_KEPT
        )

    def stream(self, path: str, body: Any) -> GatewayStream:
        """A request under a fresh id; it is sent on `async with` or the first iteration."""
        return GatewayStream(self, next(self._ids), path, body)

    async def request(self, path: str, body: Any) -> dict[str, Any]:
        """A non-streaming request: the `response` frame's body."""
        async with self.stream(path, body) as stream:
            async for item in stream:
                return item
        raise GatewayClientError({"message": "the stream ended without a response"}, stream.id)

    async def cancel(self, stream_id: int) -> None:
        await self._send(_encode({"type": "cancel", "id": stream_id}))

    def _register(
        self, stream_id: int, frames_send: trio.MemorySendChannel[dict[str, Any]]
    ) -> None:
        self._streams[stream_id] = frames_send

    def _forget(self, stream_id: int, frames_send: trio.MemorySendChannel[dict[str, Any]]) -> None:
        if self._streams.get(stream_id) is frames_send:
            del self._streams[stream_id]
        frames_send.close()

    async def _send(self, message: bytes) -> None:
        try:
            await self._connection.send_message(message.decode())
        except trio_websocket.ConnectionClosed as exc:
            raise GatewayClientError({"message": f"the connection is closed: {exc}"}, None) from exc

    async def _read(self) -> None:
        try:
            while True:
                message = await self._connection.get_message()
                await self._route(_decode(message))
        except trio_websocket.ConnectionClosed:
            pass
        finally:
            for frames_send in self._streams.values():
                frames_send.close()
            self._streams.clear()

    async def _route(self, frame: dict[str, Any]) -> None:
        stream_id = frame.get("id")
        if stream_id is None:
            if frame.get("type") == "error":
                # Benign after a cancel that crossed the request's end on the wire.
                logger.debug("gateway protocol error: %s", frame.get("error"))
                self.protocol_errors.append(frame.get("error") or {})
            return
        frames_send = self._streams.get(stream_id)
        if frames_send is None:
            return  # a late frame for a stream its reader already left
        try:
            await frames_send.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._forget(stream_id, frames_send)


@asynccontextmanager
async def open_gateway_client(
    url: str, *, api_key: str | None = None
) -> AsyncIterator[GatewayClient]:
    """Connect to the gateway's `/v1/ws`; closing the socket cancels every request on it.

    `api_key` is sent as `Authorization: Bearer` when the gateway requires one.
    """
    headers = [] if api_key is None else [(b"authorization", f"Bearer {api_key}".encode())]
    async with (
        trio_websocket.open_websocket_url(
            url, extra_headers=headers, max_message_size=MAX_MESSAGE_BYTES
        ) as connection,
        trio.open_nursery() as nursery,
    ):
        client = GatewayClient(connection)
        nursery.start_soon(client._read)
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()


def chat_text(chunk: Mapping[str, Any]) -> str:
    """The content text a chat completion chunk carries."""
    return "".join(choice.get("delta", {}).get("content") or "" for choice in chunk["choices"])


async def _stream_chat(
    url: str, prompt: str, max_tokens: int | None, stops: list[str], api_key: str | None
) -> int:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stops:
        body["stop"] = stops
    async with open_gateway_client(url, api_key=api_key) as client:
        try:
            async with client.stream("/v1/chat/completions", body) as stream:
                async for chunk in stream:
                    sys.stdout.write(chat_text(chunk))
                    sys.stdout.flush()
        except GatewayClientError as exc:
            sys.stderr.write(f"\nerror: {exc}\n")
            return 1
    reasons = ", ".join(str(f.get("reason")) for f in stream.finish or ())
    sys.stdout.write(f"\n[finish: {reasons}; usage: {stream.usage}]\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smg_trio.client", description="stream one chat completion over /v1/ws"
    )
    parser.add_argument("url", help="for example ws://127.0.0.1:8000/v1/ws")
    parser.add_argument("prompt")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="a stop string (repeat for several); the text ends before it",
    )
    parser.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    args = parser.parse_args(argv)
    try:
        return trio.run(
            _stream_chat, args.url, args.prompt, args.max_tokens, args.stop, args.api_key
        )
    except (OSError, trio_websocket.HandshakeError) as exc:
        reason = exc.__cause__ or exc  # trio-websocket wraps the OSError in a HandshakeError
        sys.stderr.write(f"error: cannot connect to {args.url}: {reason}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
