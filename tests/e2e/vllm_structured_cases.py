"""I/O. The differential harness's structured-output cases (docs/request-fields.md §2, and
docs/real-engines.md for the twinned ones): every form vLLM 0.32's server accepts, on chat and
completions, and the forms we honour where vLLM does not, compared with vLLM answering the same
constraint in its own spelling.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, Final

from tests.e2e.differential import Divergence, diff
from tests.e2e.vllm_cases import (
    CHAT,
    COMPLETIONS,
    SCHEMA,
    Case,
    Facts,
    base,
    both,
    chat,
    check_schema,
    completions,
)

# Structured outputs (docs/request-fields.md §2): every form vLLM 0.32's server accepts, on both
# endpoints. Bounded constraints: an open object schema lets a random-weight model pick
# whitespace until max_tokens.
GRAMMAR: Final = 'root ::= "The answer is " ("yes" | "no") "."'
REGEX: Final = "(red|green|blue)( (red|green|blue)){0,3}"
CHOICES: Final = ["yes", "no", 'say "maybe"\\n']
STRUCTURED_FORMS: Final[list[tuple[str, dict[str, Any]]]] = [
    ("so_choice", {"structured_outputs": {"choice": CHOICES}}),
    ("so_regex", {"structured_outputs": {"regex": REGEX}}),
    ("so_grammar", {"structured_outputs": {"grammar": GRAMMAR}}),
    ("so_json", {"structured_outputs": {"json": SCHEMA}}),
    ("so_json_string", {"structured_outputs": {"json": json.dumps(SCHEMA)}}),
    ("so_json_object", {"structured_outputs": {"json_object": True}, "max_tokens": 24}),
    ("response_format_text", {"response_format": {"type": "text"}}),
    (
        "response_format_json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "c", "schema": SCHEMA},
            }
        },
    ),
]
# vLLM 0.32 ignores the removed guided_* fields (unconstrained, with a warning in its log); the
# gateway honours them (docs/request-fields.md §2), so vLLM is sent the structured_outputs twin.
LEGACY_FORMS: Final[list[tuple[str, dict[str, Any], dict[str, Any]]]] = [
    ("guided_choice", {"guided_choice": CHOICES}, {"choice": CHOICES}),
    ("guided_regex", {"guided_regex": REGEX}, {"regex": REGEX}),
    ("guided_grammar", {"guided_grammar": GRAMMAR}, {"grammar": GRAMMAR}),
    ("guided_json", {"guided_json": SCHEMA}, {"json": SCHEMA}),
]
FORCED_TOOL: Final = {
    "type": "function",
    "function": {
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"color": SCHEMA},
            "required": ["color"],
            "additionalProperties": False,
        },
    },
}


NAMED_PICK: Final = {"type": "function", "function": {"name": "pick"}}
ENUM_TOOL: Final = {"type": "function", "function": {"name": "pick", "parameters": SCHEMA}}


def tool_schema(choice: str) -> dict[str, Any]:
    """vLLM's schema for a forced tool call (its tool_parsers/utils, read for the facts): the
    named function's parameters, or an array of `{"name", "parameters"}` objects."""
    parameters: dict[str, Any] = FORCED_TOOL["function"]["parameters"]  # type: ignore[index]
    if choice == "named":
        return parameters
    variant = {
        "properties": {"name": {"type": "string", "enum": ["pick"]}, "parameters": parameters},
        "required": ["name", "parameters"],
    }
    return {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [variant]}}


def forced_calls(vllm: Any, ours: Any) -> list[Divergence]:
    """vLLM without a tool parser leaves a forced tool_choice unconstrained, so it was asked for
    the same schema as structured_outputs: its text, read as calls, must be our tool_calls; a
    text cut short (max_tokens) is not JSON, so it must be ours verbatim (a named call's
    arguments, or the content the required-calls parser could not read)."""
    if vllm.get("error") is not None or ours.get("error") is not None:
        return diff(vllm, ours)
    (vllm_choice,), (our_choice,) = vllm["choices"], ours["choices"]
    text = (vllm_choice.get("message") or vllm_choice).get("content") or ""
    found = diff(vllm.get("usage"), ours.get("usage"), "$.usage")
    try:
        said = json.loads(text)
    except ValueError:
        mine = (our_choice.get("message") or our_choice).get("content") or ""
        merged = _merged_calls(our_choice)
        if merged:
            mine = merged[0]["arguments"]
        if mine != text:
            found.append(Divergence("$.choices[0] generated text", text, mine))
        return found
    if isinstance(said, list):  # "required": an array of {name, parameters}
        expected = [(call["name"], call["parameters"]) for call in said]
    else:  # a named function: its arguments
        expected = [("pick", said)]
    calls = [(c["name"], json.loads(c["arguments"])) for c in _merged_calls(our_choice)]
    if calls != expected:
        found.append(Divergence("$.choices[0].tool_calls", expected, calls))
    return found


def _merged_calls(choice: dict[str, Any]) -> list[dict[str, str]]:
    """A choice's tool calls as {name, arguments}, streamed deltas merged by index."""
    merged: dict[int, dict[str, str]] = {}
    deltas = (choice.get("message") or choice).get("tool_calls") or []
    for position, delta in enumerate(deltas):
        into = merged.setdefault(delta.get("index", position), {"name": "", "arguments": ""})
        function = delta.get("function") or {}
        into["name"] += function.get("name") or ""
        into["arguments"] += function.get("arguments") or ""
    return [call for _, call in sorted(merged.items())]


def _with(extra: dict[str, Any], path: str, facts: Facts) -> dict[str, Any]:
    return base(path, **extra)


def twinned(name: str, ours: dict[str, Any], vllm: dict[str, Any], **options: Any) -> list[Case]:
    """`both`, with vLLM's server sent `vllm` where the gateway is sent `ours`."""
    return [
        Case(
            f"{name}-{label}",
            path,
            partial(_with, ours, path),
            vllm_body=partial(_with, vllm, path),
            **options,
        )
        for label, path in (("chat", CHAT), ("completions", COMPLETIONS))
    ]


SCHEMA_FORMS: Final = frozenset(
    {"so_json", "so_json_string", "response_format_json_schema", "guided_json"}
)
STRUCTURED_CASES: Final[list[Case]] = [
    Case(  # json_object-chat (above) is the same on chat
        "response_format_json_object-completions",
        COMPLETIONS,
        completions(response_format={"type": "json_object"}, max_tokens=24),
    ),
    *[
        case
        for name, extra in STRUCTURED_FORMS
        for case in both(
            name, partial(_with, extra), check=check_schema if name in SCHEMA_FORMS else None
        )
    ],
    *[
        case
        for name, ours, twin in LEGACY_FORMS
        for case in twinned(
            name,
            ours,
            {"structured_outputs": twin},
            check=check_schema if name in SCHEMA_FORMS else None,
        )
    ],
    *[
        Case(
            f"tool_choice_{choice}-chat",
            CHAT,
            chat(tools=[FORCED_TOOL], tool_choice=forced, max_tokens=48),
            vllm_body=chat(
                tools=[FORCED_TOOL],
                tool_choice="none",
                max_tokens=48,
                structured_outputs={"json": tool_schema(choice)},
            ),
            compare=forced_calls,
        )
        for choice, forced in (("required", "required"), ("named", NAMED_PICK))
    ],
    Case(  # a closed schema (no object whitespace to loop in): the call parses on both sides
        "tool_choice_named_enum-chat",
        CHAT,
        chat(tools=[ENUM_TOOL], tool_choice=NAMED_PICK, max_tokens=48),
        vllm_body=chat(
            tools=[ENUM_TOOL],
            tool_choice="none",
            max_tokens=48,
            structured_outputs={"json": SCHEMA},
        ),
        compare=forced_calls,
    ),
]
