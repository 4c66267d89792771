"""Pure. The non-streaming OpenAI bodies: a `chat.completion` and a `text_completion` made of
the request's finished choices (`core.render.FinishedChoice`), as vLLM's server shapes them.

Chat `message.content` is the choice's text, `""` when it produced none (vLLM's server answers
`""` too, e.g. for a stop matched inside the first token; smg turns whitespace-only text into
null; we do not throw away what the model generated).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from smg_trio.core.render import FinishedChoice, TokenIds, token_ids_field
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChatChoice,
    ChatCompletion,
    ChoiceLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    MatchedStop,
    ResponseMessage,
    Usage,
)


def _matched(choice: FinishedChoice) -> MatchedStop | msgspec.UnsetType:
    return msgspec.UNSET if choice.matched_stop is None else choice.matched_stop


def chat_completion(
    *,
    request_id: str,
    created: int,
    model: str,
    usage: Usage,
    choices: Sequence[FinishedChoice],
    prompt_token_ids: TokenIds = None,
    role: str = "assistant",
) -> bytes:
    """A non-streaming `chat.completion`; `prompt_token_ids` at the top level as vLLM's, and
    each choice's `output_ids` as its `token_ids`, when kept (`return_token_ids`); the
    messages speak as `role` (the plan's `response_role`)."""
    rendered = tuple(
        ChatChoice(
            index=c.index,
            message=ResponseMessage(
                role=role,
                content=(c.text or None) if c.parsed else c.text,
                reasoning_content=msgspec.UNSET if c.reasoning is None else c.reasoning,
                reasoning=msgspec.UNSET if c.reasoning is None else c.reasoning,
                tool_calls=msgspec.UNSET if c.tool_calls is None else c.tool_calls,
            ),
            logprobs=c.logprobs if isinstance(c.logprobs, ChoiceLogprobs) else None,
            finish_reason=c.finish_reason,
            stop_reason=c.stop_reason,
            matched_stop=_matched(c),
            token_ids=token_ids_field(c.output_ids),
        )
        for c in choices
    )
    # Every choice shares the prompt: vLLM puts its logprobs once, at the top level.
    prompt_logprobs = choices[0].prompt_logprobs if choices else msgspec.UNSET
    response = ChatCompletion(
        id=request_id,
        created=created,
        model=model,
        choices=rendered,
        usage=usage,
        prompt_token_ids=token_ids_field(prompt_token_ids),
    )
    if prompt_logprobs is not msgspec.UNSET:
        response = msgspec.structs.replace(response, prompt_logprobs=prompt_logprobs)
    return JSON_ENCODER.encode(response)


def completion(
    *,
    request_id: str,
    created: int,
    model: str,
    usage: Usage,
    choices: Sequence[FinishedChoice],
    prompt_token_ids: Sequence[TokenIds] | None = None,
) -> bytes:
    """A non-streaming `text_completion`; with `return_token_ids`, each choice's prompt's ids
    (`prompt_token_ids`, per choice) and its `output_ids` as `token_ids`, as vLLM's."""
    rendered = tuple(
        CompletionChoice(
            text=c.text,
            index=c.index,
            logprobs=c.logprobs if isinstance(c.logprobs, CompletionLogprobs) else None,
            finish_reason=c.finish_reason,
            stop_reason=c.stop_reason,
            matched_stop=_matched(c),
            prompt_logprobs=c.prompt_logprobs,
            prompt_token_ids=token_ids_field(
                None if prompt_token_ids is None else prompt_token_ids[c.index]
            ),
            token_ids=token_ids_field(c.output_ids),
        )
        for c in choices
    )
    response = Completion(
        id=request_id, created=created, model=model, choices=rendered, usage=usage
    )
    return JSON_ENCODER.encode(response)
