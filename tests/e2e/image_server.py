"""A real HTTP image server on loopback for the fetch tests: trio + h11, one request per
connection, counting the connections it accepted and the body bytes it managed to send.

Routes: `/img/WxH.png` (a PNG of that size), `/redirect?to=URL` (302), `/big` (declares and
streams 50 MB), `/endless` (chunked, streams until the reader hangs up, bounded), `/hang` (no
answer until the client leaves; `hung_up` is set then), `/missing` (404), `/missing-after-hang`
(404 once a /hang request arrived)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, urlsplit

import h11
import trio
from PIL import Image

BIG_BYTES: Final = 50 * 1024 * 1024
CHUNK: Final = 256 * 1024
ENDLESS_CAP: Final = 200 * 1024 * 1024  # loops are bounded: the endless body stops here


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (width % 256, height % 256, 7)).save(buffer, "PNG")
    return buffer.getvalue()


@dataclass
class ImageServer:
    port: int
    connections: int = 0
    sent_body_bytes: dict[str, int] = field(default_factory=dict)
    hang_open: trio.Event = field(default_factory=trio.Event)  # a /hang request arrived
    hangs_wanted: int = 1  # `all_hanging` is set when this many /hang requests are open
    hanging: int = 0
    all_hanging: trio.Event = field(default_factory=trio.Event)
    hung_up: trio.Event = field(default_factory=trio.Event)  # a /hang client left

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


async def _serve_one(server: ImageServer, stream: trio.SocketStream) -> None:
    server.connections += 1
    connection = h11.Connection(h11.SERVER)
    async with stream:
        request = None
        while request is None:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                connection.receive_data(bytes(data))
            elif isinstance(event, h11.Request):
                request = event
        target = urlsplit(request.target.decode())
        path = target.path
        # The gateway may hang up mid-body (what the size tests want).
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await _answer(server, stream, connection, path, parse_qs(target.query))


async def _answer(
    server: ImageServer,
    stream: trio.SocketStream,
    connection: h11.Connection,
    path: str,
    query: dict[str, list[str]],
) -> None:
    async def send(event: h11.Event) -> None:
        data = connection.send(event)
        if data:
            await stream.send_all(data)

    if path.startswith("/img/") and path.endswith(".png"):
        width, height = (int(n) for n in path[5:-4].split("x"))
        body = png(width, height)
        headers = [("Content-Type", "image/png"), ("Content-Length", str(len(body)))]
        await send(h11.Response(status_code=200, headers=headers))
        await send(h11.Data(data=body))
        await send(h11.EndOfMessage())
    elif path == "/redirect":
        await send(
            h11.Response(
                status_code=302, headers=[("Location", query["to"][0]), ("Content-Length", "0")]
            )
        )
        await send(h11.EndOfMessage())
    elif path == "/hang":
        server.hang_open.set()
        server.hanging += 1
        if server.hanging >= server.hangs_wanted:
            server.all_hanging.set()
        await stream.receive_some(1)  # b"": the client closed its side
        server.hung_up.set()
    elif path == "/missing-after-hang":
        await server.hang_open.wait()
        await send(h11.Response(status_code=404, headers=[("Content-Length", "0")]))
        await send(h11.EndOfMessage())
    elif path in ("/big", "/endless"):
        total = BIG_BYTES if path == "/big" else ENDLESS_CAP
        headers = [("Content-Type", "image/png")]
        if path == "/big":
            headers.append(("Content-Length", str(total)))
        else:
            headers.append(("Transfer-Encoding", "chunked"))
        await send(h11.Response(status_code=200, headers=headers))
        sent = 0
        while sent < total:
            await send(h11.Data(data=b"\x89" * CHUNK))
            sent += CHUNK
            server.sent_body_bytes[path] = sent
        await send(h11.EndOfMessage())
    else:
        await send(h11.Response(status_code=404, headers=[("Content-Length", "0")]))
        await send(h11.EndOfMessage())


@asynccontextmanager
async def image_server() -> AsyncIterator[ImageServer]:
    """The server on a loopback port the kernel picks, until the block ends."""
    listener_socket = trio.socket.socket()
    await listener_socket.bind(("127.0.0.1", 0))
    listener_socket.listen(16)
    server = ImageServer(port=listener_socket.getsockname()[1])

    async def handler(stream: trio.SocketStream) -> None:
        await _serve_one(server, stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handler, [trio.SocketListener(listener_socket)])
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
