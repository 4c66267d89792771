"""tools / tool_choice / reasoning fields → the parsers a chat request runs, or a 400 naming the
field (docs/tools-and-reasoning.md §5). Moved from the wire tests when the decision came to
depend on the configured parsers."""

from __future__ import annotations

import json

import msgspec
import pytest

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.parsers.registry import NAMED_CALL, REQUIRED_CALLS
from smg_trio.core.plan import GeneratePlan, ParserSetup
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import SUPPORTED_PAIRS
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind
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


def test_tool_choice_auto_needs_a_parser_and_required_or_named_need_tools() -> None:
    """As vLLM: "auto" reads the model's markup, so it needs --tool-call-parser; "required"
    and a named function generate under a schema instead, so they need only the tools."""
    err = refused(MODEL, tool_choice="auto")
    assert err.param == "tool_choice"
    assert "--tool-call-parser" in err.message
    for choice in ("required", {"type": "function", "function": {"name": "f"}}):
        err = refused(MODEL, tool_choice=choice)
        assert (err.param, err.message.endswith("needs `tools`")) == ("tool_choice", True)
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


def test_required_constrains_the_engine_to_an_array_of_calls_of_the_tools() -> None:
    planned = plan(MODEL, tools=TOOLS, tool_choice="required")
    assert planned.parsers == ParserSetup(tool_parser=REQUIRED_CALLS, tool_names=frozenset({"f"}))
    constraint = planned.sampling.constraint
    assert constraint is not None
    assert (constraint.kind, constraint.param) == (ConstraintKind.JSON_SCHEMA, "tool_choice")
    assert json.loads(constraint.text) == {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": ["f"]},
                        "parameters": {"type": "object"},
                    },
                    "required": ["name", "parameters"],
                }
            ],
        },
    }


def test_required_schema_is_vllms_one_call_bound_and_gathered_defs() -> None:
    """As vLLM builds it: `maxItems: 1` only for an explicit `parallel_tool_calls: false`, each
    tool's `$defs` moved to the array schema's top; two schemas under one name are a 400."""
    point = {"type": "object", "properties": {"x": {"type": "number"}}}
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "$defs": {"P": point}, "properties": {}},
            },
        }
        for name in ("f", "g")
    ]
    planned = plan(MODEL, tools=tools, tool_choice="required", parallel_tool_calls=False)
    assert planned.sampling.constraint is not None
    schema = json.loads(planned.sampling.constraint.text)
    assert (schema["maxItems"], schema["$defs"]) == (1, {"P": point})
    for variant in schema["items"]["anyOf"]:
        assert variant["properties"]["parameters"] == {"type": "object", "properties": {}}
    parallel = plan(MODEL, tools=tools, tool_choice="required").sampling.constraint
    assert parallel is not None
    assert "maxItems" not in json.loads(parallel.text)
    tools[1]["function"]["parameters"]["$defs"] = {"P": {"type": "string"}}  # type: ignore[index]
    assert refused(MODEL, tools=tools, tool_choice="required").param == "tools"


def test_a_named_function_constrains_the_engine_to_its_parameters() -> None:
    named = {"type": "function", "function": {"name": "f"}}
    planned = plan(MODEL, tools=TOOLS, tool_choice=named)
    assert planned.parsers == ParserSetup(
        tool_parser=NAMED_CALL, forced_function="f", tool_names=frozenset({"f"})
    )
    assert planned.sampling.constraint is not None
    assert json.loads(planned.sampling.constraint.text) == {"type": "object"}
    other = {"type": "function", "function": {"name": "g"}}
    assert refused(MODEL, tools=TOOLS, tool_choice=other).param == "tool_choice"


def test_a_forced_call_with_another_constraint_is_a_400() -> None:
    fmt = {"type": "json_object"}
    err = refused(MODEL, tools=TOOLS, tool_choice="required", response_format=fmt)
    assert (err.param, "response_format" in err.message) == ("tool_choice", True)


FORMAT = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ({"response_format": FORMAT}, "response_format.json_schema.schema"),
    ],
)
def test_a_constraint_after_reasoning_starts_where_the_reasoning_ends(
    fields: dict[str, object], param: str
) -> None:
    """With reasoning separated the constraint starts after it (vLLM's reasoning_ended gate);
    with thinking off, from the first token; a model without a reasoning parser leaves it to
    the engine (docs/tools-and-reasoning.md §5)."""
    gated = plan(QWEN3, **fields).sampling.constraint
    assert gated is not None
    assert (gated.param, gated.after_reasoning) == (param, True)
    off = {"enable_thinking": False}
    for thinking_off in ({"chat_template_kwargs": off}, {"separate_reasoning": False}):
        planned = plan(QWEN3, **fields, **thinking_off)
        assert planned.parsers is None or planned.parsers.reasoning_parser is None
        assert planned.sampling.constraint is not None
        assert planned.sampling.constraint.after_reasoning is False
    plain = plan(HERMES, **fields).sampling.constraint
    assert plain is not None
    assert plain.after_reasoning is None


@pytest.mark.parametrize(("runtime", "wire"), sorted(SUPPORTED_PAIRS, key=str))
def test_only_vllm_over_zmq_can_start_a_constraint_after_the_reasoning(
    runtime: Runtime, wire: Wire
) -> None:
    """The EngineCore ADD has `reasoning_ended`; no gRPC proto nor TokenSpeed's ZMQ request
    has a field for it: there the request is a 400 naming the constraint's field."""
    planned = plan(QWEN3, tools=TOOLS, tool_choice="required")
    target = WorkerTarget(runtime=runtime, wire=wire)
    if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
        (request,) = finalize(planned, target, MODEL.tokenizer).requests
        assert request.sampling.constraint is not None
        assert request.sampling.constraint.after_reasoning is True
        return
    with pytest.raises(ClientError) as info:
        finalize(planned, target, MODEL.tokenizer)
    assert info.value.param == "tool_choice"
    assert "enable_thinking" in info.value.message


@pytest.mark.parametrize(("runtime", "wire"), sorted(SUPPORTED_PAIRS, key=str))
def test_a_forced_call_reaches_engines_with_grammars_and_is_a_400_naming_tool_choice_on_mlx(
    runtime: Runtime, wire: Wire
) -> None:
    planned = plan(MODEL, tools=TOOLS, tool_choice="required")
    target = WorkerTarget(runtime=runtime, wire=wire)
    if runtime is Runtime.MLX:
        with pytest.raises(ClientError) as info:
            finalize(planned, target, MODEL.tokenizer)
        assert info.value.param == "tool_choice"
        return
    (request,) = finalize(planned, target, MODEL.tokenizer).requests
    assert request.sampling.constraint is not None
    assert request.sampling.constraint.kind is ConstraintKind.JSON_SCHEMA


def test_echo_with_parsers_is_a_400_naming_it() -> None:
    assert refused(QWEN3, echo=True).param == "echo"
    assert plan(MODEL, echo=True).echo_text is None  # no parsers: echo as before


def test_an_assistant_turns_tool_calls_reach_the_template_with_object_arguments() -> None:
    """vLLM's rule, so the second turn of a tool loop renders as the model was trained."""
    source = (
        "calls:{% for m in messages %}{% for c in m.tool_calls or [] %}"
        "{{ c.function.name }}={{ c.function.arguments | tojson }};{% endfor %}{% endfor %}"
    )
    model = msgspec.structs.replace(MODEL, chat_template=ChatTemplate(source, special_tokens={}))

    def call(arguments: str) -> dict[str, object]:
        return {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}

    turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call('{"city": "Paris"}'), call("not json"), call("[1]"), call("")],
    }
    planned = chat(body(messages=[{"role": "user", "content": "hi"}, turn]), model)
    text = MODEL.tokenizer.decode(planned.prompt_ids, skip_special_tokens=False)
    assert text == 'calls:f={"city": "Paris"};f={};f={};f={};'
    empty = {"role": "assistant", "content": "ok", "tool_calls": []}
    planned = chat(body(messages=[{"role": "user", "content": "hi"}, empty]), model)
    assert MODEL.tokenizer.decode(planned.prompt_ids, skip_special_tokens=False) == "calls:"
