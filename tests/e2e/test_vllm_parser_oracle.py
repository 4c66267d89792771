"""Opt-in oracle: on the same model outputs, our parsers' `content`, `reasoning_content` and
`tool_calls` equal what vLLM 0.32's own parser classes extract (run in vLLM's venv as a
subprocess, `vllm_parser_oracle.py`, as vLLM's server applies them to a non-streaming answer).
Arguments are compared as JSON values (vLLM re-serializes them; we pass the model's text).
Divergences on purpose are listed in DIVERGENCES with their reason (docs/tools-and-reasoning.md
§7).

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_vllm_parser_oracle.py
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest

from smg_trio.core.parsers.chat_output import tool_calls_of
from smg_trio.core.parsers.registry import parse_whole
from smg_trio.core.plan import ParserSetup
from tests.e2e.real_vllm import MODEL, SKIP_REASON, VENV

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(not (VENV and MODEL), reason=SKIP_REASON),
    pytest.mark.timeout(300),
]

NAMES: Final = ("get_weather", "add")
TOOLS: Final = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in NAMES
]
CALL: Final = '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}'
CASES: Final[list[tuple[str | None, str | None, str]]] = [
    ("hermes", None, f"Let me check.\n<tool_call>\n{CALL}\n</tool_call>"),
    (
        "hermes",
        None,
        f'<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{"name": "add", "arguments": '
        '{"a": 1, "b": 2}}\n</tool_call>',
    ),
    ("hermes", None, "no call here"),
    ("hermes", None, "<tool_call>not json</tool_call>"),
    ("hermes", None, f"<tool_call>\n{CALL}"),  # unterminated, whole JSON
    ("llama3_json", None, f"<|python_tag|>{CALL}"),
    ("llama3_json", None, f'{CALL}; {{"name": "add", "parameters": {{"a": 1}}}}'),
    ("llama3_json", None, "plain answer"),
    ("mistral", None, f"[TOOL_CALLS][{CALL}]"),
    ("mistral", None, "no calls"),
    ("pythonic", None, '[get_weather(city="Paris", days=[1, 2]), add(a=1, b=2)]'),
    ("pythonic", None, "plain answer"),
    (None, "deepseek_r1", "<think>a plan</think>The answer."),
    (None, "deepseek_r1", "a plan</think>The answer."),
    (None, "deepseek_r1", "never ends thinking"),
    (None, "qwen3", "<think>\nplan\n</think>\n\nThe answer."),
    (None, "qwen3", "plan</think>answer"),
    (None, "granite", "Here is my thought process: x. Here is my response: y"),
    (None, "granite", "no markers"),
    ("hermes", "qwen3", f"<think>plan</think>ok\n<tool_call>\n{CALL}\n</tool_call>"),
    (
        "deepseek_v3",
        None,
        "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ),
    ("deepseek_v3", None, "no calls"),
    (
        "qwen3_coder",
        None,
        "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    ),
    ("qwen3_coder", None, "no calls"),
    # Mistral's v11+ form (the oracle gives vLLM a tokenizer with `[ARGS]` for these).
    (
        "mistral",
        None,
        'Sure.\n\n[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": [1, 2]}'
        '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
    ),
    ("mistral", None, '[TOOL_CALLS]get_weather{"city": "Paris"} trailing'),
    ("mistral", None, '[TOOL_CALLS] get_weather [ARGS] {"city": "Pa\\"ris"}'),
    # Divergences on purpose (below).
    ("hermes", None, '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'),
    ("llama3_json", None, f"Sure: {CALL}"),
    ("mistral", None, "[TOOL_CALLS]rm_rf[ARGS]{}"),
]
# Case index → why we differ from vLLM on purpose.
DIVERGENCES: Final[dict[int, str]] = {
    27: "a function that is not among the request's tools is content (the issue's rule); vLLM's "
    "hermes parser returns it as a call the client cannot run",
    28: "llama3_json calls must open the output, as vLLM's own streaming parser requires; its "
    "non-streaming parser takes JSON anywhere, so vLLM's stream and body disagree there",
    29: "the same rule for mistral's v11+ form: vLLM returns the unknown function as a call",
}


def ours(tool_parser: str | None, reasoning_parser: str | None, text: str) -> dict[str, Any]:
    setup = ParserSetup(
        tool_parser=tool_parser, tool_names=frozenset(NAMES), reasoning_parser=reasoning_parser
    )
    parsed, _ = parse_whole(setup, "call-", text)
    calls = tool_calls_of(parsed)
    return {
        "content": parsed.content or None,
        "reasoning": parsed.reasoning or None,
        "calls": [[c.function.name, json.loads(c.function.arguments)] for c in calls],
    }


def vllms(cases: list[tuple[str | None, str | None, str]]) -> list[dict[str, Any]]:
    payload = [
        {
            "tools": TOOLS,
            "tool_parser": t,
            "reasoning_parser": r,
            "text": text,
            "mistral_v11": t == "mistral" and _v11_form(text),
        }
        for t, r, text in cases
    ]
    script = Path(__file__).with_name("vllm_parser_oracle.py")
    done = subprocess.run(
        [f"{VENV}/bin/python", str(script), MODEL],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:
        result["calls"] = [[name, json.loads(args)] for name, args in result["calls"]]
        result["content"] = result["content"] or None
        result["reasoning"] = result["reasoning"] or None
    return results


def _v11_form(text: str) -> bool:
    """`[TOOL_CALLS]` followed by a name: a model whose tokenizer has `[ARGS]` wrote it."""
    _, marker, after = text.partition("[TOOL_CALLS]")
    return bool(marker) and not after.lstrip().startswith(("[", "{"))


def test_our_parsers_agree_with_vllms() -> None:
    theirs = vllms(CASES)
    differing = {
        i: (case, ours(*case), theirs[i])
        for i, case in enumerate(CASES)
        if ours(*case) != theirs[i]
    }
    assert set(differing) == set(DIVERGENCES), differing
