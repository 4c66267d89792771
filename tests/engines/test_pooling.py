"""The reference engines' pooler (engines/pooling.py, docs/pooling.md §5): deterministic,
float32, normalised embeddings and probabilities; Matryoshka truncation before normalising."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.engines.pooling import pooled_values

IDS = st.lists(st.integers(0, 2**31), min_size=1, max_size=32)


def is_float32(value: float) -> bool:
    (back,) = struct.unpack("<f", struct.pack("<f", value))
    return bool(back == value)


@given(IDS)
def test_an_embedding_is_deterministic_normalised_float32(ids: list[int]) -> None:
    values = pooled_values(ids, task="embed", hidden_size=32, num_labels=2)
    assert values == pooled_values(ids, task="embed", hidden_size=32, num_labels=2)
    assert len(values) == 32
    assert math.isclose(math.sqrt(sum(v * v for v in values)), 1.0, rel_tol=1e-5)
    assert all(is_float32(v) for v in values)


@given(IDS, st.integers(1, 32))
def test_dimensions_truncate_before_normalising(ids: list[int], size: int) -> None:
    raw = pooled_values(ids, task="embed", hidden_size=32, num_labels=2, use_activation=False)
    cut = pooled_values(ids, task="embed", hidden_size=32, num_labels=2, dimensions=size)
    norm = math.sqrt(sum(v * v for v in raw[:size])) or 1.0
    assert cut == pytest.approx([v / norm for v in raw[:size]], rel=1e-5, abs=1e-6)


@given(IDS, st.integers(1, 5))
def test_probabilities_sum_to_one(ids: list[int], labels: int) -> None:
    probs = pooled_values(ids, task="classify", hidden_size=8, num_labels=labels)
    assert len(probs) == labels
    if labels > 1:
        assert math.isclose(sum(probs), 1.0, rel_tol=1e-5)
    assert all(0.0 <= p <= 1.0 for p in probs)


def test_what_the_pooler_cannot_serve() -> None:
    cases: tuple[tuple[str, int | None, str], ...] = (
        ("embed", 33, "dimensions must be in"),
        ("classify", 2, "classify takes no dimensions"),
        ("x", None, "unknown pooling task"),
    )
    for task, dimensions, words in cases:
        with pytest.raises(ValueError, match=words):
            pooled_values([1], task=task, hidden_size=32, num_labels=2, dimensions=dimensions)
