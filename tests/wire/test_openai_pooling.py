"""The pooling endpoints' JSON (wire/openai_pooling.py, docs/pooling.md §3): any body decodes
to options or is a 400 (never another exception); the bodies have vLLM's keys."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import ClientError
from smg_trio.wire.openai_pooling import (
    POOLING_PATHS,
    EmbeddingData,
    PoolingList,
    PoolingUsage,
    decode_pooling_options,
)

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = st.sampled_from(
    ["input", "encoding_format", "dimensions", "truncate_prompt_tokens", "task", "priority",
     "use_activation", "endianness", "messages", "model", "normalize", "truncation_side"]
)  # fmt: skip


@given(st.sampled_from(POOLING_PATHS), st.dictionaries(FIELDS, VALUES, max_size=4))
def test_any_body_is_options_or_a_400(path: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(ClientError):
        decode_pooling_options(path, msgspec.json.encode(body))


@given(st.binary(max_size=64))
def test_bytes_that_are_not_json_are_a_400(raw: bytes) -> None:
    with contextlib.suppress(ClientError):
        decode_pooling_options("/v1/embeddings", raw)


def test_an_embedding_body_has_vllms_keys() -> None:
    body = PoolingList(
        id="embd-1",
        created=7,
        model="m",
        data=[EmbeddingData(0, [0.5])],
        usage=PoolingUsage(prompt_tokens=3, total_tokens=3),
    )
    assert msgspec.json.decode(msgspec.json.encode(body)) == {
        "id": "embd-1",
        "object": "list",
        "created": 7,
        "model": "m",
        "data": [{"index": 0, "embedding": [0.5], "object": "embedding"}],
        "usage": {
            "prompt_tokens": 3,
            "total_tokens": 3,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
    }
