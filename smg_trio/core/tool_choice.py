"""Pure. A chat request's `tools` / `tool_choice` / reasoning fields → the output parsers its
choices run (`ParserSetup`), or a 400 naming the field (docs/tools-and-reasoning.md §5).

- No tool-call parser configured: only `tool_choice: "none"` (tools rendered by the template,
  never parsed), as vLLM's server without `--tool-call-parser`; tools without a tool_choice
  mean "auto", so they are the same 400.
- `"auto"` (or tools without tool_choice): the configured parser reads the model's markup.
- `"required"` and a named function need no parser, as in vLLM: the engine generates under a
  JSON schema built from the tools (structured outputs; finalize refuses it where the runtime
  has no grammars, naming `tool_choice`) and the output is read as that JSON.
- `"none"`: no tool parsing, tools still rendered.
- Reasoning: the model's reasoning parser, unless `chat_template_kwargs.enable_thinking` is
  false (the template then closes the think block itself) or `separate_reasoning` is false;
  vLLM's `include_reasoning: false` separates it and leaves it out of the answer.
- A constraint (a forced call's schema, `response_format`, ...) with reasoning on starts after
  the reasoning ends (`StructuredConstraint.after_reasoning`; finalize refuses it on the
  wires that cannot say so).
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from smg_trio.core.parsers.registry import (
    KEEPS_SPECIAL_TOKENS,
    NAMED_CALL,
    REQUIRED_CALLS,
    forced_call,
    uses_harmony,
)
from smg_trio.core.plan import GeneratePlan, ParserSetup, ReasoningCount
from smg_trio.errors import ClientError
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint
from smg_trio.wire import openai as oa

# vLLM's server without --enable-auto-tool-choice/--tool-call-parser (docs/request-fields.md §3).
NO_TOOL_PARSER: Final = (
    "tool_choice {choice} requires a tool call parser (vLLM: --enable-auto-tool-choice and "
    '--tool-call-parser); this gateway has none, so only tool_choice "none", "required" or '
    "a named function is supported"
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
    tool_parser, forced = None, None
    if choice == "auto" and tool_call_parser is None:
        raise ClientError(NO_TOOL_PARSER.format(choice=_shown(choice)), param="tool_choice")
    if choice != "none" and not req.tools:
        raise ClientError(f"tool_choice {_shown(choice)} needs `tools`", param="tool_choice")
    if choice == "auto":
        tool_parser = tool_call_parser
    elif choice == "required":
        tool_parser = REQUIRED_CALLS
    elif isinstance(choice, oa.ToolChoiceFunction):
        forced = choice.function.name
        if forced not in {t.function.name for t in req.tools or ()}:
            raise ClientError(
                f"tool_choice names {forced!r}, not one of `tools`", param="tool_choice"
            )
        tool_parser = NAMED_CALL
    reasoning = reasoning_parser if _thinking(req) else None
    if reasoning is not None and req.stream and not req.stream_reasoning:
        raise ClientError(
            "stream_reasoning false is not supported: reasoning is streamed as it is parsed",
            param="stream_reasoning",
        )
    if tool_parser is None and reasoning is None:
        return None
    if forced_call(tool_parser) and uses_harmony(tool_call_parser, reasoning_parser):
        raise ClientError(
            f"tool_choice {_shown(choice)} is not supported with Harmony (gpt-oss) output: "
            'use "auto"',
            param="tool_choice",
        )
    return ParserSetup(
        tool_parser=tool_parser,
        forced_function=forced,
        tool_names=frozenset(t.function.name for t in req.tools or ()),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        reasoning_parser=reasoning,
        include_reasoning=req.include_reasoning,
    )


def with_parsers(
    plan: GeneratePlan,
    req: oa.ChatCompletionRequest,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
    special_ids: frozenset[int] | None = None,
) -> GeneratePlan:
    """`plan` with the parsers its choices run. A parser whose markers are special tokens
    (mistral's `[TOOL_CALLS]`) has the router keep special tokens in the text, as vLLM's
    parser turns `skip_special_tokens` off for it."""
    if reasoning_parser is not None:  # vLLM reports the count whenever the model has one
        thinking = (req.chat_template_kwargs or {}).get("enable_thinking", True) is not False
        count = ReasoningCount(parser=reasoning_parser, thinking=thinking, special_ids=special_ids)
        plan = msgspec.structs.replace(plan, reasoning_count=count)
    parsers = parser_setup(req, tool_call_parser, reasoning_parser)
    if parsers is None:
        return _gated(plan, reasoning_parser, thinking=False)
    if req.echo:  # the echoed message would reach the client unparsed in a stream
        raise ClientError(
            "echo cannot be combined with tool-call or reasoning parsing", param="echo"
        )
    stop_spec, sampling = plan.stop_spec, plan.sampling
    if parsers.tool_parser in KEEPS_SPECIAL_TOKENS or uses_harmony(None, parsers.reasoning_parser):
        stop_spec = msgspec.structs.replace(stop_spec, skip_special_tokens=False)
    if forced_call(parsers.tool_parser):
        if sampling.constraint is not None:
            raise ClientError(
                f"tool_choice {_shown(req.tool_choice or 'none')} cannot be combined with "
                f"{sampling.constraint.param}",
                param="tool_choice",
            )
        constraint = StructuredConstraint(
            kind=ConstraintKind.JSON_SCHEMA, param="tool_choice", text=_schema(req)
        )
        sampling = msgspec.structs.replace(sampling, constraint=constraint)
    plan = msgspec.structs.replace(plan, parsers=parsers, stop_spec=stop_spec, sampling=sampling)
    # gpt-oss: vLLM's Harmony reasoning parser says the reasoning has always ended, so a
    # constraint applies from the first token (the output is then plain JSON, read as content).
    harmony = uses_harmony(None, parsers.reasoning_parser)
    thinking = parsers.reasoning_parser is not None and not harmony
    return _gated(plan, reasoning_parser, thinking=thinking)


def _gated(plan: GeneratePlan, reasoning_parser: str | None, *, thinking: bool) -> GeneratePlan:
    """The plan's constraint told where it starts (docs/tools-and-reasoning.md §5): after the
    reasoning when this request's reasoning is separated, from the first token when the model
    reasons but not this request; left to the engine when the model has no reasoning parser."""
    constraint = plan.sampling.constraint
    if constraint is None or reasoning_parser is None:
        return plan
    constraint = msgspec.structs.replace(constraint, after_reasoning=thinking)
    sampling = msgspec.structs.replace(plan.sampling, constraint=constraint)
    return msgspec.structs.replace(plan, sampling=sampling)


def _parameters(tool: oa.Tool) -> dict[str, Any]:
    return tool.function.parameters or {"type": "object", "properties": {}}


def _schema(req: oa.ChatCompletionRequest) -> str:
    """The JSON schema a forced call is generated under, as vLLM builds it: a named function's
    parameters; for "required", an array of at least one `{"name", "parameters"}` object (at
    most one with `parallel_tool_calls: false`), the tools' `$defs` gathered at its top."""
    tools = req.tools or ()
    choice = req.tool_choice
    if isinstance(choice, oa.ToolChoiceFunction):
        schema = next(_parameters(t) for t in tools if t.function.name == choice.function.name)
    else:
        variants: list[dict[str, Any]] = []
        definitions: dict[str, Any] = {}
        for tool in tools:
            parameters = dict(_parameters(tool))
            _gather_defs(tool.function.name, parameters.pop("$defs", {}), definitions)
            variants.append(
                {
                    "properties": {
                        "name": {"type": "string", "enum": [tool.function.name]},
                        "parameters": parameters,
                    },
                    "required": ["name", "parameters"],
                }
            )
        schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": variants}}
        if req.parallel_tool_calls is False:
            schema["maxItems"] = 1
        if definitions:
            schema["$defs"] = definitions
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _gather_defs(name: str, defs: object, into: dict[str, Any]) -> None:
    """A tool's `$defs`, moved to the array schema's top as vLLM does: each name one schema."""
    if not isinstance(defs, dict):
        raise ClientError(
            f"`$defs` in the parameters of tool {name!r} must be an object", param="tools"
        )
    for def_name, definition in defs.items():
        if into.setdefault(def_name, definition) != definition:
            raise ClientError(
                f"tool definition {def_name!r} has more than one schema", param="tools"
            )


def _thinking(req: oa.ChatCompletionRequest) -> bool:
    """Reasoning is separated unless the client turned thinking or its separation off."""
    if not req.separate_reasoning:
        return False
    kwargs = req.chat_template_kwargs or {}
    return kwargs.get("enable_thinking", True) is not False
