"""Harmony prompts for gpt-oss (docs/tools-and-reasoning.md §10): the rendered markup, the
stop ids every chat request gets, what is refused, and the shipped test model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from smg_trio.core.harmony_prompt import harmony_stop_ids, typescript_type
from smg_trio.core.parsers.registry import check_parser_names
from smg_trio.errors import ClientError, ConfigError
from smg_trio.model.folder import load_model_dir
from tests.core.test_prepare import MODEL, chat

REPO_ROOT = Path(__file__).resolve().parents[2]
HARMONY_DIR = REPO_ROOT / "tests" / "harmony_model"
HARMONY_DIR_MODEL = load_model_dir(HARMONY_DIR)
HARMONY = msgspec.structs.replace(
    HARMONY_DIR_MODEL.prompt_model(),
    tool_call_parser="openai",
    reasoning_parser="openai_gptoss",
    harmony_stop_ids=harmony_stop_ids(HARMONY_DIR_MODEL.tokenizer),
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city."},
                    "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},
]
CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "content": '{"sky": "clear"}'},
    {"role": "assistant", "content": "Clear."},
    {"role": "user", "content": "Thanks"},
]
EXPECTED = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-11-29\n\nReasoning: high\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
    "<|start|>developer<|message|># Instructions\n\nAnswer briefly.\n\n# Tools\n\n"
    "## functions\n\nnamespace functions {\n\n// Current weather in a city.\n"
    "type get_weather = (_: {\n// The city.\ncity: string,\n"
    'unit?: "c" | "f", // default: c\n}) => any;\n\ntype now = () => any;\n\n'
    "} // namespace functions<|end|>"
    "<|start|>user<|message|>Weather in Paris?<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
    '<|message|>{"city": "Paris"}<|call|>'
    '<|start|>functions.get_weather<|channel|>commentary to=assistant<|message|>{"sky": "clear"}'
    "<|end|><|start|>assistant<|channel|>final<|message|>Clear.<|end|>"
    "<|start|>user<|message|>Thanks<|end|><|start|>assistant"
)


def body(**fields: object) -> dict[str, object]:
    out: dict[str, object] = {"model": "m", "messages": CONVERSATION, "tools": TOOLS}
    out.update(fields)
    return out


def test_a_conversation_renders_as_harmony() -> None:
    plan = chat(body(reasoning_effort="high"), HARMONY)
    text = HARMONY_DIR_MODEL.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)
    assert text == EXPECTED


def test_every_chat_request_stops_on_return_and_call_hidden() -> None:
    plan = chat(body(stop_token_ids=[5]), HARMONY)
    stops = harmony_stop_ids(HARMONY_DIR_MODEL.tokenizer)
    assert plan.sampling.stop_token_ids == (5, *stops)
    assert plan.stop_spec.token_ids[-2:] == stops
    assert not plan.stop_spec.no_stop_trim  # hidden: the client never sees them
    assert plan.stop_spec.skip_special_tokens is False  # the parser reads the markup
    plain: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert chat(plain, MODEL).sampling.stop_token_ids == ()  # only a Harmony model gets them


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"chat_template_kwargs": {"reasoning_effort": 3}}, "reasoning_effort"),
        (
            {"continue_final_message": True, "add_generation_prompt": False},
            "continue_final_message",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
        ({"separate_reasoning": False}, "separate_reasoning"),
    ],
)
def test_what_harmony_cannot_take_is_a_400(fields: dict[str, object], param: str) -> None:
    with pytest.raises(ClientError) as info:
        chat(body(**fields), HARMONY)
    assert info.value.param == param


def test_a_tokenizer_without_harmony_tokens_is_refused_at_startup() -> None:
    with pytest.raises(ConfigError, match=re.escape("<|start|>")):
        harmony_stop_ids(MODEL.tokenizer)


def test_typescript_types() -> None:
    assert typescript_type({"type": "array", "items": {"type": "integer"}}) == "number[]"
    assert typescript_type({"type": ["string", "null"]}) == "string | null"
    assert typescript_type({"anyOf": [{"type": "boolean"}, {"enum": [1, "a"]}]}) == (
        'boolean | 1 | "a"'
    )
    nested = {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}
    assert typescript_type(nested) == "{ a: number }"
    assert typescript_type({}) == "any"


def test_build_reproduces_the_shipped_harmony_model(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "build_harmony_model.py"),
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    shipped = {p.name: p.read_bytes() for p in HARMONY_DIR.iterdir()}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == shipped
    assert sum(len(b) for b in shipped.values()) < 1_000_000


def test_a_constraint_starts_at_the_first_token_as_vllm_gates_gpt_oss() -> None:
    """vLLM's openai_gptoss parser reports the reasoning ended: reasoning_ended true."""
    fmt = {"type": "json_object"}
    constraint = chat(body(response_format=fmt), HARMONY).sampling.constraint
    assert constraint is not None
    assert constraint.after_reasoning is False


@pytest.mark.parametrize(
    ("tool_call_parser", "reasoning_parser"),
    [("openai", None), ("harmony", "qwen3"), ("hermes", "openai_gptoss")],
)
def test_harmony_parsers_go_together(
    tool_call_parser: str | None, reasoning_parser: str | None
) -> None:
    with pytest.raises(ConfigError, match="go together"):
        check_parser_names(tool_call_parser, reasoning_parser)
    check_parser_names("openai", "openai_gptoss")
    check_parser_names("harmony", "harmony")
    check_parser_names(None, "openai_gptoss")
