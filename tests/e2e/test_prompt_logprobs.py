"""Prompt logprobs (issue 11) through a live server and the reference vLLM EngineCore over the
real ZMQ wire, parsed by the `openai` SDK: completions `echo` + `logprobs` with max_tokens 0
(lm-eval-harness's loglikelihood scoring) and > 0, and vLLM's `prompt_logprobs` extra on chat
and completions, in vLLM's shapes. The reference engine ranks every prompt token second
(`engines/wire_adapter.prompt_position_logprobs`)."""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import pytest
import trio
from openai import OpenAI

from smg_trio.engines.wire_adapter import PROMPT_TOKEN_RANK
from tests.e2e.live_server import API_KEY, MODEL, LiveServer, openai_client

TEST_TIMEOUT_S: Final = 30.0
PROMPT: Final = "Once upon a time"


def prompt_token_count(client: OpenAI) -> int:
    scored = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1)
    assert scored.usage is not None
    count: int = scored.usage.prompt_tokens
    return count


def check_prompt_logprobs(entries: Any, prompt_tokens: int, width: int) -> None:
    """vLLM's `prompt_logprobs`: null first, then per position the prompt token (its rank) and
    the top `width` candidates ranked 1..width, keyed by token id."""
    assert isinstance(entries, list)
    assert len(entries) == prompt_tokens
    assert entries[0] is None
    for entry in entries[1:]:
        assert isinstance(entry, dict)
        assert all(key.isdigit() for key in entry)
        ranks = [candidate["rank"] for candidate in entry.values()]
        assert ranks[0] == PROMPT_TOKEN_RANK
        if width >= PROMPT_TOKEN_RANK:  # the prompt token is one of the top-k: listed once
            assert sorted(ranks) == list(range(1, width + 1))
        else:
            assert sorted(ranks[1:]) == list(range(1, width + 1))
        for candidate in entry.values():
            assert candidate["logprob"] < 0
            assert isinstance(candidate["decoded_token"], str)


def echo_scoring(client: OpenAI) -> None:
    """max_tokens 0: the prompt alone, its logprobs (null first), one engine token in usage."""
    prompt_tokens = prompt_token_count(client)
    scored = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1
    )
    choice = scored.choices[0]
    assert choice.text == PROMPT
    logprobs = choice.logprobs
    assert logprobs is not None
    assert logprobs.tokens is not None
    assert len(logprobs.tokens) == prompt_tokens
    assert logprobs.token_logprobs is not None
    assert logprobs.top_logprobs is not None
    # The SDK types these entries as never null; vLLM's first (the first prompt token) is.
    token_logprobs: list[float | None] = list(logprobs.token_logprobs)
    top_logprobs: list[dict[str, float] | None] = list(logprobs.top_logprobs)
    assert token_logprobs[0] is None
    assert top_logprobs[0] is None
    assert all(value is not None and value < 0 for value in token_logprobs[1:])
    for token, top in zip(logprobs.tokens[1:], top_logprobs[1:], strict=True):
        assert top is not None
        assert token in top
        assert len(top) == 2
        assert top[token] < max(top.values())  # ranked second by the engine
    offsets = logprobs.text_offset
    assert offsets is not None
    assert offsets[0] == 0
    lengths = [len(token) for token in logprobs.tokens]
    assert offsets == [sum(lengths[:i]) for i in range(len(lengths))]
    assert scored.usage is not None
    assert scored.usage.prompt_tokens == prompt_tokens
    assert scored.usage.completion_tokens == 1  # vLLM generates one token and drops it
    extra = choice.model_extra or {}
    check_prompt_logprobs(extra.get("prompt_logprobs"), prompt_tokens, 1)


def echo_then_generated(client: OpenAI) -> None:
    """max_tokens > 0: the prompt's positions, then the generated ones, in one list."""
    prompt_tokens = prompt_token_count(client)
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, logprobs=0)
    echoed = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=3, logprobs=0, echo=True
    )
    generated, choice = plain.choices[0], echoed.choices[0]
    assert choice.text == PROMPT + generated.text
    assert generated.logprobs is not None
    assert choice.logprobs is not None
    assert generated.logprobs.tokens is not None
    assert choice.logprobs.tokens is not None
    assert choice.logprobs.tokens[prompt_tokens:] == generated.logprobs.tokens
    assert choice.logprobs.token_logprobs is not None
    assert choice.logprobs.token_logprobs[prompt_tokens:] == generated.logprobs.token_logprobs
    assert len(choice.logprobs.tokens) == prompt_tokens + 3


def echo_streamed(client: OpenAI) -> None:
    """A stream carries the prompt's positions in its echo chunk: folded, it equals the full
    response (with max_tokens 0 and > 0)."""
    for max_tokens in (0, 3):
        full = client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=max_tokens, echo=True, logprobs=1
        )
        expected = full.choices[0].logprobs
        assert expected is not None
        text = ""
        folded: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "text_offset": []}
        stream = client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=max_tokens, echo=True, logprobs=1, stream=True
        )
        for chunk in stream:
            for choice in chunk.choices:
                text += choice.text
                if choice.logprobs is not None:
                    for key, values in folded.items():
                        values += getattr(choice.logprobs, key) or []
        assert text == full.choices[0].text
        assert folded["tokens"] == expected.tokens
        assert folded["token_logprobs"] == expected.token_logprobs
        assert folded["text_offset"] == expected.text_offset


def prompt_logprobs_extra(client: OpenAI) -> None:
    """vLLM's `prompt_logprobs`: on each completions choice, at the top level of chat."""
    prompt_tokens = prompt_token_count(client)
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=2, extra_body={"prompt_logprobs": 3}
    )
    choice = completion.choices[0]
    assert choice.logprobs is None  # the generated tokens' logprobs were not asked
    check_prompt_logprobs((choice.model_extra or {}).get("prompt_logprobs"), prompt_tokens, 3)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=2,
        extra_body={"prompt_logprobs": 0},
    )
    assert chat.usage is not None
    check_prompt_logprobs(
        (chat.model_extra or {}).get("prompt_logprobs"), chat.usage.prompt_tokens, 0
    )


def chat_echo_implies_prompt_logprobs(client: OpenAI) -> None:
    """vLLM's chat `echo` asks for prompt logprobs at `top_logprobs` (default 0)."""
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=2,
        extra_body={"echo": True},
    )
    assert chat.usage is not None
    entries = (chat.model_extra or {}).get("prompt_logprobs")
    check_prompt_logprobs(entries, chat.usage.prompt_tokens, 0)


async def test_chat_echo_carries_prompt_logprobs(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(chat_echo_implies_prompt_logprobs, client)


async def test_echo_with_max_tokens_0_scores_the_prompt(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(echo_scoring, client)


async def test_echo_with_logprobs_puts_the_prompt_before_the_generated_tokens(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(echo_then_generated, client)


async def test_streamed_echo_with_logprobs_folds_to_the_full_response(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(echo_streamed, client)


async def test_prompt_logprobs_extra_on_completions_and_chat(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(prompt_logprobs_extra, client)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/completions",
            {"prompt": PROMPT, "prompt_logprobs": 1, "stream": True},
            "prompt_logprobs",
        ),
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": PROMPT, "prompt_logprobs": 21}, "prompt_logprobs"),
    ],
)
async def test_refused_prompt_logprobs_name_the_parameter(
    server: LiveServer, path: str, body: dict[str, Any], param: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"}
        ) as client:
            answer = await client.post(path, json={"model": MODEL, **body})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


async def test_generate_return_logprob_renders_sglangs_meta_info(server: LiveServer) -> None:
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 3},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"}
        ) as client:
            full = (await client.post("/generate", json=body)).json()
            plain = (await client.post("/generate", json={**body, "return_logprob": False})).json()
            stream = await client.post("/generate", json={**body, "stream": True})
    meta = full["meta_info"]
    ids = full["output_ids"]
    tokens = meta["output_token_logprobs"]
    # [logprob, token id, token text] per generated token, as SGLang renders them.
    assert [entry[1] for entry in tokens] == ids
    assert all(entry[0] < 0 and isinstance(entry[2], str) for entry in tokens)
    assert "".join(entry[2] for entry in tokens) == full["text"]
    tops = meta["output_top_logprobs"]
    assert len(tops) == len(ids)
    assert all(len(top) == 2 and all(len(entry) == 3 for entry in top) for top in tops)
    assert "output_token_logprobs" not in plain["meta_info"]  # only when asked
    # A stream carries the cumulative logprobs with the cumulative text; the last equals the full.
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in stream.text.splitlines()
        if line.startswith("data: {")
    ]
    assert chunks[-1]["meta_info"]["output_token_logprobs"] == tokens
    assert chunks[-1]["meta_info"]["output_top_logprobs"] == tops


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"logprob_start_len": 0}, "logprob_start_len"),
        ({"top_logprobs_num": 21}, "top_logprobs_num"),
    ],
)
async def test_generate_refuses_input_logprobs(
    server: LiveServer, body: dict[str, Any], param: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"}
        ) as client:
            answer = await client.post(
                "/generate", json={"text": PROMPT, "return_logprob": True, **body}
            )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
