"""Issue 45: every numeric field of every endpoint, over HTTP, over our WebSocket protocol and
over the Responses WebSocket mode, refuses the hostile numbers (beyond int64, beyond float
range, a float overflow, a bool, a negative where none is allowed) with a 400 naming the field:
never a 5xx. The fields are read from the request Structs (harness/numeric_fields.py); a real
gateway and the reference vLLM engine on loopback answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio_websocket

from harness.numeric_fields import (
    ENDPOINTS,
    FLOAT_OVERFLOW,
    GENERATE,
    HUGE_INT,
    MESSAGES,
    RESPONSES,
    NumericField,
    body_with,
    field_name,
    hostile_numbers,
    numeric_fields,
)
from tests.e2e.live_server import LiveServer, live_server

TEST_S: Final = 60.0
CHAT: Final = "/v1/chat/completions"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, api_key=None, step_ms=0.0) as running:
        yield running


def cases() -> Iterator[tuple[str, NumericField, str, bytes]]:
    for path, (struct, base) in ENDPOINTS.items():
        for field in numeric_fields(struct):
            for number in hostile_numbers(field):
                yield path, field, number, body_with(base, field, number)


def assert_names_field(error: dict[str, Any], field: NumericField, what: object) -> None:
    """OpenAI's error names the field in `param`; Anthropic's has no `param`: its message."""
    if "param" in error:
        assert field_name(error["param"] or "") == field.name, (what, error)
    else:
        assert field.name in error["message"], (what, error)


def test_the_walk_finds_every_numeric_field_class() -> None:
    """The walk is not empty where it must not be: the fields the issue names, nested ones
    and array items among them."""
    paths = {(path, field.path) for path, field, _, _ in cases()}
    for expected in (
        (CHAT, "seed"),
        (CHAT, "stop_token_ids[0]"),
        (CHAT, "logit_bias.5"),
        (GENERATE, "top_logprobs_num"),
        (GENERATE, "sampling_params.sampling_seed"),
        ("/v1/completions", "prompt[0][0]"),
        (MESSAGES, "thinking.budget_tokens"),
        (RESPONSES, "max_output_tokens"),
        ("/v1/detokenize", "tokens[0]"),
    ):
        assert expected in paths


async def test_issue_45s_two_bodies_are_400s_naming_the_field(server: LiveServer) -> None:
    """The two bodies of 10,000 that answered 500: a 300-digit `seed` on chat, a 300-digit
    `top_logprobs_num` on /generate."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 0}
    generate = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, "top_logprobs_num": 0}
    with trio.fail_after(TEST_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client:
            for path, body, param in (
                (CHAT, chat, "seed"),
                (GENERATE, generate, "top_logprobs_num"),
            ):
                text = json.dumps(body).replace(f'"{param}": 0', f'"{param}": {HUGE_INT}')
                response = await client.post(path, content=text)
                assert response.status_code == 400, response.text[:300]
                assert response.json()["error"]["param"] == param


async def test_every_numeric_field_refuses_hostile_numbers_over_http(server: LiveServer) -> None:
    seen = 0
    with trio.fail_after(TEST_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client:
            for path, field, number, body in cases():
                what = (path, field.path, number[:24])
                response = await client.post(path, content=body)
                assert response.status_code == 400, (what, response.text[:300])
                assert_names_field(response.json()["error"], field, what)
                seen += 1
    assert seen > 300  # every field of 8 endpoints, 5 to 7 numbers each


async def test_every_numeric_field_refuses_hostile_numbers_over_websocket(
    server: LiveServer,
) -> None:
    """The same bodies as request frames of /v1/ws: each id ends in one error frame naming the
    field; then a frame whose id itself is beyond int64 is refused naming `id`."""
    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    sent = list(cases())
    with trio.fail_after(TEST_S):
        async with trio_websocket.open_websocket_url(url) as ws:
            for index, (path, _, _, body) in enumerate(sent):
                frame = f'{{"type":"request","id":{index},"path":"{path}","body":{body.decode()}}}'
                await ws.send_message(frame)
            ended: set[int] = set()
            while len(ended) < len(sent):
                answer = json.loads(await ws.get_message())
                index = answer["id"]
                path, field, number, _ = sent[index]
                assert answer["type"] == "error", ((path, field.path, number[:24]), answer)
                assert_names_field(answer["error"], field, (path, field.path, number[:24]))
                assert index not in ended
                ended.add(index)
            for stream_id in (HUGE_INT, FLOAT_OVERFLOW, "true"):
                await ws.send_message(
                    f'{{"type":"request","id":{stream_id},"path":"{CHAT}","body":{{}}}}'
                )
                answer = json.loads(await ws.get_message())
                assert (answer["type"], answer["id"]) == ("error", None), answer
                assert answer["error"]["param"] == "id", answer
            assert not ws.closed


async def test_every_responses_field_refuses_hostile_numbers_over_the_responses_socket(
    server: LiveServer,
) -> None:
    """`response.create` on `GET /v1/responses` upgraded: an error event with status 400
    naming the field, also for a number no float holds (which fails the frame's own decoding)."""
    struct, base = ENDPOINTS[RESPONSES]
    url = f"ws://127.0.0.1:{server.port}/v1/responses"
    with trio.fail_after(TEST_S):
        async with trio_websocket.open_websocket_url(url) as ws:
            for field in numeric_fields(struct):
                for number in hostile_numbers(field):
                    body = body_with(base, field, number).decode()
                    await ws.send_message('{"type":"response.create",' + body[1:])
                    while True:  # a create that started answers response.failed's pair
                        event = json.loads(await ws.get_message())
                        if event["type"] == "error":
                            break
                    what = (field.path, number[:24])
                    assert event["status"] == 400, (what, event)
                    assert_names_field(event["error"], field, what)


async def test_a_retrieves_starting_after_beyond_int64_is_a_400_naming_it(
    server: LiveServer,
) -> None:
    """The one number of a query string: a sequence number, which a store keeps as int64
    (a larger one reached SQLite: `OverflowError`)."""
    with trio.fail_after(TEST_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TEST_S) as client:
            created = await client.post(
                "/v1/responses", json={"input": "hi", "max_output_tokens": 2, "background": True}
            )
            response_id = created.json()["id"]
            for number in (str(2**63), HUGE_INT, "9" * 5000, "-1"):
                response = await client.get(
                    f"/v1/responses/{response_id}?stream=true&starting_after={number}"
                )
                assert response.status_code == 400, response.text[:300]
                assert response.json()["error"]["param"] == "starting_after"
