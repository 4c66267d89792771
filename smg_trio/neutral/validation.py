"""Pure. The value rules of a client request, in one place: ranges and types of the sampling
knobs, choice and stop limits, the token budget and the context window, the vocabulary.

Every failure is a 400 `ClientError` whose `param` names the parameter as the client spelled
it (`sampling_params.` prefixed for /generate). The body decoders (wire/openai_decode) apply the
knob rules to what the client sent; prepare checks the model's context window; the wire
builders apply the rules that need the engine's own facts (its context length and vocabulary,
known once it registered). Per-runtime limits are finalize's; whether a value fits a field's
bytes is each wire's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence, Sized
from typing import Final, Protocol

import msgspec

from smg_trio.errors import ClientError
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
MAX_STOP_STRINGS: Final = 4
MAX_CHOICES: Final = 128
MAX_TOP_LOGPROBS: Final = 20  # vLLM's default max_logprobs; its EngineCore does not check it
MAX_COMPLETION_LOGPROBS: Final = 20  # vLLM: max_logprobs (20), as chat
MAX_LOGIT_BIAS: Final = 100.0  # OpenAI's documented range is [-100, 100]
# How many items a list in a request may hold (docs/request-fields.md §6). Every one is work per
# request (or per chunk: stop strings are scanned on every chunk), so each is bounded before
# anything else looks at it; a longer list is a 400 naming the field.
MAX_GENERATE_STOP_STRINGS: Final = 64  # /generate (SGLang sets no limit; OpenAI's is 4)
MAX_STOP_TOKEN_IDS: Final = 1024
MAX_LOGIT_BIAS_ENTRIES: Final = 1024
MAX_BAD_WORDS: Final = 1024
MAX_ALLOWED_TOKEN_IDS: Final = 262_144  # a whole vocabulary of the largest current models
MAX_MESSAGES: Final = 4096
MAX_TOOLS: Final = 128  # OpenAI documents at most 128 functions
MAX_BATCH_PROMPTS: Final = 1024  # /v1/completions prompt lists (times n, at most MAX_CHOICES each)
MAX_PROMPT_TOKEN_IDS: Final = 1_048_576  # token ids in one prompt; the context window cuts lower
_TOKEN_ID_END: Final = 2**32  # without a vocab size, ids must still fit the engines' u32


def check_between(
    value: float | None, param: str, low: float, high: float, *, low_open: bool = False
) -> None:
    """`value` unset, or a finite number in [low, high] (`(low, high]` when `low_open`).

    An int of any size is compared exactly, never converted to a float (a 300-digit one is
    a 400 here, not an OverflowError: issue 45)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClientError(f"{param} must be a number, got {value!r}", param=param)
    if isinstance(value, float) and not math.isfinite(value):
        raise ClientError(f"{param} must be a finite number, got {value}", param=param)
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ClientError(f"{param} must be in {interval}, got {shown(value)}", param=param)


def shown(value: int | float) -> str:
    """A number for a message: a float as `%g`, an int as written unless it is very long (then
    by its size: `str` of a 5000-digit int raises ValueError, CPython's conversion limit)."""
    if isinstance(value, float):
        return f"{value:g}"
    if value.bit_length() <= 80:
        return str(value)
    digits = int(value.bit_length() * math.log10(2)) + 1
    return f"{'-' if value < 0 else ''}an integer of about {digits} digits"


def check_at_least(value: int | None, param: str, low: int) -> None:
    """`value` unset, or an integer of at least `low`."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientError(f"{param} must be an integer, got {value!r}", param=param)
    if value < low:
        raise ClientError(f"{param} must be at least {low}, got {shown(value)}", param=param)


def check_count(items: Sized | None, param: str, max_count: int) -> None:
    """`items` unset, or holding at most `max_count` entries."""
    if items is not None and len(items) > max_count:
        raise ClientError(
            f"{param} accepts at most {max_count} entries, got {len(items)}", param=param
        )


def check_stops(stop: str | Sequence[str] | None, param: str, *, max_count: int) -> None:
    if stop is None or isinstance(stop, str):
        return  # a bare "" means "no stop", as OpenAI treats it
    if len(stop) > max_count:
        raise ClientError(
            f"{param} accepts at most {max_count} sequences, got {len(stop)}", param=param
        )
    if any(s == "" for s in stop):
        raise ClientError(f"{param} sequences must not be empty", param=param)


class SamplingKnobs(Protocol):
    """The sampling knobs every endpoint spells the same way (and `SamplingParams` has)."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def presence_penalty(self) -> float | None: ...
    @property
    def frequency_penalty(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def stop_token_ids(self) -> Sequence[int] | None: ...


def check_knobs(knobs: SamplingKnobs, prefix: str) -> None:
    """The ranges vLLM's SamplingParams enforces; `prefix` locates nested params in messages."""
    check_between(knobs.temperature, prefix + "temperature", 0.0, 2.0)
    check_between(knobs.top_p, prefix + "top_p", 0.0, 1.0, low_open=True)
    # -1 and 0 both mean "all tokens" in vLLM; anything below -1 is meaningless.
    check_at_least(knobs.top_k, prefix + "top_k", -1)
    check_between(knobs.min_p, prefix + "min_p", 0.0, 1.0)
    check_between(knobs.presence_penalty, prefix + "presence_penalty", -2.0, 2.0)
    check_between(knobs.frequency_penalty, prefix + "frequency_penalty", -2.0, 2.0)
    penalty, param = knobs.repetition_penalty, prefix + "repetition_penalty"
    check_between(penalty, param, -math.inf, math.inf)  # a finite number
    if penalty is not None and penalty <= 0:
        raise ClientError(f"{param} must be greater than 0, got {penalty:g}", param=param)
    check_count(knobs.stop_token_ids, prefix + "stop_token_ids", MAX_STOP_TOKEN_IDS)
    if knobs.stop_token_ids is not None and any(t < 0 for t in knobs.stop_token_ids):
        param = prefix + "stop_token_ids"
        raise ClientError(f"{param} must be non-negative", param=param)


def check_lengths(max_tokens: int | None, max_param: str, min_tokens: int, min_param: str) -> None:
    """max_tokens at least 1 when set; 0 <= min_tokens <= max_tokens."""
    check_at_least(max_tokens, max_param, 1)
    check_at_least(min_tokens, min_param, 0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise ClientError(
            f"{min_param} ({min_tokens}) must not exceed {max_param} ({max_tokens})",
            param=min_param,
        )


def check_context_length(
    prompt_len: int, max_tokens: int | None, context_length: int, param: str
) -> None:
    """400 when the prompt alone leaves no room for one token in the context window.

    A larger max_tokens is not an error: as vLLM does, prepare caps it to the room left.
    `param` is "messages" or "prompt" and names where the input tokens came from.
    """
    if prompt_len >= context_length:
        requested = prompt_len + (max_tokens or 0)
        raise ClientError(
            f"This model's maximum context length is {context_length} tokens. However, you "
            f"requested {requested} tokens ({prompt_len} in the {param}, {max_tokens or 0} in "
            f"the completion). Please reduce the length of the {param} or completion.",
            code="context_length_exceeded",
            param=param,
        )


def check_output_length(max_tokens: int | None, param: str, max_model_len: int | None) -> None:
    """vLLM 0.32's first length check, made before the prompt is tokenized: `max_tokens` alone
    may not exceed the context (docs/request-fields.md §4). Its message, word for word."""
    if max_tokens is None or max_model_len is None or max_tokens <= max_model_len:
        return
    raise ClientError(
        f"{param}={max_tokens} cannot be greater than max_model_len={max_model_len}. Please "
        f"request fewer output tokens. (parameter={param}, value={max_tokens})",
        param=param,
    )


def checked_ids(ids: Sequence[int], param: str, vocab_size: int | None) -> tuple[int, ...]:
    """Token ids, each in [0, vocab_size) (or [0, 2**32) when the vocab size is unknown)."""
    end = _TOKEN_ID_END if vocab_size is None else vocab_size
    # The common case in C (a prompt's ids are checked on every request): all plain ints in
    # range. Anything else is looked at one by one, which names the first bad id.
    if ids and (set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= end):
        for token_id in ids:
            if (
                isinstance(token_id, bool)
                or not isinstance(token_id, int)
                or not 0 <= token_id < end
            ):
                raise ClientError(
                    f"{param}: token id {token_id!r} is not in [0, {end})", param=param
                )
    return tuple(ids)


def checked_prompt(
    prompt_ids: Sequence[int], max_model_len: int, vocab_size: int | None
) -> tuple[int, ...]:
    """A non-empty prompt in the vocabulary that leaves the engine room for one token."""
    prompt = checked_ids(prompt_ids, "prompt", vocab_size)
    if not prompt:
        raise ClientError("the prompt must contain at least one token", param="prompt")
    if len(prompt) >= max_model_len:
        raise ClientError(
            f"the model's context length is {max_model_len} tokens and the prompt has "
            f"{len(prompt)}: no room is left for max_tokens",
            param="prompt",
        )
    return prompt


def token_budget(
    max_tokens: int | None, min_tokens: int, *, prompt_len: int, max_model_len: int
) -> tuple[int, int]:
    """(max_tokens, min_tokens) for an engine: unset max_tokens is the rest of its context."""
    if max_tokens is None:
        max_tokens = max_model_len - prompt_len
    check_at_least(max_tokens, "max_tokens", 1)
    check_at_least(min_tokens, "min_tokens", 0)
    if min_tokens > max_tokens:
        raise ClientError(
            f"min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}",
            param="min_tokens",
        )
    return max_tokens, min_tokens


def checked_logit_bias(
    bias: Mapping[str, float] | None, param: str, vocab_size: int | None
) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias` (token ids as string keys) as (id, bias) pairs, in the client's order.

    Keys must be token ids in the vocabulary, values numbers in [-100, 100] (OpenAI's range).
    """
    if not bias:
        return ()
    check_count(bias, param, MAX_LOGIT_BIAS_ENTRIES)
    pairs: list[tuple[int, float]] = []
    for key, value in bias.items():
        try:
            token_id = int(key)
        except ValueError:
            raise ClientError(f"{param} keys must be token ids, got {key!r}", param=param) from None
        checked_ids((token_id,), param, vocab_size)
        check_between(value, param, -MAX_LOGIT_BIAS, MAX_LOGIT_BIAS)
        pairs.append((token_id, float(value)))
    return tuple(pairs)


def checked_allowed_token_ids(
    ids: Sequence[int] | None, param: str, vocab_size: int | None
) -> tuple[int, ...] | None:
    """vLLM's `allowed_token_ids`: unset, or a non-empty list of ids in the vocabulary."""
    if ids is None:
        return None
    if not ids:
        raise ClientError(f"{param} must not be empty when given", param=param)
    check_count(ids, param, MAX_ALLOWED_TOKEN_IDS)
    return checked_ids(ids, param, vocab_size)


def check_truncate_prompt_tokens(value: int | None, param: str) -> None:
    """vLLM's `truncate_prompt_tokens`: -1 (the model's context length) or at least 1."""
    if value is not None and value != -1:
        check_at_least(value, param, 1)


def checked_constraint(
    candidates: Sequence[StructuredConstraint],
) -> StructuredConstraint | None:
    """The request's one structured-output constraint, its value checked (request-fields.md §2).

    More than one (across `response_format`, `structured_outputs` and `guided_*`, or inside
    `structured_outputs`) is a 400 naming them all, as vLLM allows exactly one.
    """
    if not candidates:
        return None
    if len(candidates) > 1:
        names = ", ".join(c.param for c in candidates)
        raise ClientError(
            f"only one structured-output constraint may be given, got {names}",
            param=candidates[0].param,
        )
    constraint = candidates[0]
    match constraint.kind:
        case ConstraintKind.JSON_SCHEMA:
            _check_schema(constraint.text, constraint.param)
        case ConstraintKind.REGEX:
            if "\x00" in constraint.text:  # vLLM's rule: no grammar backend takes one
                raise ClientError(
                    f"{constraint.param} must not contain a NUL character", param=constraint.param
                )
            try:
                re.compile(constraint.text)
            except re.error as exc:
                raise ClientError(
                    f"{constraint.param} is not a valid regular expression: {exc}",
                    param=constraint.param,
                ) from None
        case ConstraintKind.CHOICE:
            if not constraint.choices:
                raise ClientError(
                    f"{constraint.param} must be a non-empty list of strings",
                    param=constraint.param,
                )
        case ConstraintKind.GRAMMAR:
            if not constraint.text.strip():
                raise ClientError(f"{constraint.param} must not be empty", param=constraint.param)
        case ConstraintKind.JSON_OBJECT:
            pass
    return constraint


def _check_schema(text: str, param: str) -> None:
    try:
        schema = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise ClientError(f"{param} is not valid JSON", param=param) from None
    if not isinstance(schema, dict):
        raise ClientError(f"{param} must be a JSON schema object", param=param)
