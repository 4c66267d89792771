"""The Messages renderer and dialect (docs/client-apis.md §2.3–§2.4): however the text arrives
in pieces, the stream's events, accumulated as Anthropic's SDK does, are the whole body's
blocks; events come in Anthropic's order; errors are Anthropic's shape and status."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.anthropic_rendering import AnthropicDialect, MessagesRenderer, stop_reason
from smg_trio.core.api_dialect import split_named_events
from smg_trio.core.plan import GeneratePlan, ParserSetup
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import Positions
from smg_trio.errors import BackendUnavailable, ClientError, Overloaded, RequestTimeout
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_responses import Usage
from tests.core.mock_tokenizers import WordMockTokenizer
from tests.core.parsers.splits import cut_lists, pieces_of

MARKUP = (
    '<think>Weather.</think>Checking.\n<tool_call>\n{"name": "get_weather", '
    '"arguments": {"city": "Paris"}}\n</tool_call>'
)
PARSERS = ParserSetup(
    tool_parser="hermes", tool_names=frozenset({"get_weather"}), reasoning_parser="qwen3"
)


@dataclass
class Progress:
    """What the response assembler tells a renderer of a choice (`ChoiceProgress`)."""

    tokens: int = 0
    chars: int = 0
    finish_reason: str = ""
    matched: str | int | None = None
    streamed_match: str | int | None = None
    stop_reason: str | int | None = None
    weight_version: str | None = None
    prompt: Positions | None = None
    new_ids: list[int] = field(default_factory=list)
    counted_ids: list[int] = field(default_factory=list)

    def full_text(self) -> str:
        return ""


def renderer(parsers: ParserSetup | None) -> MessagesRenderer:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.MESSAGES,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(),
        stream=True,
        parsers=parsers,
    )
    return MessagesRenderer(plan, WordMockTokenizer(), "msg_r1", 0)


def stream(parsers: ParserSetup | None, pieces: list[str], finish: Progress) -> bytes:
    r = renderer(parsers)
    out = list(r.opening(0, finish))
    out += [r.text(0, piece, finish, ()) for piece in pieces]
    out += r.closing(0, finish)
    out.append(r.finish(0, finish, ()))
    return b"".join(out)


def accumulate(payload: bytes) -> tuple[list[str], dict[str, Any]]:
    """The event names, and the message the events build (as Anthropic's SDK accumulates)."""
    names: list[str] = []
    message: dict[str, Any] = {}
    for raw_name, raw_data in split_named_events(payload):
        name, data = raw_name.decode(), json.loads(raw_data)
        assert data["type"] == name
        names.append(name)
        if name == "message_start":
            message = data["message"]
        elif name == "content_block_start":
            assert data["index"] == len(message["content"])
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            kind = delta["type"]
            if kind == "input_json_delta":
                block["json"] = block.get("json", "") + delta["partial_json"]
            else:
                field = "text" if kind == "text_delta" else "thinking"
                block[field] += delta[field]
        elif name == "content_block_stop":
            block = message["content"][data["index"]]
            if block["type"] == "tool_use":
                block["input"] = json.loads(block.pop("json", "{}"))
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
    return names, message


def body(parsers: ParserSetup | None, text: str, finish: Progress) -> dict[str, Any]:
    choice = FinishedChoice(
        index=0,
        text=text,
        finish_reason=finish.finish_reason,
        completion_tokens=finish.tokens,
        matched_stop=finish.matched,
    )
    decoded: dict[str, Any] = json.loads(
        renderer(parsers).body(Usage.of(3, finish.tokens), [choice])
    )
    return decoded


@given(cut_lists, st.booleans())
def test_the_stream_accumulates_to_the_body(cuts: list[int], parsed: bool) -> None:
    parsers = PARSERS if parsed else None
    finish = Progress(tokens=9, finish_reason="stop")
    names, message = accumulate(stream(parsers, pieces_of(MARKUP, cuts), finish))
    assert message == body(parsers, MARKUP, finish)
    blocks = message["content"]
    if parsed:
        assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
        assert blocks[2]["input"] == {"city": "Paris"}
        assert blocks[2]["id"] == "toolu_r1_0"
        assert message["stop_reason"] == "tool_use"
    else:
        assert blocks == [{"type": "text", "text": MARKUP}]
        assert message["stop_reason"] == "end_turn"
    # Anthropic's order: one message_start, blocks opened and closed in turn, ping after the
    # first block opens, message_delta and message_stop last.
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == len(blocks)


def test_an_empty_message_still_pings_and_ends() -> None:
    finish = Progress(tokens=1, finish_reason="length")
    names, message = accumulate(stream(None, [], finish))
    assert names == ["message_start", "ping", "message_delta", "message_stop"]
    assert (message["content"], message["stop_reason"]) == ([], "max_tokens")


def test_stop_reasons() -> None:
    assert stop_reason("length", None, called=True) == ("max_tokens", None)
    assert stop_reason("stop", "STOP", called=True) == ("tool_use", None)
    assert stop_reason("stop", "STOP", called=False) == ("stop_sequence", "STOP")
    assert stop_reason("stop", 2, called=False) == ("end_turn", None)  # an EOS token
    assert stop_reason("stop", None, called=False) == ("end_turn", None)


def test_a_call_cut_short_by_max_tokens_is_text_in_the_body() -> None:
    cut = MARKUP[: MARKUP.index("Paris")]
    got = body(PARSERS, cut + "\n</tool_call>", Progress(tokens=5, finish_reason="length"))
    assert got["stop_reason"] == "max_tokens"
    assert all(block["type"] != "tool_use" for block in got["content"])


def test_errors_are_anthropics_shape_and_status() -> None:
    dialect = AnthropicDialect()
    cases = [
        (ClientError("must be at least 1", param="max_tokens"), 400, "invalid_request_error"),
        (ClientError("no key", status=401), 401, "authentication_error"),
        (ClientError("no route", status=404), 404, "not_found_error"),
        (ClientError("use POST", status=405), 405, "invalid_request_error"),
        (ClientError("too big", status=413), 413, "request_too_large"),
        (Overloaded("busy", retry_after_s=1), 429, "rate_limit_error"),
        (BackendUnavailable("no engine"), 529, "overloaded_error"),
        (RequestTimeout("late"), 504, "timeout_error"),
    ]
    for error, status, kind in cases:
        assert dialect.error_status(error) == status
        decoded = msgspec.json.decode(dialect.error_body(error))
        assert decoded == {
            "type": "error",
            "error": {"type": kind, "message": decoded["error"]["message"]},
        }
        assert msgspec.json.decode(dialect.error_object(error)) == decoded["error"]
    first = msgspec.json.decode(dialect.error_body(cases[0][0]))
    assert first["error"]["message"] == "max_tokens: must be at least 1"  # names the field
    event = dialect.stream_error(cases[0][0])
    assert list(split_named_events(event)) == [(b"error", dialect.error_body(cases[0][0]))]
