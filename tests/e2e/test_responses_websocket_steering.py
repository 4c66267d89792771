"""Steering on the Responses WebSocket (docs/client-apis.md §3.4) with the unmodified openai
SDK over loopback to the gateway and a slow reference vLLM EngineCore (so a response is still
running when it is steered): accepted input continues a completed response as an automatic
successor; after a response that calls a function it waits (`response.steer.pending`) for the
client's continuation and goes in front of its input; it is handed back when the response does
not complete, when it already did, or when the input is not text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from openai import OpenAI

from tests.e2e.live_server import (
    MODEL,
    REPLAY_HEAD,
    REPLAY_TEXT,
    STOP,
    LiveServer,
    live_server,
    openai_client,
)
from tests.e2e.test_responses_tools import MARKUP, TOOLS, model_with_tool_template

TEST_TIMEOUT_S: Final = 40.0
STEP_MS: Final = 30.0  # the answer up to STOP takes most of a second: time to steer it
FIRST: Final = "How does the gateway work?"
STEER: Final = "And then?"
ENDS: Final = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, step_ms=STEP_MS, replay_text=REPLAY_TEXT) as running:
        yield running


def create(**fields: Any) -> dict[str, Any]:
    return {"type": "response.create", "model": MODEL, **fields}


def until(connection: Any, *kinds: str) -> list[Any]:
    """Events up to and including the first of `kinds`."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in kinds:
            return events
    raise AssertionError("the socket closed first")


def steered_once(client: OpenAI) -> tuple[list[Any], list[Any], list[Any]]:
    with client, client.responses.connect() as connection:
        connection.send(create(input=FIRST, stop=[STOP]))
        first = until(connection, "response.output_text.delta")
        target = first[0].response.id
        connection.response.steer(input=STEER, previous_response_id=target)
        first += until(connection, *ENDS)
        successor = until(connection, *ENDS)
        # Steering a response that completed hands the input back.
        connection.response.steer(input=STEER, previous_response_id=target)
        late = until(connection, "response.steer.failed")
    return first, successor, late


async def test_a_steered_response_is_continued_by_an_automatic_successor(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        first, successor, late = await trio.to_thread.run_sync(steered_once, openai_client(server))
    (accepted,) = [e for e in first if e.type == "response.steer.accepted"]
    target = first[0].response
    assert accepted.steer.previous_response_id == target.id
    assert accepted.steer.id.startswith("steer_")
    assert first[-1].type == "response.completed"
    assert first[-1].response.output_text == REPLAY_HEAD
    # The successor: the target's settings, its input the steer's, continuing the target.
    assert successor[0].type == "response.created"
    assert successor[-1].type == "response.completed"
    final = successor[-1].response
    assert final.previous_response_id == target.id
    assert final.output_text == REPLAY_HEAD
    assert final.usage.input_tokens > first[-1].response.usage.input_tokens
    assert [e.sequence_number for e in successor] == list(range(len(successor)))
    (failed,) = late
    assert failed.error.code == "response_already_completed"
    assert failed.steer.input == STEER


def steer_then_cancel(client: OpenAI) -> tuple[list[Any], Any, Any]:
    with client, client.responses.connect() as connection:
        connection.send(create(input=FIRST, max_output_tokens=200))
        events = until(connection, "response.output_text.delta")
        target = events[0].response.id
        image = [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]
        connection.response.steer(input=image, previous_response_id=target)
        refused = until(connection, "response.steer.failed")[-1]
        connection.response.steer(input=STEER, previous_response_id=target)
        events += until(connection, "response.steer.accepted")
        connection.send({"type": "response.cancel", "response_id": target})
        events += until(connection, *ENDS)
        handed_back = until(connection, "response.steer.failed")[-1]
    return events, refused, handed_back


async def test_steering_input_is_handed_back_when_it_cannot_be_committed(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        events, refused, handed_back = await trio.to_thread.run_sync(
            steer_then_cancel, openai_client(server)
        )
        await server.seconds_until_idle()
    assert (refused.error.code, refused.steer.id) == ("invalid_input", None)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "cancelled"
    accepted = next(e for e in events if e.type == "response.steer.accepted")
    assert handed_back.error.code == "response_not_active"
    assert handed_back.steer.id == accepted.steer.id
    assert handed_back.steer.input == STEER


def steer_a_tool_call(client: OpenAI) -> tuple[list[Any], list[Any], Any, Any]:
    with client, client.responses.connect() as connection:
        connection.send(create(input="Weather in Paris?", tools=TOOLS))
        events = until(connection, "response.reasoning_text.delta")
        target = events[0].response.id
        connection.response.steer(input="In Celsius, please.", previous_response_id=target)
        events += until(connection, *ENDS)
        pending = until(connection, "response.steer.pending")
        call = next(item for item in events[-1].response.output if item.type == "function_call")
        answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        connection.send(create(previous_response_id=target, input=[answer], tools=TOOLS))
        steered = until(connection, *ENDS)[-1]
        # The same continuation again: the steering input went into the first one only.
        connection.send(create(previous_response_id=target, input=[answer], tools=TOOLS))
        plain = until(connection, *ENDS)[-1]
    return events, pending, steered, plain


async def test_steering_a_function_call_waits_for_the_clients_continuation(
    tmp_path: Path,
) -> None:
    async with live_server(
        tmp_path,
        step_ms=STEP_MS,
        replay_text=MARKUP,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        model_path=model_with_tool_template(tmp_path),
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            events, pending, steered, plain = await trio.to_thread.run_sync(
                steer_a_tool_call, openai_client(server)
            )
    assert events[-1].type == "response.completed"
    (event,) = pending
    assert event.reason == "waiting_for_required_input"
    call = next(item for item in events[-1].response.output if item.type == "function_call")
    assert [(r.type, r.call_id, r.name) for r in event.required_input] == [
        ("function_call_output", call.call_id, "get_weather")
    ]
    assert event.steer.previous_response_id == events[0].response.id
    assert steered.type == plain.type == "response.completed"
    assert steered.response.usage.input_tokens > plain.response.usage.input_tokens
