"""Every list a client sends is bounded (docs/request-fields.md §6): a list at its bound decodes,
one entry more is a 400 naming the field, on every endpoint that takes it; the bounds are the
named constants of `neutral/validation.py`. A 500,000-stop /generate body is refused fast."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import ClientError
from smg_trio.neutral.validation import (
    MAX_ALLOWED_TOKEN_IDS,
    MAX_BAD_WORDS,
    MAX_BATCH_PROMPTS,
    MAX_CHOICES,
    MAX_GENERATE_STOP_STRINGS,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_MESSAGES,
    MAX_PROMPT_TOKEN_IDS,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
    MAX_TOOLS,
)
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)

Decode = Callable[[bytes], object]
Fields = Callable[[int], dict[str, Any]]
# A body of one endpoint whose list has `count` entries.
Body = Callable[[int], bytes]

USER: Final = {"role": "user", "content": "hi"}
TOOL: Final = {"type": "function", "function": {"name": "f", "parameters": {}}}


def chat(fields: Fields) -> Body:
    return lambda n: json.dumps({"messages": [USER], "tool_choice": "none", **fields(n)}).encode()


def completion(fields: Fields) -> Body:
    return lambda n: json.dumps({"prompt": "once upon", **fields(n)}).encode()


def generate(fields: Fields) -> Body:
    return lambda n: json.dumps({"text": "once upon", **fields(n)}).encode()


def stops(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def sampling(**fields: Any) -> dict[str, Any]:
    return {"sampling_params": fields}


# (endpoint decoder, body with a list of n entries, the param named, the bound)
BOUNDED: Final[list[tuple[Decode, Body, str, int]]] = [
    (decode_chat_request, chat(lambda n: {"stop": stops(n)}), "stop", MAX_STOP_STRINGS),
    (decode_completion_request, completion(lambda n: {"stop": stops(n)}), "stop", MAX_STOP_STRINGS),
    (
        decode_generate_request,
        generate(lambda n: sampling(stop=stops(n))),
        "sampling_params.stop",
        MAX_GENERATE_STOP_STRINGS,
    ),
    (
        decode_chat_request,
        chat(lambda n: {"stop_token_ids": list(range(n))}),
        "stop_token_ids",
        MAX_STOP_TOKEN_IDS,
    ),
    (
        decode_generate_request,
        generate(lambda n: sampling(stop_token_ids=list(range(n)))),
        "sampling_params.stop_token_ids",
        MAX_STOP_TOKEN_IDS,
    ),
    (
        decode_completion_request,
        completion(lambda n: {"logit_bias": {str(i): 1 for i in range(n)}}),
        "logit_bias",
        MAX_LOGIT_BIAS_ENTRIES,
    ),
    (
        decode_chat_request,
        chat(lambda n: {"bad_words": stops(n)}),
        "bad_words",
        MAX_BAD_WORDS,
    ),
    (
        decode_completion_request,
        completion(lambda n: {"allowed_token_ids": list(range(n))}),
        "allowed_token_ids",
        MAX_ALLOWED_TOKEN_IDS,
    ),
    (decode_chat_request, chat(lambda n: {"messages": [USER] * n}), "messages", MAX_MESSAGES),
    (decode_chat_request, chat(lambda n: {"tools": [TOOL] * n}), "tools", MAX_TOOLS),
    (decode_chat_request, chat(lambda n: {"n": n}), "n", MAX_CHOICES),
    (
        decode_completion_request,
        completion(lambda n: {"prompt": ["a"] * n}),
        "prompt",
        MAX_BATCH_PROMPTS,
    ),
    (
        decode_completion_request,
        completion(lambda n: {"prompt": [1] * n}),
        "prompt",
        MAX_PROMPT_TOKEN_IDS,
    ),
    (
        decode_generate_request,
        lambda n: json.dumps({"input_ids": [1] * n}).encode(),
        "input_ids",
        MAX_PROMPT_TOKEN_IDS,
    ),
]
IDS: Final = [f"{decode.__name__.split('_')[1]}-{param}" for decode, _, param, _ in BOUNDED]


@pytest.mark.parametrize(("decode", "body", "param", "bound"), BOUNDED, ids=IDS)
def test_a_list_at_its_bound_decodes_and_one_more_is_a_400_naming_it(
    decode: Decode, body: Body, param: str, bound: int
) -> None:
    decode(body(bound))
    with pytest.raises(ClientError) as refused:
        decode(body(bound + 1))
    assert refused.value.status == 400
    assert refused.value.param == param
    assert str(bound) in refused.value.message


@given(count=st.integers(min_value=0, max_value=3 * MAX_GENERATE_STOP_STRINGS))
def test_generate_stop_lists_are_refused_exactly_past_the_bound(count: int) -> None:
    body = generate(lambda n: sampling(stop=stops(n)))(count)
    if count <= MAX_GENERATE_STOP_STRINGS:
        assert len(decode_generate_request(body).sampling_params.stop_strings) == count
    else:
        with pytest.raises(ClientError) as refused:
            decode_generate_request(body)
        assert refused.value.param == "sampling_params.stop"


@pytest.mark.serial  # a bound of 1 s of real time (~0.15 s of work alone; 1.6 s under xdist)
def test_half_a_million_generate_stops_are_a_fast_400() -> None:
    body = generate(lambda n: sampling(stop=stops(n)))(500_000)
    assert len(body) > 5_000_000
    started = time.perf_counter()
    with pytest.raises(ClientError) as refused:
        decode_generate_request(body)
    # Decoding ~6 MB of JSON and counting; no per-stop work (the loaded CI machine: 2 cores).
    assert time.perf_counter() - started < 1.0
    assert refused.value.param == "sampling_params.stop"
