"""Reasoning tokens in usage end to end (docs/tools-and-reasoning.md §11): the reference vLLM
EngineCore replays a reasoning model's output over the real ZMQ wire; the gateway runs a
`--reasoning-parser`. The `openai` SDK reads `usage.completion_tokens_details.reasoning_tokens`
from chat (full, streamed, n=2, reasoning hidden) and `output_tokens_details` from Responses;
the `anthropic` SDK's Messages usage has no such field, as vLLM's has none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
import trio
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.e2e.live_server import MODEL, LiveServer, live_server, openai_client
from tests.e2e.test_anthropic_messages import sdk_client

TEST_TIMEOUT_S: Final = 30.0
MESSAGES: Final[list[ChatCompletionMessageParam]] = [{"role": "user", "content": "Weather?"}]
THOUGHT: Final = "The user wants weather."
# (parser, the model's output, its reasoning by that parser's count): deepseek_r1 counts only
# between `<think>` and `</think>` ids; qwen3 starts in reasoning (its template opened it).
CASES: Final = [
    ("qwen3", f"<think>{THOUGHT}</think>Checking.", THOUGHT),
    ("deepseek_r1", f"<think>{THOUGHT}</think>Checking.", THOUGHT),
    ("qwen3", f"{THOUGHT}</think>Checking.", THOUGHT),
    ("deepseek_r1", f"{THOUGHT}</think>Checking.", ""),
]


def tokens_of(text: str) -> int:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


@pytest.fixture(params=CASES, ids=lambda case: f"{case[0]}:{case[1][:8]}")
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[LiveServer, int]]:
    parser, output, thought = request.param
    async with live_server(tmp_path, replay_text=output, reasoning_parser=parser) as running:
        yield running, tokens_of(thought)


def chat_usages(client: OpenAI) -> list[tuple[int | None, int]]:
    """(reasoning tokens, completion tokens) of: a body, n=2, hidden reasoning, a stream."""
    out: list[tuple[int | None, int]] = []
    for extra in ({}, {"n": 2}, {"include_reasoning": False}):
        body = client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body=extra)
        assert body.usage is not None
        assert body.usage.completion_tokens_details is not None
        out.append(
            (body.usage.completion_tokens_details.reasoning_tokens, body.usage.completion_tokens)
        )
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    (usage,) = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert usage.completion_tokens_details is not None
    out.append((usage.completion_tokens_details.reasoning_tokens, usage.completion_tokens))
    return out


async def test_chat_reports_the_parsers_count(served: tuple[LiveServer, int]) -> None:
    server, expected = served
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        usages = await trio.to_thread.run_sync(chat_usages, client)
    one, two, hidden, streamed = usages
    assert one[0] == hidden[0] == streamed[0] == expected
    assert two == (2 * expected, 2 * one[1])  # summed over the choices
    assert one[1] > expected


def responses_reasoning(client: OpenAI) -> tuple[int, int]:
    body = client.responses.create(model=MODEL, input="Weather?")
    assert body.usage is not None
    with client.responses.stream(model=MODEL, input="Weather?") as stream:
        final = stream.get_final_response()
    assert final.usage is not None
    return (
        body.usage.output_tokens_details.reasoning_tokens,
        final.usage.output_tokens_details.reasoning_tokens,
    )


async def test_responses_report_output_tokens_details(served: tuple[LiveServer, int]) -> None:
    server, expected = served
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        counts = await trio.to_thread.run_sync(responses_reasoning, client)
    assert counts == (expected, expected)


async def test_messages_usage_has_no_reasoning_count(tmp_path: Path) -> None:
    async with live_server(tmp_path, replay_text=CASES[0][1], reasoning_parser="qwen3") as server:
        with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
            message = await trio.to_thread.run_sync(
                lambda: client.messages.create(
                    model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
                )
            )
    assert set(message.usage.model_dump(exclude_none=True)) <= {"input_tokens", "output_tokens"}


def plain_usage(client: OpenAI) -> object:
    body = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert body.usage is not None
    return body.usage.completion_tokens_details


async def test_no_reasoning_parser_no_details(tmp_path: Path) -> None:
    async with live_server(tmp_path, replay_text=CASES[0][1]) as server:
        with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
            assert await trio.to_thread.run_sync(plain_usage, client) is None
