"""Pure. A pooling body's inputs made into prompt ids (docs/pooling.md §3): the `PoolingPlan`.

`input` takes vLLM's forms, told apart as vLLM tells them: a string, a list of strings, a list
of token ids, a list of token-id lists, one chat conversation (a list of messages, each with a
`role`) or several (a list of such lists); `messages` takes one conversation or several.
Strings are encoded with special tokens (`add_special_tokens`, default true); conversations
are templated as chat is (`prepare.chat_prompt_ids`, default `add_generation_prompt` false,
`add_special_tokens` false).

Then each prompt, as vLLM checks it: `truncate_prompt_tokens` (-1: the context length) keeps
the first N tokens (`truncation_side` "left": the last N), more than the context is vLLM's 400;
an empty prompt, a token outside the vocabulary and a prompt longer than the context are
vLLM's 400s, in vLLM's words.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from smg_trio.core.prepare import PromptModel, chat_prompt_ids
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import PoolingRequest, PoolingTask
from smg_trio.wire.openai_decode import decode_chat_request
from smg_trio.wire.openai_pooling import PoolingOptions

_MAX_INT64: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class PoolingPlan:
    """A pooling request, ready for the engines: one prompt per input."""

    path: str
    request_id: str
    model: str  # the name the response carries
    task: PoolingTask
    prompts: tuple[tuple[int, ...], ...]
    options: PoolingOptions

    def requests(self) -> list[PoolingRequest]:
        return [
            PoolingRequest(
                request_id=self.request_id,
                input_index=index,
                prompt_ids=prompt,
                task=self.task,
                dimensions=self.options.dimensions,
                use_activation=self.options.use_activation,
            )
            for index, prompt in enumerate(self.prompts)
        ]

    @property
    def prompt_tokens(self) -> int:
        return sum(len(prompt) for prompt in self.prompts)


def input_prompts(
    options: PoolingOptions, model: PromptModel, *, now: _dt.datetime
) -> tuple[tuple[int, ...], ...]:
    """Every input's prompt ids, checked (see the module doc)."""
    if options.messages is not msgspec.UNSET:
        if options.input is not msgspec.UNSET:
            raise ClientError("give either `input` or `messages`, not both", param="messages")
        conversations = _conversations(options.messages, "messages")
        if conversations is None:
            raise ClientError("messages must be a list of chat messages", param="messages")
        raw = [_chat_ids(c, options, model, now) for c in conversations]
    elif options.input is msgspec.UNSET:
        raise ClientError("Field required: give `input` or `messages`", param="input")
    else:
        raw = _input_ids(options, model, now)
    if not raw:
        raise ClientError("You must pass at least one prompt", param="input")
    return tuple(_checked(ids, options, model) for ids in raw)


def _input_ids(
    options: PoolingOptions, model: PromptModel, now: _dt.datetime
) -> list[tuple[int, ...]]:
    value = options.input
    special = options.add_special_tokens is not False
    if isinstance(value, str):
        return [_encoded(value, model, special)]
    if not isinstance(value, list):
        raise _bad_input()
    if not value:
        return []
    if all(isinstance(item, str) for item in value):
        return [_encoded(item, model, special) for item in value]
    if all(_is_token(item) for item in value):
        return [tuple(value)]
    if all(isinstance(item, list) and all(_is_token(t) for t in item) for item in value):
        return [tuple(item) for item in value]
    conversations = _conversations(value, "input")
    if conversations is None:
        raise _bad_input()
    return [_chat_ids(c, options, model, now) for c in conversations]


def _conversations(value: Any, param: str) -> list[list[Any]] | None:
    """One conversation (a non-empty list of messages with a `role`) or several; None if
    `value` is neither."""
    if _is_conversation(value):
        return [value]
    if isinstance(value, list) and value and all(_is_conversation(item) for item in value):
        return list(value)
    return None


def _is_conversation(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT64


def _bad_input() -> ClientError:
    return ClientError(
        "Invalid request: input must be a string, a list of strings, a list of token ids, "
        "a list of token-id lists or chat messages",
        param="input",
    )


def _encoded(text: str, model: PromptModel, special: bool) -> tuple[int, ...]:
    return tuple(model.tokenizer.encode(text, add_special_tokens=special))


def _chat_ids(
    messages: list[Any], options: PoolingOptions, model: PromptModel, now: _dt.datetime
) -> tuple[int, ...]:
    """One conversation templated as /v1/chat/completions would template it."""
    body = msgspec.json.encode(
        {
            "messages": messages,
            "add_generation_prompt": options.add_generation_prompt,
            "continue_final_message": options.continue_final_message,
            **(
                {}
                if options.chat_template_kwargs is None
                else {"chat_template_kwargs": options.chat_template_kwargs}
            ),
        }
    )
    chat = decode_chat_request(body)
    return chat_prompt_ids(
        chat, model, now=now, add_special_tokens=bool(options.add_special_tokens)
    )


def _checked(ids: Sequence[int], options: PoolingOptions, model: PromptModel) -> tuple[int, ...]:
    limit = model.context_length
    keep = options.truncate_prompt_tokens
    if keep is not None and limit is not None:
        if keep == -1:
            keep = limit
        elif keep > limit:
            raise ClientError(
                "truncate_prompt_tokens value is greater than max_model_len. "
                "Please request a smaller truncation size.",
                param="truncate_prompt_tokens",
            )
    if keep is not None and keep >= 0 and len(ids) > keep:
        ids = ids[len(ids) - keep :] if options.truncation_side == "left" else ids[:keep]
    if not ids:
        raise ClientError("The decoder prompt cannot be empty", param="input")
    for token_id in ids:
        if not 0 <= token_id < model.vocab_size:
            raise ClientError(f"Token id {token_id} is out of vocabulary", param="input")
    if limit is not None and len(ids) > limit:
        raise ClientError(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains at least {limit + 1} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            param="input_tokens",
        )
    return tuple(ids)
