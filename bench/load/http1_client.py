"""I/O. The load generator's HTTP/1.1 client (h11 over trio), for servers without h2c (vLLM's
own uvicorn server) and for like-for-like rows: one request at a time per keep-alive connection.

    connection = await Http1Connection.connect("127.0.0.1", port)
    status = await connection.post("/v1/completions", body, on_data=callback)
    ...
    await connection.aclose()

A response not read to its end (cancelled, failed) leaves the connection unusable: close it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import h11
import trio

READ_BYTES: Final = 256 * 1024


class Http1Error(Exception):
    """The server broke the HTTP/1.1 exchange or closed the connection mid-response."""


class Http1Connection:
    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self._stream = stream
        self._host = host.encode()
        self._h11 = h11.Connection(h11.CLIENT)
        self.usable = True

    @classmethod
    async def connect(cls, host: str, port: int) -> Http1Connection:
        return cls(await trio.open_tcp_stream(host, port), f"{host}:{port}")

    async def aclose(self) -> None:
        self.usable = False
        await self._stream.aclose()

    async def post(
        self,
        path: str,
        body: bytes,
        *,
        on_data: Callable[[int, bytes], None],
        headers: tuple[tuple[str, str], ...] = (),
    ) -> int:
        """Send one POST; hand (status, body piece) to `on_data` as pieces arrive; return the
        status."""
        return await self._exchange(b"POST", path, body, on_data, headers)

    async def get(self, path: str) -> tuple[int, bytes]:
        received = bytearray()
        status = await self._exchange(b"GET", path, b"", lambda _, data: received.extend(data), ())
        return status, bytes(received)

    async def _exchange(
        self,
        method: bytes,
        path: str,
        body: bytes,
        on_data: Callable[[int, bytes], None],
        headers: tuple[tuple[str, str], ...],
    ) -> int:
        if not self.usable:
            raise Http1Error("the connection cannot be reused")
        self.usable = False  # until the response was read to its end
        request_headers = [
            (b"host", self._host),
            (b"content-length", str(len(body)).encode()),
            *((name.encode(), value.encode()) for name, value in headers),
        ]
        if body:
            request_headers.append((b"content-type", b"application/json"))
        outgoing = self._h11.send(h11.Request(method=method, target=path, headers=request_headers))
        outgoing = (outgoing or b"") + (self._h11.send(h11.Data(data=body)) or b"")
        outgoing += self._h11.send(h11.EndOfMessage()) or b""
        await self._stream.send_all(outgoing)
        status = 0
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                data = await self._stream.receive_some(READ_BYTES)
                self._h11.receive_data(data)  # b"" marks the close; h11 then raises or ends
                if not data and self._h11.their_state is not h11.DONE:
                    raise Http1Error("the server closed the connection mid-response")
                continue
            match event:
                case h11.Response(status_code=code):
                    status = code
                case h11.Data(data=data):
                    on_data(status, bytes(data))
                case h11.EndOfMessage():
                    break
                case h11.ConnectionClosed():
                    raise Http1Error("the server closed the connection")
                case _:
                    pass
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self.usable = True
        return status
