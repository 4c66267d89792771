"""Pure. The OpenAI Responses API's `EndpointRenderer`: the response assembler's text and
finish → Responses events, and the whole `response` object (docs/client-apis.md §3.2).

A stream is `response.created`, `response.in_progress`, then output items one after another,
each opened (`response.output_item.added`, and `response.content_part.added` for text), fed
(`response.output_text.delta`, `response.reasoning_text.delta`,
`response.function_call_arguments.delta`) and closed (`.done` events, then
`response.output_item.done`) when the next kind of output begins or the choice finishes; the
last event is `response.completed`, or `response.incomplete` with `incomplete_details.reason`
`max_output_tokens` when the engine ran out of tokens. Events carry no `sequence_number`: the
dialect numbers them (core/responses_dialect.py).

With output parsers (tools, reasoning) every piece of text goes through the request's one
`OutputParser` (core/parsers/registry.py) and its `Parsed` pieces become items: reasoning →
a `reasoning` item, content → a `message` item, a call → a `function_call` item whose `call_id`
is the parser's id. A non-streaming body parses the whole text with the same parsers
(`parse_whole`), so a stream's items, accumulated, equal the body's. Per streamed token the
work is one spliced delta event (no struct), as chat's content chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.core.parsers.events import Parsed, ToolCallArguments, ToolCallStart
from smg_trio.core.parsers.registry import OutputParser, parse_whole
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions
from smg_trio.core.responses_items import ResponseItems
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.wire.openai_responses import JSON_ENCODER, PromptLogprobs, Usage
from smg_trio.wire.responses_objects import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    Response,
    ResponseSettings,
    ResponseUsage,
    event,
)

LENGTH_FINISH = "length"
_encode = JSON_ENCODER.encode


def call_id_prefix(request_id: str) -> str:
    """Call ids are fixed by the request, so a body and its stored form agree."""
    return f"call_{request_id}_"


def response_usage(usage: Usage) -> ResponseUsage:
    details = usage.prompt_tokens_details
    cached = 0 if isinstance(details, UnsetType) else details.cached_tokens
    completion = usage.completion_tokens_details
    reasoning = 0 if isinstance(completion, UnsetType) else completion.reasoning_tokens
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=cached),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
    )


def ended(response: Response, finish_reason: str, usage: Usage, items: ResponseItems) -> Response:
    """`response` finished: its status, output and usage."""
    incomplete = finish_reason == LENGTH_FINISH
    return msgspec.structs.replace(
        response,
        status="incomplete" if incomplete else "completed",
        incomplete_details=IncompleteDetails("max_output_tokens") if incomplete else None,
        output=tuple(items.done),
        usage=response_usage(usage),
    )


class ResponsesRenderer:
    """One response of `/v1/responses` (one choice: Responses has no `n`)."""

    keeps_output_ids = False
    __slots__ = ("_finish_reason", "_items", "_parser", "_plan", "_response")

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, response_id: str, created: int
    ) -> None:
        settings = plan.responses or ResponseSettings()
        self._plan = plan
        self._response = Response.of(response_id, created, plan.model, settings)
        self._items = ResponseItems(plan.request_id)
        parsers = plan.parsers
        prefix = call_id_prefix(plan.request_id)
        self._parser = None if parsers is None else OutputParser(parsers, prefix)
        self._finish_reason = ""

    # --- streaming -----------------------------------------------------------------------

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return (
            event("response.created", response=self._response),
            event("response.in_progress", response=self._response),
        )

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        if self._parser is None:
            return self._items.content(text)
        return self._parsed(self._parser.feed(text))

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        if self._parser is None:
            return ()
        events = self._parsed(self._parser.finish())
        return (events,) if events else ()

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        self._finish_reason = choice.finish_reason
        status = "incomplete" if choice.finish_reason == LENGTH_FINISH else "completed"
        if not self._items.done and self._items.open is None:
            opened = self._items.content("")  # an empty answer is still one message
            return opened + self._items.close(status)
        return self._items.close(status)

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, choice.streamed_match)

    def usage_chunk(self, usage: Usage) -> bytes | None:
        response = ended(self._response, self._finish_reason, usage, self._items)
        name = "response.incomplete" if response.status == "incomplete" else "response.completed"
        return event(name, response=response)

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage

    def _parsed(self, parsed: Parsed) -> bytes:
        items = self._items
        out = b""
        if parsed.reasoning:
            out += items.reasoning(parsed.reasoning)
        if parsed.content:
            out += items.content(parsed.content)
        for piece in parsed.calls:
            match piece:
                case ToolCallStart(id=call_id, name=name):
                    out += items.call(call_id, name)
                case ToolCallArguments(fragment=fragment):
                    out += items.arguments(fragment)
        return out

    # --- whole response ------------------------------------------------------------------

    def final_logprobs(self, index: int, positions: Positions, prompt: Positions | None) -> None:
        return None  # a Responses body asks for no logprobs (refused at decoding)

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        return UNSET

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        choice = choices[0]
        status = "incomplete" if choice.finish_reason == LENGTH_FINISH else "completed"
        items = self._items
        if self._plan.parsers is None:
            items.content(choice.text)
        else:
            prefix = call_id_prefix(self._plan.request_id)
            parsed, _ = parse_whole(self._plan.parsers, prefix, choice.text)
            self._parsed(parsed)
        if not items.done and items.open is None:
            items.content("")
        items.close(status)
        return _encode(ended(self._response, choice.finish_reason, usage, items))
