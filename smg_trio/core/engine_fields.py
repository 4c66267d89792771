"""Pure. finalize's shaping of the request fields beyond stops: structured outputs
(`core/constraint_forms.py`) and bad_words (docs/request-fields.md §2, §4), rewritten into a
spelling the worker's engine takes.

What the engine cannot take at all was refused before (`core/unsupported.py`), both read the
worker's row of `neutral/capabilities.py`; nothing a client set is ever dropped here.
`finalize` calls `shape_engine_fields` once per request, before any task starts; the wire
builders then only rename.
"""

from __future__ import annotations

import msgspec

from smg_trio.core.constraint_forms import engine_constraint
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import BadWords, Capabilities
from smg_trio.neutral.sampling import SamplingParams


def shape_engine_fields(
    sampling: SamplingParams, caps: Capabilities, tokenizer: TokenizerLike | None
) -> SamplingParams:
    """`sampling` as the engine of `caps` takes it (`refuse_unsupported` passed it already)."""
    if sampling.constraint is not None:
        sampling = msgspec.structs.replace(
            sampling, constraint=engine_constraint(sampling.constraint, caps)
        )
    if sampling.bad_words:
        match caps.bad_words:
            case BadWords.TOKEN_IDS:
                sampling = msgspec.structs.replace(
                    sampling,
                    bad_words=(),
                    bad_words_token_ids=bad_words_token_ids(sampling.bad_words, tokenizer),
                )
            case BadWords.SPELLINGS:
                # The engine tokenizes each word exactly as given: send the spellings vLLM bans.
                sampling = msgspec.structs.replace(
                    sampling, bad_words=bad_word_spellings(sampling.bad_words, tokenizer)
                )
            case BadWords.REFUSED:  # pragma: no cover - refuse_unsupported raised already
                raise AssertionError("bad_words reached an engine that cannot take them")
    return sampling


def bad_words_token_ids(
    words: tuple[str, ...], tokenizer: TokenizerLike | None
) -> tuple[tuple[int, ...], ...]:
    """vLLM's frontend rule for `bad_words` (its EngineCore takes only `_bad_words_token_ids`).

    Each word is encoded without special tokens as written (leading spaces stripped), and once
    more with one leading space when that gives a different first token but the same length.
    """
    return tuple(ids for _, ids in _banned_spellings(words, tokenizer))


def bad_word_spellings(words: tuple[str, ...], tokenizer: TokenizerLike | None) -> tuple[str, ...]:
    """The texts vLLM's rule bans (`bad_words_token_ids`), for an engine that tokenizes them."""
    return tuple(text for text, _ in _banned_spellings(words, tokenizer))


def _banned_spellings(
    words: tuple[str, ...], tokenizer: TokenizerLike | None
) -> list[tuple[str, tuple[int, ...]]]:
    if tokenizer is None:
        raise ClientError("bad_words needs the model's tokenizer", param="bad_words")
    out: list[tuple[str, tuple[int, ...]]] = []
    for word in words:
        text = word.lstrip()
        bare = tuple(tokenizer.encode(text, add_special_tokens=False))
        if not bare:
            raise ClientError(f"bad_words: {word!r} encodes to no tokens", param="bad_words")
        out.append((text, bare))
        spaced = tuple(tokenizer.encode(" " + text, add_special_tokens=False))
        if spaced and spaced[0] != bare[0] and len(spaced) == len(bare):
            out.append((" " + text, spaced))
    return out
