"""Opt-in oracle for Harmony (gpt-oss): on the same conversations our rendered prompt equals the
text of the prompt vLLM 0.32 builds for gpt-oss, and on the same model outputs our content,
reasoning and tool calls equal what vLLM's `HarmonyParser` extracts (run in vLLM's venv,
`vllm_harmony_oracle.py`; its Harmony library loads its vocabulary there). Arguments are
compared as JSON values. Divergences on purpose are in OUTPUT_DIVERGENCES with their reason
(docs/tools-and-reasoning.md §10).

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_vllm_harmony_oracle.py
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest

from smg_trio.core.harmony_prompt import render_harmony
from smg_trio.core.parsers.chat_output import tool_calls_of
from smg_trio.core.parsers.registry import parse_whole
from smg_trio.core.plan import ParserSetup
from tests.core.test_harmony_prompt import CONVERSATION, TOOLS
from tests.e2e.real_vllm import MODEL, SKIP_REASON, VENV

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(not (VENV and MODEL), reason=SKIP_REASON),
    pytest.mark.timeout(300),
]

NAMES: Final = ("get_weather", "now")
PROMPTS: Final[list[dict[str, Any]]] = [
    {"messages": CONVERSATION, "tools": TOOLS, "reasoning_effort": "high"},
    {"messages": [{"role": "user", "content": "Hi"}]},
    {
        "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "Hi"},
        ],
        "reasoning_effort": "low",
    },
    {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS[:1]},
    {
        "messages": [
            {"role": "system", "content": "First."},
            {"role": "user", "content": "Hi"},
            {"role": "developer", "content": "Later rule."},
            {"role": "user", "content": "Again"},
        ]
    },
]
ANALYSIS: Final = "<|channel|>analysis<|message|>Need the weather.<|end|>"
OUTPUTS: Final[list[str]] = [
    ANALYSIS + "<|start|>assistant<|channel|>final<|message|>Sunny.",
    ANALYSIS + "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}',
    # The recipient before the channel, right after the prompt's `<|start|>assistant`.
    " to=functions.now<|channel|>commentary json<|message|>{}",
    "<|channel|>final<|message|>Just an answer.",
    "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>"
    'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}',
    # Divergences on purpose (below).
    '<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{"path": "/"}',
]
OUTPUT_DIVERGENCES: Final[dict[int, str]] = {
    5: "a function that is not among the request's tools is content (the issue's rule, as for "
    "every parser here); vLLM returns it as a call the client cannot run",
}


def ours(text: str) -> dict[str, Any]:
    setup = ParserSetup(
        tool_parser="openai", tool_names=frozenset(NAMES), reasoning_parser="openai_gptoss"
    )
    parsed, _ = parse_whole(setup, "call-", text)
    return {
        "content": parsed.content or None,
        "reasoning": parsed.reasoning or None,
        "calls": [
            [c.function.name, json.loads(c.function.arguments)] for c in tool_calls_of(parsed)
        ],
    }


def vllms() -> dict[str, Any]:
    payload = {
        "prompts": PROMPTS,
        "outputs": [{"text": text, "tools": TOOLS} for text in OUTPUTS],
    }
    script = Path(__file__).with_name("vllm_harmony_oracle.py")
    done = subprocess.run(
        [f"{VENV}/bin/python", str(script), MODEL],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    for output in result["outputs"]:
        output["calls"] = [[name, json.loads(args)] for name, args in output["calls"]]
    return result


def test_prompts_and_parsed_outputs_agree_with_vllms() -> None:
    today = dt.datetime.now(dt.UTC)
    theirs = vllms()
    for case, prompt in zip(PROMPTS, theirs["prompts"], strict=True):
        ours_text = render_harmony(
            case["messages"],
            tools=case.get("tools"),
            reasoning_effort=case.get("reasoning_effort"),
            now=today,
        )
        assert ours_text == prompt
    differing = {
        i: (text, ours(text), theirs["outputs"][i])
        for i, text in enumerate(OUTPUTS)
        if ours(text) != theirs["outputs"][i]
    }
    assert set(differing) == set(OUTPUT_DIVERGENCES), differing
