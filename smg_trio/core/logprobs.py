"""Pure. Engine token logprobs in OpenAI's response shapes, field by field as vLLM's server
renders them.

- A token's string is its id decoded alone with special tokens kept (vLLM decodes each logprob
  token the same way), so a character split over byte-level tokens shows as U+FFFD; `bytes`
  are that string's UTF-8 bytes. SentencePiece tokenizers drop a piece's leading "▁" when it is
  decoded alone; the spaces it stood for are put back (as vLLM does), so " world" stays
  " world".
- A token whose string ends in U+FFFD (a byte-level piece of a character split over tokens) is
  decoded again after the choice's preceding sampled tokens (up to 4: any UTF-8 sequence fits),
  as vLLM's logprobs processor does: its string is the text it completes beyond those tokens'
  whole characters, or "" while the character is still incomplete (the first token has no
  context: ""). `bytes` follow the string.
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
alternatives per position (bench/pipeline/core_pipeline.py).
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
            found = self._cache[token_id] = _entry_of(text)
        return found

    def entry_after(self, token_id: int, context: Sequence[int]) -> _Entry:
        """`entry`, with a string ending in U+FFFD completed by `context` (the choice's sampled
        ids before this position): not memoised, it depends on the context."""
        found = self.entry(token_id)
        if not found[0].endswith(REPLACEMENT):
            return found
        return _entry_of(_completed_text(self._tokenizer, token_id, context))


def _entry_of(text: str) -> _Entry:
    raw = tuple(text.encode("utf-8", "replace"))
    return (text, raw, b'{"token":' + _encode(text) + b',"logprob":', b',"bytes":' + _encode(raw))


REPLACEMENT: Final = "\ufffd"
CONTEXT_TOKENS: Final = 4


def _completed_text(tokenizer: TokenizerLike, token_id: int, context: Sequence[int]) -> str:
    """What `token_id` completes after the last 1..CONTEXT_TOKENS sampled ids of `context`: the
    first window whose decoding with it no longer ends in U+FFFD gives the text past the
    window's leading whole-character tokens (a token whose own text ends in U+FFFD belongs
    with the character this one completes); "" when no window completes it (vLLM's rule)."""

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    for size in range(1, min(len(context), CONTEXT_TOKENS) + 1):
        window = list(context[-size:])
        full = decode([*window, token_id])
        if full.endswith(REPLACEMENT):
            continue
        whole = len(window)
        while whole and decode(window[whole - 1 : whole]).endswith(REPLACEMENT):
            whole -= 1
        prefix = decode(window[:whole]) if whole else ""
        # Normally `full` starts with `prefix`; when normalisation changed it, the shared part.
        shared = 0
        for before, after in zip(prefix, full, strict=False):
            if before != after:
                break
            shared += 1
        return full[shared:]
    return ""


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


def token_id_placeholder(token_id: int) -> str:
    """vLLM's `--return-tokens-as-token-ids` form of a logprob token."""
    return f"token_id:{token_id}"


class LogprobFormatter:
    """Renders released positions for one request (`top`: the client's top-k width; `as_ids`:
    tokens as `token_id:N`, vLLM's `return_tokens_as_token_ids`)."""

    __slots__ = ("_as_ids", "_strings", "_top")

    def __init__(self, tokenizer: TokenizerLike, top: int, *, as_ids: bool = False) -> None:
        self._strings = TokenStrings(tokenizer)
        self._top = top
        self._as_ids = as_ids

    def chat(
        self, positions: Sequence[TokenLogprob], context: list[int] | None = None
    ) -> ChoiceLogprobs:
        """`context`: the choice's sampled ids before `positions` (extended here; a stream
        keeps one per choice); None for a choice's first positions."""
        context = [] if context is None else context
        if self._as_ids:
            return self._chat_as_ids(positions, context)
        entry = self._strings.entry_after
        width = self._top
        content = []
        for position in positions:
            text, raw, _, _ = entry(position.token_id, context)
            tops: tuple[TopLogprob, ...] = ()
            if width:
                tops = tuple(
                    TopLogprob(found[0], _clamped(logprob), found[1])
                    for token_id, logprob in candidates(position)[:width]
                    for found in (entry(token_id, context),)
                )
            content.append(ChatTokenLogprob(text, _clamped(position.logprob), raw, tops))
            context.append(position.token_id)
        del context[:-CONTEXT_TOKENS]
        return ChoiceLogprobs(content=tuple(content))

    def _chat_as_ids(self, positions: Sequence[TokenLogprob], context: list[int]) -> ChoiceLogprobs:
        """`chat` with every token as `token_id:N`, as vLLM renders it: a sampled token's
        `bytes` stay its decoded text's, each candidate's are its placeholder's."""
        content = []
        for position in positions:
            raw = self._strings.entry_after(position.token_id, context)[1]
            tops = tuple(
                TopLogprob(name, _clamped(logprob), tuple(name.encode()))
                for token_id, logprob in candidates(position)[: self._top]
                for name in (token_id_placeholder(token_id),)
            )
            token = token_id_placeholder(position.token_id)
            content.append(ChatTokenLogprob(token, _clamped(position.logprob), raw, tops))
            context.append(position.token_id)
        del context[:-CONTEXT_TOKENS]
        return ChoiceLogprobs(content=tuple(content))

    def chat_json(
        self, positions: Sequence[TokenLogprob], context: list[int] | None = None
    ) -> bytes:
        """`chat(positions, context)` JSON-encoded, spliced from per-token pieces (the streaming
        path; tests pin that it equals the struct encoding byte for byte). The candidate rule
        of `candidates` is inlined: this runs for every token."""
        context = [] if context is None else context
        if self._as_ids:
            return _encode(self._chat_as_ids(positions, context))
        entry = self._strings.entry
        entry_after = self._strings.entry_after
        encode = _encode
        width = self._top
        lowest = LOWEST_LOGPROB
        parts = []
        for position in positions:
            sampled = position.token_id
            text, _, head, tail = entry(sampled)
            if text.endswith(REPLACEMENT):
                _, _, head, tail = entry_after(sampled, context)
            value = position.logprob if position.logprob >= lowest else lowest
            encoded = encode(value)
            context.append(sampled)
            if not width:
                parts.append(head + encoded + tail + b',"top_logprobs":[]}')
                continue
            tops = [head + encoded + tail + b"}"]
            for top in position.top:
                if len(tops) == width:
                    break
                if top.token_id != sampled:
                    top_text, _, top_head, top_tail = entry(top.token_id)
                    if top_text.endswith(REPLACEMENT):
                        _, _, top_head, top_tail = entry_after(top.token_id, context[:-1])
                    logprob = top.logprob if top.logprob >= lowest else lowest
                    tops.append(top_head + encode(logprob) + top_tail + b"}")
            parts.append(head + encoded + tail + b',"top_logprobs":[' + b",".join(tops) + b"]}")
        del context[:-CONTEXT_TOKENS]
        return b'{"content":[' + b",".join(parts) + b"]}"

    def completion(
        self,
        positions: Sequence[TokenLogprob],
        initial_offset: int,
        context: list[int] | None = None,
    ) -> CompletionLogprobs:
        context = [] if context is None else context
        keep = self._top + 1
        if self._as_ids:

            def token(token_id: int, context: Sequence[int]) -> str:
                return token_id_placeholder(token_id)
        else:

            def token(token_id: int, context: Sequence[int]) -> str:
                return self._strings.entry_after(token_id, context)[0]

        tokens: list[str] = []
        offsets: list[int] = []
        offset = initial_offset
        tops: list[dict[str, float] | None] = []
        for position in positions:
            text = token(position.token_id, context)
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            tops.append(
                {
                    token(token_id, context): _clamped(logprob)
                    for token_id, logprob in candidates(position)[:keep]
                }
            )
            context.append(position.token_id)
        del context[:-CONTEXT_TOKENS]
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
        first = (
            token_id_placeholder(first_prompt_id)
            if self._as_ids
            else self._strings.entry(first_prompt_id)[0]
        )
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
