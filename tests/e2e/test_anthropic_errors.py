"""Bad requests to Anthropic's Messages API get Anthropic's error shape and status
(docs/client-apis.md §2.4): `{"type":"error","error":{"type","message"}}`, the message naming
the field; refused before the body is read too (auth, size), since the path picks the dialect.
The `anthropic` SDK raises its own typed errors on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import anthropic
import httpx
import pytest
import trio

from tests.e2e.live_server import API_KEY, MODEL, LiveServer, live_server
from tests.e2e.test_anthropic_messages import event_names, sdk_client
from tests.e2e.test_lifecycle import assert_engine_request_gone

TEST_TIMEOUT_S: Final = 30.0
USER: Final[Any] = {"role": "user", "content": "Hi"}
BASE: Final[dict[str, Any]] = {"model": MODEL, "messages": [USER], "max_tokens": 16}
TOOL: Final = {"name": "f", "input_schema": {"type": "object"}}


def blocks(*content: object) -> dict[str, Any]:
    return {**BASE, "messages": [{"role": "user", "content": list(content)}]}


# (body, status, error type, what the message must name)
BAD_BODIES: Final[list[tuple[Any, int, str, str]]] = [
    ({"model": MODEL, "messages": [USER]}, 400, "invalid_request_error", "max_tokens"),
    ({**BASE, "max_tokens": 0}, 400, "invalid_request_error", "max_tokens"),
    ({**BASE, "frequency_penalty": 0.1}, 400, "invalid_request_error", "frequency_penalty"),
    (
        {**BASE, "metadata": {"user_id": "u", "tags": []}},
        400,
        "invalid_request_error",
        "metadata.tags",
    ),
    ({**BASE, "temperature": 1.5}, 400, "invalid_request_error", "temperature"),
    ({**BASE, "top_p": 0}, 400, "invalid_request_error", "top_p"),
    ({**BASE, "messages": []}, 400, "invalid_request_error", "messages"),
    (
        {**BASE, "messages": [{"role": "tool", "content": "x"}]},
        400,
        "invalid_request_error",
        "messages[0].role",
    ),
    ({**BASE, "stop_sequences": [""]}, 400, "invalid_request_error", "stop_sequences"),
    ({**BASE, "stream": "yes"}, 400, "invalid_request_error", "stream"),
    ({**BASE, "tools": [TOOL]}, 400, "invalid_request_error", "tool_choice"),
    ({**BASE, "tool_choice": {"type": "any"}}, 400, "invalid_request_error", "tool_choice"),
    (
        {**BASE, "thinking": {"type": "enabled", "budget_tokens": 10}},
        400,
        "invalid_request_error",
        "thinking.budget_tokens",
    ),
    (
        {**BASE, "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 4000}},
        400,
        "invalid_request_error",
        "thinking.budget_tokens",
    ),
    (
        blocks({"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}),
        400,
        "invalid_request_error",
        "messages[0].content[0]",
    ),
    (
        blocks({"type": "document", "source": {}}),
        400,
        "invalid_request_error",
        "messages[0].content[0].type",
    ),
    (
        blocks({"type": "text", "text": "x", "cache_control": {"type": "persistent"}}),
        400,
        "invalid_request_error",
        "cache_control.type",
    ),
    (
        blocks({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}),
        400,
        "invalid_request_error",
        "cache_control.ttl",
    ),
    (
        blocks({"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        400,
        "invalid_request_error",
        "messages[0].content[0].type",
    ),
    (
        blocks({"type": "tool_result", "tool_use_id": "t", "is_error": True}),
        400,
        "invalid_request_error",
        "is_error",
    ),
    ({**BASE, "model": "nope"}, 404, "not_found_error", "model"),
    (b"{not json", 400, "invalid_request_error", "not valid JSON"),
    ([1, 2], 400, "invalid_request_error", "object"),
]


COUNT_TOKENS_BAD_BODIES: Final[list[tuple[Any, str]]] = [
    ({"model": MODEL}, "messages"),
    ({"model": MODEL, "messages": [USER], "max_tokens": 4}, "max_tokens"),  # it samples nothing
    ({"model": MODEL, "messages": [USER], "system": [{"type": "image"}]}, "system[0].type"),
]


async def post_all(
    server: LiveServer, path: str, bodies: list[Any]
) -> list[tuple[int, dict[str, Any]]]:
    answers = []
    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        for body in bodies:
            content = body if isinstance(body, bytes) else None
            response = await client.post(
                path,
                json=None if content is not None else body,
                content=content,
                headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"},
            )
            answers.append((response.status_code, response.json()))
    return answers


async def test_bad_bodies_get_anthropics_error_naming_the_field(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        answers = await post_all(server, "/v1/messages", [case[0] for case in BAD_BODIES])
        counted = await post_all(
            server, "/v1/messages/count_tokens", [case[0] for case in COUNT_TOKENS_BAD_BODIES]
        )
    for (body, status, kind, named), (got_status, error) in zip(BAD_BODIES, answers, strict=True):
        assert (got_status, error["type"], error["error"]["type"]) == (status, "error", kind), body
        assert set(error["error"]) == {"type", "message"}
        assert named in error["error"]["message"], (body, error)
    for (body, named), (got_status, error) in zip(COUNT_TOKENS_BAD_BODIES, counted, strict=True):
        assert (got_status, error["error"]["type"]) == (400, "invalid_request_error"), body
        assert named in error["error"]["message"], (body, error)


async def test_refused_before_the_body_is_read(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            unauthorized = await client.post("/v1/messages", json=BASE, headers={"x-api-key": "x"})
            too_large = await client.post(
                "/v1/messages", content=b"x" * (65 * 1024), headers={"x-api-key": API_KEY}
            )
            wrong_method = await client.get("/v1/messages", headers={"x-api-key": API_KEY})
            bearer = await client.post("/v1/messages", json=BASE, headers=server.auth)
    got = [
        (r.status_code, r.json()["type"], r.json()["error"]["type"])
        for r in (unauthorized, too_large, wrong_method)
    ]
    assert got == [
        (401, "error", "authentication_error"),
        (413, "error", "request_too_large"),
        (405, "error", "invalid_request_error"),
    ]
    assert bearer.status_code == 200  # `Authorization: Bearer` is still accepted


def sdk_errors(client: anthropic.Anthropic, server: LiveServer) -> list[type[Exception]]:
    raised: list[type[Exception]] = []
    calls: list[Any] = [
        lambda: client.messages.create(model=MODEL, messages=[USER], max_tokens=0),
        lambda: client.messages.create(model="nope", messages=[USER], max_tokens=4),
        lambda: client.with_options(api_key="wrong").messages.create(
            model=MODEL, messages=[USER], max_tokens=4
        ),
        lambda: client.messages.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * 70_000}], max_tokens=4
        ),
    ]
    for call in calls:
        with pytest.raises(anthropic.APIStatusError) as caught:
            call()
        raised.append(type(caught.value))
    return raised


async def test_the_sdk_raises_its_typed_errors(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        raised = await trio.to_thread.run_sync(sdk_errors, client, server)
    assert raised == [
        anthropic.BadRequestError,
        anthropic.NotFoundError,
        anthropic.AuthenticationError,
        anthropic.ContentTooLargeError,
    ]


def overloaded(server: LiveServer) -> anthropic.APIStatusError:
    with sdk_client(server) as client, pytest.raises(anthropic.OverloadedError) as caught:
        client.messages.create(model=MODEL, messages=[USER], max_tokens=4)
    return caught.value


async def test_no_ready_engine_is_overloaded_529(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, with_engine=False) as server:
            error = await trio.to_thread.run_sync(overloaded, server)
    assert error.status_code == 529
    body: Any = error.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "overloaded_error"
    assert "worker is ready" in body["error"]["message"]


async def test_the_deadline_before_and_after_the_first_byte(tmp_path: Path) -> None:
    endless = {**BASE, "max_tokens": 2000}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, step_ms=20.0, request_timeout_s=0.3) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            before = dict(await server.counters())
            whole = await client.post("/v1/messages", json=endless)
            await assert_engine_request_gone(server, before)
            before = dict(await server.counters())
            streamed = await client.post("/v1/messages", json={**endless, "stream": True})
            await assert_engine_request_gone(server, before)
            metrics = (await client.get("/metrics")).text
    assert whole.status_code == 504
    assert whole.json()["error"]["type"] == "timeout_error"
    assert streamed.status_code == 200
    events = event_names(streamed.content)
    assert [name for name, _ in events[:3]] == ["message_start", "content_block_start", "ping"]
    name, data = events[-1]  # an error event ends the stream, as Anthropic's do
    assert (name, data["type"], data["error"]["type"]) == ("error", "error", "timeout_error")
    # The metrics count Messages requests under their own path.
    assert 'smg_trio_requests_total{endpoint="/v1/messages",status="504"' in metrics
