"""OpenAI's Responses API end to end (docs/client-apis.md §3): the `openai` SDK's
`responses.create` and `responses.stream` (its event accumulator) against the gateway and the
reference vLLM EngineCore replaying a known text over the real ZMQ wire, over HTTP/1.1 and h2c,
and the same text over our WebSocket protocol; stops, `max_output_tokens`, the event sequence."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio_websocket
from openai import DefaultHttpxClient, OpenAI
from openai.types.responses import Response

from smg_trio.frontends import websocket_sender
from tests.e2e.live_server import (
    API_KEY,
    MODEL,
    REPLAY_HEAD,
    STOP,
    LiveServer,
    live_server,
    openai_client,
)

TEST_TIMEOUT_S: Final = 30.0
QUESTION: Final = "How does the gateway work?"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path) as running:
        yield running


def sdk_client(server: LiveServer, *, h2: bool) -> OpenAI:
    if not h2:
        return openai_client(server)
    prior_knowledge = DefaultHttpxClient(http1=False, http2=True, timeout=20)
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=API_KEY,
        max_retries=0,
        http_client=prior_knowledge,
    )


def create_and_stream(client: OpenAI, **fields: Any) -> tuple[Response, Response, list[Any]]:
    """The same request whole and streamed: both responses, and the stream's events. The
    SDK's accumulator gives a final response for `response.completed` only; an incomplete one
    is the `response.incomplete` event's, as against OpenAI's own server."""
    with client:
        whole = client.responses.create(model=MODEL, **fields)
        with client.responses.stream(model=MODEL, **fields) as stream:
            events = list(stream)
            if events[-1].type == "response.incomplete":
                streamed = events[-1].response
            else:
                streamed = stream.get_final_response()
    return whole, streamed, events


@pytest.mark.parametrize("h2", [False, True], ids=["http1", "h2c"])
async def test_create_and_stream_agree_and_stop(server: LiveServer, h2: bool) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        whole, streamed, events = await trio.to_thread.run_sync(
            lambda: create_and_stream(
                sdk_client(server, h2=h2),
                input=QUESTION,
                instructions="Be brief.",
                metadata={"case": "stop"},
                extra_body={"stop": [STOP]},
            )
        )
    for response in (whole, streamed):
        assert response.output_text == REPLAY_HEAD
        assert response.status == "completed"
        assert response.id.startswith("resp_")
        assert response.instructions == "Be brief."
        assert response.metadata == {"case": "stop"}
        assert [item.type for item in response.output] == ["message"]
        assert response.usage is not None
        assert response.usage.total_tokens == (
            response.usage.input_tokens + response.usage.output_tokens
        )
    assert whole.usage == streamed.usage
    names = [event.type for event in events]
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(names[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))


async def test_max_output_tokens_is_incomplete(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        whole, streamed, events = await trio.to_thread.run_sync(
            lambda: create_and_stream(openai_client(server), input=QUESTION, max_output_tokens=5)
        )
    for response in (whole, streamed):
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage is not None
        assert response.usage.output_tokens == 5
        assert REPLAY_HEAD.startswith(response.output_text)
    assert events[-1].type == "response.incomplete"


async def ws_responses(server: LiveServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """One /v1/responses request over our WebSocket protocol: its frames, through the last."""
    frames: list[dict[str, Any]] = []
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{server.port}/v1/ws",
        extra_headers=[(b"authorization", f"Bearer {API_KEY}".encode())],
    ) as connection:
        request = {"type": "request", "id": 3, "path": "/v1/responses", "body": body}
        await connection.send_message(json.dumps(request))
        while True:
            frame = json.loads(await connection.get_message())
            frames.append(frame)
            if frame["type"] != "chunk":
                return frames


@pytest.mark.parametrize("frame_buffer", [1, 2])
async def test_websocket_events_stay_numbered_when_the_senders_buffer_is_full(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, frame_buffer: int
) -> None:
    # Responses events are numbered as they are framed (core/responses_dialect.py). With the
    # socket's sender buffer at one or two frames, a batch handed over at once finds it full or
    # takes it in part: what was framed and not taken goes later as it was framed, never
    # framed (and numbered) again (smg_trio/handoff.py; the frames once skipped 1 here).
    monkeypatch.setattr(websocket_sender, "FRAME_BUFFER", frame_buffer)
    body = {"model": MODEL, "input": QUESTION, "stream": True, "max_output_tokens": 24}
    with trio.fail_after(TEST_TIMEOUT_S):
        streamed = await ws_responses(server, {**body, "store": False})
    assert streamed[-1]["type"] == "done", streamed[-1]
    chunks = streamed[:-1]
    assert len(chunks) > 6
    assert [frame["data"]["sequence_number"] for frame in chunks] == list(range(len(chunks)))
    assert chunks[-1]["event"] in ("response.completed", "response.incomplete")


async def test_the_same_text_over_websocket(server: LiveServer) -> None:
    body = {"model": MODEL, "input": QUESTION, "stop": [STOP], "store": False}
    with trio.fail_after(TEST_TIMEOUT_S):
        streamed = await ws_responses(server, {**body, "stream": True})
        whole = await ws_responses(server, body)
    assert streamed[-1]["type"] == "done", streamed[-1]
    chunks = streamed[:-1]
    assert [frame["event"] for frame in chunks][:2] == ["response.created", "response.in_progress"]
    assert [frame["data"]["sequence_number"] for frame in chunks] == list(range(len(chunks)))
    deltas = [f["data"]["delta"] for f in chunks if f["event"] == "response.output_text.delta"]
    assert "".join(deltas) == REPLAY_HEAD
    last = chunks[-1]
    assert last["event"] == "response.completed"
    completed = Response.model_validate(last["data"]["response"])
    assert completed.output_text == REPLAY_HEAD
    body_frame = whole[-1]
    raw: dict[str, Any] = body_frame.get("data", body_frame.get("body")) or {}
    assert Response.model_validate(raw).output_text == REPLAY_HEAD
    assert raw["store"] is False
