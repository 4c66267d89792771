"""I/O. An image URL's bytes, fetched safely under trio (docs/images.md §3): HTTP/1.1 over
h11 on a trio stream (TLS with the URL's host name checked for https), to an address the
policy allowed after resolution (core/media_addresses.py), with few redirects, each checked
again, and a byte limit that refuses a declared Content-Length before reading a byte of the
body and stops reading the moment a body passes it.

No timeouts here: the caller owns the deadline (request/images.py puts each fetch under its
own `fail_after` inside the request's scope). A `file:` URL is read under
`--allowed-local-media-path` only, after its symlinks are resolved.
"""

from __future__ import annotations

import os
import ssl
from typing import Final
from urllib.parse import SplitResult, urljoin

import h11
import trio

from smg_trio.core.media_addresses import (
    MediaPolicy,
    checked_addresses,
    checked_local_path,
    checked_url,
    refused,
)
from smg_trio.errors import ClientError

MAX_REDIRECTS: Final = 3
READ_BYTES: Final = 65536
MAX_HEADER_BYTES: Final = 16384
USER_AGENT: Final = "smg-trio image fetcher"
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})


async def fetch_media(url: str, policy: MediaPolicy, *, max_bytes: int, param: str) -> bytes:
    """The body at `url` (following up to MAX_REDIRECTS redirects), at most `max_bytes`."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = checked_url(url, policy, param)
        if parts.scheme.lower() == "file":
            return await _read_file(parts, policy, max_bytes=max_bytes, param=param)
        status, location, body = await _get(parts, policy, max_bytes=max_bytes, param=param)
        if status in _REDIRECTS:
            if location is None:
                raise refused(param, f"the server answered {status} without a Location")
            url = urljoin(url, location)
            continue
        if status != 200:
            raise refused(param, f"the image server answered HTTP {status}")
        return body
    raise refused(param, f"more than {MAX_REDIRECTS} redirects")


async def _get(
    parts: SplitResult, policy: MediaPolicy, *, max_bytes: int, param: str
) -> tuple[int, str | None, bytes]:
    host = (parts.hostname or "").lower().rstrip(".")
    https = parts.scheme.lower() == "https"
    port = parts.port or (443 if https else 80)
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except OSError as exc:
        raise refused(param, f"the host {host!r} does not resolve ({exc})") from None
    addresses = checked_addresses(host, [str(info[4][0]) for info in infos], policy, param)
    try:
        stream: trio.abc.Stream = await trio.open_tcp_stream(addresses[0], port)
    except OSError as exc:
        raise refused(param, f"cannot connect to {host!r} ({exc})") from None
    async with stream:
        if https:
            stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname=host)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            return await _exchange(stream, host, target, max_bytes, param)
        except (trio.BrokenResourceError, ssl.SSLError, h11.ProtocolError, OSError) as exc:
            raise refused(param, f"the image server's answer failed ({exc})") from None


async def _exchange(
    stream: trio.abc.Stream, host: str, target: str, max_bytes: int, param: str
) -> tuple[int, str | None, bytes]:
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
    request = h11.Request(
        method="GET",
        target=target,
        headers=[
            ("Host", host),
            ("User-Agent", USER_AGENT),
            ("Accept", "image/*"),
            ("Connection", "close"),
        ],
    )
    await stream.send_all(connection.send(request) + connection.send(h11.EndOfMessage()))
    status: int | None = None
    location: str | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(bytes(await stream.receive_some(READ_BYTES)))
            continue
        if isinstance(event, h11.Response):
            status = event.status_code
            headers = {
                name.decode().lower(): value.decode("latin-1") for name, value in event.headers
            }
            location = headers.get("location")
            declared = headers.get("content-length")
            if status == 200 and declared is not None and int(declared) > max_bytes:
                raise _too_large(param, max_bytes, f"it declares {declared}")
            if status != 200:
                return status, location, b""  # never read the body of a non-image answer
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_bytes:
                raise _too_large(param, max_bytes, "its body ran past it")
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            if status is None:
                raise refused(param, "the image server closed without an answer")
            return status, location, bytes(body)
        elif isinstance(event, h11.InformationalResponse):
            continue


async def _read_file(
    parts: SplitResult, policy: MediaPolicy, *, max_bytes: int, param: str
) -> bytes:
    real = await trio.to_thread.run_sync(os.path.realpath, parts.path)
    checked_local_path(real, policy, param)
    try:
        async with await trio.open_file(real, "rb") as file:
            data = await file.read(max_bytes + 1)
    except OSError as exc:
        raise refused(param, f"the file cannot be read ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise _too_large(param, max_bytes, "the file is larger")
    return data


def _too_large(param: str, max_bytes: int, how: str) -> ClientError:
    return refused(param, f"the image is larger than {max_bytes} bytes ({how})")
