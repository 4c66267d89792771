"""Pure. finalize's shaping of the request fields beyond stops: structured outputs, bad_words
(docs/request-fields.md §2, §4), rewritten into a spelling the worker's engine takes.

What the engine cannot take at all was refused before (`core/unsupported.py`), both read the
worker's row of `neutral/capabilities.py`; nothing a client set is ever dropped here.
`finalize` calls `shape_engine_fields` once per request, before any task starts; the wire
builders then only rename.
"""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import BadWords, Capabilities
from smg_trio.neutral.sampling import ConstraintKind, SamplingParams, StructuredConstraint

# JSON mode for an engine with no JSON-object switch: the most permissive object schema (what
# SGLang's own server sends its grammar backend for response_format json_object).
JSON_OBJECT_SCHEMA: Final = '{"type":"object"}'
_REGEX_SPECIALS: Final = frozenset("\\.^$|?*+()[]{}")


def shape_engine_fields(
    sampling: SamplingParams, caps: Capabilities, tokenizer: TokenizerLike | None
) -> SamplingParams:
    """`sampling` as the engine of `caps` takes it (`refuse_unsupported` passed it already)."""
    if sampling.constraint is not None:
        sampling = msgspec.structs.replace(
            sampling, constraint=_constraint_for(sampling.constraint, caps)
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


def _constraint_for(constraint: StructuredConstraint, caps: Capabilities) -> StructuredConstraint:
    """The constraint in a kind the engine spells natively (choice → regex, JSON mode → schema)."""
    if constraint.kind in caps.constraints:
        return constraint
    match constraint.kind:
        case ConstraintKind.CHOICE:
            return msgspec.structs.replace(
                constraint,
                kind=ConstraintKind.REGEX,
                text=choice_regex(constraint.choices),
                choices=(),
            )
        case ConstraintKind.JSON_OBJECT:
            return msgspec.structs.replace(
                constraint, kind=ConstraintKind.JSON_SCHEMA, text=JSON_OBJECT_SCHEMA
            )
        case _:  # pragma: no cover - refuse_unsupported raised already
            raise AssertionError(f"{constraint.kind} reached an engine that cannot take it")


def choice_regex(choices: tuple[str, ...]) -> str:
    """A regex matching exactly one of `choices` (vLLM's guided_choice as an alternation).

    Only regex metacharacters are escaped: grammar engines' regex dialects differ on escapes of
    ordinary characters (`\\ `), so none are written.
    """
    escaped = ("".join("\\" + c if c in _REGEX_SPECIALS else c for c in x) for x in choices)
    return "(" + "|".join(escaped) + ")"


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
