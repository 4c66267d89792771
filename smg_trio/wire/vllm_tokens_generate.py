"""Pure. vLLM 0.32's tokens-in/tokens-out `POST /inference/v1/generate` (docs/vllm-frontend.md §7):
the request as we decode and check it, and the bodies we answer with.

A request names its prompt as token ids and vLLM's own SamplingParams as an object; the answer
carries the generated ids per choice (`output_mode: "tokens"`), and with `output_mode: "text"`
their text too. What we serve: the sampling knobs of `SUPPORTED_SAMPLING`, `n`, `stream` with
`stream_options.include_usage`, `return_token_ids`, the output mode and a `request_id`. Every
other field vLLM knows is refused with a 400 naming it when it asks for something (a value other
than vLLM's default): logprobs, stop strings, multimodal features, transfer parameters,
priorities.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.neutral.validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_CHOICES,
    MAX_PROMPT_TOKEN_IDS,
    check_between,
    check_count,
    check_knobs,
    check_lengths,
)
from smg_trio.wire.decode_errors import decode_body, read_decode_error
from smg_trio.wire.request_numbers import Int

TOKENS_GENERATE_PATH: Final = "/inference/v1/generate"
OUTPUT_MODES: Final = ("tokens", "text")


class TokensSamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's SamplingParams as a JSON object: the fields we honour, typed."""

    n: Int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int | None = None
    min_p: float | None = None
    seed: Int | None = None
    stop_token_ids: tuple[Int, ...] | None = None
    ignore_eos: bool = False
    max_tokens: Int | None = None  # absent: all the room the context leaves (vLLM's server)
    min_tokens: Int = 0
    detokenize: bool = True  # only stop strings and text need it; neither is served here


REFUSED_SAMPLING: Final[dict[str, Any]] = {
    "watermarking": None,
    "stop": None,
    "logprobs": None,
    "prompt_logprobs": None,
    "prompt_logprob_token_ids": None,
    "prompt_logprob_start": None,
    "logprob_token_ids": None,
    "flat_logprobs": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "output_kind": None,
    "stream_interval": None,
    "skip_clone": False,
    "output_text_buffer_length": 0,
    "structured_outputs": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "extra_args": None,
    "bad_words": None,
    "skip_reading_prefix_cache": None,
    "thinking_token_budget": None,
    "repetition_detection": None,
    "routed_experts_prompt_start": 0,
    "trace_decode_token_ids": None,
}
"""vLLM's other SamplingParams fields, with the value that asks for nothing (accepted)."""

REFUSED_TOP_LEVEL: Final[dict[str, Any]] = {
    "token_offsets": None,
    "features": None,
    "content_parts": None,
    "reasoning_ended": None,
    "reasoning_parser_kwargs": None,
    "cache_salt": None,
    "priority": 0,
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "lora_request": None,
}
"""vLLM's other request fields, likewise."""


class TokensStreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class TokensGenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    token_ids: tuple[Int, ...]
    sampling_params: TokensSamplingParams
    request_id: str | None = None
    model: str | None = None
    return_token_ids: bool | None = None
    output_mode: str = "tokens"
    stream: bool | None = False
    stream_options: TokensStreamOptions | None = None


_DECODER = msgspec.json.Decoder(TokensGenerateRequest, strict=False)
_RAW = msgspec.json.Decoder(dict[str, Any])


def _decode_error(exc: msgspec.DecodeError) -> ClientError:
    failure = read_decode_error(exc)
    if not failure.valid_json:
        return ClientError(f"The request body is not valid JSON: {failure.message}")
    return ClientError(f"Invalid request: {failure.message}", param=failure.path or None)


def _refuse_asked(raw: dict[str, Any], refused: dict[str, Any], prefix: str) -> None:
    for name, default in refused.items():
        if name in raw and raw[name] != default:
            param = prefix + name
            raise ClientError(
                f"{param} is not supported by smg-trio's /inference/v1/generate", param=param
            )


def decode_tokens_generate(body: bytes) -> TokensGenerateRequest:
    """The checked request; a 400 naming the field otherwise (docs/vllm-frontend.md §7)."""
    request = decode_body(_DECODER, body, _decode_error)
    raw = _RAW.decode(body)
    _refuse_asked(raw, REFUSED_TOP_LEVEL, "")
    sampling_raw = raw.get("sampling_params")
    if isinstance(sampling_raw, dict):
        _refuse_asked(sampling_raw, REFUSED_SAMPLING, "sampling_params.")
    if request.output_mode not in OUTPUT_MODES:
        raise ClientError(
            f"output_mode {request.output_mode!r}: one of 'tokens', 'text'", param="output_mode"
        )
    if request.output_mode == "text" and not request.sampling_params.detokenize:
        raise ClientError(  # vLLM's words
            "output_mode='text' requires sampling_params.detokenize to be true",
            param="sampling_params.detokenize",
        )
    if not request.token_ids:
        raise ClientError("token_ids must hold at least one token id", param="token_ids")
    check_count(request.token_ids, "token_ids", MAX_PROMPT_TOKEN_IDS)
    if any(token < 0 for token in request.token_ids):
        raise ClientError("token_ids must not contain negative values", param="token_ids")
    params = request.sampling_params
    check_knobs(params, "sampling_params.")
    check_between(params.n, "sampling_params.n", 1, MAX_CHOICES)
    if params.n > 1 and params.temperature == 0:
        raise ClientError(
            f"sampling_params.n must be 1 when using greedy sampling, got {params.n}",
            param="sampling_params.n",
        )
    check_between(params.seed, "sampling_params.seed", INT64_MIN, INT64_MAX)
    check_lengths(
        params.max_tokens,
        "sampling_params.max_tokens",
        params.min_tokens,
        "sampling_params.min_tokens",
    )
    if request.stream_options is not None and request.stream_options.continuous_usage_stats:
        raise ClientError(
            "stream_options.continuous_usage_stats is not supported by smg-trio's "
            "/inference/v1/generate",
            param="stream_options.continuous_usage_stats",
        )
    if request.stream_options is not None and not request.stream:
        raise ClientError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )
    return request


class TokensUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: None = None
    completion_tokens_details: None = None


class WeightVersionSpan(msgspec.Struct, frozen=True):
    """vLLM's: output tokens `[start, end)` were sampled by the weights named `version`."""

    version: str
    start: int
    end: int


class TokensChoice(msgspec.Struct, frozen=True, kw_only=True):
    """A choice of the whole answer (every field vLLM's has, null when not served)."""

    index: int
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: tuple[int, ...]
    routed_experts: None = None
    sampling_mask: None = None
    weight_versions: tuple[WeightVersionSpan, ...] | None = None
    """On the finish only (the whole answer's choice, a stream's last chunk)."""
    logprobs: None = None


class TextChoice(msgspec.Struct, frozen=True, kw_only=True):
    """A choice of `output_mode: "text"`: the ids and their text (a stream's: the text since
    the choice's last chunk), in vLLM's field order."""

    index: int
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: tuple[int, ...]
    routed_experts: None = None
    sampling_mask: None = None
    weight_versions: tuple[WeightVersionSpan, ...] | None = None
    text: str
    logprobs: None = None


class TokensResponse(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    model: str
    created: int
    usage: TokensUsage
    choices: tuple[TokensChoice | TextChoice, ...]
    prompt_logprobs: None = None
    prompt_token_id_logprobs: None = None
    prompt_token_ids: tuple[int, ...] | None = None
    mm_placeholders: None = None
    metrics: None = None
    kv_transfer_params: None = None
    ec_transfer_params: None = None
    output_mode: str = "tokens"


class TokensStreamChunk(msgspec.Struct, frozen=True, kw_only=True):
    """A streamed chunk of one choice's new ids (`usage` null, as vLLM's without continuous
    usage)."""

    request_id: str
    usage: None = None
    output_mode: str = "tokens"
    choices: tuple[TokensChoice | TextChoice, ...]


class TokensFirstStreamChunk(TokensStreamChunk, frozen=True, kw_only=True):
    """The first chunk when `return_token_ids` asked for the prompt's ids."""

    prompt_token_ids: tuple[int, ...]


class TokensStreamUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int


class TokensUsageChunk(msgspec.Struct, frozen=True, kw_only=True):
    """The closing chunk of `stream_options.include_usage`: no choices, the whole usage."""

    request_id: str
    usage: TokensStreamUsage
    output_mode: str = "tokens"
    choices: tuple[()] = ()
