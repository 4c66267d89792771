"""Pure. Where a reference vLLM EngineCore starts a request's grammar: after the reasoning, as
vLLM's structured-output manager gates it (docs/tools-and-reasoning.md §5, docs/wire.md §A.5).

vLLM's EngineCore knows a reasoning parser only when it is launched with one
(`--reasoning-parser`, its `structured_outputs_config.reasoning_parser`); ours takes the same
flag. Per request, the ADD's `reasoning_ended` says where the grammar starts:

- true, or an engine without a reasoning parser: from the first generated token;
- false: only after the output has said the reasoning's end marker;
- nil: the engine looks at the prompt: a prompt that already ended the reasoning (a template
  that closed the think block) is constrained from the first token, else as false.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from smg_trio.core.tokenizer import TokenizerLike

# The text that ends the reasoning, per vLLM reasoning-parser name.
REASONING_END_MARKERS: Final[dict[str, str]] = {
    "deepseek_r1": "</think>",
    "qwen3": "</think>",
}


def reasoning_end_ids(parser: str, tokenizer: TokenizerLike) -> tuple[int, ...]:
    """The ids of `parser`'s end marker in `tokenizer`'s vocabulary; ValueError if unknown."""
    marker = REASONING_END_MARKERS.get(parser)
    if marker is None:
        known = ", ".join(sorted(REASONING_END_MARKERS))
        raise ValueError(f"unknown reasoning parser {parser!r} (known: {known})")
    return tuple(tokenizer.encode(marker, add_special_tokens=False))


def grammar_gate(
    reasoning_ended: bool | None, prompt: Sequence[int], end_ids: Sequence[int]
) -> tuple[int, ...]:
    """The marker the request's grammar waits for; () when it constrains from the start."""
    if not end_ids or reasoning_ended:
        return ()
    if reasoning_ended is None and end_after(prompt, end_ids, 0) is not None:
        return ()
    return tuple(end_ids)


def end_after(ids: Sequence[int], marker: Sequence[int], start: int) -> int | None:
    """The position just after `marker`'s first whole occurrence in `ids[start:]`, or None."""
    width = len(marker)
    first = marker[0]
    for index in range(start, len(ids) - width + 1):
        if ids[index] == first and tuple(ids[index : index + width]) == tuple(marker):
            return index + width
    return None
