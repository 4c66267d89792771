"""I/O. The client side of `python -m bench http_limits`: one function per acceptance check of
docs/http.md, each bounded in count and time, loopback only, returning its figures.

HTTP/1.1 checks speak raw bytes over trio sockets (a dribbler, a half-sent head and
`Connection: close` need that control); the HTTP/2 ones use `bench.load.h2c_client`, and rapid reset
drives the `h2` state machine directly (HEADERS, DATA and RST_STREAM in one write).
"""

from __future__ import annotations

import json
import statistics
from typing import Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request

from bench.load.h2c_client import H2cError, open_h2c_connection
from harness.http1_framing import response_complete

HOST: Final = "127.0.0.1"
Figures = dict[str, object]


def chat_bytes(model: str, *, max_tokens: int, stream: bool = True) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about the gateway."}],
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    return json.dumps(body).encode()


def http1_post(path: str, body: bytes, *, close: bool) -> bytes:
    extra = "connection: close\r\n" if close else ""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


async def read_to_eof(stream: trio.SocketStream) -> tuple[bytes, float | None]:
    """All the server sent, and the seconds from the response's end to the server's EOF."""
    raw = b""
    ended: float | None = None
    try:
        while data := await stream.receive_some(65536):
            raw += data
            if ended is None and response_complete(raw):
                ended = trio.current_time()
    except trio.BrokenResourceError:
        pass
    return raw, None if ended is None else trio.current_time() - ended


def spread(values: list[float]) -> str:
    if not values:
        return "—"
    ms = sorted(v * 1000 for v in values)
    return f"p50 {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms"


async def connection_close(port: int, model: str, *, requests: int) -> Figures:
    """Sequential streamed chats with `Connection: close`: response end → server EOF."""
    delays: list[float] = []
    failures = 0
    for _ in range(requests):
        async with await trio.open_tcp_stream(HOST, port) as stream:
            await stream.send_all(
                http1_post("/v1/chat/completions", chat_bytes(model, max_tokens=8), close=True)
            )
            with trio.move_on_after(10):
                raw, delay = await read_to_eof(stream)
                if raw.startswith(b"HTTP/1.1 200") and delay is not None:
                    delays.append(delay)
                    continue
            failures += 1
    return {
        "requests": requests,
        "failures": failures,
        "close after response end": spread(delays),
        "max_s": max(delays, default=float("inf")),
    }


async def keep_alive_after_generation(
    port: int, model: str, *, connections: int, idle_timeout_s: float
) -> Figures:
    """`connections` keep-alive connections, one streamed chat each, then idle: all closed?"""
    delays: list[float] = []

    async def one() -> None:
        async with await trio.open_tcp_stream(HOST, port) as stream:
            body = chat_bytes(model, max_tokens=8)
            await stream.send_all(http1_post("/v1/chat/completions", body, close=False))
            with trio.move_on_after(idle_timeout_s + 10):
                _, delay = await read_to_eof(stream)
                if delay is not None:
                    delays.append(delay)

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(one)
    return {
        "connections": connections,
        "closed by the keep-alive timer": len(delays),
        "idle time before close": spread(delays),
    }


async def body_dribblers(
    port: int, *, count: int, gap_s: float, deadline_s: float
) -> tuple[Figures, list[float]]:
    """`count` connections sending a body one byte every `gap_s`: how and when each ends."""
    statuses: dict[str, int] = {}
    ends: list[float] = []
    start = trio.current_time()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
        "content-length: 8000\r\n\r\n{"
    ).encode()

    async def one() -> None:
        async with await trio.open_tcp_stream(HOST, port) as stream:
            await stream.send_all(head)
            async with trio.open_nursery() as nursery:

                async def dribble() -> None:
                    while True:
                        await trio.sleep(gap_s)
                        try:
                            await stream.send_all(b" ")
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            return

                nursery.start_soon(dribble)
                with trio.move_on_after(deadline_s):
                    raw, _ = await read_to_eof(stream)
                    status = raw[9:12].decode() or "closed"
                    statuses[status] = statuses.get(status, 0) + 1
                    ends.append(trio.current_time() - start)
                nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    figures: Figures = {
        "dribblers": count,
        "answers": dict(sorted(statuses.items())),
        "still open at the deadline": count - len(ends),
        "closed after (from start)": spread(ends),
    }
    return figures, ends


async def control_at_cap(port: int, *, holders: int, controls: int) -> Figures:
    """Hold `holders` connections (half-sent heads), then time control requests on fresh ones."""
    latencies: list[float] = []
    answers: dict[str, int] = {}
    held: list[trio.SocketStream] = []
    try:
        for _ in range(holders):
            stream = await trio.open_tcp_stream(HOST, port)
            held.append(stream)
            await stream.send_all(b"GET /health HTTP/1.1\r\n")
        await trio.sleep(0.2)  # every holder accepted (or refused) by now
        for index in range(controls):
            path = "/health" if index % 2 == 0 else "/v1/models"
            start = trio.current_time()
            async with await trio.open_tcp_stream(HOST, port) as stream:
                await stream.send_all(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
                with trio.move_on_after(5):
                    raw = b""
                    while not response_complete(raw) and (data := await stream.receive_some()):
                        raw += data
            latencies.append(trio.current_time() - start)
            status = raw[9:12].decode() or "none"
            answers[status] = answers.get(status, 0) + 1
    finally:
        for stream in held:
            await stream.aclose()
    await trio.sleep(1.0)  # the server notices the holders' FINs and frees their slots
    return {
        "held connections": holders,
        "control requests": controls,
        "answers": answers,
        "latency": spread(latencies),
        "max_s": max(latencies, default=float("inf")),
    }


async def h2_streams(
    port: int, model: str, *, connections: int, per_connection: int, max_tokens: int
) -> Figures:
    """`connections` × `per_connection` concurrent streamed chats over h2c: errors?"""
    ok = 0
    errors: dict[str, int] = {}
    body = chat_bytes(model, max_tokens=max_tokens)
    start = trio.current_time()

    async def stream_one(connection: object) -> None:
        nonlocal ok
        try:
            async with connection.post("/v1/chat/completions", body) as response:  # type: ignore[attr-defined]
                status = await response.status()
                received = b"".join([data async for data in response])
            if status == 200 and received.endswith(b"data: [DONE]\n\n"):
                ok += 1
            else:
                errors[f"status {status}"] = errors.get(f"status {status}", 0) + 1
        except H2cError as exc:
            errors[str(exc)[:60]] = errors.get(str(exc)[:60], 0) + 1

    async def one_connection() -> None:
        try:
            async with (
                open_h2c_connection(HOST, port) as connection,
                trio.open_nursery() as nursery,
            ):
                for _ in range(per_connection):
                    nursery.start_soon(stream_one, connection)
        except H2cError as exc:
            errors[f"connection: {exc}"[:60]] = errors.get(f"connection: {exc}"[:60], 0) + 1

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(one_connection)
    return {
        "streams": connections * per_connection,
        "ok": ok,
        "errors": errors,
        "wall_s": round(trio.current_time() - start, 2),
    }


async def h2_many_requests(port: int, model: str, *, requests: int, in_flight: int) -> Figures:
    """`requests` short chats on ONE h2c connection, `in_flight` at a time: errors?"""
    ok = 0
    errors: dict[str, int] = {}
    body = chat_bytes(model, max_tokens=1, stream=False)
    start = trio.current_time()
    async with open_h2c_connection(HOST, port) as connection:
        limiter = trio.Semaphore(in_flight)

        async def one() -> None:
            nonlocal ok
            try:
                async with connection.post("/v1/chat/completions", body) as response:
                    status = await response.status()
                    _ = [data async for data in response]
                if status == 200:
                    ok += 1
                else:
                    errors[f"status {status}"] = errors.get(f"status {status}", 0) + 1
            except H2cError as exc:
                errors[str(exc)[:60]] = errors.get(str(exc)[:60], 0) + 1
            finally:
                limiter.release()

        async with trio.open_nursery() as nursery:
            for _ in range(requests):
                await limiter.acquire()
                nursery.start_soon(one)
    return {
        "requests": requests,
        "ok": ok,
        "errors": errors,
        "wall_s": round(trio.current_time() - start, 2),
    }


async def rapid_reset(port: int, model: str, *, duration_s: float) -> Figures:
    """HEADERS + DATA + RST_STREAM(CANCEL) as fast as possible for `duration_s`, reconnecting
    after each GOAWAY: how many streams a connection gets in, and what ends it."""
    body = chat_bytes(model, max_tokens=64)
    per_connection: list[int] = []
    goaway_codes: dict[str, int] = {}
    first_goaway_s: float | None = None
    start = trio.current_time()
    # `duration_s` bounds when a new connection may start; the one under way always ends (each
    # is bounded: the server's answer, or our flow-control window spent and 5 s of waiting).
    while True:
        sent, code = await _reset_one_connection(port, body)
        per_connection.append(sent)
        goaway_codes[code] = goaway_codes.get(code, 0) + 1
        if first_goaway_s is None:
            first_goaway_s = trio.current_time() - start
        if trio.current_time() - start >= duration_s:
            break
    return {
        "connections": len(per_connection),
        "streams the server read": sum(per_connection),
        "streams per connection until GOAWAY (its last stream id)": (
            f"median {statistics.median(per_connection):.0f}, max {max(per_connection)}"
            if per_connection
            else "—"
        ),
        "how connections ended": goaway_codes,
        "first GOAWAY after": "—" if first_goaway_s is None else f"{first_goaway_s * 1000:.0f} ms",
    }


async def _reset_one_connection(port: int, body: bytes) -> tuple[int, str]:
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    client.initiate_connection()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", HOST),
        (":path", "/v1/chat/completions"),
    ]
    sent = 0
    ended: list[str] = []
    accepted: list[int] = []  # streams the server had seen when it sent GOAWAY
    done = trio.Event()
    async with await trio.open_tcp_stream(HOST, port) as stream, trio.open_nursery() as nursery:

        async def read_until_end() -> None:
            try:
                while data := await stream.receive_some(65536):
                    for event in client.receive_data(data):
                        if isinstance(event, h2.events.ConnectionTerminated):
                            code = h2.errors.ErrorCodes(event.error_code or 0).name
                            ended.append(f"GOAWAY {code}")
                            accepted.append(((event.last_stream_id or 0) + 1) // 2)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            ended.append("closed without GOAWAY")
            done.set()

        nursery.start_soon(read_until_end)
        try:
            while not ended:
                stream_id = client.get_next_available_stream_id()
                client.send_headers(stream_id, headers)
                client.send_data(stream_id, body, end_stream=True)
                client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                await stream.send_all(client.data_to_send())
                sent += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except h2.exceptions.FlowControlError:
            pass  # the server has not read our backlog yet: wait for its answer to it
        with trio.move_on_after(5):
            await done.wait()
        nursery.cancel_scope.cancel()
    return (accepted[0] if accepted else sent), ended[0] if ended else "connection reset"


async def websocket_storm(port: int, *, sockets: int, concurrency: int) -> Figures:
    """Open `sockets` WebSockets (`concurrency` handshakes at a time, each kept open) while
    `/health` is polled on its own keep-alive connection: served vs closed 1013, health latency."""
    outcomes: dict[str, int] = {}
    health: list[float] = []
    held: list[trio.SocketStream] = []
    done = trio.Event()

    async def open_one(limiter: trio.Semaphore) -> None:
        try:
            outcome = await _websocket_outcome(port, held)
        finally:
            limiter.release()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    async def poll_health() -> None:
        async with await trio.open_tcp_stream(HOST, port) as stream:
            while not done.is_set():
                start = trio.current_time()
                await stream.send_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                raw = b""
                while not response_complete(raw):
                    raw += await stream.receive_some(65536)
                health.append(trio.current_time() - start)
                await trio.sleep(0.02)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_health)
            limiter = trio.Semaphore(concurrency)
            async with trio.open_nursery() as openers:
                for _ in range(sockets):
                    await limiter.acquire()
                    openers.start_soon(open_one, limiter)
            done.set()
    finally:
        for stream in held:
            await stream.aclose()
    ms = sorted(h * 1000 for h in health)
    return {
        "WebSocket opens": sockets,
        "outcomes": dict(sorted(outcomes.items())),
        "/health during the storm": (
            f"{len(ms)} polls, p50 {statistics.median(ms):.1f} ms, "
            f"p99 {ms[min(len(ms) - 1, int(len(ms) * 0.99))]:.1f} ms, max {ms[-1]:.1f} ms"
            if ms
            else "—"
        ),
    }


async def _websocket_outcome(port: int, held: list[trio.SocketStream]) -> str:
    """Handshake one WebSocket: "served" (accepted, then no close for 1 s; kept open in `held`),
    the server's close code, or "no answer" (no handshake answer within 5 s)."""
    client = WSConnection(ConnectionType.CLIENT)
    stream = await trio.open_tcp_stream(HOST, port)
    await stream.send_all(client.send(Request(host=HOST, target="/v1/ws")))
    accepted_at: float | None = None
    with trio.move_on_after(5):
        while data := await stream.receive_some(65536):
            client.receive_data(data)
            for event in client.events():
                if isinstance(event, AcceptConnection):
                    accepted_at = trio.current_time()
                if isinstance(event, CloseConnection):
                    await stream.aclose()
                    return f"closed {event.code}"
                if isinstance(event, RejectConnection):
                    await stream.aclose()
                    return f"rejected {event.status_code}"
            if accepted_at is not None:
                break
        with trio.move_on_after(1):  # a refusal's close follows its accept at once
            while data := await stream.receive_some(65536):
                client.receive_data(data)
                for event in client.events():
                    if isinstance(event, CloseConnection):
                        await stream.aclose()
                        return f"closed {event.code}"
    held.append(stream)
    return "no answer" if accepted_at is None else "served"
