"""A structured-output constraint after reasoning, end to end (docs/tools-and-reasoning.md §5):
the gateway runs `--reasoning-parser qwen3` and sends `reasoning_ended: false`; the reference
vLLM EngineCore, launched with `--reasoning-parser qwen3` as vLLM's would be, replays a
`<think>…</think>` block and applies the grammar only after `</think>`."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
)

from tests.e2e.live_server import API_KEY, MODEL, LiveServer, live_server, openai_client

TEST_TIMEOUT_S: Final = 30.0
REASONING: Final = "The user wants the weather in Paris."
ARGUMENTS: Final = '{"city": "Paris"}'
REPLAY: Final = f"<think>{REASONING}</think>{ARGUMENTS}"
TOOLS: Final[list[ChatCompletionFunctionToolParam]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES: Final[list[ChatCompletionMessageParam]] = [{"role": "user", "content": "Weather?"}]
NAMED: Final[ChatCompletionToolChoiceOptionParam] = {
    "type": "function",
    "function": {"name": "get_weather"},
}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path,
        replay_text=REPLAY,
        reasoning_parser="qwen3",
        engine_args=("--reasoning-parser", "qwen3"),
    ) as running:
        yield running


def body_and_stream(client: OpenAI, request_id: str) -> tuple[ChatCompletion, ChatCompletion]:
    body = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice=NAMED,
        extra_headers={"x-request-id": request_id},
    )
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=TOOLS)
    for chunk in client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, stream=True
    ):
        state.handle_chunk(chunk)
    return body, state.get_final_completion()


async def received(server: LiveServer, request_id: str) -> dict[str, Any]:
    value = await server.backend.call_utility("smg_trio_received", request_id)
    assert value is not None
    return dict(value)


async def test_a_named_call_after_reasoning_is_gated_and_parsed(server: LiveServer) -> None:
    tag = f"gated-{uuid.uuid4().hex}"
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client, tag)
        sent = await received(server, tag)
    assert sent["reasoning_ended"] is False
    assert json.loads(sent["structured_outputs"]["json"])["properties"] == {
        "city": {"type": "string"}
    }
    for completion in (body, streamed):
        choice = completion.choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()]
        assert [(name, json.loads(args)) for name, args in calls] == [
            ("get_weather", {"city": "Paris"})
        ]
        assert (choice.message.model_extra or {}).get("reasoning_content") == REASONING
        assert choice.finish_reason == "tool_calls"


async def chat_choice(server: LiveServer, request_id: str, **extra: Any) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Yes or no?"}],
        "guided_choice": ["yes", "no"],
        "temperature": 0,
        **extra,
    }
    headers = {"authorization": f"Bearer {API_KEY}", "x-request-id": request_id}
    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.post(
            f"{server.base_url}/v1/chat/completions", json=body, headers=headers
        )
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    return message


async def test_the_engine_follows_a_choice_only_after_the_reasoning(server: LiveServer) -> None:
    """The reference engine follows a choice constraint: gated, the replayed reasoning goes
    through and the choice follows `</think>`; with thinking off the choice is the whole
    output from the first token (`reasoning_ended: true`)."""
    with trio.fail_after(TEST_TIMEOUT_S):
        gated_id, plain_id = f"choice-{uuid.uuid4().hex}", f"plain-{uuid.uuid4().hex}"
        gated = await chat_choice(server, gated_id)
        plain = await chat_choice(server, plain_id, chat_template_kwargs={"enable_thinking": False})
        assert (await received(server, gated_id))["reasoning_ended"] is False
        assert (await received(server, plain_id))["reasoning_ended"] is True
    assert (gated["reasoning_content"], gated["content"]) == (REASONING, "yes")
    assert (plain.get("reasoning_content"), plain["content"]) == (None, "yes")
