"""Pure. finalize's per-runtime rules for the request fields beyond stops: structured outputs
(and whether they may start after the reasoning, only vLLM over ZMQ), logit_bias,
allowed_token_ids, bad_words and min_tokens (docs/request-fields.md §1-§3).

Each (runtime, wire) either carries a field to its engine, rewritten into a spelling the engine
takes, or the request is a 400 `ClientError` naming the parameter as the client sent it. Nothing
a client set is ever dropped. `finalize` calls `shape_engine_fields` once per request, before
any task starts; the wire builders then only rename.
"""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind, SamplingParams, StructuredConstraint

# JSON mode for an engine with no JSON-object switch: the most permissive object schema (what
# SGLang's own server sends its grammar backend for response_format json_object).
JSON_OBJECT_SCHEMA: Final = '{"type":"object"}'
_REGEX_SPECIALS: Final = frozenset("\\.^$|?*+()[]{}")

# Which constraint kinds an engine spells natively; the others are rewritten (choice → regex,
# JSON object → schema) and none at all means a 400.
_NATIVE: Final[dict[Runtime, frozenset[ConstraintKind]]] = {
    Runtime.VLLM: frozenset(ConstraintKind),
    Runtime.SGLANG: frozenset(
        {ConstraintKind.JSON_SCHEMA, ConstraintKind.REGEX, ConstraintKind.GRAMMAR}
    ),
    Runtime.TOKENSPEED: frozenset(
        {ConstraintKind.JSON_SCHEMA, ConstraintKind.REGEX, ConstraintKind.GRAMMAR}
    ),
    Runtime.TRTLLM: frozenset(
        {
            ConstraintKind.JSON_SCHEMA,
            ConstraintKind.JSON_OBJECT,
            ConstraintKind.REGEX,
            ConstraintKind.GRAMMAR,
        }
    ),
}
# logit_bias: every engine's sampling map except TRT-LLM's (it takes a dense embedding_bias).
_LOGIT_BIAS: Final = frozenset({Runtime.VLLM, Runtime.SGLANG, Runtime.TOKENSPEED, Runtime.MLX})


def shape_engine_fields(
    sampling: SamplingParams, runtime: Runtime, wire: Wire, tokenizer: TokenizerLike | None
) -> SamplingParams:
    """`sampling` as `runtime` over `wire` can take it, or a 400 naming what it cannot."""
    vllm_zmq = runtime is Runtime.VLLM and wire is Wire.ZMQ
    if sampling.constraint is not None:
        if sampling.constraint.after_reasoning and not vllm_zmq:
            _refuse_after_reasoning(sampling.constraint.param, runtime, wire)
        sampling = msgspec.structs.replace(
            sampling, constraint=_constraint_for(sampling.constraint, runtime)
        )
    if sampling.logit_bias and runtime not in _LOGIT_BIAS:
        _refuse("logit_bias", runtime, wire)
    if sampling.allowed_token_ids is not None and not vllm_zmq:
        _refuse("allowed_token_ids", runtime, wire)
    if sampling.min_tokens and runtime is Runtime.MLX:
        _refuse("min_tokens", runtime, wire)
    if sampling.bad_words:
        if vllm_zmq:
            sampling = msgspec.structs.replace(
                sampling,
                bad_words=(),
                bad_words_token_ids=bad_words_token_ids(sampling.bad_words, tokenizer),
            )
        elif runtime is Runtime.TRTLLM:
            # TRT-LLM tokenizes each `bad` word exactly as given: send the spellings vLLM bans.
            sampling = msgspec.structs.replace(
                sampling, bad_words=bad_word_spellings(sampling.bad_words, tokenizer)
            )
        else:
            _refuse("bad_words", runtime, wire)
    return sampling


def _refuse(param: str, runtime: Runtime, wire: Wire) -> None:
    raise ClientError(
        f"{param} is not supported by this model's engine ({runtime.value} over {wire.value})",
        param=param,
    )


def _refuse_after_reasoning(param: str, runtime: Runtime, wire: Wire) -> None:
    """Only vLLM's EngineCore request says where a grammar starts (`reasoning_ended`); on any
    other wire the grammar would constrain the reasoning too (docs/request-fields.md §3)."""
    raise ClientError(
        f"{param} cannot start after the reasoning on this model's engine ({runtime.value} "
        f"over {wire.value}: its wire cannot say where the grammar starts); turn thinking "
        "off with chat_template_kwargs.enable_thinking false or separate_reasoning false",
        param=param,
    )


def _constraint_for(constraint: StructuredConstraint, runtime: Runtime) -> StructuredConstraint:
    native = _NATIVE.get(runtime)
    if native is None:
        raise ClientError(
            f"{constraint.param}: structured outputs are not supported by this model's engine "
            f"({runtime.value})",
            param=constraint.param,
        )
    if constraint.kind in native:
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
        case _:  # pragma: no cover - every engine with grammar support takes the others
            raise ClientError(
                f"{constraint.param} is not supported by this model's engine",
                param=constraint.param,
            )


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
