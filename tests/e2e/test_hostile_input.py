"""Hostile input against a real gateway and the reference vLLM engine, on loopback: a seeded fuzz
corpus over every endpoint and the WebSocket protocol (never a 5xx, never a closed socket, and
the server still serves afterwards), prompts too long to fit, deep JSON, and the memory budget
(docs/limits.md). The same checks at full size are `python -m bench hostile_input`."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio.testing
import trio_websocket

from harness.hostile_corpus import (
    GET_PATHS,
    POST_PATHS,
    expected_id,
    hostile_bodies,
    hostile_frames,
    huge_number,
)
from smg_trio.request.memory_budget import MemoryBudget
from tests.e2e.live_server import LiveServer, chat_body, live_server

TEST_S: Final = 30.0
SEED: Final = 17
BODIES: Final = 240
FRAMES: Final = 80
HUGE_PER_PATH: Final = 24
BIG_PROMPT_CHARS: Final = 1_000_000
CHAT: Final = "/v1/chat/completions"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path, api_key=None, step_ms=0.0, max_body_bytes=4 * 1024 * 1024
    ) as running:
        yield running


def assert_api_answer(response: httpx.Response, what: object) -> None:
    """A success, or the API's error JSON with a 4xx status: never a 5xx, never a traceback."""
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str), (what, error)
        assert error.get("code") or error.get("type"), (what, error)  # OpenAI's or Anthropic's
        assert "Traceback" not in response.text


async def assert_serves(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(stream=False, max_tokens=3))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


async def test_fuzzed_bodies_on_every_endpoint_never_get_a_5xx(server: LiveServer) -> None:
    with trio.fail_after(TEST_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client:
            for index, item in enumerate(hostile_bodies(SEED, BODIES)):
                response = await client.post(item.path, content=item.body)
                assert_api_answer(response, (SEED, index, item.path, item.body[:200]))
            for path in GET_PATHS:
                for method in ("GET", "POST", "DELETE", "HEAD"):
                    response = await client.request(method, path, content=b"{[")
                    if method != "HEAD":
                        assert_api_answer(response, (method, path))
            await assert_serves(client)


async def test_numbers_no_field_holds_never_get_a_5xx(server: LiveServer) -> None:
    """Issue 45's class of the corpus on every endpoint, over HTTP and over /v1/ws: a 300- or
    5000-digit integer, 1e400, a bool or a negative, on a numeric field or in free JSON."""
    rng = random.Random(SEED)
    bodies = [(path, huge_number(path, rng)) for path in POST_PATHS for _ in range(HUGE_PER_PATH)]
    with trio.fail_after(TEST_S):
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client,
            trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/v1/ws") as ws,
        ):
            for index, (path, body) in enumerate(bodies):
                response = await client.post(path, content=body)
                assert_api_answer(response, (index, path, body[:200]))
                frame = f'{{"type":"request","id":{index},"path":"{path}","body":{body}}}'
                await ws.send_message(frame)
                while True:
                    answer = await next_frame(ws)
                    if answer["type"] == "error":
                        error = answer["error"]
                        assert "internal_error" not in (error.get("code"), error["type"]), answer
                        assert error["type"] != "api_error", answer
                    if answer["type"] in ("done", "response", "error"):
                        assert answer["id"] == index, answer
                        break
            await assert_serves(client)


async def next_frame(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await ws.get_message())
    return frame


async def test_fuzzed_frames_never_close_the_socket_and_every_id_ends_once(
    server: LiveServer,
) -> None:
    """Every id a fuzzed frame still names (however malformed the frame) ends in exactly one
    terminal frame; the socket stays open and a stream beside them finishes (issue 33: a
    malformed request frame used to be answered under a null id, so its id never ended)."""
    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    live = {"type": "request", "id": "live", "path": CHAT, "body": chat_body(max_tokens=200)}
    last = {"type": "request", "id": "last", "path": CHAT, "body": chat_body(max_tokens=3)}
    frames = list(hostile_frames(SEED, FRAMES))
    expected = {"live", "last"} | {
        stream_id
        for index, frame in enumerate(frames)
        if (stream_id := expected_id(frame, index)) is not None
    }
    assert len(expected) > FRAMES // 2  # the corpus keeps most ids readable
    terminals: dict[object, int] = {}
    with trio.fail_after(TEST_S):
        async with trio_websocket.open_websocket_url(url) as ws:

            async def read_until_all_ended() -> None:
                while not expected <= terminals.keys():
                    frame = await next_frame(ws)
                    if frame["type"] == "error":
                        error = frame["error"]  # OpenAI's error object, or Anthropic's
                        assert "internal_error" not in (error.get("code"), error["type"]), frame
                        assert error["type"] != "api_error", frame
                    if frame["type"] in ("done", "response", "error") and frame["id"] is not None:
                        terminals[frame["id"]] = terminals.get(frame["id"], 0) + 1

            # Read while sending: the server holds back a socket whose client does not read.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_until_all_ended)
                await ws.send_message(json.dumps(live))
                for hostile in frames:
                    await ws.send_message(hostile)
                await ws.send_message(json.dumps(last))
            # Anything still in flight would come now: no id may end twice.
            with trio.move_on_after(0.3):
                while True:
                    frame = await next_frame(ws)
                    if frame["type"] in ("done", "response", "error") and frame["id"] is not None:
                        terminals[frame["id"]] = terminals.get(frame["id"], 0) + 1
            assert not ws.closed
    assert {i: n for i, n in terminals.items() if n != 1} == {}


async def test_prompts_that_cannot_fit_are_refused_over_http_and_websocket(
    server: LiveServer,
) -> None:
    big = chat_body(stream=False, messages=[{"role": "user", "content": "word " * 200_000}])
    deep = '{"type":"request","id":"deep","path":"/v1/completions","x":' + "[" * 5000
    answers: list[dict[str, Any]] = []
    with trio.fail_after(TEST_S):
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client,
            trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/v1/ws") as ws,
        ):

            async def over_http() -> None:
                response = await client.post(CHAT, json=big)
                answers.append(response.json()["error"])

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(over_http)
                await ws.send_message(
                    json.dumps({"type": "request", "id": 1, "path": CHAT, "body": big})
                )
                await ws.send_message(deep + "]" * 5000 + "}")
                frames = [await next_frame(ws), await next_frame(ws)]
            await assert_serves(client)
    by_id = {frame["id"]: frame for frame in frames}
    assert by_id["deep"]["error"]["code"] == "json_too_deep"
    answers.append(by_id[1]["error"])
    for error in answers:
        assert error["code"] == "context_length_exceeded", error
        assert error["message"].startswith("This model's maximum context length is 4096 tokens.")


async def test_deep_json_is_a_400_on_every_endpoint_and_over_websocket(
    server: LiveServer,
) -> None:
    # /v1/responses decoded its `previous_response_id` before any depth check: msgspec's
    # RecursionError was a 500 (issue 33's fuzz). Every POST path, a known and an unknown field.
    deep = "[" * 5000 + "]" * 5000
    bodies = [f'{{"{field}":{deep},"max_tokens":2}}' for field in ("input", "messages", "zz")]
    with trio.fail_after(TEST_S):
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client,
            trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/v1/ws") as ws,
        ):
            for path in POST_PATHS:
                for index, body in enumerate(bodies):
                    response = await client.post(path, content=body)
                    assert response.status_code == 400, (path, response.text[:300])
                    assert "deeper than 128" in response.text, (path, response.text[:300])
                    frame = f'{{"type":"request","id":{index},"path":"{path}","body":{body}}}'
                    await ws.send_message(frame)
                    answer = await next_frame(ws)
                    assert answer["id"] == index, (path, answer)
                    assert "deeper than 128" in json.dumps(answer), (path, answer)
            await assert_serves(client)


async def test_past_the_memory_budget_a_request_gets_429_and_retry_after(
    server: LiveServer,
) -> None:
    # Small sizes: the refused body is on the server before the 429 closes the connection.
    budget = MemoryBudget(64 * 1024)
    server.serving.gateway.memory_budget = budget
    body = json.dumps(chat_body(stream=False, max_tokens=2, pad="p" * 20_000)).encode()
    with trio.fail_after(TEST_S):
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client,
            trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/v1/ws") as ws,
        ):
            with budget.reserve(48 * 1024):  # what other requests in flight hold
                response = await client.post(CHAT, content=body)
                assert response.status_code == 429, response.text
                assert response.headers["retry-after"] == "1"
                assert response.json()["error"]["code"] == "memory_budget_exceeded"
                frame = b'{"type":"request","id":5,"path":"/v1/chat/completions","body":' + body
                await ws.send_message((frame + b"}").decode())
                refused = await next_frame(ws)
                assert (refused["id"], refused["error"]["code"]) == (5, "memory_budget_exceeded")
            assert budget.in_flight_bytes == 0
            response = await client.post(CHAT, content=body)
            assert response.status_code == 200, response.text  # admitted again
            await trio.testing.wait_all_tasks_blocked()  # the response's handler has ended
            assert budget.in_flight_bytes == 0
