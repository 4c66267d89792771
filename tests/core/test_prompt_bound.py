"""core.prompt_bound with the demo model's real tokenizer: what cannot fit is refused before it is
encoded whole, what may fit is encoded exactly as before, and truncate_prompt_tokens keeps the
exact tail (docs/limits.md §1)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from smg_trio.core.prompt_bound import CHUNK_CHARS, PromptLimit, bounded_encode
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.model.hf_tokenizer import max_bytes_per_token

DEMO = load_model_dir(demo_model_path())
TOKENIZER = DEMO.tokenizer
CONTEXT = 4096
WORDS = ("the", " gateway", "\n", "  ", "tokens", "!", "42", "ünïcødé", "\t", "é", "😀", "x" * 40)


class CountingTokenizer:
    """The demo tokenizer, recording the length of every text it is asked to encode."""

    def __init__(self) -> None:
        self.encoded: list[int] = []

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return TOKENIZER.eos_token_ids

    @property
    def special_token_ids(self) -> frozenset[int]:
        return TOKENIZER.special_token_ids

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        self.encoded.append(len(text))
        return TOKENIZER.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return TOKENIZER.decode(ids, skip_special_tokens=skip_special_tokens)


def limit(keep: int | None = None, context: int = CONTEXT) -> PromptLimit:
    return PromptLimit(
        context_length=context,
        max_bytes_per_token=TOKENIZER.max_bytes_per_token,
        keep=keep,
        param="prompt",
    )


def text_of(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    pieces: list[str] = []
    size = 0
    while size < chars:
        pieces.append(rng.choice(WORDS))
        size += len(pieces[-1])
    return "".join(pieces)


def test_every_token_of_the_demo_vocabulary_is_within_the_byte_bound() -> None:
    bound = TOKENIZER.max_bytes_per_token
    assert bound is not None
    assert all(len(b) <= bound for b in TOKENIZER._token_bytes if b is not None)


def test_a_tokenizer_that_drops_characters_has_no_byte_bound() -> None:
    dropping = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    dropping.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert max_bytes_per_token(dropping) is None
    stripping = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    stripping.normalizer = normalizers.Strip()
    assert max_bytes_per_token(stripping) is None
    nfc = Tokenizer(models.BPE(vocab={"aaa": 0}, merges=[]))
    nfc.normalizer = normalizers.NFC()
    assert max_bytes_per_token(nfc) == 4 * 4  # a 4-byte floor, times what NFC may fold


def test_a_text_the_bytes_prove_too_long_is_refused_without_tokenizing() -> None:
    counting = CountingTokenizer()
    text = "hello world " * 700_000  # 8.4 MB
    with pytest.raises(ClientError) as info:
        bounded_encode(counting, text, add_special_tokens=True, limit=limit())
    assert counting.encoded == []
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "prompt"
    assert info.value.message.startswith("This model's maximum context length is 4096 tokens.")


def test_a_text_under_the_byte_rule_but_over_the_context_stops_after_a_chunk() -> None:
    counting = CountingTokenizer()
    text = " a" * 30_000  # 60 kB: under 4095 * 18 bytes, but 30,000 tokens
    with pytest.raises(ClientError, match="at least"):
        bounded_encode(counting, text, add_special_tokens=True, limit=limit())
    assert len(counting.encoded) == 1  # one chunk, not the whole text
    assert counting.encoded[0] <= CHUNK_CHARS + 4096


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), special=st.booleans())
def test_a_long_text_that_may_fit_is_encoded_exactly(seed: int, special: bool) -> None:
    text = text_of(seed, 3 * CHUNK_CHARS)
    whole = tuple(TOKENIZER.encode(text, add_special_tokens=special))
    assert (
        bounded_encode(TOKENIZER, text, add_special_tokens=special, limit=limit(context=10**6))
        == whole
    )


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), keep=st.integers(1, 4096))
def test_truncation_keeps_the_exact_tail_and_encodes_only_a_suffix(seed: int, keep: int) -> None:
    text = text_of(seed, 6 * CHUNK_CHARS)
    whole = TOKENIZER.encode(text, add_special_tokens=True)
    counting = CountingTokenizer()
    tail = bounded_encode(counting, text, add_special_tokens=True, limit=limit(keep=keep))
    assert len(tail) >= keep
    assert tail[-keep:] == tuple(whole[-keep:])
    assert counting.encoded[-1] < len(text)  # the final encoding is a suffix, not the whole
