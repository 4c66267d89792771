"""The incremental detokenizer: docs/stops-and-finalize.md §3.3, §5 cases 24, 38, 44, 45."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.detokenize import REPLACEMENT_CHAR, Detokenizer
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.core.mock_tokenizers import (
    BPE_END,
    BPE_EOS,
    BYTE_EOS,
    BpeTokenizer,
    ByteMockTokenizer,
    ByteTableMockTokenizer,
    WithoutTokenBytes,
    WordMockTokenizer,
)

BYTE_TOKENIZERS = [
    pytest.param(ByteMockTokenizer(), id="window-path"),
    pytest.param(ByteTableMockTokenizer(), id="byte-path"),
]
BPE_BYTES = BpeTokenizer()
BPE_WINDOW = WithoutTokenBytes(BPE_BYTES)
DEMO = load_model_dir(demo_model_path()).tokenizer  # the real ModelTokenizer (byte path)
DEMO_ADDED = (0, 1, 2, 3, 3999, 4000)  # four specials, then <think> and </think> (not special)


def steps(tokenizer: TokenizerLike, ids: Sequence[int], *, skip: bool = True) -> list[str]:
    """Every step's output, then the flush."""
    detokenizer = Detokenizer(tokenizer, skip_special_tokens=skip)
    return [detokenizer.step(token_id) for token_id in ids] + [detokenizer.flush()]


def test_word_tokens_are_emitted_once_each_case_24() -> None:
    assert steps(WordMockTokenizer(), [1, 2, 3]) == ["Hello", " world", " test", ""]


@pytest.mark.parametrize("tokenizer", BYTE_TOKENIZERS)
def test_a_character_split_over_tokens_is_held_until_complete(tokenizer: TokenizerLike) -> None:
    assert steps(tokenizer, list("a中🚀".encode())) == ["a", "", "", "中", "", "", "", "🚀", ""]


@pytest.mark.parametrize("tokenizer", BYTE_TOKENIZERS)
def test_incomplete_bytes_flush_as_replacement_char_case_38(tokenizer: TokenizerLike) -> None:
    # Our divergence from smg, which drops incomplete trailing bytes silently.
    assert steps(tokenizer, [*b"hi", 0xE4, 0xB8]) == ["h", "i", "", "", REPLACEMENT_CHAR]


@pytest.mark.parametrize("tokenizer", BYTE_TOKENIZERS)
def test_invalid_bytes_render_as_replacement_chars_held_until_followed(
    tokenizer: TokenizerLike,
) -> None:
    # A decode ending in U+FFFD is held, whatever made it: the next text releases it.
    assert steps(tokenizer, [0x80, 0x61, 0xFF]) == ["", "\ufffda", "", "\ufffd"]


@pytest.mark.parametrize("tokenizer", BYTE_TOKENIZERS)
def test_special_tokens_are_skipped_or_kept(tokenizer: TokenizerLike) -> None:
    ids = [*b"hi", BYTE_EOS, *b"!"]
    assert "".join(steps(tokenizer, ids, skip=True)) == "hi!"
    assert "".join(steps(tokenizer, ids, skip=False)) == "hi<eos>!"


@pytest.mark.parametrize("tokenizer", [BPE_WINDOW, BPE_BYTES], ids=["window-path", "byte-path"])
def test_special_token_inside_a_split_character(tokenizer: TokenizerLike) -> None:
    head, tail = b"\xe4\xb8", b"\xad"  # 中 split around the special token
    ids = [*_bpe_ids_for_bytes(head), BPE_END, *_bpe_ids_for_bytes(tail)]
    # Skipped, the special token vanishes and the bytes around it still join.
    assert "".join(steps(tokenizer, ids, skip=True)) == "中"
    # Kept, it interrupts the character: each broken part renders as U+FFFD, like a full decode.
    kept = "".join(steps(tokenizer, ids, skip=False))
    assert kept == "\ufffd<|end|>\ufffd" == tokenizer.decode(ids, skip_special_tokens=False)


class BoundaryTokenizer:
    """decode([1,2]) = "abc" but decode([1,2,3]) = "ab🎉": token 3 re-merges the prefix's bytes."""

    TEXTS: Final = {
        (1,): "a",
        (1, 2): "abc",
        (1, 2, 3): "ab🎉",
        (2,): "bc",
        (2, 3): "b🎉",
        (3,): "🎉",
    }

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return ()

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset()

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        raise AssertionError("the detokenizer never encodes")

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return self.TEXTS[tuple(ids)]


def test_split_point_moves_back_to_a_char_boundary_case_44() -> None:
    detokenizer = Detokenizer(BoundaryTokenizer(), context_ids=[1, 2])
    assert detokenizer.step(3) == "🎉"


def test_context_is_restored_by_reset() -> None:
    detokenizer = Detokenizer(BoundaryTokenizer(), context_ids=[1, 2])
    detokenizer.step(3)
    detokenizer.reset()
    assert detokenizer.step(3) == "🎉"


def test_window_stays_small_and_output_equals_full_decode_case_45() -> None:
    tokenizer = WordMockTokenizer()
    ids = [1 + i % 4 for i in range(100)]
    detokenizer = Detokenizer(tokenizer)
    out = []
    for token_id in ids:
        out.append(detokenizer.step(token_id))
        assert detokenizer.window_len <= 2
    out.append(detokenizer.flush())
    assert "".join(out) == tokenizer.decode(ids, skip_special_tokens=True)


def test_window_stays_small_over_multibyte_text() -> None:
    ids = list(("日本語 🚀 " * 40).encode())
    detokenizer = Detokenizer(ByteMockTokenizer())
    for token_id in ids:
        detokenizer.step(token_id)
        assert detokenizer.window_len <= 5  # previous char (<= 4 bytes) + the new byte


def test_flush_resets_for_the_next_stream() -> None:
    detokenizer = Detokenizer(ByteTableMockTokenizer())
    detokenizer.step(0xE4)
    assert detokenizer.flush() == REPLACEMENT_CHAR
    assert [detokenizer.step(byte) for byte in b"ok"] == ["o", "k"]


def _bpe_ids_for_bytes(raw: bytes) -> list[int]:
    """BPE ids whose bytes are exactly `raw`, one single-byte token per byte."""
    byte_ids = {BPE_BYTES.token_bytes(i): i for i in range(BPE_BYTES.vocab_size)}
    return [byte_ids[bytes((byte,))] for byte in raw]


TEXT_ALPHABET = "ab <>\n.é中文東京🚀💡👍🏽"


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(TEXT_ALPHABET, max_size=40),
    specials=st.lists(st.tuples(st.integers(0, 40), st.sampled_from([BPE_EOS, BPE_END]))),
    skip=st.booleans(),
)
def test_byte_path_matches_window_path_step_by_step_on_bpe(
    text: str, specials: list[tuple[int, int]], skip: bool
) -> None:
    ids = BPE_WINDOW.encode(text, add_special_tokens=False)
    for position, special in specials:
        ids.insert(min(position, len(ids)), special)
    window = steps(BPE_WINDOW, ids, skip=skip)
    assert steps(BPE_BYTES, ids, skip=skip) == window
    assert "".join(window) == BPE_WINDOW.decode(ids, skip_special_tokens=skip)
    if not specials or skip:
        # Valid text in, so no step ever emits half a character.
        assert REPLACEMENT_CHAR not in "".join(window)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, BPE_BYTES.vocab_size - 1), max_size=30), skip=st.booleans())
def test_byte_path_matches_window_path_on_arbitrary_bpe_ids(ids: list[int], skip: bool) -> None:
    window = steps(BPE_WINDOW, ids, skip=skip)
    assert steps(BPE_BYTES, ids, skip=skip) == window
    assert "".join(window) == BPE_WINDOW.decode(ids, skip_special_tokens=skip)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, BYTE_EOS), max_size=30), skip=st.booleans())
def test_byte_path_matches_window_path_on_arbitrary_bytes(ids: list[int], skip: bool) -> None:
    window = steps(ByteMockTokenizer(), ids, skip=skip)
    assert steps(ByteTableMockTokenizer(), ids, skip=skip) == window
    assert "".join(window) == ByteMockTokenizer().decode(ids, skip_special_tokens=skip)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(TEXT_ALPHABET + "Δ°€×", max_size=40),
    added=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(DEMO_ADDED))),
    skip=st.booleans(),
)
def test_byte_path_matches_window_path_on_the_demo_model(
    text: str, added: list[tuple[int, int]], skip: bool
) -> None:
    assert DEMO.is_byte_level
    ids = DEMO.encode(text, add_special_tokens=False)
    for position, token_id in added:
        ids.insert(min(position, len(ids)), token_id)
    window = steps(WithoutTokenBytes(DEMO), ids, skip=skip)
    assert steps(DEMO, ids, skip=skip) == window
    assert "".join(window) == DEMO.decode(ids, skip_special_tokens=skip)
