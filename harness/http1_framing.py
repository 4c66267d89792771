"""Pure. Whether raw bytes read from an HTTP/1.1 connection hold one whole response: its head,
and a body as long as its Content-Length, or chunked up to the last chunk."""

from __future__ import annotations


def response_complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n")
