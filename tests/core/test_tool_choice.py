"""tools / tool_choice / reasoning fields → the parsers a chat request runs, or a 400 naming the
field (docs/tools-and-reasoning.md §5). Moved from the wire tests when the decision came to
depend on the configured parsers."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from smg_trio.core.plan import GeneratePlan, ParserSetup
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from tests.core.test_prepare import MODEL, chat

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HERMES = msgspec.structs.replace(MODEL, tool_call_parser="hermes")
QWEN3 = msgspec.structs.replace(MODEL, tool_call_parser="hermes", reasoning_parser="qwen3")


def body(**fields: object) -> dict[str, object]:
    out: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    out.update(fields)
    return out


def refused(model: PromptModel, **fields: object) -> ClientError:
    with pytest.raises(ClientError) as info:
        chat(body(**fields), model)
    return info.value


def plan(model: PromptModel, **fields: object) -> GeneratePlan:
    return chat(body(**fields), model)


@pytest.mark.parametrize(
    "choice", ["auto", "required", {"type": "function", "function": {"name": "f"}}]
)
def test_tool_choice_that_needs_a_parser_is_a_400_without_one(choice: Any) -> None:
    err = refused(MODEL, tool_choice=choice)
    assert err.param == "tool_choice"
    assert "--tool-call-parser" in err.message
    assert plan(MODEL, tool_choice="none", parallel_tool_calls=False).parsers is None


def test_tools_without_tool_choice_default_to_auto_and_are_a_400_as_in_vllm() -> None:
    """vLLM's server makes tool_choice "auto" when tools are given without one, then answers
    400 without --tool-call-parser (verified on vLLM 0.32); no tools, or none: accepted."""
    err = refused(MODEL, tools=TOOLS)
    assert err.param == "tool_choice"
    assert "'auto'" in err.message
    assert "--tool-call-parser" in err.message
    assert plan(MODEL, tools=TOOLS, tool_choice="none").parsers is None
    assert plan(MODEL).parsers is None


def test_with_a_parser_tools_mean_auto_and_the_plan_names_the_parser() -> None:
    assert plan(HERMES, tools=TOOLS).parsers == ParserSetup(
        tool_parser="hermes", tool_names=frozenset({"f"})
    )
    assert plan(HERMES, tools=TOOLS, tool_choice="auto", parallel_tool_calls=False).parsers == (
        ParserSetup(tool_parser="hermes", tool_names=frozenset({"f"}), parallel_tool_calls=False)
    )
    assert plan(HERMES, tools=TOOLS, tool_choice="none").parsers is None
    assert plan(HERMES).parsers is None  # no tools: nothing to parse


def test_tool_choice_auto_without_tools_is_a_400() -> None:
    assert refused(HERMES, tool_choice="auto").param == "tool_choice"


def test_reasoning_runs_unless_thinking_or_its_separation_is_off() -> None:
    assert plan(QWEN3).parsers == ParserSetup(reasoning_parser="qwen3")
    assert plan(QWEN3, chat_template_kwargs={"enable_thinking": False}).parsers is None
    assert plan(QWEN3, separate_reasoning=False).parsers is None
    both = plan(QWEN3, tools=TOOLS).parsers
    assert both is not None
    assert both.tool_parser == "hermes"
    assert both.reasoning_parser == "qwen3"


def test_stream_reasoning_false_with_a_reasoning_parser_is_a_400() -> None:
    assert refused(QWEN3, stream=True, stream_reasoning=False).param == "stream_reasoning"
    assert plan(MODEL, stream=True, stream_reasoning=False).parsers is None  # nothing to stream


def test_a_parser_whose_markers_are_special_tokens_keeps_them_in_the_text() -> None:
    """vLLM's mistral parser turns skip_special_tokens off: `[TOOL_CALLS]` is a control token."""
    mistral = msgspec.structs.replace(MODEL, tool_call_parser="mistral")
    assert plan(mistral, tools=TOOLS).stop_spec.skip_special_tokens is False
    assert plan(mistral, tools=TOOLS, tool_choice="none").stop_spec.skip_special_tokens is True
    assert plan(HERMES, tools=TOOLS).stop_spec.skip_special_tokens is True
