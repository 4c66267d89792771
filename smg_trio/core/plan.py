"""Pure. The typed values that flow from `prepare` to `finalize` to the wire encoders.

`GeneratePlan` is what the client asked for, in engine-neutral terms (its sampling is the
neutral `SamplingParams`), after validation, templating and tokenization; `StopSpec` is what the
router's stop scanner enforces. Everything here is frozen: stages return new values, they never
fill in bags.
"""

from __future__ import annotations

import msgspec

from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.responses_objects import ResponseSettings


class StopSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the router's stop scanner enforces for one choice (docs/stops-and-finalize.md §3.1).

    Strings are hidden stops (trimmed), or visible ones when `no_stop_trim`. `token_ids` are
    the tokenizer's EOS ids (unless `ignore_eos`) followed by the client's `stop_token_ids`;
    they are hidden, or visible when `no_stop_trim`. Strings match only text that ends in a
    token after the first `min_tokens` ones, as vLLM's detokenizer checks them.
    `eos_token_id` is the model's primary EOS (None with `ignore_eos`): a stop on it reports
    `stop_reason` null, any other stop id reports itself (vLLM's rule, docs/stops-and-finalize.md §3.9).
    """

    strings: tuple[str, ...] = ()
    min_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    eos_token_id: int | None = None


class ParserSetup(msgspec.Struct, frozen=True, kw_only=True):
    """Which output parsers a chat request's choices run (docs/tools-and-reasoning.md §5).

    `tool_parser` is set only when the request has tools and a tool_choice that lets the model
    call them; `reasoning_parser` only when the model has one and thinking is on.
    """

    tool_parser: str | None = None
    forced_function: str | None = None  # tool_choice naming a function: the output is its args
    tool_names: frozenset[str] = frozenset()
    parallel_tool_calls: bool = True
    reasoning_parser: str | None = None
    include_reasoning: bool = True  # vLLM's include_reasoning: false drops what was separated


class ReasoningCount(msgspec.Struct, frozen=True, kw_only=True):
    """How usage counts a choice's reasoning tokens: the model's reasoning parser (vLLM's
    counting rule of that name, `core/reasoning_tokens.py`) and whether the request
    left thinking on (`chat_template_kwargs.enable_thinking`, which qwen3's rule reads).
    Set for every chat-shaped request of a model with a reasoning parser, as vLLM then always
    reports the count (docs/tools-and-reasoning.md §11)."""

    parser: str
    thinking: bool = True
    # The special tokens never counted as text (the tokenizer configs' named ones, vLLM's);
    # None: the tokenizer's special-marked added tokens.
    special_ids: frozenset[int] | None = None
    # A chat stream: counted delta by delta as vLLM's stream does (its detokenizer's deltas,
    # with the request's skip_special_tokens); set by `reasoning_tokens.reasoning_rule`.
    streamed: bool = False
    skip_special_tokens: bool = True


class PromptPart(msgspec.Struct, frozen=True, kw_only=True):
    """One prompt of a batched completion: its ids, and its text when `echo` asks for it."""

    ids: tuple[int, ...]
    echo_text: str | None = None


class GeneratePlan(msgspec.Struct, frozen=True, kw_only=True):
    """A validated, templated, tokenized client request, ready to be finalized for a worker."""

    request_id: str
    endpoint: Endpoint
    model: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: usage on every chunk
    echo_text: str | None = None  # `echo`: the prompt (completions) or last message (chat) text
    stop_spec: StopSpec = StopSpec()
    # Completions `prompt` given as a list: every prompt, in order (the first is also
    # `prompt_ids`/`echo_text`). Prompt i's choice j is choice i * n + j, as vLLM numbers them.
    # Empty for a single prompt.
    batch_prompts: tuple[PromptPart, ...] = ()
    # Prompt logprobs (`sampling.prompt_logprobs`): the field the client asked with, for a
    # runtime's 400 (`prompt_logprobs`, or completions `echo` with `logprobs`). None: implied by
    # chat `echo` (vLLM asks for them there), dropped where the runtime cannot return them.
    prompt_logprobs_param: str | None = "prompt_logprobs"
    # Completions `echo` with max_tokens 0: the engine makes one token (vLLM's rule) that the
    # client never sees; the choice is the prompt and, with `logprobs`, its logprobs.
    echo_only: bool = False
    # /generate `return_text_in_logprobs`: each SGLang logprob entry carries its token's text.
    logprob_text: bool = False
    # Chat only: the tool-call / reasoning parsers its choices run; None for plain text.
    parsers: ParserSetup | None = None
    # Chat, Responses, Messages of a model with a reasoning parser: usage counts reasoning.
    reasoning_count: ReasoningCount | None = None
    # /v1/responses only: what its response object echoes and its store keeps.
    responses: ResponseSettings | None = None
    # Streaming: tokens per chunk after a choice's first text chunk (--stream-interval, as
    # vLLM's: the first text and the finish are never held; docs/performance.md §4).
    stream_interval: int = 1
    # vLLM's `return_token_ids` (chat, completions): the prompt's and the generated ids shown.
    return_token_ids: bool = False
    # vLLM's /inference/v1/generate `output_mode: "text"`: the ids' text shown beside them.
    text_output: bool = False
    # The prompt's images, processed, by position in `prompt_ids` (docs/images.md); the
    # client's names of their parts, for a worker's 400 when its wire carries no image.
    media: tuple[MediaFeature, ...] = ()
    media_params: tuple[str, ...] = ()
    # Chat: the reply's role (vLLM's --response-role, or the last message's without a generation
    # prompt). Chat and completions: logprob tokens as `token_id:N`, and usage with
    # prompt_tokens_details always (core/frontend_options.py).
    response_role: str = "assistant"
    tokens_as_ids: bool = False
    prompt_tokens_details: bool = False

    @property
    def prompts(self) -> tuple[PromptPart, ...]:
        """Every prompt of the request (one unless batched)."""
        return self.batch_prompts or (PromptPart(ids=self.prompt_ids, echo_text=self.echo_text),)

    @property
    def choice_count(self) -> int:
        """Choices across every prompt: `n` per prompt."""
        return max(1, len(self.batch_prompts)) * self.n
