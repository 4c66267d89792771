"""Run by vLLM's own Python (never imported by the tests): vLLM's Harmony code for gpt-oss on
our cases. Reads {"prompts": [...], "outputs": [...]} on stdin and writes the same shape on
stdout: each prompt rendered as vLLM's chat renderer builds a gpt-oss prompt (preamble, the
conversation, `render_for_completion`) and decoded back to text; each output text encoded with
the Harmony vocabulary and parsed by vLLM's `HarmonyParser` as its server parses a
non-streaming answer. Used by test_vllm_harmony_oracle.py (docs/tools-and-reasoning.md §10).
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
    from vllm.entrypoints.openai.parser.harmony_utils import (  # type: ignore[import-not-found]
        build_harmony_preamble,
        extract_instructions_from_messages,
        get_encoding,
        parse_chat_inputs_to_harmony_messages,
        render_for_completion,
    )
    from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found]

    model_path, cases = sys.argv[1], json.load(sys.stdin)
    encoding = get_encoding()
    prompts: list[str] = []
    for case in cases["prompts"]:
        request = ChatCompletionRequest(
            model="m",
            messages=case["messages"],
            tools=case.get("tools"),
            reasoning_effort=case.get("reasoning_effort"),
        )
        instructions, rest = extract_instructions_from_messages(list(request.messages))
        messages = build_harmony_preamble(
            instructions=instructions,
            tools=request.tools,
            reasoning_effort=request.reasoning_effort,
            with_custom_tools=bool(request.tools),
        )
        messages.extend(parse_chat_inputs_to_harmony_messages(rest))
        prompts.append(encoding.decode(render_for_completion(messages)))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    outputs: list[dict[str, Any]] = []
    for case in cases["outputs"]:
        request = ChatCompletionRequest(
            model="m", messages=[{"role": "user", "content": "hi"}], tools=case["tools"]
        )
        parser_class = ParserManager.get_parser(
            tool_parser_name="openai",
            reasoning_parser_name="openai_gptoss",
            enable_auto_tools=True,
            model_name="openai/gpt-oss-20b",
            is_harmony=True,
        )
        parser = parser_class(tokenizer, request.tools)
        ids = encoding.encode(case["text"], allowed_special="all")
        reasoning, content, calls = parser.parse(
            case["text"], request, enable_auto_tools=True, model_output_token_ids=ids
        )
        outputs.append(
            {
                "content": content,
                "reasoning": reasoning,
                "calls": [[c.name, c.arguments] for c in calls or ()],
            }
        )
    json.dump({"prompts": prompts, "outputs": outputs}, sys.stdout)


if __name__ == "__main__":
    main()
