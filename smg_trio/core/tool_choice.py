"""Pure. A chat request's `tools` / `tool_choice` / reasoning fields → the output parsers its
choices run (`ParserSetup`), or a 400 naming the field (docs/tools-and-reasoning.md §5).

- No tool-call parser configured: only `tool_choice: "none"` (tools rendered by the template,
  never parsed), as vLLM's server without `--tool-call-parser`; tools without a tool_choice
  mean "auto", so they are the same 400.
- `"auto"` (or tools without tool_choice): the configured parser reads the model's markup.
- `"none"`: no tool parsing, tools still rendered.
- Reasoning: the model's reasoning parser, unless `chat_template_kwargs.enable_thinking` is
  false (the template then closes the think block itself) or `separate_reasoning` is false.
"""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.core.parsers.registry import KEEPS_SPECIAL_TOKENS
from smg_trio.core.plan import GeneratePlan, ParserSetup
from smg_trio.errors import ClientError
from smg_trio.wire import openai as oa

# vLLM's server without --enable-auto-tool-choice/--tool-call-parser (request-fields.md §3).
NO_TOOL_PARSER: Final = (
    "tool_choice {choice} requires a tool call parser (vLLM: --enable-auto-tool-choice and "
    '--tool-call-parser); this gateway has none, so only tool_choice "none" is supported'
)


def _shown(choice: oa.ToolChoice) -> str:
    if isinstance(choice, oa.ToolChoiceFunction):
        return f"{{'function': {choice.function.name!r}}}"
    return repr(choice)


def parser_setup(
    req: oa.ChatCompletionRequest, tool_call_parser: str | None, reasoning_parser: str | None
) -> ParserSetup | None:
    """The parsers `req`'s choices run; None when they run none (plain text)."""
    choice = req.tool_choice
    if choice is None:
        choice = "auto" if req.tools else "none"  # vLLM's default when tools are given
    tool_parser = None
    if choice != "none":
        if tool_call_parser is None:
            raise ClientError(NO_TOOL_PARSER.format(choice=_shown(choice)), param="tool_choice")
        if not req.tools:
            raise ClientError(f"tool_choice {_shown(choice)} needs `tools`", param="tool_choice")
        if choice != "auto":
            raise ClientError(
                f'tool_choice {_shown(choice)} is not supported; use "auto" or "none"',
                param="tool_choice",
            )
        tool_parser = tool_call_parser
    reasoning = reasoning_parser if _thinking(req) else None
    if reasoning is not None and req.stream and not req.stream_reasoning:
        raise ClientError(
            "stream_reasoning false is not supported: reasoning is streamed as it is parsed",
            param="stream_reasoning",
        )
    if tool_parser is None and reasoning is None:
        return None
    return ParserSetup(
        tool_parser=tool_parser,
        tool_names=frozenset(t.function.name for t in req.tools or ()),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        reasoning_parser=reasoning,
    )


def with_parsers(
    plan: GeneratePlan,
    req: oa.ChatCompletionRequest,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> GeneratePlan:
    """`plan` with the parsers its choices run. A parser whose markers are special tokens
    (mistral's `[TOOL_CALLS]`) has the router keep special tokens in the text, as vLLM's
    parser turns `skip_special_tokens` off for it."""
    parsers = parser_setup(req, tool_call_parser, reasoning_parser)
    if parsers is None:
        return plan
    stop_spec = plan.stop_spec
    if parsers.tool_parser in KEEPS_SPECIAL_TOKENS:
        stop_spec = msgspec.structs.replace(stop_spec, skip_special_tokens=False)
    return msgspec.structs.replace(plan, parsers=parsers, stop_spec=stop_spec)


def _thinking(req: oa.ChatCompletionRequest) -> bool:
    """Reasoning is separated unless the client turned thinking or its separation off."""
    if not req.separate_reasoning:
        return False
    kwargs = req.chat_template_kwargs or {}
    return kwargs.get("enable_thinking", True) is not False
