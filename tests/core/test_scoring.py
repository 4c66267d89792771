"""Scoring with an embedding model (docs/pooling.md §8): bodies decoded with vLLM's checks, the
plan's engine requests, cosine similarities against a float32 numpy reference, and the score
and rerank bodies in vLLM's shapes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.prepare import PromptModel
from smg_trio.core.scoring import ScoringPlan, cosine, prepare_scoring, scoring_body
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.pooling import PooledOutput, PoolingTask
from smg_trio.wire.openai_scoring import SCORING_PATHS, decode_scoring_options

MODEL: Final[PromptModel] = load_model_dir(demo_model_path()).prompt_model()
NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
VECTOR = st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=32)


def plan_of(path: str, body: dict[str, Any]) -> ScoringPlan:
    options = decode_scoring_options(path, json.dumps(body).encode())
    return prepare_scoring(
        path, options, MODEL, architecture="LlamaModel", request_id="r1", now=NOW
    )


def ids(text: str) -> tuple[int, ...]:
    return tuple(MODEL.tokenizer.encode(text, add_special_tokens=True))


def output(values: list[float]) -> PooledOutput:
    return PooledOutput(values=tuple(values), shape=(len(values),), prompt_tokens=3)


def reference_cosine(a: list[float], b: list[float]) -> float:
    """torch's cosine_similarity in float32, as vLLM runs it, written with numpy."""
    x, y = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    eps = np.float32(1e-8)
    x = x / max(np.linalg.norm(x), eps)
    y = y / max(np.linalg.norm(y), eps)
    return float(np.dot(x, y))


@given(a=VECTOR, b=VECTOR)
def test_cosine_is_vllms_within_float32(a: list[float], b: list[float]) -> None:
    size = min(len(a), len(b))
    a, b = a[:size], b[:size]
    assert abs(cosine(a, b) - reference_cosine(a, b)) <= 1e-6


def test_cosine_of_zero_vectors_is_zero_not_nan() -> None:
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0


@pytest.mark.parametrize(
    "sides",
    [
        {"queries": "q", "documents": ["a", "b"]},
        {"queries": ["q"], "items": ["a", "b"]},
        {"data_1": "q", "data_2": ["a", "b"]},
        {"text_1": ["q"], "text_2": ["a", "b"]},
    ],
)
def test_every_pair_of_score_fields_is_one_query_against_its_documents(
    sides: dict[str, Any],
) -> None:
    plan = plan_of("/score", sides)
    assert plan.prompts == (ids("q"), ids("a"), ids("b"))
    assert plan.first_count == 1
    requests = plan.requests()
    assert [r.input_index for r in requests] == [0, 1, 2]
    assert {r.task for r in requests} == {PoolingTask.EMBED}
    assert plan.prompt_tokens == sum(len(p) for p in plan.prompts)


def test_n_to_n_pairs_in_order_and_the_body_is_vllms() -> None:
    plan = plan_of("/v1/score", {"queries": ["q1", "q2"], "documents": ["d1", "d2"]})
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 2.0]]
    body = json.loads(scoring_body(plan, [output(v) for v in vectors], created=7))
    assert body == {
        "id": "score-r1",
        "object": "list",
        "created": 7,
        "model": MODEL.name,
        "data": [
            {"index": 0, "object": "score", "score": pytest.approx(0.70710678, abs=1e-6)},
            {"index": 1, "object": "score", "score": 1.0},
        ],
        "usage": {
            "prompt_tokens": 12,
            "total_tokens": 12,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
    }


def test_rerank_sorts_best_first_echoes_documents_and_keeps_top_n() -> None:
    documents = ["far", "near", "middle"]
    plan = plan_of("/rerank", {"query": "q", "documents": documents, "top_n": 2})
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [1.0, 1.0]]
    body = json.loads(scoring_body(plan, [output(v) for v in vectors], created=7))
    assert list(body) == ["id", "model", "usage", "results"]
    assert body["id"] == "score-r1"
    assert body["usage"] == {"prompt_tokens": 12, "total_tokens": 12}
    assert [r["index"] for r in body["results"]] == [1, 2]
    assert body["results"][0]["document"] == {"text": "near", "multi_modal": None}
    everything = plan_of("/v2/rerank", {"query": "q", "documents": documents})
    full = json.loads(scoring_body(everything, [output(v) for v in vectors], created=7))
    assert [r["index"] for r in full["results"]] == [1, 2, 0]


@pytest.mark.parametrize(
    ("path", "body", "message", "param"),
    [
        ("/score", {"queries": ["a", "b"], "documents": ["c"]}, "1:1, 1:N or N:N", None),
        ("/score", {"queries": [], "documents": ["c"]}, "At least one text element", None),
        ("/score", {"queries": "a", "documents": []}, "At least one text_pair element", None),
        ("/score", {"queries": "a"}, "Field required", "queries"),
        ("/score", {"queries": "a", "documents": ["b"], "top_n": 1}, "rerank field", "top_n"),
        ("/score", {"queries": {"content": []}, "documents": "b"}, "MultiModalParam", None),
        ("/score", {"queries": 5, "documents": "b"}, "must be a string", None),
        ("/score", {"queries": "a", "documents": [""]}, "cannot be empty", "input"),
        ("/rerank", {"documents": ["b"]}, "Field required: query", "query"),
        ("/rerank", {"query": ["a"], "documents": ["b"]}, "one string", "query"),
        ("/rerank", {"query": "a", "documents": ["b"], "top_n": -1}, "top_n", "top_n"),
        ("/rerank", {"query": "a", "documents": "b", "text_1": "x"}, "score field", "text_1"),
        ("/rerank", {"query": "a", "documents": "b", "instruction": "x"}, "not supported", None),
        ("/rerank", {"query": "a", "documents": "b", "max_tokens_per_doc": 3}, "not supp", None),
        ("/rerank", {"query": "a", "documents": "b", "priority": 1}, "priority", "priority"),
        (
            "/score",
            {"queries": "a", "documents": "b", "truncate_prompt_tokens": 99999},
            "max_model_len",
            None,
        ),
    ],
)
def test_vllms_400s(path: str, body: dict[str, Any], message: str, param: str | None) -> None:
    with pytest.raises(ClientError) as refused:
        plan_of(path, body)
    assert refused.value.status == 400
    assert message in refused.value.message
    if param is not None:
        assert refused.value.param == param


def test_truncate_prompt_tokens_keeps_each_inputs_first_tokens() -> None:
    long = "one two three four five six seven eight"
    plan = plan_of("/score", {"queries": long, "documents": long, "truncate_prompt_tokens": 3})
    assert plan.prompts == (ids(long)[:3], ids(long)[:3])
    left = plan_of(
        "/score",
        {
            "queries": long,
            "documents": long,
            "truncate_prompt_tokens": 3,
            "truncation_side": "left",
        },
    )
    assert left.prompts == (ids(long)[-3:], ids(long)[-3:])


def test_unknown_fields_are_ignored_as_vllm_ignores_them() -> None:
    plan = plan_of("/score", {"queries": "a", "documents": "b", "something_else": 1})
    assert plan.first_count == 1


def test_a_nan_vector_is_vllms_400_not_a_nan_score() -> None:
    plan = plan_of("/score", {"queries": "q", "documents": "d"})
    with pytest.raises(ClientError, match="not JSON compliant"):
        scoring_body(plan, [output([float("nan"), 1.0]), output([1.0, 0.0])], created=7)


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = st.sampled_from(
    ["queries", "documents", "items", "data_1", "data_2", "text_1", "text_2", "query", "top_n",
     "truncate_prompt_tokens", "truncation_side", "use_activation", "priority", "request_id",
     "instruction", "max_tokens_per_doc", "model"]
)  # fmt: skip


@given(st.sampled_from(SCORING_PATHS), st.dictionaries(FIELDS, VALUES, max_size=5))
def test_any_body_is_a_plan_or_a_400(path: str, body: dict[str, Any]) -> None:
    try:
        plan = plan_of(path, body)
    except ClientError:  # every refusal here is a 400 (ClientError's status)
        return
    assert plan.first_count >= 1
    assert len(plan.requests()) == plan.first_count + len(plan.documents)
    if plan.first_count > 1:
        assert plan.first_count == len(plan.documents)
