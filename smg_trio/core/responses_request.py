"""Pure. A Responses API request → the chat request it means → chat's own preparation, with the
plan's endpoint set to `Endpoint.RESPONSES` (docs/client-apis.md §3.1).

Templates, tools, `tool_choice`, structured outputs, reasoning, finalize and every 400 of chat
apply unchanged; an error chat names by its own field is renamed to the Responses field the
client wrote (`max_completion_tokens` → `max_output_tokens`, `messages` → `input`...).

The conversation is the stored one first (`previous_response_id`: its input items and output
items, as the store keeps them), then this request's `input`; `instructions` are a system
message in front and are never carried over to the next turn, as OpenAI's are not.

- `message` items → chat messages of their role (`input_text` / `output_text` parts → text);
- `function_call` items → an assistant message's `tool_calls` (consecutive calls, and a call
  right after an assistant message, share that message);
- `function_call_output` → a `tool` message answering `call_id`;
- `reasoning` items → the next assistant message's `reasoning_content` (templates that render
  earlier thinking read it there).
- `reasoning.effort` → chat's `reasoning_effort`, and `enable_thinking` (false for "none")
  for templates that opt in, as vLLM's Responses server passes them.
- `text.format` → `response_format` (json_schema, json_object).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.core.images import ProcessedImage
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, prepare_chat
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import validate_chat
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_api import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    InputImage,
    InputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    decode_items,
)
from smg_trio.wire.responses_objects import ResponseSettings

# Chat's names for the fields a Responses body spells otherwise (prefixes match too).
_RENAMED: Final = (
    ("max_completion_tokens", "max_output_tokens"),
    ("max_tokens", "max_output_tokens"),
    ("messages", "input"),
    ("response_format.json_schema.schema", "text.format.schema"),
    ("response_format", "text.format"),
    ("reasoning_effort", "reasoning.effort"),
    ("chat_template_kwargs", "reasoning.effort"),
)


def responses_param(param: str | None) -> str | None:
    """The Responses field a chat parameter name stands for."""
    if param is None:
        return None
    for chat, ours in _RENAMED:
        if param == chat or param.startswith((chat + ".", chat + "[")):
            return ours + param[len(chat) :] if chat != "chat_template_kwargs" else ours
    return param


def responses_chat(
    req: ResponsesRequest, history: list[Any]
) -> tuple[list[InputItem], list[InputItem], oa.ChatCompletionRequest]:
    """The stored items, the request's own, and the chat request they say together."""
    earlier = decode_items(history, "previous_response_id")
    current: list[InputItem] = (
        [MessageItem(role="user", content=req.input)]
        if isinstance(req.input, str)
        else decode_items(req.input, "input")
    )
    names = ["previous_response_id"] * len(earlier) + [f"input[{i}]" for i in range(len(current))]
    return earlier, current, _chat_request(req, [*earlier, *current], names)


def prepare_responses(
    req: ResponsesRequest,
    history: list[Any],
    model: PromptModel,
    *,
    request_id: str,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> GeneratePlan:
    """The plan of a Responses request continuing `history` (stored items; [] for none);
    `images`: its `input_image` parts processed, in order."""
    earlier, current, chat = responses_chat(req, history)
    try:
        validate_chat(chat)
        plan = prepare_chat(chat, model, request_id=request_id, now=now, images=images)
    except ClientError as error:
        error.param = responses_param(error.param)
        raise
    constraint = plan.sampling.constraint
    if constraint is not None:  # finalize's 400s name the field the client wrote
        renamed = msgspec.structs.replace(constraint, param=responses_param(constraint.param))
        plan = msgspec.structs.replace(
            plan, sampling=msgspec.structs.replace(plan.sampling, constraint=renamed)
        )
    settings = ResponseSettings(
        instructions=req.instructions,
        metadata=req.metadata,
        temperature=req.temperature,
        top_p=req.top_p,
        max_output_tokens=req.max_output_tokens,
        tools=req.tools or (),
        tool_choice=req.tool_choice or "auto",  # echoed as OpenAI and vLLM echo it
        parallel_tool_calls=req.parallel_tool_calls is not False,
        text=req.text,
        reasoning=req.reasoning,
        previous_response_id=req.previous_response_id,
        user=req.user,
        store=req.store is not False,
        background=req.background is True,
        conversation=JSON_ENCODER.encode([*earlier, *current]),
    )
    return msgspec.structs.replace(
        plan, endpoint=Endpoint.RESPONSES, include_usage=plan.stream, responses=settings
    )


def _chat_request(
    req: ResponsesRequest, items: list[InputItem], names: list[str]
) -> oa.ChatCompletionRequest:
    messages: list[oa.ChatMessage] = []
    if req.instructions is not None:
        messages.append(oa.SystemMessage(content=req.instructions))
    messages.extend(_messages(items, names))
    effort = req.reasoning.effort if req.reasoning is not None else None
    fmt = req.text.format if req.text is not None else None
    response_format: oa.ResponseFormat | None = None
    if isinstance(fmt, TextFormatJsonObject):
        response_format = oa.JsonObjectFormat()
    elif isinstance(fmt, TextFormatJsonSchema):
        spec = oa.JsonSchemaSpec(
            name=fmt.name, json_schema=fmt.schema, description=fmt.description, strict=fmt.strict
        )
        response_format = oa.JsonSchemaFormat(json_schema=spec)
    choice: oa.ToolChoice | None = None
    if isinstance(req.tool_choice, FunctionChoice):
        choice = oa.ToolChoiceFunction(function=oa.NamedFunction(name=req.tool_choice.name))
    elif req.tool_choice is not None:
        choice = req.tool_choice
    tools = tuple(
        oa.Tool(
            function=oa.FunctionDefinition(
                name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
            )
        )
        for t in req.tools or ()
    )
    return oa.ChatCompletionRequest(
        messages=tuple(messages),
        model=req.model,
        max_completion_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed,
        stop=req.stop,
        stream=req.stream,
        user=req.user,
        tools=tools or None,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls,
        response_format=response_format,
        reasoning_effort=effort,
        chat_template_kwargs=None if effort is None else {"enable_thinking": effort != "none"},
    )


def _text(content: str | tuple[Any, ...], where: str) -> str | tuple[oa.ContentPart, ...]:
    """A message's content in chat form; images only in a user turn (`_user_content`)."""
    if isinstance(content, str):
        return content
    for at, part in enumerate(content):
        if isinstance(part, InputImage):
            param = f"{where}.content[{at}]"
            raise ClientError(
                f"{param}: images are taken in user messages only",
                code="multimodal_not_supported",
                param=param,
            )
    return tuple(oa.TextPart(text=part.text) for part in content)


def _user_content(content: str | tuple[Any, ...], where: str) -> str | tuple[oa.ContentPart, ...]:
    if isinstance(content, str):
        return content
    parts: list[oa.ContentPart] = []
    for at, part in enumerate(content):
        param = f"{where}.content[{at}]"
        if not isinstance(part, InputImage):
            parts.append(oa.TextPart(text=part.text))
        elif part.image_url is None:
            raise ClientError(
                f"{param}: only image_url is taken (file_id needs a files API this gateway "
                "does not have)",
                param=f"{param}.file_id" if part.file_id is not None else f"{param}.image_url",
            )
        else:
            url = oa.ImageURL(url=part.image_url, detail=part.detail)
            parts.append(oa.SourcedImagePart(image_url=url, param=f"{param}.image_url"))
    return tuple(parts)


def _messages(items: list[InputItem], names: list[str]) -> list[oa.ChatMessage]:
    messages: list[oa.ChatMessage] = []
    reasoning: str | None = None
    for item, where in zip(items, names, strict=True):
        match item:
            case MessageItem(role="assistant", content=content):
                messages.append(
                    oa.AssistantMessage(content=_text(content, where), reasoning_content=reasoning)
                )
                reasoning = None
            case MessageItem(role="user", content=content):
                messages.append(oa.UserMessage(content=_user_content(content, where)))
            case MessageItem(role="system", content=content):
                messages.append(oa.SystemMessage(content=_text(content, where)))
            case MessageItem(content=content):
                messages.append(oa.DeveloperMessage(content=_text(content, where)))
            case FunctionCallItem(call_id=call_id, name=name, arguments=arguments):
                call = oa.ToolCall(id=call_id, function=oa.FunctionCall(name, arguments))
                last = messages[-1] if messages else None
                if isinstance(last, oa.AssistantMessage) and reasoning is None:
                    calls = (*(last.tool_calls or ()), call)
                    messages[-1] = msgspec.structs.replace(last, tool_calls=calls)
                else:
                    messages.append(
                        oa.AssistantMessage(tool_calls=(call,), reasoning_content=reasoning)
                    )
                    reasoning = None
            case FunctionCallOutputItem(call_id=call_id, output=output):
                messages.append(oa.ToolMessage(content=output, tool_call_id=call_id))
            case ReasoningItem(content=content):
                reasoning = "".join(part.text for part in content or ())
    return messages
