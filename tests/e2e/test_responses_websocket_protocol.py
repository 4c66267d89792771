"""The Responses WebSocket protocol frame by frame (docs/client-apis.md §3.4), with a raw
trio-websocket client over loopback to the gateway and the reference vLLM EngineCore: several
responses in flight on one socket (lanes side by side, FIFO within one), cancel by lane and by
response id, malformed and refused frames (every create that reached a lane ends in exactly one
terminal event on it; frames that open no response get an error with `"stream_id": null`; the
socket stays open), a client that leaves aborts its engine requests, and a slow reader holds
back its own socket only, its events still numbered without a gap."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio_websocket

from smg_trio.frontends import websocket_sender
from smg_trio.wire.json_depth import MAX_JSON_DEPTH
from tests.e2e.live_server import MODEL, REPLAY_HEAD, REPLAY_TEXT, STOP, LiveServer, live_server
from tests.observability.test_request_log import json_request_lines

TEST_TIMEOUT_S: Final = 30.0
QUESTION: Final = "How does the gateway work?"
DEFAULT: Final = "<default lane>"
PROTOCOL: Final = "<no response>"
RESPONSE_ENDS: Final = ("response.completed", "response.incomplete", "response.failed")


LONG_REPLAY: Final = REPLAY_TEXT + " Filler words follow." * 1500
"""Without a stop, a response runs for seconds (about 6,000 tokens at 2 ms a step) before the
replay's EOS: long enough to be running when it is cancelled or its client leaves."""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, replay_text=LONG_REPLAY) as running:
        yield running


@asynccontextmanager
async def responses_socket(server: LiveServer) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    headers = [(name.encode(), value.encode()) for name, value in server.auth.items()]
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{server.port}/v1/responses", extra_headers=headers
    ) as connection:
        yield connection


def create(stream_id: str | None = None, **fields: Any) -> str:
    event: dict[str, Any] = {"type": "response.create", "model": MODEL, "input": QUESTION}
    if stream_id is not None:
        event["stream_id"] = stream_id
    event.update(fields)
    return json.dumps(event)


def lane_of(event: dict[str, Any]) -> str:
    """The lane an event belongs to; PROTOCOL for an error that ends no create."""
    if "stream_id" not in event:
        return DEFAULT
    stream_id = event["stream_id"]
    return PROTOCOL if stream_id is None else str(stream_id)


def ends_a_create(event: dict[str, Any]) -> bool:
    if event["type"] in RESPONSE_ENDS:
        return True
    # An error ends a create that never began; one inside a stream is numbered (and followed
    # by response.failed); one that ends no create carries `"stream_id": null`.
    return (
        event["type"] == "error" and "sequence_number" not in event and lane_of(event) != PROTOCOL
    )


async def read_until(
    connection: trio_websocket.WebSocketConnection, creates: int, protocol_errors: int = 0
) -> list[dict[str, Any]]:
    """Events until `creates` creates ended and `protocol_errors` errors that end none came."""
    events: list[dict[str, Any]] = []
    while (
        sum(map(ends_a_create, events)) < creates
        or sum(lane_of(e) == PROTOCOL for e in events) < protocol_errors
    ):
        events.append(json.loads(await connection.get_message()))
    return events


def terminals_by_lane(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    ends: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if ends_a_create(event):
            ends.setdefault(lane_of(event), []).append(event)
    return ends


async def test_lanes_run_side_by_side_and_in_order_within_a_lane(server: LiveServer) -> None:
    lanes = [f"lane-{n}" for n in range(4)]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as connection:
            for lane in lanes:
                await connection.send_message(create(lane, max_output_tokens=100))
            # Two more on lane-0: they wait for its first, one after another.
            await connection.send_message(create("lane-0", stop=[STOP]))
            await connection.send_message(create("lane-0", stop=[STOP]))
            events = await read_until(connection, len(lanes) + 2)
    ends = terminals_by_lane(events)
    assert {lane: len(found) for lane, found in ends.items()} == {
        "lane-0": 3,
        "lane-1": 1,
        "lane-2": 1,
        "lane-3": 1,
    }
    # Side by side: every lane's first event came before every other lane's end.
    first = {lane: next(i for i, e in enumerate(events) if lane_of(e) == lane) for lane in lanes}
    last_end = {lane: max(i for i, e in enumerate(events) if e in ends[lane]) for lane in lanes}
    assert max(first.values()) < min(last_end.values())
    # In order on a lane: each response's events are contiguous in numbering and the next
    # response begins only after the previous one ended.
    on_lane_0 = [e for e in events if lane_of(e) == "lane-0"]
    starts = [i for i, e in enumerate(on_lane_0) if e["type"] == "response.created"]
    assert len(starts) == 3
    lane_0_ends = [i for i, e in enumerate(on_lane_0) if ends_a_create(e)]
    for start, previous_end in zip(starts[1:], lane_0_ends[:-1], strict=True):
        assert previous_end < start
    for begin, stop in zip(starts, [*starts[1:], len(on_lane_0)], strict=True):
        numbers = [e["sequence_number"] for e in on_lane_0[begin:stop]]
        assert numbers == list(range(len(numbers)))
    texts = [
        e["response"]["output"][0]["content"][0]["text"]
        for e in ends["lane-0"][1:]
        if e["type"] == "response.completed"
    ]
    assert texts == [REPLAY_HEAD, REPLAY_HEAD]


async def test_cancel_by_lane_and_by_response_id(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as connection:
            for lane in ("a", "b", "c"):
                await connection.send_message(create(lane, max_output_tokens=4000))
            created: dict[str, str] = {}
            deltas: set[str] = set()
            events: list[dict[str, Any]] = []
            while len(deltas) < 3:
                event = json.loads(await connection.get_message())
                events.append(event)
                if event["type"] == "response.created":
                    created[lane_of(event)] = event["response"]["id"]
                elif event["type"] == "response.output_text.delta":
                    deltas.add(lane_of(event))
            await connection.send_message(json.dumps({"type": "response.cancel", "stream_id": "a"}))
            await connection.send_message(
                json.dumps({"type": "response.cancel", "response_id": created["b"]})
            )
            # A response id on another lane than the one named: nothing is cancelled.
            await connection.send_message(
                json.dumps(
                    {"type": "response.cancel", "response_id": created["c"], "stream_id": "a"}
                )
            )
            events += await read_until(connection, 2, protocol_errors=1)
            await connection.send_message(json.dumps({"type": "response.cancel", "stream_id": "c"}))
            events += await read_until(connection, 1)
        await server.seconds_until_idle()
    ends = terminals_by_lane(events)
    assert sorted(ends) == ["a", "b", "c"]
    for lane, (end,) in ends.items():
        assert end["type"] == "response.incomplete"
        assert end["response"]["status"] == "cancelled"
        assert end["response"]["id"] == created[lane]
        assert end["stream_id"] == lane
    (refused,) = [e for e in events if lane_of(e) == PROTOCOL]
    assert refused["error"]["code"] == "response_not_found"
    for lane in ends:  # cut short mid-stream, numbered without a gap to the end
        numbers = [e["sequence_number"] for e in events if lane_of(e) == lane]
        assert numbers == list(range(len(numbers)))


def too_deep() -> str:
    nested: Any = "x"
    for _ in range(MAX_JSON_DEPTH + 1):
        nested = [nested]
    return create("deep", input=nested)


async def test_bad_frames_get_error_events_and_every_create_one_end(server: LiveServer) -> None:
    protocol_frames = [
        "not json",
        "[1, 2]",
        json.dumps({"type": "response.frobnicate"}),
        create("bad lane!"),
        too_deep(),
        json.dumps({"type": "response.cancel", "stream_id": "nobody"}),
        json.dumps({"type": "response.cancel", "unknown": 1}),
        json.dumps({"type": "response.steer", "input": "x"}),
    ]
    refused_creates = {
        "s1": (create("s1", stream=False), 400, "stream"),
        "s2": (create("s2", background=True), 400, "background"),
        "s3": (create("s3", frobnicate=1), 400, "frobnicate"),
        "s4": (create("s4", previous_response_id="resp_nope"), 404, "previous_response_id"),
        "s5": (create("s5", model="no-such-model"), 404, "model"),
    }
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as connection:
            for frame in protocol_frames:
                await connection.send_message(frame)
            await connection.send_message(b"\x00binary")
            for frame, _status, _param in refused_creates.values():
                await connection.send_message(frame)
            # The socket is still open and serves: a good create after all of it.
            await connection.send_message(create("good", stop=[STOP]))
            events = await read_until(
                connection, len(refused_creates) + 1, protocol_errors=len(protocol_frames) + 1
            )
            # Nothing else comes: every frame was answered once.
            with trio.move_on_after(0.3):
                extra = await connection.get_message()
                raise AssertionError(f"an event after every create ended: {extra!r}")
    protocol = [e for e in events if lane_of(e) == PROTOCOL]
    codes = [e["error"]["code"] for e in protocol]
    assert sorted(codes) == sorted(
        [
            "invalid_json",
            "invalid_event",
            "unknown_event",
            "invalid_stream_id",
            "json_too_deep",
            "response_not_found",
            "unknown_field",
            "invalid_input",
            "unsupported_frame",
        ]
    )
    assert all(e["type"] == "error" and e["status"] >= 400 for e in protocol)
    ends = terminals_by_lane(events)
    assert sorted(ends) == sorted([*refused_creates, "good"])
    for lane, (_frame, status, param) in refused_creates.items():
        (end,) = ends[lane]
        assert end["type"] == "error"
        assert (end["status"], end["error"]["param"]) == (status, param), end
        assert end["error"]["message"]
    (good,) = ends["good"]
    assert good["type"] == "response.completed"
    assert [
        e for e in events if lane_of(e) not in (PROTOCOL, "good") and not ends_a_create(e)
    ] == []


async def test_a_response_past_the_deadline_fails_with_the_streams_pair(tmp_path: Path) -> None:
    async with live_server(tmp_path, request_timeout_s=0.5, replay_text=LONG_REPLAY) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with responses_socket(server) as connection:
                await connection.send_message(create("late", max_output_tokens=4000))
                events = await read_until(connection, 1)
            await server.seconds_until_idle()
    *streamed, error, failed = events
    assert streamed[0]["type"] == "response.created"
    assert error["type"] == "error"
    assert (error["status"], error["error"]["code"]) == (504, "request_timeout")
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "request_timeout"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert all(e["stream_id"] == "late" for e in events)


async def test_a_client_that_leaves_aborts_its_engine_requests(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as connection:
            for n in range(4):
                await connection.send_message(create(f"lane-{n}", max_output_tokens=4000))
            streaming: set[str] = set()
            while len(streaming) < 4:
                event = json.loads(await connection.get_message())
                if event["type"] == "response.output_text.delta":
                    streaming.add(lane_of(event))
            assert (await server.counters())["requests_active"] == 4
        # The socket closed with four responses mid-stream: their engine requests end.
        await server.seconds_until_idle()


@pytest.mark.parametrize("frame_buffer", [1, 2])
async def test_a_slow_reader_holds_back_its_own_socket_only(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, frame_buffer: int
) -> None:
    # The socket's sender takes at most `frame_buffer` frames from the responses (its bounded
    # channel); a response that finds it full waits, and what it framed but the sender did not
    # take goes later as framed: numbered without a gap. A socket whose client reads nothing
    # for a while holds back no other socket.
    monkeypatch.setattr(websocket_sender, "FRAME_BUFFER", frame_buffer)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as slow, responses_socket(server) as other:
            await slow.send_message(create("slow", max_output_tokens=300))
            await trio.sleep(0.5)  # the slow client reads nothing meanwhile
            await other.send_message(create(stop=[STOP]))
            (other_end,) = [e for e in await read_until(other, 1) if ends_a_create(e)]
            assert other_end["type"] == "response.completed"
            events = await read_until(slow, 1)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == events[-1]["response"]["output"][0]["content"][0]["text"]


def counted(exposition: str, status: int) -> float:
    """`smg_trio_requests_total` of /v1/responses over a WebSocket with `status`."""
    for line in exposition.splitlines():
        if (
            line.startswith("smg_trio_requests_total{")
            and 'endpoint="/v1/responses"' in line
            and 'transport="ws"' in line
            and f'status="{status}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_each_response_has_its_metrics_and_its_log_line(server: LiveServer) -> None:
    metrics = server.serving.gateway.metrics
    with trio.fail_after(TEST_TIMEOUT_S), json_request_lines() as lines:
        async with responses_socket(server) as connection:
            await connection.send_message(create("served", stop=[STOP]))
            await connection.send_message(create("refused", frobnicate=True))
            await connection.send_message(create("cancelled", max_output_tokens=4000))
            await connection.send_message(create("bad lane!"))  # refused before the gateway
            events: list[dict[str, Any]] = []
            while not any(
                e["type"] == "response.output_text.delta" and lane_of(e) == "cancelled"
                for e in events
            ):
                events.append(json.loads(await connection.get_message()))
            assert "smg_trio_websocket_connections 1.0" in metrics.exposition().decode()
            await connection.send_message(
                json.dumps({"type": "response.cancel", "stream_id": "cancelled"})
            )
            events += await read_until(connection, 3 - sum(map(ends_a_create, events)))
        exposition = metrics.exposition().decode()
    ends = {lane: found[0] for lane, found in terminals_by_lane(events).items()}
    assert sorted(ends) == ["cancelled", "refused", "served"]
    assert (counted(exposition, 200), counted(exposition, 499)) == (1, 1)
    assert counted(exposition, 400) == 2  # the gateway's refusal and the frame's
    assert "smg_trio_websocket_connections 0.0" in exposition
    assert "smg_trio_websocket_streams 0.0" in exposition
    by_id = {line["request_id"]: line for line in lines}
    assert len(by_id) == 3
    for lane in ("served", "cancelled"):
        line = by_id[ends[lane]["response"]["id"].removeprefix("resp_")]
        assert (line["endpoint"], line["transport"]) == ("/v1/responses", "ws")
        assert line["client"].startswith("127.0.0.1:")
    assert by_id[ends["served"]["response"]["id"].removeprefix("resp_")]["status"] == 200
    cancelled = by_id[ends["cancelled"]["response"]["id"].removeprefix("resp_")]
    assert (cancelled["status"], cancelled["abort_cause"]) == (499, "client_gone")
    assert sorted(line["status"] for line in lines) == [200, 400, 499]


async def test_a_create_holds_its_body_from_the_memory_budget(server: LiveServer) -> None:
    budget = server.serving.gateway.memory_budget
    budget.limit_bytes = 64 * 1024
    with trio.fail_after(TEST_TIMEOUT_S):
        async with responses_socket(server) as connection:
            await connection.send_message(create("running", max_output_tokens=4000))
            while json.loads(await connection.get_message())["type"] != "response.created":
                pass
            # A body past what the budget has left, refused at once under its lane.
            await connection.send_message(create("big", input="x " * 40_000))
            while lane_of(refused := json.loads(await connection.get_message())) != "big":
                pass
            assert budget.in_flight_bytes > 0
            await connection.send_message(json.dumps({"type": "response.cancel"}))
            await connection.send_message(
                json.dumps({"type": "response.cancel", "stream_id": "running"})
            )
            events = await read_until(connection, 1, protocol_errors=1)
    assert (refused["type"], refused["stream_id"], refused["status"]) == ("error", "big", 429)
    assert refused["error"]["code"] == "memory_budget_exceeded"
    assert terminals_by_lane(events)["running"][0]["response"]["status"] == "cancelled"
    assert budget.in_flight_bytes == 0
