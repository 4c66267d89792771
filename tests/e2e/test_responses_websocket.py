"""OpenAI's Responses WebSocket mode end to end (docs/client-apis.md §3.4) with the unmodified
openai SDK (`client.responses.connect()` and its lane session) over a real loopback socket to
the gateway and the reference vLLM EngineCore replaying a known text: create and stream,
`previous_response_id` chaining on the socket, eight lanes in flight with one cancelled (the
other seven complete, the engine ends with no request), a steer for no response, a refused
create, the connection-local cache, auth. Steering is in test_responses_websocket_steering.py,
the raw protocol (several in flight, bad frames, disconnect) in
test_responses_websocket_protocol.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from openai import OpenAI
from openai.lib.responses_websocket import ResponsesWebSocketLimits, ResponsesWebSocketSession
from websockets.exceptions import InvalidStatus

from tests.e2e.live_server import (
    MODEL,
    REPLAY_HEAD,
    REPLAY_TEXT,
    STOP,
    LiveServer,
    live_server,
    openai_client,
)

TEST_TIMEOUT_S: Final = 30.0
FIRST: Final = "How does the gateway work?"
SECOND: Final = "And then?"
LANES: Final = 8
CANCELLED_LANE: Final = "lane-3"
LIMITS: Final = ResponsesWebSocketLimits(
    max_lanes=LANES + 1,
    max_events_per_lane=4096,
    max_events=16384,
    max_bytes_per_lane=16 * 1024 * 1024,
    max_bytes=64 * 1024 * 1024,
)


LONG_REPLAY: Final = REPLAY_TEXT + " Filler words follow." * 1500
"""Without a stop, a response runs for seconds (about 6,000 tokens at 2 ms a step) before the
replay's EOS: long enough to be running when it is cancelled or its client leaves."""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, replay_text=LONG_REPLAY) as running:
        yield running


def create(**fields: Any) -> dict[str, Any]:
    """A `response.create` as a dict: `stop` is vLLM's extension, which the SDK's typed
    `create` does not take (the SDK sends a dict as it is)."""
    return {"type": "response.create", "model": MODEL, **fields}


def until_terminal(connection: Any) -> tuple[list[Any], Any]:
    """The events of one response on the default lane, and its final response."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events, getattr(event, "response", None)
    raise AssertionError("the socket closed before the response ended")


def chained_turns(client: OpenAI) -> tuple[list[Any], Any, list[Any], Any]:
    with client, client.responses.connect() as connection:
        connection.send(create(input=FIRST, stop=[STOP]))
        first_events, first = until_terminal(connection)
        connection.send(
            create(
                input=[{"role": "user", "content": [{"type": "input_text", "text": SECOND}]}],
                previous_response_id=first.id,
                stop=[STOP],
            )
        )
        second_events, second = until_terminal(connection)
    return first_events, first, second_events, second


async def test_create_streams_the_sse_events_and_chains_on_the_socket(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        first_events, first, second_events, second = await trio.to_thread.run_sync(
            chained_turns, openai_client(server)
        )
    kinds = [event.type for event in first_events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in first_events] == list(range(len(first_events)))
    deltas = "".join(e.delta for e in first_events if e.type == "response.output_text.delta")
    assert deltas == REPLAY_HEAD == first.output_text
    assert first.status == "completed"
    # The second turn continues the first: its prompt holds the first turn's input and output.
    assert second_events[-1].type == "response.completed"
    assert second.previous_response_id == first.id
    assert second.output_text == REPLAY_HEAD
    assert second.usage.input_tokens > first.usage.input_tokens
    # Default-lane events carry no lane.
    assert all(getattr(event, "stream_id", None) is None for event in first_events)


def eight_lanes_one_cancelled(client: OpenAI) -> dict[str, Any]:
    finals: dict[str, Any] = {}
    with (
        client,
        client.responses.connect() as connection,
        ResponsesWebSocketSession(connection, limits=LIMITS) as session,
    ):
        lanes = {f"lane-{n}": session.lane(f"lane-{n}") for n in range(LANES)}
        for name, lane in lanes.items():
            if name == CANCELLED_LANE:  # long enough to be running when cancelled
                lane.send(create(input=FIRST, max_output_tokens=4000))
            else:
                lane.send(create(input=FIRST, stop=[STOP]))
        cancelled = lanes[CANCELLED_LANE]
        while cancelled.recv().type != "response.output_text.delta":
            pass
        # Our extension: the SDK sends a dict as it is.
        connection.send({"type": "response.cancel", "stream_id": CANCELLED_LANE})
        for name, lane in lanes.items():
            finals[name] = lane.get_final_response()
    return finals


async def test_eight_lanes_in_flight_one_cancelled(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        finals = await trio.to_thread.run_sync(eight_lanes_one_cancelled, openai_client(server))
        # The cancelled response's engine request was aborted: the engine is idle at once.
        await server.seconds_until_idle()
    cancelled = finals.pop(CANCELLED_LANE)
    assert cancelled.status == "cancelled"
    assert len(finals) == LANES - 1
    for final in finals.values():
        assert final.status == "completed"
        assert final.output_text == REPLAY_HEAD
    assert len({final.id for final in finals.values()} | {cancelled.id}) == LANES


def steer_and_refused_create(client: OpenAI) -> tuple[Any, Any]:
    with client, client.responses.connect() as connection:
        connection.response.steer(input="faster", previous_response_id="resp_unknown")
        steer_failed = connection.recv()
        connection.send(create(input=FIRST, stream=False))
        refused = connection.recv()
    return steer_failed, refused


async def test_a_steer_for_no_response_and_a_bad_create_get_their_error_events(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        steer_failed, refused = await trio.to_thread.run_sync(
            steer_and_refused_create, openai_client(server)
        )
    assert steer_failed.type == "response.steer.failed"
    assert steer_failed.error.code == "response_not_found"
    assert steer_failed.steer.previous_response_id == "resp_unknown"
    assert steer_failed.steer.input == "faster"
    assert refused.type == "error"
    assert refused.status == 400
    assert refused.error.param == "stream"
    assert refused.error.type == "invalid_request_error"


def unstored_chain(client: OpenAI) -> tuple[Any, Any, Any]:
    with client:
        with client.responses.connect() as connection:
            connection.send(create(input=FIRST, stop=[STOP], store=False))
            _, first = until_terminal(connection)
            connection.send(
                create(input=SECOND, previous_response_id=first.id, stop=[STOP], store=False)
            )
            _, second = until_terminal(connection)
        # Another socket has no cache of the first's: an unstored response is not found.
        with client.responses.connect() as connection:
            connection.send(create(input=SECOND, previous_response_id=first.id, store=False))
            (missing,), _ = until_terminal(connection)
    return first, second, missing


async def test_an_unstored_response_chains_on_its_own_socket_only(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        first, second, missing = await trio.to_thread.run_sync(
            unstored_chain, openai_client(server)
        )
    assert first.store is False
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens
    assert missing.type == "error"
    assert (missing.status, missing.error.code) == (404, "previous_response_not_found")
    assert missing.error.param == "previous_response_id"


def stored_then_chained_elsewhere(client: OpenAI) -> tuple[Any, Any, Any]:
    with client:
        with client.responses.connect() as connection:
            connection.send(create(input=FIRST, stop=[STOP]))
            _, first = until_terminal(connection)
        with client.responses.connect() as connection:
            connection.send(create(input=SECOND, previous_response_id=first.id, stop=[STOP]))
            _, second = until_terminal(connection)
        retrieved = client.responses.retrieve(second.id)
    return first, second, retrieved


async def test_a_stored_response_chains_from_another_socket_and_over_http(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        first, second, retrieved = await trio.to_thread.run_sync(
            stored_then_chained_elsewhere, openai_client(server)
        )
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens
    assert retrieved.id == second.id
    assert retrieved.output_text == REPLAY_HEAD


def connect_with(client: OpenAI) -> None:
    with client, client.responses.connect():
        pass


async def test_a_wrong_api_key_is_refused_at_the_handshake(server: LiveServer) -> None:
    wrong = openai_client(server)
    wrong.api_key = "sk-wrong"
    with trio.fail_after(TEST_TIMEOUT_S), pytest.raises(InvalidStatus) as refused:
        await trio.to_thread.run_sync(connect_with, wrong)
    assert refused.value.response.status_code == 403
