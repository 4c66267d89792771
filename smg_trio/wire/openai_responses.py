"""Pure. The client-facing JSON the gateway sends: OpenAI/SGLang responses, chunks and errors.

Field order is the order OpenAI/SGLang emit. Fields OpenAI always sends are plain `None`
defaults (`"finish_reason": null`); fields it omits when absent use `UNSET` (`usage`,
`matched_stop`, delta keys). `stop_reason` is vLLM's (the stop string, the stop token id, or
null): set on every non-streaming choice and on finish chunks, as vLLM sends it; `matched_stop`
is smg's (docs/stops-and-finalize.md §3.9).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.errors import ClientError, GatewayError
from smg_trio.wire.openai import ToolCall

MatchedStop = str | int


class PromptTokensDetails(msgspec.Struct, frozen=True):
    """`cached_tokens`; with vLLM's --enable-prompt-tokens-details also, as vLLM's chat sends
    them, the tokens written to the prefix cache and the prompt tokens of each modality (null
    when unknown or none; left out where vLLM leaves them out: core/frontend_options.py)."""

    cached_tokens: int
    created_cache_tokens: int | UnsetType | None = UNSET
    multimodal_tokens: dict[str, int] | UnsetType | None = UNSET


class CompletionTokensDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int


class Usage(msgspec.Struct, frozen=True):
    """Token counts. `prompt_tokens_details` only when the engine reported cached prefix tokens
    (vLLM sends it only then too, with its `--enable-prompt-tokens-details`);
    `completion_tokens_details` only when the model has a reasoning parser (vLLM's rule).
    """

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | UnsetType = UNSET
    completion_tokens_details: CompletionTokensDetails | UnsetType = UNSET

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
        details = PromptTokensDetails(cached_tokens) if cached_tokens > 0 else UNSET
        return cls(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens, details)


class TopLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None


class TokenLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    top_logprobs: tuple[TopLogprob, ...] = ()


class ChoiceLogprobs(msgspec.Struct, frozen=True):
    content: tuple[TokenLogprob, ...] | None = None


class DeltaFunction(msgspec.Struct, frozen=True, kw_only=True):
    name: str | UnsetType = UNSET  # in a call's first delta only
    arguments: str = ""


class DeltaToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A streamed piece of a tool call: `id`, `type` and the name come once, with the first."""

    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: DeltaFunction


class ChoiceDelta(msgspec.Struct, frozen=True, kw_only=True):
    role: str | UnsetType = UNSET  # "assistant" unless --response-role or the prompt says
    content: str | UnsetType = UNSET
    # Reasoning goes out under both names: `reasoning_content` (DeepSeek's, SGLang's, most
    # clients') and `reasoning` (vLLM >= 0.11's) (docs/tools-and-reasoning.md §3).
    reasoning_content: str | UnsetType = UNSET
    reasoning: str | UnsetType = UNSET
    tool_calls: tuple[DeltaToolCall, ...] | UnsetType = UNSET


class ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: ChoiceDelta
    logprobs: ChoiceLogprobs | msgspec.Raw | None = None  # Raw: pre-encoded ChoiceLogprobs
    finish_reason: str | None = None
    stop_reason: MatchedStop | UnsetType | None = UNSET
    matched_stop: MatchedStop | UnsetType = UNSET
    token_ids: tuple[int, ...] | UnsetType = UNSET  # vLLM `return_token_ids`: this chunk's ids


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: tuple[ChunkChoice, ...]
    usage: Usage | UnsetType = UNSET
    prompt_token_ids: tuple[int, ...] | UnsetType = UNSET  # vLLM's, on each role chunk


class ResponseMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: str = "assistant"  # or --response-role's, or the last message's (core/prepare.py)
    content: str | None
    reasoning_content: str | UnsetType = UNSET
    reasoning: str | UnsetType = UNSET
    tool_calls: tuple[ToolCall, ...] | UnsetType = UNSET


class ChatChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: MatchedStop | UnsetType | None = UNSET
    matched_stop: MatchedStop | UnsetType = UNSET
    token_ids: tuple[int, ...] | UnsetType = UNSET  # vLLM `return_token_ids`: generated ids


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: tuple[ChatChoice, ...]
    usage: Usage
    prompt_logprobs: PromptLogprobs | UnsetType = UNSET  # vLLM: top level in chat
    prompt_token_ids: tuple[int, ...] | UnsetType = UNSET  # vLLM `return_token_ids`, top level


class PromptLogprob(msgspec.Struct, frozen=True):
    """One candidate of a prompt position in vLLM's `prompt_logprobs` (keyed by token id)."""

    logprob: float
    rank: int | None
    decoded_token: str


# vLLM's `prompt_logprobs`: null for the first prompt token, then per position its candidates.
PromptLogprobs = tuple[dict[str, PromptLogprob] | None, ...]


class CompletionLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    tokens: tuple[str, ...] = ()
    token_logprobs: tuple[float | None, ...] = ()
    top_logprobs: tuple[dict[str, float] | None, ...] = ()
    text_offset: tuple[int, ...] = ()


class CompletionChoice(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    index: int
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: MatchedStop | UnsetType | None = UNSET
    matched_stop: MatchedStop | UnsetType = UNSET
    prompt_logprobs: PromptLogprobs | UnsetType = UNSET
    # vLLM `return_token_ids`: the choice's prompt's ids (a stream: on its first chunk) and the
    # generated ids (a stream: each chunk's own).
    prompt_token_ids: tuple[int, ...] | UnsetType = UNSET
    token_ids: tuple[int, ...] | UnsetType = UNSET


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """A non-streaming completion and, with `usage` UNSET, one streaming chunk (as OpenAI)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: tuple[CompletionChoice, ...]
    usage: Usage | UnsetType = UNSET


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(msgspec.Struct, frozen=True):
    error: ErrorDetail


class ModelPermission(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's permission entry of a model card (every served name gets one)."""

    id: str
    object: Literal["model_permission"] = "model_permission"
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    """One served name in /v1/models, with vLLM's fields (`root` is the model folder)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "smg-trio"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: tuple[ModelPermission, ...] = ()


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: tuple[ModelCard, ...]


class GenerateFinishReason(msgspec.Struct, frozen=True, kw_only=True):
    """SGLang's shape: `{"type":"stop","matched":"\\n"}` or `{"type":"length","length":16}`."""

    type: str
    matched: MatchedStop | UnsetType = UNSET
    length: int | UnsetType = UNSET


# SGLang's logprob entry: [logprob, token id, token text or null (`return_text_in_logprobs`)].
SglangLogprob = tuple[float, int, str | None]


class GenerateLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    """`meta_info`'s output logprobs as SGLang renders them (`return_logprob`); the top lists
    only with `top_logprobs_num` > 0."""

    output_token_logprobs: tuple[SglangLogprob, ...] | UnsetType = UNSET
    output_top_logprobs: tuple[tuple[SglangLogprob, ...], ...] | UnsetType = UNSET


NO_LOGPROBS: Final = GenerateLogprobs()  # a /generate without `return_logprob`


class GenerateMetaInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    finish_reason: GenerateFinishReason | None
    prompt_tokens: int
    completion_tokens: int
    output_token_logprobs: tuple[SglangLogprob, ...] | UnsetType = UNSET
    output_top_logprobs: tuple[tuple[SglangLogprob, ...], ...] | UnsetType = UNSET


class GenerateResponse(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    output_ids: tuple[int, ...] | UnsetType = UNSET
    meta_info: GenerateMetaInfo
    index: int | UnsetType = UNSET  # set when n > 1, as SGLang does


JSON_ENCODER = msgspec.json.Encoder()


def error_body(err: GatewayError) -> bytes:
    """OpenAI error JSON for any gateway error; `param` only a ClientError can name."""
    param = err.param if isinstance(err, ClientError) else None
    detail = ErrorDetail(message=err.message, type=err.error_type, param=param, code=err.code)
    return JSON_ENCODER.encode(ErrorResponse(detail))
