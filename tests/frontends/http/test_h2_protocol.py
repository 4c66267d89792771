"""HTTP/2 limits through our accept loop (frontends.http.h2_protocol), with the `h2` package as a raw
client over loopback: an extra stream is refused alone, a connection carries more requests
than hypercorn's old per-connection limit, and rapid reset is answered GOAWAY(ENHANCE_YOUR_CALM).
docs/http.md §3."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
import trio
from hpack.struct import NeverIndexedHeaderTuple

from smg_trio.frontends.http.h2_protocol import RAPID_RESET_LIMIT
from tests.e2e.live_server import (
    API_KEY,
    MODEL,
    REPLAY_HEAD,
    STOP,
    chat_body,
    chat_outcome,
    live_server,
    parse_sse,
)

TEST_TIMEOUT_S: Final = 10.0
# 1,100 requests are ~1.2 s of CPU; on a loaded 2-core machine (other users, the suite's own
# workers) they took over 10 s of wall time. The cap is against a hang, not a speed bound.
BULK_TIMEOUT_S: Final = 30.0
MAX_STREAMS: Final = 100  # hypercorn's h2_max_concurrent_streams, which serve() keeps


@dataclass
class RawH2:
    """One h2 client connection; `events` collects everything the server sent."""

    stream: trio.SocketStream
    connection: h2.connection.H2Connection = field(
        default_factory=lambda: h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
    )
    events: list[h2.events.Event] = field(default_factory=list)

    def request(self, method: str, path: str, *, end: bool = True) -> int:
        stream_id = self.connection.get_next_available_stream_id()
        headers = [
            (":method", method),
            (":scheme", "http"),
            (":authority", "t"),
            (":path", path),
            ("authorization", f"Bearer {API_KEY}"),
        ]
        self.connection.send_headers(stream_id, headers, end_stream=end)
        return stream_id

    async def flush(self) -> None:
        await self.stream.send_all(self.connection.data_to_send())

    async def post(self, path: str, body: object) -> int:
        """A POST of `body` as JSON, sent; its stream id."""
        stream_id = self.request("POST", path, end=False)
        self.connection.send_data(stream_id, json.dumps(body).encode(), end_stream=True)
        await self.flush()
        return stream_id

    async def receive(self) -> list[h2.events.Event]:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError
        events = self.connection.receive_data(data)
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.connection.acknowledge_received_data(
                    event.flow_controlled_length, event.stream_id
                )
        self.events.extend(events)
        await self.flush()
        return events

    async def receive_until(self, done: Iterable[type[h2.events.Event]], stream_id: int) -> None:
        kinds = tuple(done)
        while not any(
            isinstance(e, kinds) and getattr(e, "stream_id", stream_id) == stream_id
            for e in self.events
        ):
            await self.receive()


async def open_h2(port: int) -> RawH2:
    client = RawH2(await trio.open_tcp_stream("127.0.0.1", port))
    client.connection.initiate_connection()
    await client.flush()
    return client


async def receive_until_closed(client: RawH2) -> None:
    """Take what the server sends until it closes the connection."""
    try:
        while True:
            await client.receive()
    except (EOFError, trio.BrokenResourceError):
        return


def goaways(events: list[h2.events.Event]) -> list[h2.events.ConnectionTerminated]:
    return [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]


async def test_a_stream_past_the_limit_is_refused_alone(tmp_path: Path) -> None:
    limit = 10  # --h2-max-streams
    async with live_server(
        tmp_path, with_engine=False, http_limits={"h2_max_streams": limit}
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                # Sent before the server's SETTINGS are read, so our h2 does not hold the extra
                # stream back. Requests whose bodies never come stay open: the limit is full.
                held = [client.request("POST", "/v1/completions", end=False) for _ in range(limit)]
                # The extra stream's body is already on its way when the refusal arrives: h2 answers
                # that DATA per stream and credits the connection's flow-control window back.
                extra = client.request("POST", "/v1/completions", end=False)
                client.connection.send_data(extra, b"{}" * 1000, end_stream=True)
                await client.flush()
                await client.receive_until([h2.events.StreamReset], extra)
                reset = next(e for e in client.events if isinstance(e, h2.events.StreamReset))
                assert reset.stream_id == extra
                assert reset.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
                # The held streams go on: one ends its (empty) body and gets its answer.
                client.connection.end_stream(held[0])
                await client.flush()
                await client.receive_until([h2.events.StreamEnded], held[0])
                after = client.request("GET", "/health")
                await client.flush()
                await client.receive_until([h2.events.StreamEnded], after)
                assert goaways(client.events) == []


async def test_one_connection_carries_more_than_a_thousand_requests(tmp_path: Path) -> None:
    # hypercorn's keep_alive_max_requests (1,000) used to GOAWAY here and strand streams.
    windows, window = 11, MAX_STREAMS  # 1,100 requests, as many at once as the limit allows
    async with live_server(tmp_path, with_engine=False) as server:
        with trio.fail_after(BULK_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                statuses: dict[int, int] = {}
                for _ in range(windows):
                    ids = [client.request("GET", "/v1/models") for _ in range(window)]
                    await client.flush()
                    for stream_id in ids:
                        await client.receive_until([h2.events.StreamEnded], stream_id)
                    for event in client.events:
                        if isinstance(event, h2.events.ResponseReceived):
                            statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                    assert goaways(client.events) == []
                    client.events.clear()
    assert len(statuses) == windows * window
    assert set(statuses.values()) == {200}


async def test_rapid_reset_gets_goaway_enhance_your_calm(tmp_path: Path) -> None:
    body = json.dumps(chat_body(max_tokens=50)).encode()
    async with live_server(tmp_path, step_ms=20) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                sent = 0
                while not goaways(client.events) and sent < 4 * RAPID_RESET_LIMIT:
                    stream_id = client.request("POST", "/v1/chat/completions", end=False)
                    client.connection.send_data(stream_id, body, end_stream=True)
                    client.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                    await client.flush()
                    sent += 1
                    with trio.move_on_after(0.005):
                        await client.receive()
                while True:  # the server closes the connection after its GOAWAY
                    try:
                        await client.receive()
                    except EOFError:
                        break
            [goaway] = goaways(client.events)
            assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
            assert sent <= RAPID_RESET_LIMIT + 10, sent
            await server.seconds_until_idle()  # nothing the resets started is left running


async def test_h2c_upgrade_switches_to_our_h2_protocol(tmp_path: Path) -> None:
    async with live_server(tmp_path, with_engine=False) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = RawH2(await trio.open_tcp_stream("127.0.0.1", server.port))
            async with client.stream:
                settings = client.connection.initiate_upgrade_connection()
                assert settings is not None
                head = (
                    "GET /health HTTP/1.1\r\nhost: t\r\nconnection: Upgrade, HTTP2-Settings\r\n"
                    f"upgrade: h2c\r\nhttp2-settings: {settings.decode()}\r\n\r\n"
                )
                await client.stream.send_all(head.encode())
                raw = b""
                while b"\r\n\r\n" not in raw:
                    raw += await client.stream.receive_some(65536)
                assert raw.startswith(b"HTTP/1.1 101 ")
                await client.flush()  # our preface and SETTINGS
                events = client.connection.receive_data(raw.partition(b"\r\n\r\n")[2])
                client.events.extend(events)
                # The upgraded request is stream 1, answered over h2 (no worker: 503).
                await client.receive_until([h2.events.StreamEnded], 1)
                [response] = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
                assert dict(response.headers or ())[b":status"] == b"503"
                # The connection is h2 from here: a second stream is served on it.
                extra = client.request("GET", "/v1/models")
                await client.flush()
                await client.receive_until([h2.events.StreamEnded], extra)


async def test_upload_after_an_early_answer_is_stopped_not_fatal(tmp_path: Path) -> None:
    # A 413 goes out while the client is still sending its body (RFC 9113 §8.1 allows it):
    # the rest of the upload is stopped with RST_STREAM(NO_ERROR); the connection lives on.
    async with live_server(tmp_path, with_engine=False, max_body_bytes=4096) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                upload = client.request("POST", "/v1/completions", end=False)
                client.connection.send_data(upload, b"x" * 5000)
                await client.flush()
                await client.receive_until([h2.events.StreamEnded], upload)
                [answer] = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
                assert dict(answer.headers or ())[b":status"] == b"413"
                client.connection.send_data(upload, b"y" * 1000)
                await client.flush()
                await client.receive_until([h2.events.StreamReset], upload)
                [reset] = [e for e in client.events if isinstance(e, h2.events.StreamReset)]
                assert reset.error_code == h2.errors.ErrorCodes.NO_ERROR
                after = client.request("GET", "/v1/models")
                await client.flush()
                await client.receive_until([h2.events.StreamEnded], after)
                assert goaways(client.events) == []


async def post_streamed(port: int, path: str, body: object, window: int) -> RawH2:
    """One streamed request on a connection of its own whose streams have `window` bytes of
    flow-control window; returns once the response ended."""
    client = await open_h2(port)
    async with client.stream:
        client.connection.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        stream_id = await client.post(path, body)
        await client.receive_until([h2.events.StreamEnded], stream_id)
    return client


def head_fields(client: RawH2) -> dict[bytes, bytes]:
    """The response head's fields but the two that differ per response."""
    (head,) = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
    return {bytes(n): bytes(v) for n, v in head.headers if n not in (b"date", b"x-request-id")}


async def test_a_stream_whose_window_is_smaller_than_a_chunk_still_gets_every_byte(
    tmp_path: Path,
) -> None:
    # A chunk the stream's window cannot take whole is never framed by the request's own task
    # (docs/performance.md §2): it waits in hypercorn's buffer, which sends it in window-sized
    # DATA frames as the client credits them. The text is the same as over a roomy window, and
    # so is the head, which the roomy stream sends with its first chunk, past hypercorn's ASGI
    # layers (`GuardedH2Protocol.start_response_now`), and the narrow one through them.
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            texts, heads = [], []
            for window in (65535, 48):
                client = await post_streamed(
                    server.port, "/v1/chat/completions", chat_body(stop=[STOP]), window
                )
                data = [e for e in client.events if isinstance(e, h2.events.DataReceived)]
                assert all(len(e.data) <= window for e in data)
                texts.append(chat_outcome(parse_sse(b"".join(e.data for e in data))).texts)
                heads.append(head_fields(client))
    assert texts == [{0: REPLAY_HEAD}, {0: REPLAY_HEAD}]
    assert heads[0] == heads[1]
    assert heads[0][b":status"] == b"200"
    assert heads[0][b"content-type"] == b"text/event-stream; charset=utf-8"


async def test_a_lone_streams_head_and_first_chunk_arrive_together(tmp_path: Path) -> None:
    # The first token waits for no task hop and no awaited head (docs/performance.md §3): the
    # head and the first DATA are framed by the task that has the first chunk, and a lone
    # stream's bytes are written at once, in one write.
    async with live_server(tmp_path, step_ms=50) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                stream_id = await client.post("/v1/chat/completions", chat_body(max_tokens=4))
                while not any(isinstance(e, h2.events.ResponseReceived) for e in client.events):
                    events = await client.receive()
                await client.receive_until([h2.events.StreamEnded], stream_id)
    # (the engine steps every 50 ms: a head sent on its own would be read alone). The same read
    # may also carry the connection's own frames (SETTINGS and its ACK, WINDOW_UPDATE).
    of_the_stream = [
        type(e)
        for e in events
        if getattr(e, "stream_id", 0) == stream_id and not isinstance(e, h2.events.WindowUpdated)
    ]
    assert of_the_stream[:2] == [h2.events.ResponseReceived, h2.events.DataReceived]
    (head,) = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
    kinds = {bytes(header[0]): type(header) for header in head.headers}
    assert kinds[b"x-request-id"] is NeverIndexedHeaderTuple


@pytest.mark.parametrize("window", [65535, 48])
async def test_responses_events_are_numbered_in_order_whichever_way_they_go(
    tmp_path: Path, window: int
) -> None:
    # OpenAI Responses events are numbered as they are framed (core/responses_dialect.py); a
    # chunk framed for the direct path and refused there (a 48-byte window takes none whole)
    # goes the other way as it was framed, not framed (and numbered) again.
    body = {"model": MODEL, "input": "How?", "stream": True, "max_output_tokens": 12}
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await post_streamed(server.port, "/v1/responses", body, window)
    data = b"".join(e.data for e in client.events if isinstance(e, h2.events.DataReceived))
    events = [
        json.loads(line[len(b"data: ") :])
        for line in data.split(b"\n")
        if line.startswith(b"data: ")
    ]
    assert len(events) > 6
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


@pytest.mark.serial
async def test_an_idle_h2_connection_is_closed_by_the_keep_alive_timer_but_not_a_busy_one(
    tmp_path: Path,
) -> None:
    # The idle timer (frontends/http/idle_timer.py) stops while a stream is served, however long it
    # takes, and runs again once the connection has no stream left.
    limits = {"idle_timeout_s": 0.3}
    async with live_server(tmp_path, step_ms=2, http_limits=limits) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                stream_id = await client.post("/v1/chat/completions", chat_body(max_tokens=300))
                start = trio.current_time()
                await client.receive_until([h2.events.StreamEnded], stream_id)
                served_s = trio.current_time() - start
                ended = trio.current_time()
                await receive_until_closed(client)
                idle_s = trio.current_time() - ended
    assert served_s > 0.4, served_s  # longer than the idle time: served to its end
    assert [e.stream_id for e in client.events if isinstance(e, h2.events.StreamReset)] == []
    assert 0.25 < idle_s < 1.5, idle_s


async def test_the_request_id_is_sent_never_indexed_and_the_other_fields_are_not(
    tmp_path: Path,
) -> None:
    # A unique value has no place in any HPACK table, ours or an intermediary's.
    async with live_server(tmp_path, with_engine=False) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                for _ in range(2):
                    stream_id = client.request("GET", "/v1/models")
                    await client.flush()
                    await client.receive_until([h2.events.StreamEnded], stream_id)
    responses = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
    assert len(responses) == 2
    for response in responses:
        kinds = {bytes(header[0]): type(header) for header in response.headers}
        assert kinds[b"x-request-id"] is NeverIndexedHeaderTuple
        assert kinds[b"content-type"] is not NeverIndexedHeaderTuple
    ids = {dict(response.headers)[b"x-request-id"] for response in responses}
    assert len(ids) == 2


async def test_a_stream_keeps_its_bytes_in_order_while_others_come_and_go(tmp_path: Path) -> None:
    # One stream alone writes its bytes at once (ConnectionWriter.write_through); with two on
    # the connection they wait for the writer's round. A stream that goes from one to the
    # other and back, mid-answer, must still arrive whole and in order (docs/performance.md §2).
    long_body = json.dumps(chat_body(max_tokens=120)).encode()
    short_body = json.dumps(chat_body(max_tokens=8)).encode()
    async with live_server(tmp_path, step_ms=2) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            client = await open_h2(server.port)
            async with client.stream:
                alone = client.request("POST", "/v1/chat/completions", end=False)
                client.connection.send_data(alone, long_body, end_stream=True)
                await client.flush()
                await client.receive_until([h2.events.DataReceived], alone)
                others = []
                for _ in range(3):  # each comes and goes while the first streams on
                    other = client.request("POST", "/v1/chat/completions", end=False)
                    client.connection.send_data(other, short_body, end_stream=True)
                    await client.flush()
                    await client.receive_until([h2.events.StreamEnded], other)
                    others.append(other)
                await client.receive_until([h2.events.StreamEnded], alone)
    bodies: dict[int, bytes] = {}
    for event in client.events:
        if isinstance(event, h2.events.DataReceived):
            bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
    assert not any(isinstance(e, h2.events.StreamReset) for e in client.events)
    assert goaways(client.events) == []
    for stream_id in (alone, *others):
        outcome = chat_outcome(parse_sse(bodies[stream_id]))  # every event whole, then [DONE]
        assert list(outcome.finishes) == [0]
        assert outcome.texts[0]
