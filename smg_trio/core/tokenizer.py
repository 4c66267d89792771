"""Pure. The tokenizer seam: what core/ needs from a tokenizer, as a Protocol.

`smg_trio.model.hf_tokenizer.ModelTokenizer` implements it over Hugging Face `tokenizers`; tests implement it
with small scripted vocabularies (the spec's T1 "word mock" and T2 "byte mock").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TokenizerLike(Protocol):
    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """EOS ids: union of config.json and generation_config.json, deduplicated, ascending."""
        ...

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids whose text is dropped when decoding with skip_special_tokens=True."""
        ...

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        """Lossy UTF-8: an incomplete trailing byte sequence renders as U+FFFD."""
        ...
