"""Pure. An Anthropic Messages body → the chat request the core already prepares
(docs/client-apis.md §2.1).

The body is decoded strictly (`wire/anthropic.py`: an unknown field is a 400 naming it),
checked against Anthropic's own ranges, then rewritten as an OpenAI `ChatCompletionRequest`
and prepared by `prepare_chat`, so the chat template, stops, tools, `tool_choice`, reasoning,
finalize and every 400 they raise work unchanged; only the plan's endpoint becomes
`Endpoint.MESSAGES`, which picks the Anthropic renderer (`core/anthropic_rendering.py`).

- `system` (a string or text blocks) is the first message, a `system` one; a `system` turn
  among the messages (the SDK's SystemMessageParam) is one where it stands.
- A user turn's `tool_result` blocks become `tool` messages, in place; its text blocks the
  user message around them. An assistant turn's `tool_use` blocks become its `tool_calls`
  (`input` as the arguments' JSON), its `thinking` blocks its `reasoning_content`.
- `thinking` is `chat_template_kwargs.enable_thinking`: enabled or adaptive → true (and the
  model's reasoning parser separates the thinking), disabled or absent → false, as Anthropic
  answers without thinking unless asked.
- `tool_choice`: `auto` → "auto", `any` → "required", `tool` → the named function, `none` →
  "none"; `disable_parallel_tool_use` → `parallel_tool_calls: false`.
- `metadata.user_id` → `user` (the sticky-session key of consistent_hash routing).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.core.images import ProcessedImage
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, chat_prompt, prepare_chat
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.validation import (
    MAX_GENERATE_STOP_STRINGS,
    MAX_MESSAGES,
    MAX_TOOLS,
    check_at_least,
    check_between,
    check_count,
    check_stops,
)
from smg_trio.wire import anthropic as an
from smg_trio.wire import openai as oa
from smg_trio.wire.decode_errors import decode_body, read_decode_error

MESSAGES_PATH: Final = "/v1/messages"
COUNT_TOKENS_PATH: Final = "/v1/messages/count_tokens"


_MESSAGES_DECODER: Final = msgspec.json.Decoder(an.MessagesRequest, strict=False)
_COUNT_DECODER: Final = msgspec.json.Decoder(an.CountTokensRequest, strict=False)


def _decode_error(exc: msgspec.DecodeError) -> ClientError:
    """msgspec's error → a 400 naming the field (`$.metadata` + unknown `x` → `metadata.x`)."""
    failure = read_decode_error(exc)
    if not failure.valid_json:
        return ClientError(f"The request body is not valid JSON: {failure.message}")
    message = failure.message
    if failure.unknown_field:
        message = (
            f"{failure.path}: Extra inputs are not permitted (this gateway does not honour it)"
        )
    return ClientError(message, param=failure.path or None)


def decode_messages_request(body: bytes) -> an.MessagesRequest:
    """`POST /v1/messages`: the body, decoded and checked; any problem a 400 naming the field."""
    req = decode_body(_MESSAGES_DECODER, body, _decode_error)
    check_at_least(req.max_tokens, "max_tokens", 1)
    # Anthropic's ranges (narrower than vLLM's: temperature is at most 1 there).
    check_between(req.temperature, "temperature", 0.0, 1.0)
    check_between(req.top_p, "top_p", 0.0, 1.0, low_open=True)  # vLLM needs > 0
    check_at_least(req.top_k, "top_k", 0)
    # As many stop sequences as /generate takes: the stop scan stays cheap per chunk
    # (docs/request-fields.md §6); Anthropic documents no count.
    check_stops(req.stop_sequences, "stop_sequences", max_count=MAX_GENERATE_STOP_STRINGS)
    if isinstance(req.thinking, an.ThinkingEnabled):
        # Anthropic's rules for the budget (docs/client-apis.md §2.1 says what it bounds here).
        check_at_least(req.thinking.budget_tokens, "thinking.budget_tokens", 1024)
        if req.thinking.budget_tokens >= req.max_tokens:
            raise ClientError(
                "thinking.budget_tokens must be less than max_tokens",
                param="thinking.budget_tokens",
            )
    _check_shape(req)
    return req


def decode_count_tokens_request(body: bytes) -> an.CountTokensRequest:
    """`POST /v1/messages/count_tokens`."""
    req = decode_body(_COUNT_DECODER, body, _decode_error)
    if isinstance(req.thinking, an.ThinkingEnabled):  # Anthropic's floor, as /v1/messages
        check_at_least(req.thinking.budget_tokens, "thinking.budget_tokens", 1024)
    _check_shape(req)
    return req


def _check_shape(req: an.CountTokensRequest) -> None:
    if not req.messages:
        raise ClientError("messages: at least one message is required", param="messages")
    check_count(req.messages, "messages", MAX_MESSAGES)
    check_count(req.tools, "tools", MAX_TOOLS)


def prepare_messages(
    req: an.MessagesRequest,
    model: PromptModel,
    *,
    request_id: str,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> GeneratePlan:
    """The plan of a Messages request: the chat plan of its chat request, answered as Messages;
    `images`: its image blocks processed, in order."""
    # Every chat-only check (validate_chat) concerns fields a Messages body cannot set.
    chat = chat_request_of(req)
    plan = prepare_chat(chat, model, request_id=request_id, now=now, images=images)
    return msgspec.structs.replace(plan, endpoint=Endpoint.MESSAGES)


def count_tokens_body(
    req: an.CountTokensRequest,
    model: PromptModel,
    *,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> bytes:
    """`{"input_tokens": N}`: the prompt the Messages request would send, counted (like
    /v1/tokenize, unbounded by the context), its image blocks expanded as the prompt holds them."""
    ids, _ = chat_prompt(chat_request_of(req), model, now=now, images=images)
    return msgspec.json.encode(an.TokenCount(len(ids)))


def chat_request_of(req: an.CountTokensRequest) -> oa.ChatCompletionRequest:
    """The OpenAI chat request that says what `req` says (see the module doc)."""
    messages: list[oa.ChatMessage] = []
    if req.system is not None:
        system = req.system if isinstance(req.system, str) else _texts(req.system)
        messages.append(oa.SystemMessage(content=system))
    for index, message in enumerate(req.messages):
        if message.role == "user":
            messages.extend(_user_messages(message, index))
        elif message.role == "system":
            messages.append(_system_message(message, index))
        else:
            messages.append(_assistant_message(message, index))
    thinking = isinstance(req.thinking, an.ThinkingEnabled | an.ThinkingAdaptive)
    fields: dict[str, Any] = {
        "model": req.model,
        "messages": tuple(messages),
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    if req.tools is not None:
        fields["tools"] = tuple(_tool(tool) for tool in req.tools)
    if req.tool_choice is not None:
        fields["tool_choice"], parallel = _tool_choice(req.tool_choice)
        if parallel is not None:
            fields["parallel_tool_calls"] = parallel
    if isinstance(req, an.MessagesRequest):
        fields.update(
            max_tokens=req.max_tokens,
            stop=req.stop_sequences,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stream=req.stream,
            user=None if req.metadata is None else req.metadata.user_id,
        )
    return oa.ChatCompletionRequest(**fields)


def _texts(blocks: tuple[an.TextBlock, ...]) -> tuple[oa.ContentPart, ...]:
    return tuple(oa.TextPart(block.text) for block in blocks)


def _kind(block: an.ContentBlock) -> str:
    return str(block.__struct_config__.tag)


def _no_image(param: str) -> ClientError:
    return ClientError(
        f"{param}: images are taken in user turns only (the chat template cannot place this one)",
        code="multimodal_not_supported",
        param=param,
    )


def _image_part(source: dict[str, Any], param: str) -> oa.SourcedImagePart:
    """An `image` block's source as an OpenAI image part: base64 as a data: URI, a url as
    itself (fetched as any image URL is, docs/images.md §3)."""
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise ClientError(f"{param}: a base64 source needs media_type and data", param=param)
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        given = source.get("url")
        if not isinstance(given, str):
            raise ClientError(f"{param}.url: a url source needs a url", param=f"{param}.url")
        url = given
    else:
        raise ClientError(
            f"{param}.type: image sources of type {kind!r} are not supported (base64, url)",
            param=f"{param}.type",
        )
    return oa.SourcedImagePart(image_url=oa.ImageURL(url=url), param=param)


def _user_messages(message: an.Message, index: int) -> list[oa.ChatMessage]:
    if isinstance(message.content, str):
        return [oa.UserMessage(content=message.content)]
    out: list[oa.ChatMessage] = []
    texts: list[oa.ContentPart] = []
    for at, block in enumerate(message.content):
        param = f"messages[{index}].content[{at}]"
        match block:
            case an.TextBlock(text=text):
                texts.append(oa.TextPart(text))
            case an.ToolResultBlock():
                if texts:
                    out.append(oa.UserMessage(content=tuple(texts)))
                    texts = []
                out.append(_tool_message(block, param))
            case an.ImageBlock(source=source):
                texts.append(_image_part(source, f"{param}.source"))
            case _:
                raise ClientError(
                    f"{param}.type: a user turn cannot carry a {_kind(block)} block",
                    param=f"{param}.type",
                )
    if texts or not out:
        out.append(oa.UserMessage(content=tuple(texts)))
    return out


def _system_message(message: an.Message, index: int) -> oa.SystemMessage:
    """A `system` message among the turns (SDK 2's SystemMessageParam): text only."""
    if isinstance(message.content, str):
        return oa.SystemMessage(content=message.content)
    texts: list[oa.ContentPart] = []
    for at, block in enumerate(message.content):
        if not isinstance(block, an.TextBlock):
            param = f"messages[{index}].content[{at}].type"
            raise ClientError(f"{param}: a system message carries text blocks only", param=param)
        texts.append(oa.TextPart(block.text))
    return oa.SystemMessage(content=tuple(texts))


def _tool_message(block: an.ToolResultBlock, param: str) -> oa.ToolMessage:
    if block.is_error:
        # The chat templates have no way to mark a tool's answer as an error.
        raise ClientError(
            f"{param}.is_error: true is not supported (the chat template cannot mark it)",
            param=f"{param}.is_error",
        )
    if isinstance(block.content, str):
        return oa.ToolMessage(content=block.content, tool_call_id=block.tool_use_id)
    parts: list[oa.ContentPart] = []
    for at, item in enumerate(block.content):
        if isinstance(item, an.ImageBlock):
            raise _no_image(f"{param}.content[{at}]")
        parts.append(oa.TextPart(item.text))
    return oa.ToolMessage(content=tuple(parts), tool_call_id=block.tool_use_id)


def _assistant_message(message: an.Message, index: int) -> oa.AssistantMessage:
    if isinstance(message.content, str):
        return oa.AssistantMessage(content=message.content)
    texts: list[oa.ContentPart] = []
    calls: list[oa.ToolCall] = []
    thoughts: list[str] = []
    for at, block in enumerate(message.content):
        param = f"messages[{index}].content[{at}]"
        match block:
            case an.TextBlock(text=text):
                texts.append(oa.TextPart(text))
            case an.ToolUseBlock(id=call_id, name=name, input=arguments):
                encoded = msgspec.json.encode(arguments).decode()
                calls.append(oa.ToolCall(id=call_id, function=oa.FunctionCall(name, encoded)))
            case an.ThinkingBlock(thinking=thinking):
                thoughts.append(thinking)
            case an.ImageBlock():
                raise _no_image(param)
            case _:
                raise ClientError(
                    f"{param}.type: an assistant turn cannot carry a {_kind(block)} block",
                    param=f"{param}.type",
                )
    return oa.AssistantMessage(
        content=tuple(texts) if texts else None,
        tool_calls=tuple(calls) or None,
        reasoning_content="".join(thoughts) or None,
    )


def _tool(tool: an.Tool) -> oa.Tool:
    return oa.Tool(
        function=oa.FunctionDefinition(
            name=tool.name, description=tool.description, parameters=tool.input_schema
        )
    )


def _tool_choice(choice: an.ToolChoice) -> tuple[oa.ToolChoice, bool | None]:
    """The chat `tool_choice`, and `parallel_tool_calls` when the client said."""
    match choice:
        case an.ToolChoiceAuto(disable_parallel_tool_use=disable):
            chat: oa.ToolChoice = "auto"
        case an.ToolChoiceAny(disable_parallel_tool_use=disable):
            chat = "required"
        case an.ToolChoiceTool(name=name, disable_parallel_tool_use=disable):
            chat = oa.ToolChoiceFunction(oa.NamedFunction(name))
        case an.ToolChoiceNone():
            return "none", None
    return chat, None if disable is None else not disable
