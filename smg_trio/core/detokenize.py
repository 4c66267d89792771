"""Pure. Incremental detokenization: one token id in, the text it safely adds out.

A `Detokenizer` turns engine output ids into text increments whose concatenation equals decoding
all ids at once (docs/stops-and-finalize.md §3.3), with three guarantees:
- a character whose bytes are split over several tokens is never emitted half: text is held
  while the decoded tail ends in U+FFFD or while UTF-8 bytes are still incomplete;
- special tokens are dropped or kept per request (`skip_special_tokens`);
- the work per token does not grow with the length of the output.

Two paths with identical output, token by token:
- **byte path** — when the tokenizer has `token_bytes(id) -> bytes | None` (byte-level BPE).
  Each id's piece is looked up once per detokenizer: a `str` when its bytes are complete UTF-8
  on their own (the common case: emitted as is while nothing is pending), else its raw `bytes`,
  which go through an incremental UTF-8 decoder. Ids without bytes (added/special tokens) decode
  alone through the tokenizer.
- **window path** — any other `TokenizerLike`: the prefix-offset algorithm over a small window
  of recent ids, decoding the window and diffing against the text already emitted. The split
  point moves back to a character boundary when the new decode does not extend the old one
  (docs/stops-and-finalize.md §5 case 44); the window is cut after every emission, so it stays small.

Our divergence from smg: `flush()` at the end of a stream renders incomplete trailing bytes as
U+FFFD instead of dropping them silently.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from typing import Final

from smg_trio.core.tokenizer import TokenizerLike

REPLACEMENT_CHAR: Final = "\ufffd"


class Detokenizer:
    """Incremental, UTF-8 safe detokenizer over any `TokenizerLike` (see the module docstring).

    `context_ids` (window path only) seeds the window with the prompt's tail so that tokenizers
    whose decode depends on the left context (leading spaces, merged byte fallbacks) start right.
    Byte-level pieces need no context, so the byte path ignores it.
    """

    __slots__ = (
        "_clean",
        "_context_ids",
        "_decoder",
        "_held",
        "_ids",
        "_pieces",
        "_prefix",
        "_prefix_index",
        "_skip_special_tokens",
        "_special_token_ids",
        "_token_bytes",
        "_tokenizer",
    )

    def __init__(
        self,
        tokenizer: TokenizerLike,
        *,
        skip_special_tokens: bool = True,
        context_ids: Sequence[int] = (),
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._special_token_ids = tokenizer.special_token_ids
        token_bytes = getattr(tokenizer, "token_bytes", None)
        self._token_bytes: Callable[[int], bytes | None] | None = (
            token_bytes if callable(token_bytes) else None
        )
        # Byte path. `_pieces` survives reset(): it depends only on the tokenizer and the skip flag.
        self._pieces: dict[int, str | bytes] = {}
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""  # decoded text not yet emitted (ends in U+FFFD or precedes partial bytes)
        self._clean = True  # nothing held and no partial bytes: a `str` piece is emitted as is
        # Window path.
        self._context_ids = tuple(context_ids) if self._token_bytes is None else ()
        self._ids: list[int] = []
        self._prefix = ""  # decode(_ids[:_prefix_index]): text already emitted (or prompt context)
        self._prefix_index = 0
        self.reset()

    @property
    def window_len(self) -> int:
        """Ids the window path keeps as context (always 0 on the byte path)."""
        return len(self._ids)

    def step(self, token_id: int) -> str:
        """Append one id; return the text it makes safe to emit (often "")."""
        if self._token_bytes is None:
            return self._step_window(token_id)
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._learn_piece(token_id, self._token_bytes)
        if self._clean and type(piece) is str:
            return piece
        return self._step_pending(piece)

    def flush(self) -> str:
        """End of stream: return everything held, incomplete bytes as U+FFFD; then reset."""
        if self._token_bytes is None:
            text = self._flush_window()
        else:
            text = self._held + self._decoder.decode(b"", True)
        self.reset()
        return text

    def reset(self) -> None:
        """Back to the initial state (a new choice starts); the per-id piece table is kept."""
        self._decoder.reset()
        self._held = ""
        self._clean = True
        self._ids[:] = self._context_ids
        self._prefix = self._decode(self._ids) if self._ids else ""
        self._prefix_index = len(self._ids)

    # -- byte path --------------------------------------------------------------------------

    def _learn_piece(
        self, token_id: int, token_bytes: Callable[[int], bytes | None]
    ) -> str | bytes:
        piece: str | bytes
        if self._skip_special_tokens and token_id in self._special_token_ids:
            piece = ""
        else:
            raw = token_bytes(token_id)
            if raw is None:
                raw = self._decode((token_id,)).encode()
            try:
                piece = raw.decode()
            except UnicodeDecodeError:
                piece = raw
            else:
                # A piece ending in U+FFFD must be held like a decode error would be.
                if piece.endswith(REPLACEMENT_CHAR):
                    piece = raw
        self._pieces[token_id] = piece
        return piece

    def _step_pending(self, piece: str | bytes) -> str:
        # Rare: something is pending, or this piece alone is not complete UTF-8. Feeding a
        # complete piece's bytes after partial ones renders the partial ones as U+FFFD, exactly
        # like decoding the whole window would; an empty piece (a skipped special) changes nothing.
        raw = piece.encode() if isinstance(piece, str) else piece
        text = self._held + self._decoder.decode(raw)
        if self._decoder.getstate()[0] or text.endswith(REPLACEMENT_CHAR):
            self._held = text
            self._clean = False
            return ""
        self._held = ""
        self._clean = True
        return text

    # -- window path (prefix-offset algorithm, docs/stops-and-finalize.md §3.3) -------------------------------------

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)

    def _step_window(self, token_id: int) -> str:
        ids = self._ids
        if not self._prefix and ids:
            # The previous emission decoded to nothing (e.g. skipped specials): re-anchor.
            text = self._decode(ids)
            if not text.endswith(REPLACEMENT_CHAR):
                self._prefix = text
                self._prefix_index = len(ids)
        ids.append(token_id)
        decoded = self._decode(ids)
        if decoded.endswith(REPLACEMENT_CHAR):
            return ""
        new_text = _text_after(decoded, self._prefix)
        if not new_text:
            return ""
        del ids[: self._prefix_index]
        self._prefix_index = len(ids)
        self._prefix = self._decode(ids)
        return new_text

    def _flush_window(self) -> str:
        if not self._ids:
            return ""
        return _text_after(self._decode(self._ids), self._prefix)


def _text_after(decoded: str, prefix: str) -> str:
    """The part of `decoded` beyond `prefix`, or "" when `decoded` is not longer in bytes.

    Usually `decoded` extends `prefix`. When it does not (a later token re-merged earlier bytes
    into a different character), cut at the prefix's UTF-8 length moved back to a character
    boundary, so a character is emitted whole rather than split (docs/stops-and-finalize.md §6 bug class 2).
    """
    if decoded.startswith(prefix):
        return decoded[len(prefix) :]
    encoded = decoded.encode()
    split = len(prefix.encode())
    if len(encoded) <= split:
        return ""
    while split > 0 and encoded[split] & 0xC0 == 0x80:
        split -= 1
    return encoded[split:].decode()
