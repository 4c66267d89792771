"""Routing keys of an image prompt (core/images.py `routing_ids`, docs/images.md §5): an
image's span is keyed by its identifier, so cache_aware's prefix tree (the real one) parts two
different images of one size where the engine's prefix cache parts them, and matches a repeat
whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.images import routing_ids
from smg_trio.neutral.media import MediaSpan
from smg_trio.routing.prefix_tree import PrefixTree

PROMPT = tuple(range(100, 164))  # 64 ids; the image spans [16, 48)


def image(identifier: str) -> MediaSpan:
    return MediaSpan(identifier, 16, 32)


def test_a_text_prompt_is_its_ids() -> None:
    assert routing_ids(PROMPT, ()) == PROMPT


@given(st.text(min_size=1), st.text(min_size=1))
def test_the_span_holds_the_identifiers_keys_and_nothing_else_changes(a: str, b: str) -> None:
    first, second = routing_ids(PROMPT, (image(a),)), routing_ids(PROMPT, (image(b),))
    assert first[:16] == PROMPT[:16]
    assert first[48:] == PROMPT[48:]
    assert all(token < 0 for token in first[16:48])  # never a vocabulary id
    assert routing_ids(PROMPT, (image(a),)) == first  # stable
    if a != b:
        assert first[16:48] != second[16:48]


def test_cache_aware_parts_different_images_and_matches_a_repeat() -> None:
    tree = PrefixTree(block_tokens=8)
    tree.insert(routing_ids(PROMPT, (image("a" * 64),)), "w1")
    assert tree.match(routing_ids(PROMPT, (image("a" * 64),))) == {"w1": 64}
    assert tree.match(routing_ids(PROMPT, (image("b" * 64),))) == {"w1": 16}  # the text before
