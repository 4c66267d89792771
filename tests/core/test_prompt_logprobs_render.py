"""Prompt logprobs in the assembled response (issue 11), as vLLM's server renders them: the
`prompt_logprobs` list (per completions choice, top level in chat), completions `echo` +
`logprobs` with the prompt's positions first, and `echo` with max_tokens 0 (the engine's one
token counted, never shown). Parsed by the `openai` SDK."""

from __future__ import annotations

import json

import msgspec
import openai
import pytest

from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob, TopLogprob, coalesce
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from tests.core.mock_tokenizers import WordMockTokenizer

T1 = WordMockTokenizer()
PROMPT = (1, 2, 3)  # "Hello world test"
# The engine's prompt positions 1.. ("world", "test"): each ranked 2nd below "token" (4).
PROMPT_POSITIONS = (
    TokenLogprob(2, -1.5, 2, (TopLogprob(4, -0.5), TopLogprob(2, -1.5))),
    TokenLogprob(3, -2.5, 2, (TopLogprob(4, -0.25), TopLogprob(3, -2.5))),
)


def assembler(
    endpoint: Endpoint,
    *,
    logprobs: int | None,
    echo: str | None = None,
    echo_only: bool = False,
    n: int = 1,
    stream: bool = False,
) -> ResponseAssembler:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=PROMPT,
        sampling=SamplingParams(logprobs=logprobs, prompt_logprobs=2, max_tokens=4),
        n=n,
        stream=stream,
        echo_text=echo,
        stop_spec=StopSpec(token_ids=(999,)),
        echo_only=echo_only,
    )
    return ResponseAssembler(plan, T1, created=1700000000)


def generated(token_ids: tuple[int, ...], index: int = 0) -> TokenDelta:
    positions = tuple(TokenLogprob(t, -0.1 * t, 1, (TopLogprob(t, -0.1 * t),)) for t in token_ids)
    return TokenDelta(index, token_ids, positions)


def first(token_ids: tuple[int, ...], index: int = 0) -> TokenDelta:
    return msgspec.structs.replace(generated(token_ids, index), prompt_logprobs=PROMPT_POSITIONS)


EXPECTED_PROMPT_LOGPROBS = [
    None,
    {
        "2": {"logprob": -1.5, "rank": 2, "decoded_token": "world"},
        "4": {"logprob": -0.5, "rank": 1, "decoded_token": "token"},
    },
    {
        "3": {"logprob": -2.5, "rank": 2, "decoded_token": "test"},
        "4": {"logprob": -0.25, "rank": 1, "decoded_token": "token"},
    },
]


def test_echo_with_max_tokens_0_shows_the_prompt_and_its_logprobs_only() -> None:
    a = assembler(Endpoint.COMPLETION, logprobs=1, echo="Hello world test", echo_only=True)
    a.on_events([first((4,)), ChoiceFinished(0, "length", None, 3, 1)])
    body = json.loads(a.response_body())
    choice = body["choices"][0]
    assert choice["text"] == "Hello world test"
    assert choice["finish_reason"] == "length"
    assert choice["logprobs"] == {
        "tokens": ["Hello", "world", "test"],
        "token_logprobs": [None, -1.5, -2.5],
        "top_logprobs": [None, {"world": -1.5, "token": -0.5}, {"test": -2.5, "token": -0.25}],
        "text_offset": [0, 5, 10],
    }
    assert choice["prompt_logprobs"] == EXPECTED_PROMPT_LOGPROBS
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    # The SDK's strict model types these entries as never null; vLLM's first one is (the SDK
    # client parses leniently: tests/e2e/test_prompt_logprobs.py).


def test_echo_with_logprobs_puts_the_prompt_positions_before_the_generated_ones() -> None:
    a = assembler(Endpoint.COMPLETION, logprobs=0, echo="Hello world test")
    a.on_events([first((4,)), generated((1,)), ChoiceFinished(0, "length", None, 3, 2)])
    choice = json.loads(a.response_body())["choices"][0]
    assert choice["text"] == "Hello world test" + "token Hello"
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == ["Hello", "world", "test", "token", "Hello"]
    assert logprobs["token_logprobs"] == [None, -1.5, -2.5, pytest.approx(-0.4), -0.1]
    assert logprobs["text_offset"] == [0, 5, 10, 14, 19]


def test_a_stream_carries_the_prompt_positions_in_its_echo_chunk() -> None:
    a = assembler(Endpoint.COMPLETION, logprobs=0, echo="Hello world test", stream=True)
    payloads = a.on_events([first((4,)), ChoiceFinished(0, "length", None, 3, 1)])
    chunks = [json.loads(p)["choices"][0] for p in payloads]
    assert chunks[0]["text"] == "Hello world test"
    assert chunks[0]["logprobs"]["tokens"] == ["Hello", "world", "test"]
    assert chunks[0]["logprobs"]["token_logprobs"] == [None, -1.5, -2.5]
    generated_offsets = [
        o for c in chunks[1:] if c["logprobs"] for o in c["logprobs"]["text_offset"]
    ]
    # The token strings "Hello" "world" "test" end at 14, not at the echo's 16 characters: the
    # generated offsets continue from the token strings, as vLLM's stream does.
    assert generated_offsets == [14]


def test_prompt_logprobs_alone_leave_the_generated_logprobs_null() -> None:
    a = assembler(Endpoint.COMPLETION, logprobs=None)
    a.on_events([first((4,)), ChoiceFinished(0, "length", None, 3, 1)])
    choice = json.loads(a.response_body())["choices"][0]
    assert choice["logprobs"] is None
    assert choice["prompt_logprobs"] == EXPECTED_PROMPT_LOGPROBS


def test_chat_puts_prompt_logprobs_at_the_top_level_once() -> None:
    a = assembler(Endpoint.CHAT, logprobs=None, n=2)
    # Coalesced with a later delta, the first delta's prompt logprobs survive.
    a.on_events(coalesce([first((4,), 0), generated((1,), 0), first((4,), 1)]))
    a.on_events([ChoiceFinished(0, "length", None, 3, 2), ChoiceFinished(1, "length", None, 3, 1)])
    body = json.loads(a.response_body())
    assert body["prompt_logprobs"] == EXPECTED_PROMPT_LOGPROBS
    assert all("prompt_logprobs" not in choice for choice in body["choices"])
    openai.types.chat.ChatCompletion.model_validate(body)


def test_no_prompt_logprobs_field_unless_the_engine_sent_them() -> None:
    a = assembler(Endpoint.CHAT, logprobs=None)
    a.on_events([generated((4,)), ChoiceFinished(0, "length", None, 3, 1)])
    assert "prompt_logprobs" not in json.loads(a.response_body())


def test_coalesce_keeps_prompt_logprobs_wherever_the_first_delta_landed() -> None:
    merged = coalesce([generated((1,), 1), first((4,), 0), generated((2,), 0)])
    assert [(d.choice_index, d.prompt_logprobs) for d in merged if isinstance(d, TokenDelta)] == [
        (1, None),
        (0, PROMPT_POSITIONS),
    ]
