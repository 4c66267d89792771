"""tool_choice "required" and a named function end to end, with no tool-call parser configured
(as vLLM needs none for them, docs/tools-and-reasoning.md §5): the reference vLLM EngineCore
replays what a grammar-guided model would say under the tools' schema; the `openai` SDK gets
the calls in the body and rebuilds the same from the stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

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

from tests.e2e.live_server import MODEL, LiveServer, live_server, openai_client

TEST_TIMEOUT_S: Final = 30.0
REPLAY: Final = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
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


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, replay_text=REPLAY) as running:
        yield running


def calls(completion: ChatCompletion) -> list[tuple[str, str]]:
    message = completion.choices[0].message
    return [
        (c.function.name, c.function.arguments)
        for c in message.tool_calls or ()
        if c.type == "function"
    ]


def body_and_stream(
    client: OpenAI, tool_choice: ChatCompletionToolChoiceOptionParam
) -> tuple[ChatCompletion, ChatCompletion]:
    body = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice
    )
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=TOOLS)
    for chunk in client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, stream=True
    ):
        state.handle_chunk(chunk)
    return body, state.get_final_completion()


async def test_required_reads_the_array_of_calls(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client, "required")
    for completion in (body, streamed):
        assert [(n, json.loads(a)) for n, a in calls(completion)] == [
            ("get_weather", {"city": "Paris"})
        ]
        assert completion.choices[0].finish_reason == "tool_calls"
        assert not completion.choices[0].message.content


async def test_a_named_function_takes_the_whole_output_as_its_arguments(
    server: LiveServer,
) -> None:
    named: ChatCompletionToolChoiceOptionParam = {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client, named)
    assert calls(body) == calls(streamed) == [("get_weather", REPLAY)]
    assert body.choices[0].finish_reason == streamed.choices[0].finish_reason == "tool_calls"
