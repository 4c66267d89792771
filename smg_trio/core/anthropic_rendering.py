"""Pure. Anthropic Messages responses (docs/client-apis.md §2): the renderer of a
`Endpoint.MESSAGES` plan and the dialect of `/v1/messages` paths.

`MessagesRenderer` is a `renderer_vocabulary.EndpointRenderer`; its stream payloads are whole
named events (`api_dialect.named_event`), in Anthropic's order: `message_start` when the
message opens; per content block `content_block_start` (the first followed by `ping`),
`content_block_delta`s (`text_delta`, `thinking_delta`, `input_json_delta`) and
`content_block_stop`; then `message_delta` (stop reason, stop sequence, output tokens) and
`message_stop`. With output parsers (tools, thinking) each piece of text the stop scanner lets
out is parsed (`core/parsers/registry.py`'s `OutputParser`) and its `Parsed` pieces open and
feed the blocks; a full body parses the whole text with the same parsers (`parse_whole`), so
a stream accumulated equals the body. A Messages request has one choice (index 0).

Stop reasons: `max_tokens` when the length ran out, else `tool_use` when a call was made,
else `stop_sequence` (with the string) for a stop string, else `end_turn`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.core.api_dialect import NamedEventDialect, named_event
from smg_trio.core.parsers.events import Parsed, ToolCallStart
from smg_trio.core.parsers.registry import OutputParser, parse_whole
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions, RenderedLogprobs
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, GatewayError
from smg_trio.wire import anthropic as an
from smg_trio.wire.openai_responses import JSON_ENCODER, PromptLogprobs, Usage

_encode = JSON_ENCODER.encode
_DELTA: Final = b"content_block_delta"
_PING: Final = named_event(b"ping", b'{"type":"ping"}')
_MESSAGE_STOP: Final = named_event(b"message_stop", b'{"type":"message_stop"}')
# A text delta event is its prebuilt head, the text's JSON string, and this tail.
_TEXT_DELTA_TAIL: Final = b"}}\n\n"

# Anthropic's error types by status (docs/client-apis.md §2.4); any other 4xx is an
# invalid_request_error, any other 5xx an api_error.
ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",  # the request deadline (the SDK's GatewayTimeoutError)
    529: "overloaded_error",
}
OVERLOADED: Final = 529


def message_id(request_id: str) -> str:
    return f"msg_{request_id}"


def tool_use_prefix(request_id: str) -> str:
    """Tool-use ids are fixed by the request, so a body and a stream agree."""
    return f"toolu_{request_id}_"


class AnthropicDialect(NamedEventDialect):
    """Anthropic's errors: `{"type":"error","error":{"type","message"}}`, a 503 as 529."""

    __slots__ = ()

    def error_status(self, err: GatewayError) -> int:
        # Our 503s (no ready worker, draining, a dead engine) are what Anthropic calls
        # overloaded: 529, which its SDKs retry.
        return OVERLOADED if err.status == 503 else err.status

    def error_body(self, err: GatewayError) -> bytes:
        return _encode(an.ErrorResponse(self._error(err)))

    def error_object(self, err: GatewayError) -> bytes:
        return _encode(self._error(err))

    def _error(self, err: GatewayError) -> an.ErrorObject:
        status = self.error_status(err)
        kind = ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
        message = err.message
        param = err.param if isinstance(err, ClientError) else None
        if param and param not in message:  # Anthropic's errors have no `param` field
            message = f"{param}: {message}"
        return an.ErrorObject(kind, message)


def stop_reason(
    finish_reason: str, matched: str | int | None, called: bool
) -> tuple[an.StopReason, str | None]:
    """Anthropic's `stop_reason` and `stop_sequence` of a finished choice."""
    if finish_reason == "length":
        return "max_tokens", None
    if called:
        return "tool_use", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    return "end_turn", None


def _event(name: bytes, data: dict[str, Any]) -> bytes:
    return named_event(name, _encode(data))


class MessagesRenderer:
    """One Messages response, streamed as events or whole (see the module doc)."""

    keeps_output_ids = False
    __slots__ = (
        "_block",
        "_blocks",
        "_id",
        "_model",
        "_parser",
        "_pinged",
        "_prefix",
        "_prompt_tokens",
        "_setup",
        "_text_head",
    )

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str, created: int
    ) -> None:
        self._id, self._model = request_id, plan.model
        self._prompt_tokens = len(plan.prompt_ids)
        self._setup = plan.parsers
        self._prefix = tool_use_prefix(plan.request_id)
        self._parser = None if plan.parsers is None else OutputParser(plan.parsers, self._prefix)
        self._block = ""  # the open block's type ("" when none is open)
        self._blocks = 0  # blocks opened so far: the next block's index
        self._pinged = False
        self._text_head = b""  # the open text block's delta event, up to its text

    # -- streaming ------------------------------------------------------------------------

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        usage = an.MessageUsage(self._prompt_tokens, 0)
        message = an.MessageResponse(self._id, self._model, (), None, None, usage)
        return (_event(b"message_start", {"type": "message_start", "message": message}),)

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        if self._parser is None:
            return self._text(text)
        return self._parsed(self._parser.feed(text))

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        if self._parser is None:
            return ()
        parsed = self._parser.finish()
        return (self._parsed(parsed),) if parsed else ()

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        reason, sequence = self._reason(choice.finish_reason, choice.streamed_match)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"output_tokens": choice.tokens},
        }
        end = self._close() + (b"" if self._pinged else _PING)
        return end + _event(b"message_delta", delta) + _MESSAGE_STOP

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        reason, sequence = self._reason(choice.finish_reason, choice.streamed_match)
        return ChoiceFinish(index, reason, sequence)

    def usage_chunk(self, usage: Usage) -> bytes | None:
        return None  # message_delta carries the output tokens

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        return None  # the Messages API has no logprobs

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        return UNSET

    def _reason(self, finish: str, matched: str | int | None) -> tuple[an.StopReason, str | None]:
        called = self._parser is not None and self._parser.called
        return stop_reason(finish, matched, called)

    def _text(self, text: str) -> bytes:
        """A text delta: the per-token path, one encode and a splice."""
        if not text:
            return b""
        if self._block != "text":
            opened = self._open("text", {"type": "text", "text": ""})
            # named_event(b"content_block_delta", data) up to the text, built once per block.
            self._text_head = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                + str(self._blocks - 1).encode()
                + b',"delta":{"type":"text_delta","text":'
            )
            return opened + self._text(text)
        return self._text_head + _encode(text) + _TEXT_DELTA_TAIL

    def _delta(self, delta: dict[str, str]) -> bytes:
        data = {"type": "content_block_delta", "index": self._blocks - 1, "delta": delta}
        return _event(_DELTA, data)

    def _parsed(self, parsed: Parsed) -> bytes:
        out: list[bytes] = []
        if parsed.reasoning:
            if self._block != "thinking":
                out.append(self._open("thinking", {"type": "thinking", "thinking": ""}))
                # Signed by nobody here (docs/client-apis.md §2.5): the signature stays "".
            out.append(self._delta({"type": "thinking_delta", "thinking": parsed.reasoning}))
        if parsed.content:
            out.append(self._text(parsed.content))
        for piece in parsed.calls:
            if isinstance(piece, ToolCallStart):
                block = {"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}}
                out.append(self._open("tool_use", block))
            elif piece.fragment:
                out.append(
                    self._delta({"type": "input_json_delta", "partial_json": piece.fragment})
                )
        return b"".join(out)

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        """Close the open block (if any) and open a `kind` one, pinging after the first."""
        if kind == "thinking":
            block["signature"] = ""
        start = {"type": "content_block_start", "index": self._blocks, "content_block": block}
        out = self._close() + _event(b"content_block_start", start)
        self._block = kind
        self._blocks += 1
        if not self._pinged:
            self._pinged = True
            out += _PING
        return out

    def _close(self) -> bytes:
        if not self._block:
            return b""
        self._block = ""
        stop = {"type": "content_block_stop", "index": self._blocks - 1}
        return _event(b"content_block_stop", stop)

    # -- a whole body ---------------------------------------------------------------------

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        choice = choices[0]
        blocks: list[an.OutputBlock] = []
        called = False
        if self._setup is None:
            if choice.text:
                blocks.append(an.OutputText(choice.text))
        else:
            parsed, called = parse_whole(self._setup, self._prefix, choice.text)
            blocks.extend(_blocks_of(parsed))
        reason, sequence = stop_reason(choice.finish_reason, choice.matched_stop, called)
        message = an.MessageResponse(
            id=self._id,
            model=self._model,
            content=tuple(blocks),
            stop_reason=reason,
            stop_sequence=sequence,
            usage=an.MessageUsage(usage.prompt_tokens, usage.completion_tokens),
        )
        return _encode(message)


def _blocks_of(parsed: Parsed) -> list[an.OutputBlock]:
    """A whole choice's parse as content blocks: thinking, text, then each tool use."""
    blocks: list[an.OutputBlock] = []
    if parsed.reasoning:
        blocks.append(an.OutputThinking(parsed.reasoning))
    if parsed.content:
        blocks.append(an.OutputText(parsed.content))
    calls: dict[int, tuple[str, str]] = {}
    arguments: dict[int, list[str]] = {}
    for piece in parsed.calls:
        if isinstance(piece, ToolCallStart):
            calls[piece.index] = (piece.id, piece.name)
            arguments[piece.index] = []
        else:
            arguments[piece.index].append(piece.fragment)
    for index, (call_id, name) in sorted(calls.items()):
        text = "".join(arguments[index])
        try:
            value = msgspec.json.decode(text) if text.strip() else {}
        except msgspec.DecodeError:
            value = None
        if isinstance(value, dict):
            blocks.append(an.OutputToolUse(call_id, name, value))
        else:  # arguments cut short (max_tokens inside a call) are no object: kept as text
            blocks.append(an.OutputText(text))
    return blocks
