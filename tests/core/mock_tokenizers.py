"""Reference tokenizers for tests (docs/stops-and-finalize.md §5): T1, T2 and a trained BPE.

- `WordMockTokenizer` (T1 "word mock"): a dozen whole words; decode joins token texts with one
  space. Unknown ids are a hard decode error. It records every decode call, so a test can prove
  an id was never decoded.
- `ByteMockTokenizer` (T2 "byte mock"): ids 0-255 are raw bytes, 256 is `<eos>`; decode is lossy
  UTF-8. `ByteTableMockTokenizer` is the same plus `token_bytes`, which puts the detokenizer on
  its byte path, so a test can run both paths over one vocabulary.
- `BpeTokenizer`: a small byte-level BPE trained with `tokenizers` on text with CJK and emoji,
  with `token_bytes` — real merges that split multi-byte characters.
- `WithoutTokenBytes(tokenizer)` hides `token_bytes`, putting the detokenizer on its window path.
All implement `smg_trio.core.tokenizer.TokenizerLike`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from smg_trio.core.tokenizer import TokenizerLike

WORD_VOCAB: Final[dict[str, int]] = {
    "Hello": 1,
    "world": 2,
    "test": 3,
    "token": 4,
    " ": 5,
    ".": 6,
    "system": 7,
    "user": 8,
    "assistant": 9,
    "<eos>": 999,
    "<bos>": 1000,
    "<|im_start|>": 1001,
    "<|im_end|>": 1002,
    "<|eot_id|>": 1003,
}
WORD_EOS: Final = 999
WORD_IM_END: Final = 1002


class WordMockTokenizer:
    """T1. `special_ids` are dropped by skip_special (default: only `<eos>` and `<bos>`)."""

    def __init__(self, *, special_ids: frozenset[int] = frozenset({999, 1000})) -> None:
        self._special_ids = special_ids
        self._texts = {token_id: text for text, token_id in WORD_VOCAB.items()}
        self.decode_calls: list[tuple[int, ...]] = []

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (WORD_EOS,)

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self._special_ids

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return [WORD_VOCAB[word] for word in text.split() if word in WORD_VOCAB]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        self.decode_calls.append(tuple(ids))
        unknown = [token_id for token_id in ids if token_id not in self._texts]
        if unknown:
            raise ValueError(f"unknown token ids {unknown}")
        return " ".join(
            self._texts[token_id]
            for token_id in ids
            if not (skip_special_tokens and token_id in self._special_ids)
        )


BYTE_EOS: Final = 256
BYTE_EOS_TEXT: Final = b"<eos>"


class ByteMockTokenizer:
    """T2. encode = UTF-8 bytes; decode = lossy UTF-8 (`<eos>` kept unless skipped)."""

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (BYTE_EOS,)

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset({BYTE_EOS})

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return list(text.encode())

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        raw = bytearray()
        for token_id in ids:
            if token_id == BYTE_EOS:
                if not skip_special_tokens:
                    raw += BYTE_EOS_TEXT
            elif 0 <= token_id < BYTE_EOS:
                raw.append(token_id)
            else:
                raise ValueError(f"unknown token id {token_id}")
        return raw.decode("utf-8", "replace")


class ByteTableMockTokenizer(ByteMockTokenizer):
    """T2 with `token_bytes`: the detokenizer takes its byte path."""

    def token_bytes(self, token_id: int) -> bytes | None:
        return bytes((token_id,)) if 0 <= token_id < BYTE_EOS else None


BPE_SPECIAL_TOKENS: Final = ("<|eos|>", "<|end|>")
BPE_EOS: Final = 0
BPE_END: Final = 1

_TRAINING_LINES: Final = (
    "The quick brown fox jumps over the lazy dog, again and again.",
    "def scan(tokens):\n    for token in tokens:\n        yield token.upper()\n",
    "Stop strings may span tokens; the scanner must hold back only what could start one.",
    "東京は日本の首都です。中文文本和汉字在这里出现。日本語のテキストもあります。",
    "한국어 문장도 조금 있습니다. Ελληνικά γράμματα: αβγδε. Кириллица тоже.",
    "Emoji: 🚀 launch, 💡 idea, 🎉 party, 👍🏽 thumbs, 🇯🇵 flag, 😀😃😄😁.",
    "Math: 2 × 3 = 6, Δx ≈ 0.5°, €100 – a dash, (∆) delta.",
    "<think>reasoning</think> The answer is 42. END of message. ### Observation:",
)


def _byte_level_char_to_byte() -> dict[str, int]:
    """The byte-level BPE alphabet: printable Latin-1 bytes stand for themselves, the other
    bytes are shifted to code points 256 and up, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    byte_to_char = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in byte_to_char:
            byte_to_char[byte] = chr(256 + shifted)
            shifted += 1
    return {char: byte for byte, char in byte_to_char.items()}


@functools.cache
def train_byte_level_bpe(vocab_size: int = 600) -> Tokenizer:
    """A deterministic byte-level BPE with special tokens `<|eos|>`=0 and `<|end|>`=1."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(BPE_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([line for _ in range(20) for line in _TRAINING_LINES], trainer)
    return tokenizer


class BpeTokenizer:
    """The trained byte-level BPE behind `TokenizerLike`, with `token_bytes` (byte path)."""

    _CHAR_TO_BYTE: Final = _byte_level_char_to_byte()

    def __init__(self) -> None:
        self.tokenizer = train_byte_level_bpe()
        self._special_ids = frozenset(range(len(BPE_SPECIAL_TOKENS)))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (BPE_EOS,)

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self._special_ids

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_bytes(self, token_id: int) -> bytes | None:
        if token_id in self._special_ids:
            return None
        token = self.tokenizer.id_to_token(token_id)
        if token is None:
            raise ValueError(f"unknown token id {token_id}")
        return bytes(self._CHAR_TO_BYTE[char] for char in token)


class WithoutTokenBytes:
    """Any tokenizer with `token_bytes` hidden, so the detokenizer takes its window path."""

    def __init__(self, inner: TokenizerLike) -> None:
        self.inner = inner

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.inner.eos_token_ids

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self.inner.special_token_ids

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return self.inner.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)
