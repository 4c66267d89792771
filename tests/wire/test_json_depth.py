"""wire.json_depth against a reference depth computed on decoded values (hypothesis), and the
decoders' 400 for deep bodies on every endpoint (docs/limits.md §3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.errors import ClientError
from smg_trio.wire.json_depth import MAX_JSON_DEPTH, json_depth_exceeds, shallow_json
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_tokenize import decode_detokenize_request, decode_tokenize_request

# Strings full of brackets and escapes: they must never count as structure.
TRICKY_TEXT = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


def nested(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, limit=st.integers(0, 8))
def test_the_scan_agrees_with_the_decoded_depth(value: Any, limit: int) -> None:
    text = json.dumps(value, ensure_ascii=False)
    expected = depth(value) > limit
    assert json_depth_exceeds(text, limit) is expected
    assert json_depth_exceeds(text.encode(), limit) is expected


@settings(max_examples=100, deadline=None)
@given(value=st.dictionaries(TRICKY_TEXT, JSON_VALUES, max_size=4))
def test_shallow_json_keeps_the_top_level_scalars(value: dict[str, Any]) -> None:
    shallow = json.loads(shallow_json(json.dumps(value)))
    assert shallow == {k: (None if isinstance(v, list | dict) else v) for k, v in value.items()}


DECODERS: list[Callable[[bytes], object]] = [
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
    decode_tokenize_request,
    decode_detokenize_request,
]


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("field", ["unknown", "messages", "prompt", "tokens", "sampling_params"])
def test_a_deep_body_is_a_400_on_every_endpoint(
    decode: Callable[[bytes], object], field: str
) -> None:
    for levels in (MAX_JSON_DEPTH, 100_000):
        body = f'{{"{field}":{nested(levels)}}}'.encode()
        with pytest.raises(ClientError) as info:
            decode(body)
        assert info.value.status == 400
        assert info.value.code == "json_too_deep"


def test_a_body_at_the_limit_is_decoded_as_usual() -> None:
    body = '{"messages":[{"role":"user","content":"hi"}],"x":' + nested(MAX_JSON_DEPTH - 1) + "}"
    assert decode_chat_request(body.encode()).messages
