"""Pure. The client-facing JSON: OpenAI/vLLM/SGLang request, response, chunk and error structs.

Requests decode with msgspec (unknown fields ignored, as vLLM/SGLang servers do) and are then
validated like OpenAI/vLLM would; every rejection is a 400 `ClientError` naming the parameter.
Response structs use `None` for fields OpenAI always sends (`"finish_reason": null`) and `UNSET`
for fields it omits when absent (`usage`, `matched_stop`, delta keys).
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.errors import ClientError, GatewayError

# ---------------------------------------------------------------------------------------------
# Requests


class TextPart(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageURL(msgspec.Struct, frozen=True):
    url: str
    detail: str | None = None


class ImagePart(msgspec.Struct, frozen=True, tag_field="type", tag="image_url"):
    image_url: ImageURL


class InputAudio(msgspec.Struct, frozen=True):
    data: str
    format: str


class AudioPart(msgspec.Struct, frozen=True, tag_field="type", tag="input_audio"):
    input_audio: InputAudio


ContentPart = TextPart | ImagePart | AudioPart
Content = str | tuple[ContentPart, ...]


class FunctionCall(msgspec.Struct, frozen=True):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, frozen=True, tag_field="role", tag="system"):
    content: Content
    name: str | None = None


class DeveloperMessage(msgspec.Struct, frozen=True, tag_field="role", tag="developer"):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, frozen=True, tag_field="role", tag="user"):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, frozen=True, tag_field="role", tag="assistant"):
    content: Content | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    reasoning_content: str | None = None


class ToolMessage(msgspec.Struct, frozen=True, tag_field="role", tag="tool"):
    content: Content
    tool_call_id: str


ChatMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDefinition(msgspec.Struct, frozen=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, frozen=True):
    function: FunctionDefinition
    type: Literal["function"] = "function"


class NamedFunction(msgspec.Struct, frozen=True):
    name: str


class ToolChoiceFunction(msgspec.Struct, frozen=True):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | ToolChoiceFunction


class TextFormat(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(msgspec.Struct, frozen=True, tag_field="type", tag="json_object"):
    pass


class JsonSchemaSpec(msgspec.Struct, frozen=True):
    name: str
    json_schema: dict[str, Any] | None = msgspec.field(default=None, name="schema")
    description: str | None = None
    strict: bool | None = None


class JsonSchemaFormat(msgspec.Struct, frozen=True, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat


class StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool | None = None


Stop = str | tuple[str, ...] | None


class _SamplingFields(msgspec.Struct, frozen=True, kw_only=True):
    """Fields shared by chat and completions: OpenAI's, then the vLLM/SGLang extensions.

    `None` means "not given": the engine's default applies.
    """

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: Stop = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    user: str | None = None
    # vLLM / SGLang extensions
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    include_stop_str_in_output: bool = False

    @property
    def num_choices(self) -> int:
        return 1 if self.n is None else self.n

    @property
    def is_stream(self) -> bool:
        return bool(self.stream)

    @property
    def include_usage(self) -> bool:
        """Streaming only: whether a final usage chunk was asked for."""
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """`stop` as a tuple; a bare `""` means no stop, as OpenAI treats it."""
        return stop_strings(self.stop)

    @property
    def keep_stop_text(self) -> bool:
        """SGLang's `no_stop_trim` and vLLM's `include_stop_str_in_output` mean the same."""
        return self.no_stop_trim or self.include_stop_str_in_output


class ChatCompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    """POST /v1/chat/completions."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: tuple[Tool, ...] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    # vLLM / SGLang chat extensions
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    separate_reasoning: bool = True
    stream_reasoning: bool = True

    @property
    def max_new_tokens(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens` when both are set."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


class CompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    """POST /v1/completions. Exactly one prompt per request (checked by validation)."""

    # One array type per msgspec union: list forms are told apart by `validate_completion`.
    prompt: str | tuple[str | int | tuple[int, ...], ...]
    suffix: str | None = None
    echo: bool | None = None
    logprobs: int | None = None
    best_of: int | None = None
    max_tokens: int | None = 16  # OpenAI's documented default for completions

    @property
    def single_prompt(self) -> str | tuple[int, ...]:
        """The prompt as text or token ids; valid only after `validate_completion`."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        first = prompt[0]
        if isinstance(first, str):
            return first
        if isinstance(first, tuple):
            return first
        return tuple(p for p in prompt if isinstance(p, int))


class GenerateSamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """SGLang `sampling_params`; defaults are SGLang's (`max_new_tokens` 128)."""

    max_new_tokens: int | None = 128
    min_new_tokens: int = 0
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: Stop = None
    stop_token_ids: tuple[int, ...] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: int | None = None
    sampling_seed: int | None = None  # SGLang's own name for the seed

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return stop_strings(self.stop)

    @property
    def effective_seed(self) -> int | None:
        return self.seed if self.seed is not None else self.sampling_seed


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """POST /generate (SGLang native). One prompt: `text` or `input_ids`, not both."""

    text: str | None = None
    input_ids: tuple[int, ...] | None = None
    sampling_params: GenerateSamplingParams = GenerateSamplingParams()
    stream: bool = False
    rid: str | None = None
    return_logprob: bool = False
    top_logprobs_num: int = 0
    model: str | None = None


def stop_strings(stop: Stop) -> tuple[str, ...]:
    if stop is None or stop == "":
        return ()
    if isinstance(stop, str):
        return (stop,)
    return stop


# ---------------------------------------------------------------------------------------------
# Decoding and validation

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


def _check_stops(stop: Stop, param: str, *, max_count: int | None) -> None:
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


# ---------------------------------------------------------------------------------------------
# Responses (encode side). Field order is the order OpenAI/SGLang emit.

MatchedStop = str | int


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)


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


class ChoiceDelta(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] | UnsetType = UNSET
    content: str | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET


class ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: ChoiceDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    matched_stop: MatchedStop | UnsetType = UNSET


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: tuple[ChunkChoice, ...]
    usage: Usage | UnsetType = UNSET


class ResponseMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | UnsetType = UNSET
    tool_calls: tuple[ToolCall, ...] | UnsetType = UNSET


class ChatChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    matched_stop: MatchedStop | UnsetType = UNSET


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: tuple[ChatChoice, ...]
    usage: Usage


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
    matched_stop: MatchedStop | UnsetType = UNSET


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


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "smg-trio"
    root: str | UnsetType = UNSET
    max_model_len: int | UnsetType = UNSET


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: tuple[ModelCard, ...]


class GenerateFinishReason(msgspec.Struct, frozen=True, kw_only=True):
    """SGLang's shape: `{"type":"stop","matched":"\\n"}` or `{"type":"length","length":16}`."""

    type: str
    matched: MatchedStop | UnsetType = UNSET
    length: int | UnsetType = UNSET


class GenerateMetaInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    finish_reason: GenerateFinishReason | None
    prompt_tokens: int
    completion_tokens: int


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
