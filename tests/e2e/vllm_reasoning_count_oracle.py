"""Run by vLLM's own Python (never imported by the tests): vLLM's reasoning parsers count the
reasoning tokens of token id sequences, as its chat server does for usage, the whole output at
once and (qwen3) delta by delta as a stream. Reads `{"tokenizer": DIR, "cases": [[id, ...]]}`
on stdin, writes per case `{"deepseek_r1": n, "qwen3": n, "qwen3_stream": n, "granite": n}`
(None: the parser refuses the tokenizer).
Used by test_vllm_reasoning_count_oracle.py (docs/tools-and-reasoning.md §11).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    # vLLM's venv only (this project never installs it).
    from tokenizers.decoders import DecodeStream
    from vllm.entrypoints.openai.chat_completion.protocol import (  # type: ignore[import-not-found]
        ChatCompletionRequest,
    )
    from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found]
    from vllm.reasoning import ReasoningParserManager  # type: ignore[import-not-found]
    from vllm.tokenizers import get_tokenizer  # type: ignore[import-not-found]

    given = json.load(sys.stdin)
    tokenizer = get_tokenizer(given["tokenizer"])
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    stream_parser = ParserManager.get_parser(
        tool_parser_name=None,
        reasoning_parser_name="qwen3",
        enable_auto_tools=False,
        model_name="m",
        is_harmony=False,
        tokenizer=tokenizer,
    )
    results: list[dict[str, Any]] = []
    for ids in given["cases"]:
        counts: dict[str, Any] = {}
        for name in ("deepseek_r1", "qwen3", "granite"):
            try:
                parser = ReasoningParserManager.get_reasoning_parser(name)(tokenizer)
            except RuntimeError:  # deepseek_r1 without its markers in the vocabulary
                counts[name] = None
                continue
            counts[name] = parser.count_reasoning_tokens(ids)
        streamed = stream_parser(tokenizer)
        # vLLM's fast incremental detokenizer makes a stream's deltas (special tokens skipped).
        deltas = DecodeStream(skip_special_tokens=True)
        for position, token in enumerate(ids):
            streamed.parse_delta(
                deltas.step(tokenizer._tokenizer, token) or "",
                [token],
                request,
                prompt_token_ids=[1] if position == 0 else None,
                finished=position == len(ids) - 1,
            )
        counts["qwen3_stream"] = streamed.count_reasoning_tokens(tuple(ids)) if ids else 0
        results.append(counts)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
