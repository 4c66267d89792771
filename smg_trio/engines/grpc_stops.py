"""Pure. Stop strings for the reference gRPC engines that match them themselves, each the way its
real engine does:

- `TextStops` (vLLM, TokenSpeed): on the incremental detokenization of the engine's own output.
  A stop string counts once it appears in text that ends within the newest token's text, so a
  string spanning several tokens is found on the token that completes it. While fewer than
  `min_tokens` tokens were generated nothing is matched, and that text is never searched again
  (only the `len(stop) - 1` characters before new text are, so a stop may straddle the edge).
  Several candidates: the first in the request's list that occurs wins.
  vLLM's detokenizer runs after the engine's own stop check and a string match wins over it;
  its stop-id token is then left out of the text unless `include_stop_str_in_output` (the
  `include_stop_token_text` flag). TokenSpeed (SGLang's order) checks strings only when no
  other stop ended the request.
- `TokenSequenceStops` (TRT-LLM): each stop string is tokenized once (no special tokens) and
  matches when the output ends with exactly those ids, so a string the model spells with other
  ids (a different leading space, a different split) does not stop it.

Empty stop strings never match (the admission rules reject or drop them first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from smg_trio.core.detokenize import Detokenizer
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.engines.generation import EosStop, Finish, TokenStop


@dataclass(frozen=True)
class StringStop:
    """Ended by a stop string; its last `token_count` output tokens spell it (TRT-LLM only:
    TRT-LLM can leave them out of the output; text matchers report 0)."""

    text: str
    token_count: int = 0


class StopMatcher(Protocol):
    def check(self, output_ids: Sequence[int], finish: Finish | None) -> StringStop | None:
        """Call once per generated token, the newest last in `output_ids`; `finish` is what the
        engine's own stop rules decided for that token."""
        ...


class TextStops:
    """Stop strings on the detokenized output (see the module docstring)."""

    def __init__(
        self,
        tokenizer: TokenizerLike,
        stops: Sequence[str],
        *,
        min_tokens: int,
        skip_special_tokens: bool,
        include_stop_token_text: bool,
        after_other_stops: bool,
    ) -> None:
        self._stops = tuple(s for s in stops if s)
        self._min_tokens = min_tokens
        self._include_stop_token_text = include_stop_token_text
        self._after_other_stops = after_other_stops
        self._detokenizer = Detokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
        self._text = ""
        self._searched = 0  # text before this index was searched (or skipped for min_tokens)

    def check(self, output_ids: Sequence[int], finish: Finish | None) -> StringStop | None:
        if not self._stops or (finish is not None and self._after_other_stops):
            return None
        stopped_by_id = isinstance(finish, EosStop | TokenStop)
        if not stopped_by_id or self._include_stop_token_text:
            self._text += self._detokenizer.step(output_ids[-1])
        if len(output_ids) <= self._min_tokens:
            self._searched = len(self._text)
            return None
        if self._searched == len(self._text):
            return None
        searched, self._searched = self._searched, len(self._text)
        for stop in self._stops:
            if self._text.find(stop, max(0, searched - len(stop) + 1)) != -1:
                return StringStop(stop)
        return None


class TokenSequenceStops:
    """Stop strings as token-id sequences at the end of the output (TRT-LLM's stop words)."""

    def __init__(self, tokenizer: TokenizerLike, stops: Sequence[str], *, min_tokens: int) -> None:
        words = ((s, tuple(tokenizer.encode(s, add_special_tokens=False))) for s in stops if s)
        self._words = tuple((text, ids) for text, ids in words if ids)
        self._min_tokens = min_tokens

    def check(self, output_ids: Sequence[int], finish: Finish | None) -> StringStop | None:
        if finish is not None or len(output_ids) < max(1, self._min_tokens):
            return None
        for text, ids in self._words:
            if len(ids) <= len(output_ids) and tuple(output_ids[-len(ids) :]) == ids:
                return StringStop(text, token_count=len(ids))
        return None
