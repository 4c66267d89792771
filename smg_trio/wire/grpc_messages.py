"""Pure. Generate and Abort requests for the engines' gRPC services, built from neutral inputs.

One builder per engine turns a `GrpcGenerate` (one engine request, already finalized: fanned
out to n=1, stops resolved) into that engine's protobuf `GenerateRequest` (wire.md §C). What
differs per engine, besides field names and numbers (stops-and-finalize.md §1.2):

- vLLM: chat sends `skip_special_tokens=true` whatever the client asked (the router detokenizes
  for the client); completion maps `no_stop_trim` to `include_stop_str_in_output`.
- SGLang: workers run without a tokenizer and reject string stops, so `stop` must be empty
  (finalize strips it); chat forces `skip_special_tokens=true`; `no_stop_trim` is forwarded.
  The service has no seed field: a seed is not sent.
- TokenSpeed: scalars are `optional`, so only what the client set is sent.
- MLX: no string-stop field: string stops are the client's error (400).
- TRT-LLM: chat and generate send `stop_token_ids=[]` (the router enforces the client's ids);
  completion maps `no_stop_trim` to `include_stop_token_in_output`; `max_tokens` is required.

proto3 zeros are indistinguishable from "unset" for plain scalars, and several servicers read a
zero literally (SGLang temperature 0 = greedy), so every knob with a neutral value is sent
explicitly. Integer values the protobuf field cannot hold are a `ClientError`, never a crash.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final, TypeAlias, assert_never

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire._proto import mlx_engine_pb2 as mlx
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.sampling_checks import checked_ids

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
UINT32_MAX: Final = 2**32 - 1
UINT64_MAX: Final = 2**64 - 1
# TRT-LLM requires max_tokens; these are what smg sends when the client set none.
TRTLLM_DEFAULT_MAX_TOKENS_CHAT: Final = 2048
TRTLLM_DEFAULT_MAX_TOKENS_COMPLETION: Final = 16


class GrpcEngine(enum.Enum):
    """The engines with a gRPC service; values equal `core.runtime.Runtime` values."""

    SGLANG = "sglang"
    VLLM = "vllm"
    TOKENSPEED = "tokenspeed"
    MLX = "mlx"
    TRTLLM = "trtllm"


class GrpcEndpoint(enum.Enum):
    """The client endpoint a request came from: some engines' rules depend on it."""

    CHAT = "chat"
    COMPLETION = "completion"
    GENERATE = "generate"


class GrpcSampling(msgspec.Struct, frozen=True, kw_only=True):
    """Engine-neutral sampling, field for field like `core.plan.SamplingParams`.

    `None` means "the engine's default". `stop`/`stop_token_ids` are what the ENGINE should stop
    on (after finalize). `logprobs` is the number of top candidates per sampled token.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0 or -1: all tokens
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    min_tokens: int = 0
    logprobs: int | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()


class GrpcGenerate(msgspec.Struct, frozen=True, kw_only=True):
    """One engine request (one choice): the prompt as token ids, never as text."""

    request_id: str
    prompt_ids: tuple[int, ...]
    sampling: GrpcSampling
    endpoint: GrpcEndpoint
    stream: bool = True  # False: the engine sends only complete messages
    prompt_text: str = ""  # the prompt's text, for the engine's logs; may stay empty


GenerateRequest: TypeAlias = (
    vllm.GenerateRequest
    | sglang.GenerateRequest
    | tokenspeed.GenerateRequest
    | mlx.GenerateRequest
    | trtllm.GenerateRequest
)
AbortRequest: TypeAlias = (
    vllm.AbortRequest
    | sglang.AbortRequest
    | tokenspeed.AbortRequest
    | mlx.AbortRequest
    | trtllm.AbortRequest
)


def build_generate(engine: GrpcEngine, request: GrpcGenerate) -> GenerateRequest:
    """The `GenerateRequest` of `engine` for `request`."""
    match engine:
        case GrpcEngine.VLLM:
            return build_vllm_generate(request)
        case GrpcEngine.SGLANG:
            return build_sglang_generate(request)
        case GrpcEngine.TOKENSPEED:
            return build_tokenspeed_generate(request)
        case GrpcEngine.MLX:
            return build_mlx_generate(request)
        case GrpcEngine.TRTLLM:
            return build_trtllm_generate(request)
        case _:
            assert_never(engine)


def build_abort(engine: GrpcEngine, request_ids: Sequence[str]) -> list[AbortRequest]:
    """Abort calls for `request_ids`: one for vLLM and MLX (they take a list), else one per id."""
    match engine:
        case GrpcEngine.VLLM:
            return [vllm.AbortRequest(request_ids=request_ids)]
        case GrpcEngine.MLX:
            return [mlx.AbortRequest(request_ids=request_ids)]
        case GrpcEngine.SGLANG:
            return [sglang.AbortRequest(request_id=rid) for rid in request_ids]
        case GrpcEngine.TOKENSPEED:
            return [tokenspeed.AbortRequest(request_id=rid) for rid in request_ids]
        case GrpcEngine.TRTLLM:
            return [trtllm.AbortRequest(request_id=rid) for rid in request_ids]
        case _:
            assert_never(engine)


# Constructors leave a field unset when given None: that is how `optional` fields stay unset.


def build_vllm_generate(request: GrpcGenerate) -> vllm.GenerateRequest:
    s = request.sampling
    params = vllm.SamplingParams(
        temperature=s.temperature,  # unset: 1.0
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, 0, UINT32_MAX),
        min_p=_or(s.min_p, 0.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        max_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        min_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        stop=s.stop,
        stop_token_ids=_ids(s.stop_token_ids),
        skip_special_tokens=request.endpoint is GrpcEndpoint.CHAT or s.skip_special_tokens,
        spaces_between_special_tokens=True,  # vLLM's own default; proto3's would be false
        ignore_eos=s.ignore_eos,
        n=1,
        logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX),
        seed=_optional(s.seed, "seed", INT32_MIN, INT32_MAX),
        include_stop_str_in_output=request.endpoint is GrpcEndpoint.COMPLETION and s.no_stop_trim,
    )
    return vllm.GenerateRequest(
        request_id=request.request_id,
        tokenized=vllm.TokenizedInput(
            original_text=request.prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        stream=request.stream,
    )


def build_sglang_generate(request: GrpcGenerate) -> sglang.GenerateRequest:
    s = request.sampling
    if s.stop:
        raise ValueError("SGLang takes no stop strings: finalize must have resolved them")
    params = sglang.SamplingParams(
        temperature=_or(s.temperature, 1.0),  # unset would be 0.0: greedy
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, -1, INT32_MAX),
        min_p=_or(s.min_p, 0.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        max_new_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        stop_token_ids=_ids(s.stop_token_ids),
        skip_special_tokens=request.endpoint is GrpcEndpoint.CHAT or s.skip_special_tokens,
        spaces_between_special_tokens=True,
        n=1,
        min_new_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        ignore_eos=s.ignore_eos,
        no_stop_trim=s.no_stop_trim,
    )
    return sglang.GenerateRequest(
        request_id=request.request_id,
        tokenized=sglang.TokenizedInput(
            original_text=request.prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        return_logprob=s.logprobs is not None,
        top_logprobs_num=_ranged(s.logprobs or 0, "logprobs", 0, INT32_MAX),
        stream=request.stream,
    )


def build_tokenspeed_generate(request: GrpcGenerate) -> tokenspeed.GenerateRequest:
    s = request.sampling
    params = tokenspeed.SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=_optional_top_k(s.top_k),
        min_p=s.min_p,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        repetition_penalty=s.repetition_penalty,
        max_new_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        min_new_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        stop=s.stop,
        stop_token_ids=_ids(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=True,
        n=1,
        no_stop_trim=s.no_stop_trim,
        sampling_seed=_optional(s.seed, "seed", 0, UINT64_MAX),
    )
    return tokenspeed.GenerateRequest(
        request_id=request.request_id,
        tokenized=tokenspeed.TokenizedInput(
            input_ids=_ids(request.prompt_ids, "prompt"), original_text=request.prompt_text
        ),
        sampling_params=params,
        return_logprob=s.logprobs is not None,
        top_logprobs_num=_ranged(s.logprobs or 0, "logprobs", 0, INT32_MAX),
        stream=request.stream,
    )


def build_mlx_generate(request: GrpcGenerate) -> mlx.GenerateRequest:
    s = request.sampling
    if s.stop:
        raise ClientError(
            "invalid request parameters: the MLX engine cannot take string stop sequences; "
            "use stop_token_ids",
            param="stop",
        )
    params = mlx.SamplingParams(
        temperature=s.temperature,
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, 0, UINT32_MAX),
        min_p=_or(s.min_p, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        max_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        stop_token_ids=_ids(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX),
        seed=_optional(s.seed, "seed", INT32_MIN, INT32_MAX),
    )
    return mlx.GenerateRequest(
        request_id=request.request_id,
        tokenized=mlx.TokenizedInput(
            original_text=request.prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        stream=request.stream,
    )


def build_trtllm_generate(request: GrpcGenerate) -> trtllm.GenerateRequest:
    s = request.sampling
    completion = request.endpoint is GrpcEndpoint.COMPLETION
    default_max = (
        TRTLLM_DEFAULT_MAX_TOKENS_COMPLETION if completion else TRTLLM_DEFAULT_MAX_TOKENS_CHAT
    )
    max_tokens = default_max if s.max_tokens is None else s.max_tokens
    return trtllm.GenerateRequest(
        request_id=request.request_id,
        tokenized=trtllm.TokenizedInput(
            original_text=request.prompt_text,
            input_token_ids=_ids(request.prompt_ids, "prompt"),
        ),
        sampling_config=trtllm.SamplingConfig(
            beam_width=1,
            num_return_sequences=1,
            top_k=_optional_top_k(s.top_k),
            top_p=s.top_p,
            seed=_optional(s.seed, "seed", 0, UINT64_MAX),
            temperature=s.temperature,
            min_tokens=_optional(s.min_tokens or None, "min_tokens", 1, UINT32_MAX),
            repetition_penalty=s.repetition_penalty,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            min_p=s.min_p,
        ),
        output_config=trtllm.OutputConfig(logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX)),
        max_tokens=_ranged(max_tokens, "max_tokens", 1, UINT32_MAX),
        streaming=request.stream,
        stop=s.stop,
        # Chat and generate send no stop ids: the router enforces the client's (spec §1.2).
        stop_token_ids=_ids(s.stop_token_ids) if completion else (),
        ignore_eos=s.ignore_eos,
        include_stop_token_in_output=completion and s.no_stop_trim,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _ranged(value: int, param: str, low: int, high: int) -> int:
    """`value` if the protobuf field can hold it and the engine can take it, else a 400."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ClientError(
            f"{param} must be an integer in [{low}, {high}], got {value!r}", param=param
        )
    return value


def _optional(value: int | None, param: str, low: int, high: int) -> int | None:
    return None if value is None else _ranged(value, param, low, high)


def _all_tokens_as(top_k: int | None, all_tokens: int, high: int) -> int:
    """top_k with "all tokens" (None, 0 or -1) spelled the engine's way."""
    if top_k is None or top_k in (0, -1):
        return all_tokens
    return _ranged(top_k, "top_k", 1, high)


def _optional_top_k(top_k: int | None) -> int | None:
    """top_k for an `optional` field: "all tokens" is the engine's default, so left unset."""
    if top_k is None or top_k in (0, -1):
        return None
    return _ranged(top_k, "top_k", 1, INT32_MAX)


def _ids(ids: Sequence[int], param: str = "stop_token_ids") -> tuple[int, ...]:
    return checked_ids(ids, param, None)
