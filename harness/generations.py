"""Pure (but for reading the demo corpus). The synthetic generations the pure-core benches
(bench/pipeline/) time and the tests check the assembler against: one long generation of
prose, code and multilingual text, and the same text as a qwen3/hermes answer with a tool call
and as gpt-oss's Harmony channels, with the parsers and stop strings that go with them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from smg_trio.core.plan import ParserSetup
from smg_trio.core.tokenizer import TokenizerLike

CHECKOUT: Final = Path(__file__).resolve().parent.parent
CORPUS_DIR: Final = CHECKOUT / "scripts" / "demo_corpus"
HARMONY_MODEL: Final = CHECKOUT / "tests" / "harmony_model"
GENERATION_TOKENS: Final = 5150  # the least `long_generation` makes: core_pipeline's positions
STOP_SETS: Final[dict[int, tuple[str, ...]]] = {
    0: (),
    1: ("\n\nUser:",),
    4: ("\n\nUser:", "</answer>", " the end.", "### Observation"),
}
PARSERS: Final = ParserSetup(
    tool_parser="hermes", tool_names=frozenset({"write"}), reasoning_parser="qwen3"
)
HARMONY_PARSERS: Final = ParserSetup(
    tool_parser="openai", tool_names=frozenset({"write"}), reasoning_parser="openai_gptoss"
)


def long_generation(tokenizer: TokenizerLike, stops: Sequence[str]) -> list[int]:
    """About 5,200 tokens of prose, code and multilingual text (CJK, emoji), in turns."""
    sources = [
        (CORPUS_DIR / name).read_text(encoding="utf-8").splitlines(keepends=True)
        for name in ("prose.txt", "code.txt", "multilingual.txt")
    ]
    lines: list[str] = []
    ids: list[int] = []
    turn = 0
    while len(ids) < GENERATION_TOKENS:
        chunk = "".join(source[turn % len(source)] for source in sources)
        lines.append(chunk)
        ids.extend(tokenizer.encode(chunk, add_special_tokens=False))
        turn += 1
    text = "".join(lines)
    matching = [stop for stop in stops if stop in text]
    assert not matching, f"bench stops must never match: {matching}"
    return ids


def parsed_generation(tokenizer: TokenizerLike, ids: Sequence[int]) -> tuple[list[int], str]:
    """The same generation as a reasoning model's answer with a tool call: its first third
    inside `<think>…</think>`, the second as content, the last as the JSON-string argument of a
    hermes call (so every token passes a parser state). Returns the ids and the arguments."""
    third = len(ids) // 3
    thought, answer, payload = (
        tokenizer.decode(part, skip_special_tokens=True)
        for part in (ids[:third], ids[third : 2 * third], ids[2 * third :])
    )
    arguments = json.dumps({"text": payload}, ensure_ascii=False)
    text = (
        f"<think>{thought}</think>{answer}\n<tool_call>\n"
        f'{{"name": "write", "arguments": {arguments}}}\n</tool_call>'
    )
    return tokenizer.encode(text, add_special_tokens=False), arguments


def harmony_generation(tokenizer: TokenizerLike, ids: Sequence[int]) -> list[int]:
    """The same generation as gpt-oss would say it (docs/tools-and-reasoning.md §10): its first
    third on the analysis channel, the second a commentary preamble, the last the JSON-string
    argument of a call to functions.write; `tokenizer` has Harmony's special tokens."""
    third = len(ids) // 3
    thought, preamble, payload = (
        tokenizer.decode(part, skip_special_tokens=True)
        for part in (ids[:third], ids[third : 2 * third], ids[2 * third :])
    )
    arguments = json.dumps({"text": payload}, ensure_ascii=False)
    text = (
        f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant<|channel|>commentary"
        f"<|message|>{preamble}<|end|><|start|>assistant<|channel|>commentary "
        f"to=functions.write <|constrain|>json<|message|>{arguments}"
    )
    return tokenizer.encode(text, add_special_tokens=False)
