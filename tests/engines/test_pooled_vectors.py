"""The reference engines' pooled vectors: deterministic, unit length, float32, per input."""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.engines.pooled_vectors import DEFAULT_EMBEDDING_DIM, embedding_dim, pooled_vector

IDS = st.lists(st.integers(0, 2**32 - 1), max_size=40)


@given(ids=IDS, dim=st.integers(1, 256))
def test_a_vector_is_unit_length_float32_and_the_same_every_time(ids: list[int], dim: int) -> None:
    vector = pooled_vector(ids, dim)
    assert len(vector) == dim
    assert vector == pooled_vector(tuple(ids), dim)
    assert vector == struct.unpack(f"<{dim}f", struct.pack(f"<{dim}f", *vector))
    assert math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-5)


@given(a=IDS, b=IDS)
def test_other_ids_give_another_vector(a: list[int], b: list[int]) -> None:
    if a != b:
        assert pooled_vector(a, 16) != pooled_vector(b, 16)


def test_the_length_is_the_hidden_size_else_the_default() -> None:
    assert embedding_dim({"hidden_size": 128}) == 128
    assert embedding_dim({}) == DEFAULT_EMBEDDING_DIM
    assert embedding_dim({"hidden_size": True}) == DEFAULT_EMBEDDING_DIM
    assert embedding_dim({"hidden_size": 0}) == DEFAULT_EMBEDDING_DIM
