"""Pure. The client-facing request JSON: OpenAI/vLLM/SGLang request structs and validation.

Requests decode with msgspec (unknown fields ignored, as vLLM/SGLang servers do) and are then
validated like OpenAI/vLLM would; every rejection is a 400 `ClientError` naming the parameter.
Response structs use `None` for fields OpenAI always sends (`"finish_reason": null`) and `UNSET`
for fields it omits when absent (`usage`, `matched_stop`, delta keys).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from smg_trio.wire.request_numbers import Int

# ---------------------------------------------------------------------------------------------
# Requests


class TextPart(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageURL(msgspec.Struct, frozen=True):
    url: str
    detail: str | None = None


class ImagePart(msgspec.Struct, frozen=True, tag_field="type", tag="image_url"):
    image_url: ImageURL


class SourcedImagePart(ImagePart, frozen=True, tag="image_url"):
    """An image another API's request became (an Anthropic `image` block, a Responses
    `input_image`): `param` names it as that client wrote it, for its 400s. Never decoded."""

    param: str = ""


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


class StructuredOutputs(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's `structured_outputs` extra: exactly one constraint, plus backend options."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None


class StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM: usage on every chunk (with include_usage)


StopField = str | tuple[str, ...] | None


class _SamplingFields(msgspec.Struct, frozen=True, kw_only=True):
    """Fields shared by chat and completions: OpenAI's, then the vLLM/SGLang extensions.

    `None` means "not given": the engine's default applies.
    """

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: Int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stream_interval: Int | None = None  # vLLM: tokens per streamed chunk, at least the server's
    stop: StopField = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: Int | None = None
    user: str | None = None
    # vLLM / SGLang extensions
    top_k: Int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: Int = 0
    stop_token_ids: tuple[Int, ...] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    include_stop_str_in_output: bool = False
    allowed_token_ids: tuple[Int, ...] | None = None
    bad_words: tuple[str, ...] | None = None
    truncate_prompt_tokens: Int | None = None
    # Structured outputs: OpenAI's response_format and vLLM's extras (one constraint in all).
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: tuple[str, ...] | None = None
    guided_grammar: str | None = None
    prompt_logprobs: Int | None = None  # vLLM: top-k logprobs of each prompt position
    return_token_ids: bool | None = None  # vLLM: prompt and generated token ids in the answer
    # vLLM: logprob tokens as `token_id:N` (None: the server's --return-tokens-as-token-ids).
    return_tokens_as_token_ids: bool | None = None

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
    def continuous_usage(self) -> bool:
        """vLLM's `continuous_usage_stats`: usage on every chunk, only with `include_usage`."""
        return self.include_usage and bool(
            self.stream_options and self.stream_options.continuous_usage_stats
        )

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
    max_tokens: Int | None = None
    max_completion_tokens: Int | None = None
    logprobs: bool | None = None
    top_logprobs: Int | None = None
    tools: tuple[Tool, ...] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    # vLLM / SGLang chat extensions
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None  # vLLM: the request's own, with --trust-request-chat-template
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    include_reasoning: bool = True  # vLLM: false separates reasoning but leaves it out
    # vLLM's per-request image processor settings (docs/images.md §1; model/ checks the keys).
    mm_processor_kwargs: dict[str, Any] | None = None

    @property
    def max_new_tokens(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens` when both are set."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


class CompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    """POST /v1/completions. Exactly one prompt per request (checked by validation)."""

    # One array type per msgspec union: list forms are told apart by `validate_completion`.
    prompt: str | tuple[str | Int | tuple[Int, ...], ...]
    suffix: str | None = None
    echo: bool | None = None
    logprobs: Int | None = None
    best_of: Int | None = None
    max_tokens: Int | None = 16  # OpenAI's documented default for completions


class GenerateSamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """SGLang `sampling_params`; defaults are SGLang's (`max_new_tokens` 128)."""

    max_new_tokens: Int | None = 128
    min_new_tokens: Int = 0
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: StopField = None
    stop_token_ids: tuple[Int, ...] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: Int = 1
    seed: Int | None = None
    sampling_seed: Int | None = None  # SGLang's own name for the seed
    # SGLang's structured outputs: at most one (docs/request-fields.md §2).
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return stop_strings(self.stop)

    @property
    def effective_seed(self) -> int | None:
        return self.seed if self.seed is not None else self.sampling_seed


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """POST /generate (SGLang native). One prompt: `text` or `input_ids`, not both."""

    text: str | None = None
    input_ids: tuple[Int, ...] | None = None
    sampling_params: GenerateSamplingParams = GenerateSamplingParams()
    stream: bool = False
    rid: str | None = None
    return_logprob: bool = False
    top_logprobs_num: Int = 0
    return_text_in_logprobs: bool = False  # each logprob entry's token text, else null
    logprob_start_len: Int | None = None  # SGLang's input logprobs: only the default (-1) here
    model: str | None = None


def stop_strings(stop: StopField) -> tuple[str, ...]:
    if stop is None or stop == "":
        return ()
    if isinstance(stop, str):
        return (stop,)
    return stop
