"""I/O. The answer to a connection past the connection cap (docs/http.md): a 503 with OpenAI
error JSON over HTTP/1.1, or GOAWAY(REFUSED_STREAM) over HTTP/2, whichever it speaks."""

from __future__ import annotations

from typing import Final

import h2.config
import h2.connection
import h2.errors
import trio
from hypercorn.trio.tcp_server import MAX_RECV

Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]

H2_PREFACE: Final = b"PRI * HTTP/2.0"
REFUSAL_BODY: Final = (
    b'{"error":{"message":"the server is at its connection limit; retry shortly",'
    b'"type":"server_error","param":null,"code":"too_many_connections"}}'
)
REFUSAL_503: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"x-error-code: too_many_connections\r\nretry-after: 1\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n" % len(REFUSAL_BODY)
) + REFUSAL_BODY


async def refuse(stream: Stream) -> None:
    """Answer one connection we cannot take: 503 (HTTP/1.1), or GOAWAY(REFUSED_STREAM) with
    last stream 0, telling an HTTP/2 client that nothing was processed and it may retry."""
    head = b""
    try:
        if isinstance(stream, trio.SSLStream):
            await stream.do_handshake()
            if stream.selected_alpn_protocol() == "h2":
                await stream.send_all(_h2_refusal())
                return
        while b"\r\n\r\n" not in head and len(head) < MAX_RECV:
            data = await stream.receive_some(MAX_RECV)
            if not data:
                return
            head += data
            if head.startswith(H2_PREFACE):
                await stream.send_all(_h2_refusal())
                return
        await stream.send_all(REFUSAL_503)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


def _h2_refusal() -> bytes:
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    connection.initiate_connection()
    connection.close_connection(h2.errors.ErrorCodes.REFUSED_STREAM, last_stream_id=0)
    return connection.data_to_send()
