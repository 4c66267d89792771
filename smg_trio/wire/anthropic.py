"""Pure. Anthropic's Messages API on the wire: the request body of `POST /v1/messages` and
`/v1/messages/count_tokens`, and the response body (docs/client-apis.md §2).

Unlike the OpenAI structs (`wire/openai.py`, lax like vLLM's), every struct here forbids
unknown fields: a field this gateway does not honour is a 400 naming it, never accepted and
ignored (Anthropic's own API refuses unknown fields too). Block types other than those below
(`document`, `redacted_thinking`, server tools...) fail the tagged union, naming the block's
`type`; an `image` block becomes an image part of its turn (`core/anthropic_request.py`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from smg_trio.wire.request_numbers import Int

# ---------------------------------------------------------------------------------------------
# Request


class CacheControl(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A prompt-cache breakpoint (docs/client-apis.md §2.5): the prefix up to the marked block
    is to be cached. The engines here cache every prefix themselves (vLLM's automatic prefix
    caching) and cache-aware routing sends a shared prefix back to the worker holding it, so
    the mark is met without being passed on; its shape is checked like Anthropic's."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="text"
):
    text: str
    citations: None = None  # a response's text block sent back says `"citations": null`
    cache_control: CacheControl | None = None


class ImageBlock(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="image"
):
    """An image in a user turn (core/anthropic_request.py: base64 and url sources)."""

    source: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolUseBlock(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="tool_use"
):
    """An assistant turn's tool call, sent back by the client in the next request."""

    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="tool_result"
):
    """A user turn's answer to a tool call: a `tool` message for the chat template."""

    tool_use_id: str
    content: str | tuple[TextBlock | ImageBlock, ...] = ""
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class ThinkingBlock(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="thinking"
):
    """An assistant turn's thinking, sent back by the client: the message's reasoning."""

    thinking: str
    signature: str | None = None


ContentBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: Literal["user", "assistant", "system"]
    content: str | tuple[ContentBlock, ...]


class Tool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A client tool (Anthropic's `custom` type); server tools have other fields and fail."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None


class ToolChoiceAuto(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="auto"
):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="any"
):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="tool"
):
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="none"
):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class ThinkingEnabled(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="enabled"
):
    budget_tokens: Int


class ThinkingDisabled(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="disabled"
):
    pass


class ThinkingAdaptive(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="adaptive"
):
    """The model decides whether to think: thinking on, the template and model decide."""


Thinking = ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled


class Metadata(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    user_id: str | None = None


class CountTokensRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/messages/count_tokens`: what shapes the prompt, nothing that samples."""

    model: str
    messages: tuple[Message, ...]
    system: str | tuple[TextBlock, ...] | None = None
    tools: tuple[Tool, ...] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class MessagesRequest(CountTokensRequest, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/messages`."""

    max_tokens: Int
    stop_sequences: tuple[str, ...] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int | None = None
    stream: bool = False
    metadata: Metadata | None = None


# ---------------------------------------------------------------------------------------------
# Response

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class OutputText(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class OutputThinking(msgspec.Struct, frozen=True, tag_field="type", tag="thinking"):
    thinking: str
    # Anthropic signs its thinking so it can be verified when sent back; this gateway has no
    # key to sign with, so the signature is empty (docs/client-apis.md §2.5).
    signature: str = ""


class OutputToolUse(msgspec.Struct, frozen=True, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


OutputBlock = OutputText | OutputThinking | OutputToolUse


class MessageUsage(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int


class MessageResponse(msgspec.Struct, frozen=True, tag_field="type", tag="message"):
    id: str
    model: str
    content: tuple[OutputBlock, ...]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: MessageUsage
    role: Literal["assistant"] = "assistant"


class TokenCount(msgspec.Struct, frozen=True):
    input_tokens: int


class ErrorObject(msgspec.Struct, frozen=True):
    type: str
    message: str


class ErrorResponse(msgspec.Struct, frozen=True, tag_field="type", tag="error"):
    error: ErrorObject
