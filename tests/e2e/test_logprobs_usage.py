"""Issue 11's response shapes through a live server and the reference vLLM EngineCore (real
ZMQ wire), parsed by the `openai` SDK: chat and completions logprobs (streaming and not),
continuous usage stats, chat echo."""

from __future__ import annotations

from typing import Final

import trio
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.live_server import (
    MODEL,
    REPLAY_HEAD,
    STOP,
    LiveServer,
    openai_client,
)

TEST_TIMEOUT_S: Final = 30.0
MESSAGES: Final[list[ChatCompletionMessageParam]] = [
    {"role": "user", "content": "How does it work?"}
]


def chat_logprobs(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stop=[STOP], logprobs=True, top_logprobs=3
    )
    choice = completion.choices[0]
    assert choice.message.content == REPLAY_HEAD
    assert choice.logprobs is not None
    content = choice.logprobs.content
    assert content is not None
    tokens = [entry.token for entry in content]
    # The stop's tokens never appear; every other token does, in order.
    assert REPLAY_HEAD.startswith("".join(tokens))
    assert len("".join(tokens)) >= len(REPLAY_HEAD) - len(" ")
    # The reference engine's logprobs differ per token (and are logprobs: below 0).
    assert len({entry.logprob for entry in content}) > 1
    assert all(entry.logprob < 0 for entry in content)
    for entry in content:
        assert entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == 3
        values = [top.logprob for top in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert entry.top_logprobs[0].token == entry.token  # greedy: the sampled one is first

    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stop=[STOP],
        logprobs=True,
        top_logprobs=1,
        stream=True,
        # vLLM's extra key: the SDK's typed stream_options has no room for it.
        extra_body={"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    )
    streamed: list[str] = []
    text = ""
    usages: list[int] = []
    for chunk in stream:
        assert chunk.usage is not None  # continuous usage: on every chunk
        usages.append(chunk.usage.completion_tokens)
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.logprobs is not None and c.logprobs.content is not None:
                streamed += [entry.token for entry in c.logprobs.content]
    assert text == REPLAY_HEAD
    assert streamed == tokens  # the same tokens streamed as in the full response
    assert usages == sorted(usages)
    assert completion.usage is not None
    assert usages[-1] == completion.usage.completion_tokens


def completion_logprobs(client: OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, logprobs=2
    )
    choice = completion.choices[0]
    assert choice.text == "Tokens stream"
    logprobs = choice.logprobs
    assert logprobs is not None
    assert logprobs.tokens is not None
    assert "".join(logprobs.tokens) == "Tokens stream"
    assert logprobs.text_offset is not None
    assert logprobs.text_offset[0] == 0
    assert logprobs.token_logprobs is not None
    assert len(logprobs.token_logprobs) == len(logprobs.tokens) == 4
    assert logprobs.top_logprobs is not None
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs, strict=True):
        assert top is not None
        assert token in top
        assert 1 <= len(top) <= 3
    stream = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, logprobs=0, stream=True
    )
    streamed: list[str] = []
    offsets: list[int] = []
    for chunk in stream:
        for c in chunk.choices:
            if c.logprobs is not None and c.logprobs.tokens:
                streamed += c.logprobs.tokens
                offsets += c.logprobs.text_offset or []
    assert streamed == logprobs.tokens
    assert offsets == logprobs.text_offset


def chat_echo(client: OpenAI) -> None:
    answers = [
        client.chat.completions.create(
            model=MODEL,
            messages=[*MESSAGES, {"role": "assistant", "content": "Well: "}],
            max_tokens=2,
            extra_body={
                "echo": echo,
                "add_generation_prompt": False,
                "continue_final_message": True,
            },
        )
        .choices[0]
        .message.content
        for echo in (False, True)
    ]
    assert answers[0]
    assert answers[1] == "Well: " + answers[0]


async def test_sdk_parses_chat_logprobs_and_continuous_usage(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(chat_logprobs, client)


async def test_sdk_parses_completion_logprobs(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(completion_logprobs, client)


async def test_sdk_chat_echo_prefixes_the_last_assistant_message(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(chat_echo, client)
