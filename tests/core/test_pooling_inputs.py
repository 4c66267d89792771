"""A pooling body's inputs → prompt ids (core/pooling_inputs.py, docs/pooling.md §3): every
form vLLM takes, its truncation and its 400s; anything else is a 400 naming `input`, never
another exception."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.pooling_inputs import input_prompts
from smg_trio.core.pooling_prepare import check_dimensions, path_task
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.model.pooler_facts import model_pooler
from smg_trio.neutral.pooling import ModelPooler, PoolingTask, Task
from smg_trio.wire.openai_pooling import decode_pooling_options

MODEL: PromptModel = load_model_dir(demo_model_path()).prompt_model()
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CONTEXT = MODEL.context_length or 0


def prompts(body: dict[str, Any], path: str = "/v1/embeddings") -> list[list[int]]:
    options = decode_pooling_options(path, msgspec.json.encode(body))
    return [list(ids) for ids in input_prompts(options, MODEL, now=NOW)]


def encoded(text: str) -> list[int]:
    return list(MODEL.tokenizer.encode(text, add_special_tokens=True))


def test_every_input_form() -> None:
    assert prompts({"input": "hi there"}) == [encoded("hi there")]
    assert prompts({"input": ["a", "b c"]}) == [encoded("a"), encoded("b c")]
    assert prompts({"input": [1, 2, 3]}) == [[1, 2, 3]]
    assert prompts({"input": [[1], [2, 3]]}) == [[1], [2, 3]]
    conversation = [{"role": "user", "content": "hi"}]
    one = prompts({"input": conversation})
    assert one == prompts({"messages": conversation})
    assert prompts({"messages": [conversation, conversation]}) == one * 2
    assert len(one[0]) > len(encoded("hi"))  # templated
    plain = list(MODEL.tokenizer.encode("hi", add_special_tokens=False))
    assert prompts({"input": "hi", "add_special_tokens": False}) == [plain]


def test_truncation_keeps_the_first_tokens_or_the_last() -> None:
    ids = list(range(10, 30))
    assert prompts({"input": ids, "truncate_prompt_tokens": 5}) == [ids[:5]]
    left = {"input": ids, "truncate_prompt_tokens": 5, "truncation_side": "left"}
    assert prompts(left) == [ids[-5:]]
    assert prompts({"input": ids, "truncate_prompt_tokens": -1}) == [ids]
    with pytest.raises(ClientError, match="greater than max_model_len"):
        prompts({"input": ids, "truncate_prompt_tokens": CONTEXT + 1})
    with pytest.raises(ClientError, match="The decoder prompt cannot be empty"):
        prompts({"input": ids, "truncate_prompt_tokens": 0})


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": ""}, "The decoder prompt cannot be empty"),
        ({"input": []}, "You must pass at least one prompt"),
        ({}, "give `input` or `messages`"),
        ({"input": [MODEL.vocab_size]}, f"Token id {MODEL.vocab_size} is out of vocabulary"),
        ({"input": [True]}, "input must be"),
        ({"input": {"a": 1}}, "input must be"),
        ({"messages": "hi"}, "messages must be"),
        ({"messages": [{"role": "user", "content": "a"}], "input": "b"}, "not both"),
        ({"input": [1] * (CONTEXT + 1)}, "maximum context length"),
    ],
)
def test_vllms_400s(body: dict[str, Any], words: str) -> None:
    with pytest.raises(ClientError, match=words):
        prompts(body)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(JSON)
def test_any_json_input_is_prompts_or_a_400(value: Any) -> None:
    try:
        result = prompts({"input": value})
    except ClientError:
        return
    assert result
    assert all(0 < len(ids) <= CONTEXT for ids in result)


@given(
    st.lists(
        st.lists(st.integers(0, MODEL.vocab_size - 1), min_size=1, max_size=8),
        min_size=1,
        max_size=8,
    )
)
def test_token_batches_pass_as_they_are(batch: list[list[int]]) -> None:
    assert prompts({"input": batch}) == batch


def test_the_path_task_and_dimensions() -> None:
    embed = ModelPooler(tasks=frozenset({Task.EMBED}), hidden_size=64)
    options = decode_pooling_options("/pooling", b'{"input": "x"}')
    assert path_task("/pooling", options, embed) is PoolingTask.EMBED
    wrong = decode_pooling_options("/pooling", b'{"input": "x", "task": "classify"}')
    with pytest.raises(ClientError, match="Unsupported task: 'classify'"):
        path_task("/pooling", wrong, embed)
    with pytest.raises(ClientError, match="does not support Matryoshka"):
        check_dimensions(8, "m", embed)
    matryoshka = model_pooler({"hidden_size": 64, "matryoshka_dimensions": [16, 32]}, embed.tasks)
    check_dimensions(16, "m", matryoshka)
    with pytest.raises(ClientError, match=r"only supports Matryoshka dimensions \[16, 32\]"):
        check_dimensions(8, "m", matryoshka)
    with pytest.raises(ClientError, match=r"range \[1, 64\]"):
        check_dimensions(65, "m", matryoshka)
    labelled = model_pooler({"id2label": {"1": "pos", "0": "neg"}}, frozenset({Task.CLASSIFY}))
    assert labelled.labels == ("neg", "pos")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("encoding_format", "bytes"),
        ("embed_dtype", "float16"),
        ("priority", 1),
        ("padding", "max_length"),
        ("cache_salt", "s"),
        ("chat_template", "x"),
        ("normalize", True),
        ("truncation_side", "middle"),
        ("truncate_prompt_tokens", -2),
    ],
)
def test_fields_not_honoured_are_refused_by_name(field: str, value: Any) -> None:
    body = msgspec.json.encode({"input": "x", field: value})
    with pytest.raises(ClientError) as raised:
        decode_pooling_options("/v1/embeddings", body)
    assert raised.value.param == field
