"""Pure. The chat renderer of a request whose choices run output parsers (tool calls,
reasoning): each piece of text the stop scanner lets out is parsed, and the chunk carries the
`content`, `reasoning_content` / `reasoning` and `tool_calls` deltas it became
(docs/tools-and-reasoning.md §4).

Picked by the response assembler instead of the plain `ChatRenderer` only when the plan has
parsers, so plain requests never pay for them. A non-streaming body parses each choice's whole
text with the same parsers, so streamed deltas, accumulated, equal the body. A choice that made
a tool call finishes with "tool_calls", as vLLM reports it.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from smg_trio.core.openai_rendering import ChatRenderer
from smg_trio.core.parsers.events import Parsed, ToolCallArguments, ToolCallStart
from smg_trio.core.parsers.registry import OutputParser, parse_whole
from smg_trio.core.plan import GeneratePlan, ParserSetup
from smg_trio.core.render import FinishedChoice, TokenIds
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.wire.openai import FunctionCall, ToolCall
from smg_trio.wire.openai_responses import ChoiceDelta, DeltaFunction, DeltaToolCall, Usage

TOOL_CALLS_FINISH = "tool_calls"


def call_id_prefix(request_id: str, index: int) -> str:
    """Call ids are fixed by the request and choice, so a body and a stream agree."""
    return f"chatcmpl-tool-{request_id}-{index}-"


def delta_of(parsed: Parsed) -> ChoiceDelta:
    """One piece's parse as a chunk delta; consecutive argument fragments of a call merge."""
    calls: list[DeltaToolCall] = []
    for piece in parsed.calls:
        match piece:
            case ToolCallStart(index=index, id=call_id, name=name):
                function = DeltaFunction(name=name)
                calls.append(
                    DeltaToolCall(index=index, id=call_id, type="function", function=function)
                )
            case ToolCallArguments(index=index, fragment=fragment):
                last = calls[-1] if calls else None
                if last is not None and last.index == index:
                    merged = DeltaFunction(
                        name=last.function.name, arguments=last.function.arguments + fragment
                    )
                    calls[-1] = msgspec.structs.replace(last, function=merged)
                else:
                    calls.append(
                        DeltaToolCall(index=index, function=DeltaFunction(arguments=fragment))
                    )
    reasoning = parsed.reasoning or UNSET
    return ChoiceDelta(
        content=parsed.content or UNSET,
        reasoning_content=reasoning,
        reasoning=reasoning,
        tool_calls=tuple(calls) or UNSET,
    )


def tool_calls_of(parsed: Parsed) -> tuple[ToolCall, ...]:
    """A whole choice's calls, for `message.tool_calls`."""
    names: dict[int, tuple[str, str]] = {}
    arguments: dict[int, list[str]] = {}
    for piece in parsed.calls:
        match piece:
            case ToolCallStart(index=index, id=call_id, name=name):
                names[index] = (call_id, name)
                arguments[index] = []
            case ToolCallArguments(index=index, fragment=fragment):
                arguments[index].append(fragment)
    return tuple(
        ToolCall(id=call_id, function=FunctionCall(name, "".join(arguments[index])))
        for index, (call_id, name) in sorted(names.items())
    )


class ParsingChatRenderer(ChatRenderer):
    """`ChatRenderer` with one `OutputParser` per streamed choice."""

    __slots__ = ("_parsers", "_request_id", "_setup")

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str, created: int
    ) -> None:
        super().__init__(plan, tokenizer, request_id, created)
        assert plan.parsers is not None
        self._setup: ParserSetup = plan.parsers
        self._request_id = plan.request_id
        self._parsers: dict[int, OutputParser] = {}

    def _parser(self, index: int) -> OutputParser:
        parser = self._parsers.get(index)
        if parser is None:
            prefix = call_id_prefix(self._request_id, index)
            parser = self._parsers[index] = OutputParser(self._setup, prefix)
        return parser

    def _chunk(
        self,
        index: int,
        parsed: Parsed,
        choice: ChoiceProgress,
        positions: Positions,
        token_ids: TokenIds = None,
    ) -> bytes:
        if not positions and not self._continuous and token_ids is None:  # spliced shapes
            calls = parsed.calls
            if not calls:
                if not parsed.reasoning:
                    return self._chunks.content(index, parsed.content)
                if not parsed.content:
                    return self._chunks.reasoning(index, parsed.reasoning)
            elif len(calls) == 1 and not parsed.content and not parsed.reasoning:
                piece = calls[0]
                if type(piece) is ToolCallArguments:
                    return self._chunks.arguments(index, piece.index, piece.fragment)
        logprobs = self._logprobs(index, positions)
        usage = self._running_usage(index, choice) if self._continuous else None
        return self._chunks.delta(index, delta_of(parsed), logprobs, usage, token_ids)

    def _feed(self, index: int, text: str) -> Parsed:
        parsed = self._parser(index).feed(text)
        if not self._setup.include_reasoning:
            parsed.reasoning = ""
        return parsed

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        parsed = self._feed(index, text)
        if not parsed and not positions:
            return b""  # held: the parser waits for more text to know what this is
        return self._chunk(index, parsed, choice, positions, self._new_ids(choice))

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        parsed = self._parser(index).finish()
        if not self._setup.include_reasoning:
            parsed.reasoning = ""
        return (self._chunk(index, parsed, choice, ()),) if parsed else ()

    def _reason(self, index: int, choice: ChoiceProgress) -> str:
        return TOOL_CALLS_FINISH if self._parser(index).called else choice.finish_reason

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        return self._chunks.finish(
            index,
            self._reason(index, choice),
            choice.streamed_match,
            self._logprobs(index, positions),
            self._running_usage(index, choice),
            choice.stop_reason,
            self._new_ids(choice),
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, self._reason(index, choice), choice.streamed_match)

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        return super().body(usage, [self._parsed_choice(c) for c in choices])

    def _parsed_choice(self, choice: FinishedChoice) -> FinishedChoice:
        prefix = call_id_prefix(self._request_id, choice.index)
        parsed, called = parse_whole(self._setup, prefix, choice.text)
        return msgspec.structs.replace(
            choice,
            text=parsed.content,
            parsed=True,
            reasoning=(parsed.reasoning or None) if self._setup.include_reasoning else None,
            tool_calls=tool_calls_of(parsed) if called else None,
            finish_reason=TOOL_CALLS_FINISH if called else choice.finish_reason,
        )
