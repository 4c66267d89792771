"""Our accept loop (frontends.http.server) on loopback with raw sockets: `Connection: close` and
the keep-alive timer after generation requests, the header and body timers (408), the
connection cap (503 on a fresh connection) and the WebSocket cap (close 1013). docs/http.md."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing
import trio_websocket
import trustme
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated
from wsproto import ConnectionType, WSConnection
from wsproto.events import CloseConnection, Request

from harness.http1_framing import response_complete
from smg_trio.frontends.http import hypercorn_seam
from smg_trio.frontends.http.limits import HttpLimits, default_max_connections
from tests.e2e.live_server import API_KEY, chat_body, chat_outcome, live_server, parse_sse

TEST_TIMEOUT_S: Final = 10.0
AUTH: Final = f"authorization: Bearer {API_KEY}\r\n"


def chat_request(*, close: bool, stream: bool = True, max_tokens: int = 4) -> bytes:
    body = json.dumps(chat_body(stream=stream, max_tokens=max_tokens)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\n{AUTH}"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        + ("connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + body


async def read_until_eof(
    stream: trio.SocketStream, *, response: bool = True
) -> tuple[bytes, float]:
    """Everything the server sends, and the seconds from the response's end to the server's
    EOF (a chunked body ends with `0\\r\\n\\r\\n`; a sized one at its content-length).
    `response=False`: the bytes are not HTTP/1.1 (the delay is then 0)."""
    seen = b""
    ended_at: float | None = None if response else trio.current_time()
    while data := await stream.receive_some(65536):
        seen += data
        if ended_at is None and response_complete(seen):
            ended_at = trio.current_time()
    assert ended_at is not None, seen
    return seen, trio.current_time() - ended_at


@pytest.mark.serial
async def test_connection_close_after_a_generation_request_closes_at_once(
    tmp_path: Path,
) -> None:
    async with live_server(tmp_path, step_ms=1) as server:
        for stream_response in (True, False):
            with trio.fail_after(TEST_TIMEOUT_S):
                async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                    await client.send_all(chat_request(close=True, stream=stream_response))
                    raw, close_s = await read_until_eof(client)
            assert raw.startswith(b"HTTP/1.1 200 ")
            assert close_s < 0.1, close_s


@pytest.mark.serial
async def test_keep_alive_timer_runs_after_a_generation_request(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=1, http_limits={"idle_timeout_s": 0.3}) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(chat_request(close=False))
                raw, close_s = await read_until_eof(client)
    assert raw.startswith(b"HTTP/1.1 200 ")
    assert b"[DONE]" in raw
    assert 0.25 < close_s < 1.5, close_s  # the 0.3 s idle timer, not a dead connection kept


@pytest.mark.serial
async def test_a_body_dribbler_gets_408_and_the_connection_closes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The defaults (15 s between reads, 60 s for the whole body), in virtual time.
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: t\r\n{AUTH}"
        "content-type: application/json\r\ncontent-length: 100\r\n\r\n{"
    ).encode()
    async with live_server(tmp_path, with_engine=False) as server:
        # A stall (one byte every 20 s) ends at the 15 s read bound; a trickle (one byte every
        # 10 s, each gap under the bound) at the 60 s body deadline.
        for gap_s, expected_s, says in (
            (20.0, 15.0, b"stalled"),
            (10.0, 60.0, b"was not complete in time"),
        ):
            with trio.fail_after(TEST_TIMEOUT_S + expected_s):
                async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                    await client.send_all(head)
                    start = trio.current_time()
                    async with trio.open_nursery() as nursery:

                        async def dribble(
                            client: trio.SocketStream = client, gap_s: float = gap_s
                        ) -> None:
                            while True:
                                await trio.sleep(gap_s)
                                await client.send_all(b" ")

                        nursery.start_soon(dribble)
                        raw, _ = await read_until_eof(client)
                        nursery.cancel_scope.cancel()
            assert raw.startswith(b"HTTP/1.1 408 "), raw
            assert b'"code":"request_timeout"' in raw
            assert b"the request body " + says in raw
            assert expected_s <= trio.current_time() - start < expected_s + 0.5


async def test_a_stalled_request_head_is_closed_by_the_header_timer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Defaults, in virtual time: the 75 s keep-alive timer is not what closes it, the 20 s
    # header timer is, once bytes of a head arrived.
    async with live_server(tmp_path, with_engine=False) as server:
        with trio.fail_after(TEST_TIMEOUT_S + 20 + 75):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(b"GET /health HTTP/1.1\r\nhost: t\r\n")
                start = trio.current_time()
                assert await client.receive_some(65536) == b""
                assert 20.0 <= trio.current_time() - start < 20.5
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                start = trio.current_time()  # no byte sent: the keep-alive timer
                assert await client.receive_some(65536) == b""
                assert 75.0 <= trio.current_time() - start < 75.5


async def test_past_the_connection_cap_a_fresh_connection_gets_503_fast(tmp_path: Path) -> None:
    async with live_server(
        tmp_path, with_engine=False, http_limits={"max_connections": 3}
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            held = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(3)]
            await trio.sleep(0.05)  # the server has accepted them
            start = trio.current_time()
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as control:
                await control.send_all(b"GET /health HTTP/1.1\r\nhost: t\r\n\r\n")
                raw, _ = await read_until_eof(control)
            assert trio.current_time() - start < 1.0
            assert raw.startswith(b"HTTP/1.1 503 "), raw
            assert b'"code":"too_many_connections"' in raw
            # An h2c client (prior knowledge) is refused in HTTP/2: GOAWAY, nothing processed.
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as control:
                preface = H2Connection(H2Configuration(client_side=True))
                preface.initiate_connection()
                await control.send_all(preface.data_to_send())
                raw, _ = await read_until_eof(control, response=False)
            [goaway] = [e for e in h2_client_events(raw) if isinstance(e, ConnectionTerminated)]
            assert (goaway.error_code, goaway.last_stream_id) == (ErrorCodes.REFUSED_STREAM, 0)
            await held.pop().aclose()
            await trio.sleep(0.05)
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as control:
                await control.send_all(
                    b"GET /health HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
                )
                raw, _ = await read_until_eof(control)
            assert raw.startswith(b"HTTP/1.1 503 ")
            assert b"no worker is ready" in raw  # served by the app: no engine in this test
            for stream in held:
                await stream.aclose()


async def websocket_close_code(port: int) -> int | None:
    """Open a WebSocket (wsproto over a raw socket) and wait: the server's close code, or None
    if the socket is served (open 0.2 s without a close)."""
    client = WSConnection(ConnectionType.CLIENT)
    upgrade = Request(
        host="t", target="/v1/ws", extra_headers=[(b"authorization", f"Bearer {API_KEY}".encode())]
    )
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(client.send(upgrade))
        with trio.move_on_after(0.2):
            while data := await stream.receive_some(65536):
                client.receive_data(data)
                for event in client.events():
                    if isinstance(event, CloseConnection):
                        await stream.send_all(client.send(event.response()))
                        return event.code
        return None


async def test_past_the_websocket_cap_a_socket_is_closed_1013(tmp_path: Path) -> None:
    async with live_server(
        tmp_path, with_engine=False, http_limits={"max_websockets": 1}
    ) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/ws"
        headers = [(b"authorization", f"Bearer {API_KEY}".encode())]
        with trio.fail_after(TEST_TIMEOUT_S):
            async with trio_websocket.open_websocket_url(url, extra_headers=headers):
                assert await websocket_close_code(server.port) == 1013
            # The first one closed: a new socket is served again.
            assert await websocket_close_code(server.port) is None


def test_default_caps_follow_the_descriptor_limit() -> None:
    limits = HttpLimits().resolved()
    assert limits.max_connections == default_max_connections() >= 16
    assert limits.max_websockets == int(limits.max_connections * 0.9)


async def test_past_the_cap_tls_clients_are_refused_in_their_protocol(tmp_path: Path) -> None:
    # TLS: the refusal completes the handshake, then answers in what ALPN picked.
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certificate.private_key_pem.write_to_path(str(keyfile))
    certificate.cert_chain_pems[0].write_to_path(str(certfile))
    context = ssl.create_default_context()
    authority.configure_trust(context)
    async with live_server(
        tmp_path, with_engine=False, tls=(certfile, keyfile), http_limits={"max_connections": 1}
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port):
                await trio.sleep(0.05)  # the one connection the cap allows
                for alpn in ("http/1.1", "h2"):
                    context.set_alpn_protocols([alpn])
                    tls = trio.SSLStream(
                        await trio.open_tcp_stream("127.0.0.1", server.port),
                        context,
                        server_hostname="127.0.0.1",
                    )
                    async with tls:
                        await tls.do_handshake()
                        if alpn == "http/1.1":
                            await tls.send_all(b"GET /health HTTP/1.1\r\nhost: t\r\n\r\n")
                        raw = b""
                        with contextlib.suppress(trio.BrokenResourceError):
                            while data := await tls.receive_some(65536):
                                raw += data
                    if alpn == "http/1.1":
                        assert raw.startswith(b"HTTP/1.1 503 "), raw
                    else:
                        events = h2_client_events(raw)
                        [goaway] = [e for e in events if isinstance(e, ConnectionTerminated)]
                        assert goaway.error_code == ErrorCodes.REFUSED_STREAM
                        assert goaway.last_stream_id == 0


def h2_client_events(raw: bytes) -> list[object]:
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    return list(client.receive_data(raw))


def dechunk(raw: bytes) -> bytes:
    """The body of an HTTP/1.1 chunked response (asserting the framing is whole)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n", rest
            return body
        body, rest = body + rest[:size], rest[size:]
        assert rest.startswith(b"\r\n"), rest[:20]
        rest = rest[2:]


class KernelThatTakesLittle:
    """Stands in for `os` in hypercorn_seam: every third write is refused (EAGAIN) and the others
    take at most 3 bytes, as a kernel whose socket buffer is nearly full would."""

    def __init__(self) -> None:
        self.calls = self.refused = self.partial = 0

    def write(self, fd: int, data: bytes) -> int:
        self.calls += 1
        if self.calls % 3 == 0:
            self.refused += 1
            raise BlockingIOError
        if len(data) > 3:
            self.partial += 1
        return os.write(fd, data[:3])


async def test_a_streamed_http1_chunk_the_kernel_only_partly_takes_is_finished_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct write of an HTTP/1.1 chunk (docs/performance.md §2) hands what the kernel did
    not take to hypercorn's awaited write: the stream arrives whole and in order."""
    outcomes = []
    async with live_server(tmp_path, step_ms=1) as server:
        for kernel in (None, KernelThatTakesLittle()):
            if kernel is not None:
                monkeypatch.setattr(hypercorn_seam, "os", kernel)
            with trio.fail_after(TEST_TIMEOUT_S):
                async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                    await client.send_all(chat_request(close=True, max_tokens=40))
                    raw, _ = await read_until_eof(client)
            assert raw.startswith(b"HTTP/1.1 200 "), raw[:200]
            outcomes.append(chat_outcome(parse_sse(dechunk(raw))))
    assert isinstance(kernel, KernelThatTakesLittle)
    assert kernel.refused > 0  # both fallbacks ran: nothing taken, and part taken
    assert kernel.partial > 0
    assert len(outcomes[0].texts[0]) > 20
    assert outcomes[1].texts == outcomes[0].texts
    assert outcomes[1].finishes == outcomes[0].finishes


async def test_an_answer_before_the_body_ended_says_connection_close(tmp_path: Path) -> None:
    # A 413 goes out while the body is still to come: hypercorn closes the connection after it,
    # so the answer says so (RFC 9112 §9.6) and no client sends its next request on it.
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: t\r\n{AUTH}"
        "content-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    ).encode()
    async with live_server(tmp_path, with_engine=False, max_body_bytes=4096) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(head + b"{" * 100)
                raw, _ = await read_until_eof(client)
    head_lines = raw.split(b"\r\n\r\n", 1)[0].lower().split(b"\r\n")
    assert head_lines[0].startswith(b"http/1.1 413 ")
    assert b"connection: close" in head_lines


async def test_a_streamed_http1_head_and_first_chunk_arrive_together_and_keep_alive_holds(
    tmp_path: Path,
) -> None:
    """The first token waits for no task hop and no awaited head (docs/performance.md §3): the
    head and the first chunk leave in one write, framed past hypercorn as it would have framed
    them, and the connection then serves the next request."""
    async with live_server(tmp_path, step_ms=50) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(chat_request(close=False))
                first = await client.receive_some(65536)
                raw = first
                while not response_complete(raw):
                    raw += await client.receive_some(65536)
                await client.send_all(chat_request(close=True))
                again, _ = await read_until_eof(client)
    # (the engine steps every 50 ms: a head written on its own would be read alone)
    head, _, body = first.partition(b"\r\n\r\n")
    assert body.split(b"\r\n")[1].startswith(b"data: ")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"http/1.1 200 "
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    assert fields[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert fields[b"transfer-encoding"] == b"chunked"
    assert {b"x-request-id", b"date", b"cache-control", b"x-accel-buffering"} <= fields.keys()
    for response in (raw, again):
        outcome = chat_outcome(parse_sse(dechunk(response)))
        assert list(outcome.finishes) == [0]
        assert outcome.texts[0]


async def test_an_http10_client_gets_its_stream_unchunked(tmp_path: Path) -> None:
    # No chunked framing for HTTP/1.0: the head and the chunks take hypercorn's path, and the
    # body ends with the connection.
    request = chat_request(close=True).replace(b"HTTP/1.1\r\n", b"HTTP/1.0\r\n", 1)
    async with live_server(tmp_path, step_ms=1) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(request)
                raw, _ = await read_until_eof(client, response=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower()
    outcome = chat_outcome(parse_sse(body))
    assert list(outcome.finishes) == [0]
    assert outcome.texts[0]


async def test_pipelined_http1_requests_get_their_streams_in_order(tmp_path: Path) -> None:
    # Two requests in one packet: hypercorn serves them one after the other, and each
    # response's head goes with its first chunk (`HttpConnection.start_now`) only while its
    # own request is the connection's current one; both answers arrive whole, in order.
    async with live_server(tmp_path, step_ms=1) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(
                    chat_request(close=False, max_tokens=6) + chat_request(close=True)
                )
                raw, _ = await read_until_eof(client, response=False)
    first, second = raw.split(b"HTTP/1.1 200 ")[1:]
    for response in (first, second):
        outcome = chat_outcome(parse_sse(dechunk(b"HTTP/1.1 200 " + response)))
        assert list(outcome.finishes) == [0]
        assert outcome.texts[0]
