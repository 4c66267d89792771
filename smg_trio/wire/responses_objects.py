"""Pure. The OpenAI Responses API objects the gateway sends: the `response` object, its output
items and usage, as the `openai` SDK types them (`openai/types/responses/`), and the bytes of
one streamed event (docs/client-apis.md §3.2).

Field order follows OpenAI's; fields OpenAI always sends are plain `None` defaults. Events are
sent without `sequence_number`: the request's dialect numbers them as it frames them
(core/responses_dialect.py).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_api import FunctionChoice, FunctionTool, ReasoningConfig, TextConfig

_encode = JSON_ENCODER.encode
EVENT_PREFIX: Final = b"event: "


class OutputTextPart(msgspec.Struct, frozen=True, tag_field="type", tag="output_text"):
    text: str
    annotations: tuple[Any, ...] = ()
    logprobs: tuple[Any, ...] = ()


class ReasoningTextPart(msgspec.Struct, frozen=True, tag_field="type", tag="reasoning_text"):
    text: str


class OutputMessage(msgspec.Struct, frozen=True, tag_field="type", tag="message"):
    id: str
    status: str
    content: tuple[OutputTextPart, ...]
    role: Literal["assistant"] = "assistant"


class FunctionCallOutput(msgspec.Struct, frozen=True, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


class ReasoningOutput(msgspec.Struct, frozen=True, tag_field="type", tag="reasoning"):
    id: str
    summary: tuple[Any, ...]
    content: tuple[ReasoningTextPart, ...]
    status: str


OutputItem = OutputMessage | FunctionCallOutput | ReasoningOutput


class InputTokensDetails(msgspec.Struct, frozen=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # the SDK requires it; engines report no cache writes


class OutputTokensDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()


class IncompleteDetails(msgspec.Struct, frozen=True):
    reason: str


class ResponseError(msgspec.Struct, frozen=True):
    code: str
    message: str


class ResponseSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a response object echoes of its request, and what the store keeps of its input:
    `conversation` is the JSON array of every input item of the turn (a continued turn's
    earlier items first), `store` whether the response is kept (docs/client-apis.md §3.3)."""

    instructions: str | None = None
    metadata: dict[str, str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: str | FunctionChoice = "auto"
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    previous_response_id: str | None = None
    user: str | None = None
    store: bool = True
    background: bool = False
    conversation: bytes = b"[]"


class Response(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: str
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: tuple[OutputItem, ...] = ()
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningConfig | None = None
    store: bool = True
    temperature: float | None = None
    text: TextConfig | None = None
    tool_choice: str | FunctionChoice = "auto"
    tools: tuple[FunctionTool, ...] = ()
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] | UnsetType = UNSET
    background: bool | UnsetType = UNSET  # present (true) on background responses only

    @classmethod
    def of(
        cls, response_id: str, created_at: int, model: str, settings: ResponseSettings
    ) -> Response:
        """An in-progress response echoing `settings`; its end is `msgspec.structs.replace`d."""
        return cls(
            id=response_id,
            created_at=created_at,
            status="in_progress",
            instructions=settings.instructions,
            max_output_tokens=settings.max_output_tokens,
            model=model,
            parallel_tool_calls=settings.parallel_tool_calls,
            previous_response_id=settings.previous_response_id,
            reasoning=settings.reasoning,
            store=settings.store,
            temperature=settings.temperature,
            text=settings.text,
            tool_choice=settings.tool_choice,
            tools=settings.tools,
            top_p=settings.top_p,
            user=settings.user,
            metadata={} if settings.metadata is None else settings.metadata,
            background=True if settings.background else UNSET,
        )


class DeletedResponse(msgspec.Struct, frozen=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


def event(name: str, /, **fields: object) -> bytes:
    """One named event: `event: NAME`, data `{"type": NAME, **fields}` (unnumbered)."""
    data = _encode({"type": name, **fields})
    return EVENT_PREFIX + name.encode() + b"\ndata: " + data + b"\n\n"


def event_prefix(name: str, /, **fields: object) -> bytes:
    """The bytes of an event with `fields` up to where its last field's value goes: the
    per-token events are this, the JSON value, then `}\\n\\n` (spliced, never a struct)."""
    head = _encode({"type": name, **fields})[:-1]
    return EVENT_PREFIX + name.encode() + b"\ndata: " + head + b","
