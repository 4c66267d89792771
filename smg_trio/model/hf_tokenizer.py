"""Pure. A Hugging Face `tokenizers.Tokenizer` behind the core's `TokenizerLike`, with the
byte-level vocabulary table the detokenizer's fast path uses.

Byte-level BPE vocabularies spell every byte as one printable character; `token_bytes(id)` undoes
that once per id so incremental detokenization can join raw bytes instead of decoding windows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from tokenizers import Tokenizer, decoders

U32_MAX = 2**32 - 1
# How many input bytes a normalizer may fold into one normalized byte: Unicode normalization and
# lowercasing map a 4-byte character to at most one byte (NFKC: U+1D400 -> "A"), never more.
_SHRINKING_NORMALIZERS: Final = {"NFC": 4, "NFD": 4, "NFKC": 4, "NFKD": 4, "Lowercase": 4}
# Pre-tokenizers that keep every input character (those that drop whitespace or delimiters
# would let a body of spaces be any length at zero tokens).
_KEEPING_PRE_TOKENIZERS: Final = frozenset(
    {"ByteLevel", "Metaspace", "Digits", "UnicodeScripts", "Punctuation", "Split"}
)


def _byte_level_char_to_byte() -> dict[str, int]:
    """The byte-level BPE alphabet: each byte is spelled as one printable character.

    Bytes that are already printable (and not a space) stand for themselves; the others, in
    ascending order, are spelled with consecutive characters from U+0100 up.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    char_to_byte = {chr(b): b for b in printable}
    unprintable = [b for b in range(256) if b not in char_to_byte.values()]
    char_to_byte.update({chr(0x100 + n): b for n, b in enumerate(unprintable)})
    return char_to_byte


BYTE_LEVEL_CHARS = _byte_level_char_to_byte()
# str.translate table that turns an alphabet character into the latin-1 character of its byte.
_TO_LATIN1 = {ord(char): byte for char, byte in BYTE_LEVEL_CHARS.items()}
_ALPHABET = frozenset(BYTE_LEVEL_CHARS)


def byte_level_token_bytes(token: str) -> bytes:
    """Raw bytes of a byte-level vocabulary entry, as the ByteLevel decoder produces them.

    A token with any character outside the alphabet is taken as its own UTF-8 text, whole;
    that is what the decoder does too.
    """
    if _ALPHABET.issuperset(token):
        return token.translate(_TO_LATIN1).encode("latin-1")
    return token.encode("utf-8")


class ModelTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` behind `smg_trio.core.tokenizer.TokenizerLike`.

    Decoding is lossy UTF-8: an incomplete trailing sequence renders as one U+FFFD.

    `token_bytes(id)` is the detokenizer's fast path for byte-level vocabularies: the raw bytes
    of an ordinary (model vocabulary) token, or None for added tokens (special or not), ids
    outside the vocabulary, and every id when the decoder is not ByteLevel. For ids that all have
    bytes, `b"".join(bytes).decode("utf-8", "replace") == decode(ids)`. Added tokens break
    that join: `decode` renders the bytes on either side of an added token separately, except
    that a special token dropped by skip_special_tokens=True is transparent.
    """

    def __init__(self, tokenizer: Tokenizer, *, eos_token_ids: Sequence[int] = ()) -> None:
        self._tokenizer = tokenizer
        self._eos_token_ids = tuple(sorted(set(eos_token_ids)))
        added = tokenizer.get_added_tokens_decoder()
        self._special_token_ids = frozenset(i for i, token in added.items() if token.special)
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        self._vocab_size = max([*vocab.values(), *added, -1]) + 1
        self._is_byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
        table: list[bytes | None] = [None] * self._vocab_size
        if self._is_byte_level:
            for token, token_id in vocab.items():
                if token_id not in added:
                    table[token_id] = byte_level_token_bytes(token)
        self._token_bytes = table
        self._max_bytes_per_token = max_bytes_per_token(tokenizer)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos_token_ids

    @property
    def max_bytes_per_token(self) -> int | None:
        """The most input bytes one token can stand for, or None when nothing bounds it."""
        return self._max_bytes_per_token

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self._special_token_ids

    @property
    def vocab_size(self) -> int:
        """One past the largest id, added tokens included."""
        return self._vocab_size

    @property
    def is_byte_level(self) -> bool:
        """True when the decoder is ByteLevel, i.e. `token_bytes` has entries."""
        return self._is_byte_level

    @property
    def hf_tokenizer(self) -> Tokenizer:
        """The wrapped tokenizer, for batch APIs. Do not mutate it."""
        return self._tokenizer

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        # The "fast" batch path skips the character offsets `encode` computes (we never use
        # them): the same ids in about half the time, which is most of a request's prepare cost.
        encodings = self._tokenizer.encode_batch_fast([text], add_special_tokens=add_special_tokens)
        return encodings[0].ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id <= U32_MAX:
            return None
        return self._tokenizer.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes | None:
        if 0 <= token_id < self._vocab_size:
            return self._token_bytes[token_id]
        return None


def max_bytes_per_token(tokenizer: Tokenizer) -> int | None:
    """An upper bound on the input bytes one token of `tokenizer` covers (docs/limits.md §1).

    A token's raw bytes (byte-level vocabularies) or UTF-8 spelling (others: a SentencePiece "▁"
    for one byte, "<0x41>" for one byte) are at least the input bytes it stands for, times what the
    normalizer may fold. None (no bound, so no rejection by size) unless the model is BPE with
    no fused unknown token and every pre-tokenizer keeps every character.
    """
    model = tokenizer.model
    if type(model).__name__ != "BPE" or (model.unk_token is not None and model.fuse_unk):
        return None
    shrink = _normalizer_shrink(tokenizer.normalizer)
    if shrink is None or not _keeps_every_character(tokenizer.pre_tokenizer):
        return None
    added = tokenizer.get_added_tokens_decoder().values()
    spelled = (
        byte_level_token_bytes
        if isinstance(tokenizer.decoder, decoders.ByteLevel)
        else lambda token: token.encode("utf-8")
    )
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    longest = max((len(spelled(token)) for token in vocab), default=1)
    longest = max(longest, *(len(token.content.encode("utf-8")) for token in added), 4)
    return longest * shrink


def _components(component: Any, list_key: str) -> list[dict[str, Any]]:
    """A normalizer's or pre-tokenizer's parts, from its own JSON (Sequence flattened)."""
    if component is None:
        return []
    state: dict[str, Any] = json.loads(component.__getstate__())
    return list(state.get(list_key, [])) if state.get("type") == "Sequence" else [state]


def _normalizer_shrink(normalizer: Any) -> int | None:
    shrink = 1
    for part in _components(normalizer, "normalizers"):
        kind = part.get("type")
        if kind == "Prepend":
            continue
        if kind not in _SHRINKING_NORMALIZERS:
            return None
        shrink *= _SHRINKING_NORMALIZERS[kind]
    return shrink


def _keeps_every_character(pre_tokenizer: Any) -> bool:
    for part in _components(pre_tokenizer, "pretokenizers"):
        if part.get("type") not in _KEEPING_PRE_TOKENIZERS:
            return False
        if str(part.get("behavior", "")).lower() == "removed":
            return False
    return True
