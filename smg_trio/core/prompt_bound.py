"""Pure. Tokenizing a prompt with a bound: what cannot fit the context is refused before it costs
memory in proportion to its token count (docs/limits.md §1).

A tokenizer's output for one text costs far more than the text (Hugging Face `tokenizers` keeps
~180 bytes per token while encoding, so an 8 MB prompt peaked near 1 GB). So a long prompt is
not encoded whole until it is known to fit:

1. Bytes first: when every token stands for at most `max_bytes_per_token` input bytes (the
   model's longest token, computed once at load by `hf_tokenizer.max_bytes_per_token`), a text
   of more than `(context - 1) * max_bytes_per_token` bytes has at least `context` tokens and
   leaves no room: a 400 without tokenizing at all.
2. Otherwise a text longer than one chunk is counted chunk by chunk (each chunk's encoding freed
   before the next), stopping as soon as the count passes the context by more than what chunk
   boundaries can add; only a text that may fit is then encoded whole, so that encoding is
   bounded by the context, not by the body.
3. `truncate_prompt_tokens` keeps the prompt's tail: chunks are counted from the end until they
   hold the tail with room to spare, and only that suffix is encoded (its first tokens, near the
   cut, are the ones truncation drops).

Chunks end just before a space that follows a non-space, where byte-level and SentencePiece
pre-tokenizers split anyway, so a cut changes no token; a run with no such space is cut hard.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

import msgspec

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError

CHUNK_CHARS: Final = 32 * 1024
# How far past a chunk's nominal end a safe cut is looked for before cutting hard.
CUT_SEARCH_CHARS: Final = 4 * 1024
# Tokens one chunk boundary may add to the chunked count over the whole text's (a cut word's
# two halves, a prefix space a SentencePiece pre-tokenizer adds to each chunk).
BOUNDARY_SLACK_TOKENS: Final = 8
_SAFE_CUT: Final = re.compile(r"(?<=\S) ")


class PromptLimit(msgspec.Struct, frozen=True, kw_only=True):
    """What bounds one prompt's tokenization: the context, the byte rule, truncation."""

    context_length: int
    max_bytes_per_token: int | None
    keep: int | None  # truncate_prompt_tokens, -1 resolved to the context
    param: str  # "messages", "prompt" or "text": named in the 400


def prompt_too_long(limit: PromptLimit, at_least: int) -> ClientError:
    """vLLM's context message, for a prompt whose exact token count was never computed."""
    param = limit.param
    return ClientError(
        f"This model's maximum context length is {limit.context_length} tokens. However, your "
        f"{param} has at least {at_least} tokens. Please reduce the length of the {param} or "
        "completion.",
        code="context_length_exceeded",
        param=param,
    )


def truncated(
    prompt_ids: tuple[int, ...], keep: int | None, context_length: int | None
) -> tuple[int, ...]:
    """vLLM's truncate_prompt_tokens: keep the prompt's last `keep` tokens (-1: the context)."""
    if keep is None or (context_length is None and keep == -1):
        return prompt_ids
    kept = keep if context_length is None else kept_tokens(keep, context_length)
    assert kept is not None
    return prompt_ids[-kept:]


def kept_tokens(keep: int | None, context_length: int) -> int | None:
    """truncate_prompt_tokens as a count (-1: the context); over the context is a 400."""
    if keep is None:
        return None
    if keep == -1:
        return context_length
    if keep > context_length:
        raise ClientError(
            f"truncate_prompt_tokens ({keep}) must not exceed the model's context length "
            f"({context_length})",
            param="truncate_prompt_tokens",
        )
    return keep


def utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def bounded_encode(
    tokenizer: TokenizerLike, text: str, *, add_special_tokens: bool, limit: PromptLimit | None
) -> tuple[int, ...]:
    """`tokenizer.encode(text)`, or a 400 when it cannot fit `limit`, paid for in chunks.

    With `limit.keep`, the result is the whole encoding's tail of at least `keep` tokens (the
    caller truncates it); without, the whole encoding of a text that may fit.
    """
    if limit is None or len(text) <= CHUNK_CHARS:
        return tuple(tokenizer.encode(text, add_special_tokens=add_special_tokens))
    if limit.keep is not None:
        start = _tail_start(tokenizer, text, limit.keep)
        suffix = text if start == 0 else text[start:]
        return tuple(tokenizer.encode(suffix, add_special_tokens=add_special_tokens))
    context = limit.context_length
    per_token = limit.max_bytes_per_token
    if per_token is not None and utf8_length(text) > (context - 1) * per_token:
        raise prompt_too_long(limit, -(-utf8_length(text) // per_token))
    counted = 0
    for index, (begin, end) in enumerate(_chunks(text)):
        counted += len(tokenizer.encode(text[begin:end], add_special_tokens=False))
        at_least = counted - BOUNDARY_SLACK_TOKENS * (index + 1)
        if at_least >= context:
            raise prompt_too_long(limit, at_least)
    return tuple(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def _tail_start(tokenizer: TokenizerLike, text: str, keep: int) -> int:
    """Where a suffix holding (with room to spare) the last `keep` tokens starts; 0: all."""
    counted = 0
    for index, (begin, end) in enumerate(reversed(list(_chunks(text)))):
        counted += len(tokenizer.encode(text[begin:end], add_special_tokens=False))
        if counted - BOUNDARY_SLACK_TOKENS * (index + 2) >= keep:
            return begin
    return 0


def _chunks(text: str) -> Iterator[tuple[int, int]]:
    """(begin, end) spans covering `text`, each about CHUNK_CHARS long, cut at safe places."""
    begin = 0
    while begin < len(text):
        end = begin + CHUNK_CHARS
        if end >= len(text):
            yield begin, len(text)
            return
        cut = _SAFE_CUT.search(text, end, end + CUT_SEARCH_CHARS)
        end = cut.start() if cut is not None else end
        yield begin, end
        begin = end
