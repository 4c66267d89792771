"""vLLM's prompt and answer flags on a live gateway (`--response-role`, `--return-tokens-as-token-ids`,
`--enable-prompt-tokens-details`; serving/frontend_option_flags.py) in front of the reference vLLM
EngineCore over real ZMQ, read by the `openai` SDK: the reply's role in a full answer and in a
stream's role chunk, logprob tokens as `token_id:N` in chat and completions (a request's own
field winning), and usage.prompt_tokens_details with 0 cached tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.live_server import MODEL, STOP, LiveServer, live_server, openai_client

TEST_TIMEOUT_S: Final = 30.0
FLAGS: Final = {
    "response_role": "narrator",
    "return_tokens_as_token_ids": True,
    "enable_prompt_tokens_details": True,
}
MESSAGES: Final[list[ChatCompletionMessageParam]] = [{"role": "user", "content": "Go on."}]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, config_fields=FLAGS) as running:
        yield running


def chat_answers(client: OpenAI) -> None:
    full = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stop=[STOP], max_tokens=4, logprobs=True, top_logprobs=2
    )
    message = full.choices[0].message
    assert message.role == "narrator"
    assert message.content
    logprobs = full.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.content
    for entry in logprobs.content:
        assert entry.token.startswith("token_id:")
        int(entry.token.removeprefix("token_id:"))
        assert next(top.token for top in entry.top_logprobs) == entry.token  # greedy
        assert all(top.bytes == list(top.token.encode()) for top in entry.top_logprobs)
    # The sampled tokens' bytes stay their text's: joined, they are the reply.
    assert b"".join(bytes(entry.bytes or ()) for entry in logprobs.content).decode() == (
        message.content
    )
    usage = full.usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0  # reported, 0 included
    extra: dict[str, Any] = usage.prompt_tokens_details.model_extra or {}
    assert extra == {"created_cache_tokens": 0, "multimodal_tokens": None}

    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=3,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_tokens_as_token_ids": False},  # the request's own field wins
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "narrator"
    assert all(c.choices[0].delta.role is None for c in chunks[1:] if c.choices)
    tokens = [
        entry.token
        for c in chunks
        for choice in c.choices
        if choice.logprobs is not None
        for entry in choice.logprobs.content or ()
    ]
    assert tokens
    assert not any(t.startswith("token_id:") for t in tokens)
    last = chunks[-1].usage
    assert last is not None
    assert last.prompt_tokens_details is not None
    assert last.prompt_tokens_details.cached_tokens == 0


def completion_answers(client: OpenAI) -> None:
    full = client.completions.create(model=MODEL, prompt="Once", max_tokens=3, logprobs=1)
    logprobs = full.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens
    assert logprobs.text_offset
    assert all(token.startswith("token_id:") for token in logprobs.tokens)
    lengths = [len(token) for token in logprobs.tokens[:-1]]
    assert logprobs.text_offset == [sum(lengths[:i]) for i in range(len(logprobs.tokens))]
    assert logprobs.top_logprobs is not None
    assert all(key.startswith("token_id:") for top in logprobs.top_logprobs for key in top or {})
    usage = full.usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0


async def test_chat_answers_as_the_flags_ask(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(chat_answers, client)


async def test_completion_answers_as_the_flags_ask(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(completion_answers, client)


PROMPT_FLAGS: Final = {
    "chat_template_text": "{{ greeting }}{% for m in messages %}|{{ m['content'] }}{% endfor %}",
    "default_chat_template_kwargs": {"greeting": "Hello"},
    "trust_request_chat_template": True,
    "enable_force_include_usage": True,
}


def prompt_flags(client: OpenAI) -> None:
    def prompt_ids(**extra: Any) -> list[int]:
        full = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=1,
            extra_body={"return_token_ids": True, **extra},
        )
        ids = (full.model_extra or {})["prompt_token_ids"]
        assert isinstance(ids, list)
        return ids

    def tokens(text: str) -> list[int]:
        answer = client.post(
            "/tokenize",
            body={"prompt": text, "add_special_tokens": False},
            cast_to=httpx.Response,
        )
        ids = answer.json()["tokens"]
        assert isinstance(ids, list)
        return ids

    assert prompt_ids() == tokens("Hello|Go on.")  # the server's default variable
    assert prompt_ids(chat_template_kwargs={"greeting": "Hey"}) == tokens("Hey|Go on.")
    own = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    assert prompt_ids(chat_template=own) == tokens("<Go on.>")  # trusted
    # Forced usage: a stream that did not ask carries it on every chunk and at its end.
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, stream=True)
    )
    assert all(chunk.usage is not None for chunk in chunks)
    assert chunks[-1].choices == []
    last = chunks[-1].usage
    assert last is not None
    assert last.completion_tokens == 3


async def test_prompt_flags_and_forced_usage(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, config_fields=PROMPT_FLAGS) as running:
            with openai_client(running) as client:
                await trio.to_thread.run_sync(prompt_flags, client)
