"""Run by vLLM's own Python (never imported by the tests): vLLM's parser classes applied to
model outputs, as its OpenAI server applies them to a non-streaming chat answer (reasoning
first, then tool calls on the content). Reads a JSON list of cases on stdin, writes a JSON
list of results on stdout. Used by test_vllm_parser_oracle.py (docs/tools-and-reasoning.md §7).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    # vLLM's venv only (this project never installs them).
    from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]
    from vllm.entrypoints.openai.chat_completion.protocol import (  # type: ignore[import-not-found]
        ChatCompletionRequest,
    )
    from vllm.reasoning import ReasoningParserManager  # type: ignore[import-not-found]
    from vllm.tool_parsers import ToolParserManager  # type: ignore[import-not-found]

    model_path, cases = sys.argv[1], json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # Parsers look their markers up in the vocabulary: give the tiny model them.
    tokenizer.add_tokens(
        [
            *("<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>"),
            *("[TOOL_CALLS]", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
            *("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"),
        ]
    )
    # A Mistral tokenizer of v11 or later has `[ARGS]`: vLLM's mistral parser then reads the
    # `[TOOL_CALLS]NAME[ARGS]{...}` form, and the older JSON array without it.
    v11 = AutoTokenizer.from_pretrained(model_path)
    v11.add_tokens([*tokenizer.get_added_vocab(), "[ARGS]"])
    results: list[dict[str, Any]] = []
    for case in cases:
        tokenizer_of_case = v11 if case.get("mistral_v11") else tokenizer
        request = ChatCompletionRequest(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=case["tools"],
            chat_template_kwargs=case.get("chat_template_kwargs"),
        )
        content: str | None = case["text"]
        reasoning = None
        if case.get("reasoning_parser"):
            parser_class = ReasoningParserManager.get_reasoning_parser(case["reasoning_parser"])
            try:
                parser = parser_class(
                    tokenizer_of_case, chat_template_kwargs=request.chat_template_kwargs
                )
            except TypeError:
                parser = parser_class(tokenizer_of_case)
            reasoning, content = parser.extract_reasoning(content or "", request)
        calls: list[list[str]] = []
        if case.get("tool_parser") and content is not None:
            parser_class = ToolParserManager.get_tool_parser(case["tool_parser"])
            try:
                tool_parser = parser_class(tokenizer_of_case, request.tools)
            except TypeError:
                tool_parser = parser_class(tokenizer_of_case)
            info = tool_parser.extract_tool_calls(content, request)
            if info.tools_called:
                calls = [[c.function.name, c.function.arguments] for c in info.tool_calls]
                content = info.content
        results.append({"content": content, "reasoning": reasoning, "calls": calls})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
