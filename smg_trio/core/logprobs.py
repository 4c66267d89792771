"""Pure. Engine token logprobs in OpenAI's response shapes, field by field as vLLM's server
renders them.

- A token's string is its id decoded alone with special tokens kept (vLLM decodes each logprob
  token the same way), so a character split over byte-level tokens shows as U+FFFD; `bytes`
  are that string's UTF-8 bytes. SentencePiece tokenizers drop a piece's leading "▁" when it is
  decoded alone; the spaces it stood for are put back (as vLLM does), so " world" stays
  " world".
- The candidates of one position are vLLM's logprob dict: the sampled token first, then the
  engine's top-k without the sampled token. Chat shows the first `top_logprobs` of them (none
  for 0); completions show the first `logprobs + 1` (the sampled one alone for 0).
- Logprobs below -9999.0 (and -inf) are reported as -9999.0, as vLLM clamps them for JSON.
- Completions' `text_offset` starts at the text already sent for the choice and advances by each
  token string's length (vLLM's rule; it is not a position in the trimmed text).
- Prompt logprobs (vLLM's `prompt_logprobs`): null for the first prompt token, then per position
  a dict by token id: the prompt token first with the engine's rank, then the top-k ranked 1..k.
  Completions `echo` with `logprobs` puts the prompt's positions before the generated ones in
  `logprobs` (the first with null logprob and top_logprobs), offsets counted from 0 over both.

Token strings are decoded once per tokenizer and id: the per-token render must stay cheap with 20
alternatives per position (bench/core_pipeline.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final
from weakref import WeakKeyDictionary

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.events import TokenLogprob
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChoiceLogprobs,
    CompletionLogprobs,
    GenerateLogprobs,
    PromptLogprob,
    PromptLogprobs,
    SglangLogprob,
    TopLogprob,
)
from smg_trio.wire.openai_responses import (
    TokenLogprob as ChatTokenLogprob,
)

LOWEST_LOGPROB: Final = -9999.0

# A token's string, its UTF-8 bytes, and its chat JSON entry split around the logprob value:
# `{"token":T,"logprob":` and `,"bytes":[...]`.
_Entry = tuple[str, tuple[int, ...], bytes, bytes]
_STRINGS: WeakKeyDictionary[TokenizerLike, dict[int, _Entry]] = WeakKeyDictionary()
_encode = JSON_ENCODER.encode
SENTENCEPIECE_SPACE: Final = "\u2581"


def _with_leading_spaces(text: str, piece: str | None) -> str:
    """`text` with the leading spaces its SentencePiece `piece` has and decoding dropped."""
    if not piece or not piece.startswith(SENTENCEPIECE_SPACE):
        return text
    markers = len(piece) - len(piece.lstrip(SENTENCEPIECE_SPACE))
    missing = markers - (len(text) - len(text.lstrip(" ")))
    return " " * missing + text if missing > 0 else text


class TokenStrings:
    """Each token id decoded alone, memoised per tokenizer."""

    __slots__ = ("_cache", "_piece", "_tokenizer")

    def __init__(self, tokenizer: TokenizerLike) -> None:
        self._tokenizer = tokenizer
        # The vocabulary piece of an id, when the tokenizer can tell (SentencePiece spaces).
        self._piece: Callable[[int], str | None] | None = getattr(tokenizer, "id_to_token", None)
        cache = _STRINGS.get(tokenizer)
        if cache is None:
            cache = _STRINGS[tokenizer] = {}
        self._cache = cache

    def entry(self, token_id: int) -> _Entry:
        found = self._cache.get(token_id)
        if found is None:
            text = self._tokenizer.decode((token_id,), skip_special_tokens=False)
            if self._piece is not None:
                text = _with_leading_spaces(text, self._piece(token_id))
            raw = tuple(text.encode("utf-8", "replace"))
            head = b'{"token":' + _encode(text) + b',"logprob":'
            found = self._cache[token_id] = (text, raw, head, b',"bytes":' + _encode(raw))
        return found


def prompt_logprobs(strings: TokenStrings, positions: Sequence[TokenLogprob]) -> PromptLogprobs:
    """vLLM's `prompt_logprobs` list for a prompt whose positions 1.. are `positions`."""
    rendered: list[dict[str, PromptLogprob] | None] = [None]
    for position in positions:
        ranked = [(position.token_id, position.logprob, position.rank)]
        ranked += [(top.token_id, top.logprob, i) for i, top in enumerate(position.top, 1)]
        rendered.append(
            {
                str(token_id): PromptLogprob(_clamped(logprob), rank, strings.entry(token_id)[0])
                for token_id, logprob, rank in ranked
            }
        )
    return tuple(rendered)


def sglang_logprobs(
    strings: TokenStrings | None, positions: Sequence[TokenLogprob], *, with_top: bool
) -> GenerateLogprobs:
    """/generate's `meta_info` output logprobs (SGLang's shape): per position `[logprob, id,
    text]`, the text only with `strings` (`return_text_in_logprobs`), else null; with `with_top`
    the engine's top-k of each position the same way."""

    def entry(token_id: int, logprob: float) -> SglangLogprob:
        return (logprob, token_id, None if strings is None else strings.entry(token_id)[0])

    tokens = tuple(entry(p.token_id, p.logprob) for p in positions)
    if not with_top:
        return GenerateLogprobs(output_token_logprobs=tokens)
    tops = tuple(tuple(entry(t.token_id, t.logprob) for t in p.top) for p in positions)
    return GenerateLogprobs(output_token_logprobs=tokens, output_top_logprobs=tops)


def _clamped(logprob: float) -> float:
    return logprob if logprob >= LOWEST_LOGPROB else LOWEST_LOGPROB


def candidates(position: TokenLogprob) -> list[tuple[int, float]]:
    """vLLM's logprob dict of one position, in order: the sampled token, then the top-k."""
    sampled = position.token_id
    out = [(sampled, position.logprob)]
    out.extend((top.token_id, top.logprob) for top in position.top if top.token_id != sampled)
    return out


class LogprobFormatter:
    """Renders released positions for one request (`top`: the client's top-k width)."""

    __slots__ = ("_strings", "_top")

    def __init__(self, tokenizer: TokenizerLike, top: int) -> None:
        self._strings = TokenStrings(tokenizer)
        self._top = top

    def chat(self, positions: Sequence[TokenLogprob]) -> ChoiceLogprobs:
        entry = self._strings.entry
        width = self._top
        content = []
        for position in positions:
            text, raw, _, _ = entry(position.token_id)
            tops: tuple[TopLogprob, ...] = ()
            if width:
                tops = tuple(
                    TopLogprob(entry(token_id)[0], _clamped(logprob), entry(token_id)[1])
                    for token_id, logprob in candidates(position)[:width]
                )
            content.append(ChatTokenLogprob(text, _clamped(position.logprob), raw, tops))
        return ChoiceLogprobs(content=tuple(content))

    def chat_json(self, positions: Sequence[TokenLogprob]) -> bytes:
        """`chat(positions)` JSON-encoded, spliced from per-token pieces (the streaming path;
        tests pin that it equals the struct encoding byte for byte). The candidate rule of
        `candidates` is inlined: this runs for every token."""
        entry = self._strings.entry
        encode = _encode
        width = self._top
        lowest = LOWEST_LOGPROB
        parts = []
        for position in positions:
            sampled = position.token_id
            _, _, head, tail = entry(sampled)
            value = position.logprob if position.logprob >= lowest else lowest
            encoded = encode(value)
            if not width:
                parts.append(head + encoded + tail + b',"top_logprobs":[]}')
                continue
            tops = [head + encoded + tail + b"}"]
            for top in position.top:
                if len(tops) == width:
                    break
                if top.token_id != sampled:
                    _, _, top_head, top_tail = entry(top.token_id)
                    logprob = top.logprob if top.logprob >= lowest else lowest
                    tops.append(top_head + encode(logprob) + top_tail + b"}")
            parts.append(head + encoded + tail + b',"top_logprobs":[' + b",".join(tops) + b"]}")
        return b'{"content":[' + b",".join(parts) + b"]}"

    def completion(
        self, positions: Sequence[TokenLogprob], initial_offset: int
    ) -> CompletionLogprobs:
        entry = self._strings.entry
        keep = self._top + 1
        tokens: list[str] = []
        offsets: list[int] = []
        offset = initial_offset
        tops: list[dict[str, float] | None] = []
        for position in positions:
            text = entry(position.token_id)[0]
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            tops.append(
                {
                    entry(token_id)[0]: _clamped(logprob)
                    for token_id, logprob in candidates(position)[:keep]
                }
            )
        return CompletionLogprobs(
            tokens=tuple(tokens),
            token_logprobs=tuple(_clamped(p.logprob) for p in positions),
            top_logprobs=tuple(tops),
            text_offset=tuple(offsets),
        )

    def echoed_completion(
        self,
        first_prompt_id: int,
        prompt: Sequence[TokenLogprob],
        positions: Sequence[TokenLogprob],
    ) -> CompletionLogprobs:
        """`completion` of the prompt's positions then the generated ones (`echo`): the first
        prompt token has no logprob (null entries), offsets run from 0 over both."""
        first = self._strings.entry(first_prompt_id)[0]
        rest = self.completion((*prompt, *positions), len(first))
        return CompletionLogprobs(
            tokens=(first, *rest.tokens),
            token_logprobs=(None, *rest.token_logprobs),
            top_logprobs=(None, *rest.top_logprobs),
            text_offset=(0, *rest.text_offset),
        )

    @property
    def strings(self) -> TokenStrings:
        return self._strings
