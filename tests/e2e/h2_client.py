"""A raw HTTP/2 client (the `h2` package over a trio socket, prior knowledge), for what httpx
cannot do: reset one stream (RST_STREAM CANCEL) and keep the connection open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import trio


@dataclass
class H2Response:
    status: int = 0
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: bool = False


class H2Client:
    def __init__(self, stream: trio.SocketStream, authority: str) -> None:
        self._stream = stream
        self._authority = authority
        self._connection = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.responses: dict[int, H2Response] = {}

    async def start(self) -> None:
        self._connection.initiate_connection()
        await self._flush()

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        stream_id = self._connection.get_next_available_stream_id()
        request_headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", self._authority),
            (":path", path),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *headers.items(),
        ]
        self._connection.send_headers(stream_id, request_headers)
        self._connection.send_data(stream_id, body, end_stream=True)
        self.responses[stream_id] = H2Response()
        await self._flush()
        return stream_id

    async def reset(self, stream_id: int) -> None:
        self._connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        await self._flush()

    async def read_until(self, stream_id: int, *, body_bytes: int = 0) -> H2Response:
        """Read frames until the stream ended, or has at least `body_bytes` of body."""
        response = self.responses[stream_id]
        while not response.ended and not response.reset:
            if body_bytes and len(response.body) >= body_bytes:
                break
            await self._receive()
        return response

    async def ping(self) -> None:
        """A PING round trip: every frame the server sent before its ACK has been read."""
        self._connection.ping(b"12345678")
        await self._flush()
        acked = False
        while not acked:
            for event in await self._receive():
                acked |= isinstance(event, h2.events.PingAckReceived)

    async def _receive(self) -> list[h2.events.Event]:
        data = await self._stream.receive_some(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        events = self._connection.receive_data(data)
        for event in events:
            self._apply(event)
        await self._flush()
        return events

    def _apply(self, event: h2.events.Event) -> None:
        stream_id = getattr(event, "stream_id", None)
        response = self.responses.get(stream_id) if stream_id is not None else None
        match event:
            case h2.events.ResponseReceived(headers=headers) if response is not None:
                decoded = {bytes(name): bytes(value) for name, value in headers or ()}
                response.status = int(decoded[b":status"])
                response.headers = decoded
            case h2.events.DataReceived(data=data, flow_controlled_length=length):
                if response is not None:
                    response.body.extend(data or b"")
                self._connection.acknowledge_received_data(length or 0, event.stream_id)
            case h2.events.StreamEnded() if response is not None:
                response.ended = True
            case h2.events.StreamReset() if response is not None:
                response.reset = True
            case _:
                pass

    async def _flush(self) -> None:
        outgoing = self._connection.data_to_send()
        if outgoing:
            await self._stream.send_all(outgoing)


@asynccontextmanager
async def open_h2_client(host: str, port: int) -> AsyncIterator[H2Client]:
    async with await trio.open_tcp_stream(host, port) as stream:
        client = H2Client(stream, f"{host}:{port}")
        await client.start()
        yield client
