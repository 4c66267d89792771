"""Pure. The value checks both ZMQ request builders run before encoding an ADD.

A value an engine would reject at decode time can take down its input thread (vLLM) or get the
frame dropped without an answer (TokenSpeed), so we reject it first: every failure here is a
`ClientError` (400) whose message and `param` name the offending parameter. Types are checked
too: a float (16.0) or a bool on an int field fails msgspec validation inside the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from smg_trio.errors import ClientError

_MSGPACK_INT_MIN: Final = -(2**63)
_MSGPACK_INT_MAX: Final = 2**64 - 1
_TOKEN_ID_END: Final = 2**32  # without a vocab size, ids must still fit the engines' u32


def checked_int(value: int, param: str) -> int:
    """`value` if it is a real int that msgpack can carry."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientError(f"{param} must be an integer, got {value!r}", param=param)
    if not _MSGPACK_INT_MIN <= value <= _MSGPACK_INT_MAX:
        raise ClientError(f"{param} is out of range: {value}", param=param)
    return value


def float_in(value: float | None, default: float, param: str, low: float, high: float) -> float:
    """`value` as a finite float in [low, high], or `default` when unset."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClientError(f"{param} must be a number, got {value!r}", param=param)
    number = float(value)
    if not math.isfinite(number):
        raise ClientError(f"{param} must be a finite number, got {value}", param=param)
    if not low <= number <= high:
        bounds = f"at least {low:g}" if math.isinf(high) else f"in [{low:g}, {high:g}]"
        raise ClientError(f"{param} must be {bounds}, got {value}", param=param)
    return number


def positive_float(value: float | None, default: float, param: str, high: float) -> float:
    """`value` in (0, high] (high may be infinite: any finite positive value), or `default`."""
    number = float_in(value, default, param, 0.0, high)
    if number == 0.0:
        raise ClientError(f"{param} must be greater than 0, got {value}", param=param)
    return number


def checked_ids(ids: Sequence[int], param: str, vocab_size: int | None) -> tuple[int, ...]:
    """Token ids, each in [0, vocab_size) (or [0, 2**32) when the vocab size is unknown)."""
    end = _TOKEN_ID_END if vocab_size is None else vocab_size
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < end:
            raise ClientError(f"{param}: token id {token_id!r} is not in [0, {end})", param=param)
    return tuple(ids)


def checked_prompt(
    prompt_ids: Sequence[int], max_model_len: int, vocab_size: int | None
) -> tuple[int, ...]:
    """A non-empty prompt that leaves room for at least one generated token."""
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
    """(max_tokens, min_tokens): unset max_tokens is the rest of the context; 0 <= min <= max."""
    if max_tokens is None:
        max_tokens = max_model_len - prompt_len
    max_tokens = checked_int(max_tokens, "max_tokens")
    if max_tokens < 1:
        raise ClientError(f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
    min_tokens = checked_int(min_tokens, "min_tokens")
    if not 0 <= min_tokens <= max_tokens:
        raise ClientError(
            f"min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}",
            param="min_tokens",
        )
    return max_tokens, min_tokens
