"""Pure. Decoding and validating client request bodies, like OpenAI/vLLM validate them.

Bodies decode with msgspec (unknown fields ignored, as vLLM/SGLang servers do) and are then
checked; every rejection is a 400 `ClientError` whose `param` names the offending field.
"""

from __future__ import annotations

import re
from typing import Protocol

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    StopField,
    _SamplingFields,
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_STOP_STRINGS = 4
MAX_CHOICES = 128
MAX_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5

_ERROR_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")


def _decode_error(exc: msgspec.DecodeError) -> ClientError:
    """msgspec's error → 400 naming the parameter (`$.messages[0].role` → `messages[0].role`)."""
    message = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return ClientError(f"The request body is not valid JSON: {message}")
    at = _ERROR_PATH.search(message)
    path = at.group("path") if at else ""
    missing = _MISSING_FIELD.match(message)
    if missing:
        field = missing.group("field")
        path = f"{path}.{field}" if path else field
    return ClientError(f"Invalid request: {message}", param=path or None)


def _reject(param: str, message: str) -> ClientError:
    return ClientError(message, param=param)


def _check_between(
    value: float | None, param: str, low: float, high: float, *, low_open: bool = False
) -> None:
    if value is None:
        return
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise _reject(param, f"{param} must be in {interval}, got {value:g}")


def _check_at_least(value: int | None, param: str, low: int) -> None:
    if value is not None and value < low:
        raise _reject(param, f"{param} must be at least {low}, got {value}")


def _check_stops(stop: StopField, param: str, *, max_count: int | None) -> None:
    if stop is None or isinstance(stop, str):
        return  # a bare "" means "no stop", as OpenAI treats it
    if max_count is not None and len(stop) > max_count:
        raise _reject(param, f"{param} accepts at most {max_count} sequences, got {len(stop)}")
    if any(s == "" for s in stop):
        raise _reject(param, f"{param} sequences must not be empty")


class _Knobs(Protocol):
    """The sampling knobs that chat, completions and /generate spell the same way."""

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
    def stop_token_ids(self) -> tuple[int, ...] | None: ...


def _check_knobs(knobs: _Knobs, prefix: str) -> None:
    """Range checks shared by all endpoints; `prefix` locates nested params in messages."""
    _check_between(knobs.temperature, prefix + "temperature", 0.0, 2.0)
    _check_between(knobs.top_p, prefix + "top_p", 0.0, 1.0, low_open=True)
    # -1 and 0 both mean "all tokens" in vLLM; anything below -1 is meaningless.
    _check_at_least(knobs.top_k, prefix + "top_k", -1)
    _check_between(knobs.min_p, prefix + "min_p", 0.0, 1.0)
    _check_between(knobs.presence_penalty, prefix + "presence_penalty", -2.0, 2.0)
    _check_between(knobs.frequency_penalty, prefix + "frequency_penalty", -2.0, 2.0)
    if knobs.repetition_penalty is not None and knobs.repetition_penalty <= 0:
        param = prefix + "repetition_penalty"
        raise _reject(param, f"{param} must be greater than 0, got {knobs.repetition_penalty:g}")
    if knobs.stop_token_ids is not None and any(t < 0 for t in knobs.stop_token_ids):
        raise _reject(prefix + "stop_token_ids", f"{prefix}stop_token_ids must be non-negative")


def _check_lengths(max_tokens: int | None, max_param: str, min_tokens: int, min_param: str) -> None:
    _check_at_least(max_tokens, max_param, 1)
    _check_at_least(min_tokens, min_param, 0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise _reject(
            min_param, f"{min_param} ({min_tokens}) must not exceed {max_param} ({max_tokens})"
        )


def _check_openai_common(req: _SamplingFields, max_tokens: int | None, max_param: str) -> None:
    _check_knobs(req, "")
    _check_between(req.n, "n", 1, MAX_CHOICES)
    _check_between(req.seed, "seed", _INT64_MIN, _INT64_MAX)
    _check_lengths(max_tokens, max_param, req.min_tokens, "min_tokens")
    _check_stops(req.stop, "stop", max_count=MAX_STOP_STRINGS)
    if req.stream_options is not None and not req.stream:
        raise _reject("stream_options", "stream_options is only allowed when stream is true")


def validate_chat(req: ChatCompletionRequest) -> None:
    if not req.messages:
        raise _reject("messages", "messages must contain at least one message")
    _check_at_least(req.max_tokens, "max_tokens", 1)
    max_param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    _check_openai_common(req, req.max_new_tokens, max_param)
    if req.top_logprobs is not None:
        _check_between(req.top_logprobs, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if not req.logprobs:
            raise _reject("top_logprobs", "top_logprobs requires logprobs to be true")
    if req.continue_final_message and req.add_generation_prompt:
        raise _reject(
            "continue_final_message",
            "continue_final_message and add_generation_prompt cannot both be true",
        )


def validate_completion(req: CompletionRequest) -> None:
    prompt = req.prompt
    if not isinstance(prompt, str):
        if not prompt:
            raise _reject("prompt", "prompt must not be empty")
        kinds = {type(p) for p in prompt}
        if len(kinds) != 1:
            raise _reject("prompt", "prompt must be a string, strings, token ids or token id lists")
        if kinds != {int} and len(prompt) > 1:
            raise _reject("prompt", "batched prompts are not supported; send one per request")
        single = req.single_prompt
        if isinstance(single, tuple) and (not single or any(t < 0 for t in single)):
            raise _reject("prompt", "prompt token ids must be non-empty and non-negative")
    _check_openai_common(req, req.max_tokens, "max_tokens")
    _check_between(req.logprobs, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if req.best_of is not None and req.best_of != req.num_choices:
        raise _reject("best_of", "best_of is not supported unless it equals n")


def validate_generate(req: GenerateRequest) -> None:
    if (req.text is None) == (req.input_ids is None):
        raise _reject("text", "exactly one of text and input_ids must be given")
    if req.input_ids is not None and (not req.input_ids or any(t < 0 for t in req.input_ids)):
        raise _reject("input_ids", "input_ids must be non-empty and non-negative")
    sp = req.sampling_params
    _check_knobs(sp, "sampling_params.")
    _check_between(sp.n, "sampling_params.n", 1, MAX_CHOICES)
    _check_between(sp.effective_seed, "sampling_params.seed", _INT64_MIN, _INT64_MAX)
    _check_lengths(
        sp.max_new_tokens,
        "sampling_params.max_new_tokens",
        sp.min_new_tokens,
        "sampling_params.min_new_tokens",
    )
    # SGLang sets no limit on the number of stop strings; empty ones would match at once.
    _check_stops(sp.stop, "sampling_params.stop", max_count=None)
    _check_between(req.top_logprobs_num, "top_logprobs_num", 0, MAX_TOP_LOGPROBS)


_CHAT_DECODER = msgspec.json.Decoder(ChatCompletionRequest)
_COMPLETION_DECODER = msgspec.json.Decoder(CompletionRequest)
_GENERATE_DECODER = msgspec.json.Decoder(GenerateRequest)


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """JSON body → validated request; any problem is a 400 `ClientError` naming the param."""
    try:
        req = _CHAT_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise _decode_error(exc) from None
    validate_chat(req)
    return req


def decode_completion_request(body: bytes) -> CompletionRequest:
    try:
        req = _COMPLETION_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise _decode_error(exc) from None
    validate_completion(req)
    return req


def decode_generate_request(body: bytes) -> GenerateRequest:
    try:
        req = _GENERATE_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise _decode_error(exc) from None
    validate_generate(req)
    return req


def check_context_length(
    prompt_len: int, max_tokens: int | None, context_length: int, param: str
) -> None:
    """400 when the prompt, or prompt plus requested completion, exceeds the context window.

    `param` is "messages" or "prompt" and names where the input tokens came from.
    """
    if prompt_len >= context_length or (
        max_tokens is not None and prompt_len + max_tokens > context_length
    ):
        requested = prompt_len + (max_tokens or 0)
        raise ClientError(
            f"This model's maximum context length is {context_length} tokens. However, you "
            f"requested {requested} tokens ({prompt_len} in the {param}, {max_tokens or 0} in "
            f"the completion). Please reduce the length of the {param} or completion.",
            code="context_length_exceeded",
            param=param,
        )
