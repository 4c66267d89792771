"""The pooling bodies (core/pooling_render.py, docs/pooling.md §3): float or base64 (little- or
big-endian float32), the label of the most probable class, and vLLM's 400 for a value JSON
cannot hold."""

from __future__ import annotations

import base64
import struct
from typing import Any

import msgspec
import pytest

from smg_trio.core.pooling_inputs import PoolingPlan
from smg_trio.core.pooling_render import pooling_body
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import PooledOutput, PoolingTask
from smg_trio.wire.openai_pooling import decode_pooling_options

OUTPUTS = [
    PooledOutput(values=(0.5, -0.25), shape=(2,), prompt_tokens=3),
    PooledOutput(values=(0.125, 0.75), shape=(2,), prompt_tokens=1),
]


def body(path: str, options: dict[str, Any], outputs: list[PooledOutput] = OUTPUTS) -> Any:
    plan = PoolingPlan(
        path=path,
        request_id="r1",
        model="m",
        task=PoolingTask.CLASSIFY if path == "/classify" else PoolingTask.EMBED,
        prompts=((1, 2, 3), (4,)),
        options=decode_pooling_options(path, msgspec.json.encode({"input": "x", **options})),
    )
    return msgspec.json.decode(pooling_body(plan, outputs, created=5, labels=("neg", "pos")))


def test_floats_and_base64_in_either_byte_order() -> None:
    floats = body("/v1/embeddings", {})
    assert floats["id"] == "embd-r1"
    assert [d["embedding"] for d in floats["data"]] == [[0.5, -0.25], [0.125, 0.75]]
    assert floats["usage"]["prompt_tokens"] == floats["usage"]["total_tokens"] == 4
    for endianness, order in (("native", "<"), ("little", "<"), ("big", ">")):
        encoded = body("/pooling", {"encoding_format": "base64", "endianness": endianness})
        assert encoded["id"] == "pooling-r1"
        raw = base64.b64decode(encoded["data"][0]["data"])
        assert struct.unpack(f"{order}2f", raw) == (0.5, -0.25)


def test_a_classification_names_its_most_probable_label() -> None:
    answer = body("/classify", {})
    assert answer["id"] == "classify-r1"
    assert [(d["label"], d["num_classes"]) for d in answer["data"]] == [("neg", 2), ("pos", 2)]


def test_a_value_json_cannot_hold_is_vllms_400() -> None:
    nan = [PooledOutput(values=(float("nan"), 0.0), shape=(2,), prompt_tokens=1)]
    with pytest.raises(ClientError, match="Out of range float values are not JSON compliant"):
        body("/v1/embeddings", {}, nan)
    # In base64 the bytes go as they are.
    assert body("/v1/embeddings", {"encoding_format": "base64"}, nan)["data"][0]["embedding"]
