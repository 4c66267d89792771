"""Pure. How many of a choice's output tokens are reasoning, for
`usage.completion_tokens_details.reasoning_tokens` (Responses:
`usage.output_tokens_details.reasoning_tokens`), counted from the ids the engine produced as
vLLM 0.32's reasoning parser of the same name counts them (docs/tools-and-reasoning.md §11).
The count is usage only: it never changes what the text parsers separate.

- deepseek_r1: the ids strictly between a `<think>` id and its `</think>` id, spans nested by
  depth, a stray end ignored. Only single-token markers count: a vocabulary without them
  counts 0 (vLLM refuses such a model's requests instead).
- qwen3: the output starts in reasoning unless `enable_thinking` is false (then 0). The first
  `</think>` or `<tool_call>` ends it for good; `<think>` inside it is dropped markup. A token
  counts when its text starts inside reasoning text (not inside a marker). A marker that is
  one token of the vocabulary is matched by id only (its spelling in pieces is text); one
  that is not is matched in the text. The special tokens the tokenizer configs name (bos, eos,
  pad, unk, the additional ones: vLLM's set) are never counted. A chat stream counts as
  vLLM's does, delta by delta: a token whose delta has no text (a piece of a character, a
  skipped special token) is not counted there, though the whole output's count credits it.
- granite: 0, as vLLM's granite parser does not count.
- openai_gptoss / harmony: the non-special tokens of messages on the `analysis` channel, or on
  `commentary` with a recipient (a tool call's arguments); headers are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import msgspec

from smg_trio.core.detokenize import Detokenizer
from smg_trio.core.plan import GeneratePlan, ReasoningCount
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.runtime import Endpoint

THINK_START: Final = "<think>"
THINK_END: Final = "</think>"
TOOL_CALL_START: Final = "<tool_call>"


def single_token(tokenizer: TokenizerLike, text: str) -> int | None:
    """`text`'s id when the vocabulary has it as one token, else None."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return (
        ids[0]
        if len(ids) == 1 and tokenizer.decode(ids, skip_special_tokens=False) == text
        else None
    )


def think_spans(ids: Sequence[int], start: int | None, end: int | None) -> int:
    """deepseek_r1's rule: ids inside `<think>` … `</think>` spans, nested by depth."""
    if start is None or end is None:
        return 0
    count = depth = 0
    for token in ids:
        if token == start:
            depth += 1
        elif token == end:
            depth = max(0, depth - 1)
        elif depth:
            count += 1
    return count


def _deepseek_r1(ids: Sequence[int], tokenizer: TokenizerLike, rule: ReasoningCount) -> int:
    return think_spans(
        ids, single_token(tokenizer, THINK_START), single_token(tokenizer, THINK_END)
    )


def _first_chars(tokenizer: TokenizerLike, segment: Sequence[int], text: str) -> list[int]:
    """Per character of `text` (the segment decoded), how many tokens start there: each
    token's own text is looked for after the previous one's; one not found is put at the
    segment's first character."""
    counts = [0] * len(text)
    position = placed = 0
    for token in segment:
        alone = tokenizer.decode((token,), skip_special_tokens=False)
        if not alone:
            continue
        found = text.find(alone, position)
        if found < 0:
            continue
        counts[found] += 1
        placed += 1
        position = found + len(alone)
    if text and placed < len(segment):
        counts[0] += len(segment) - placed
    return counts


class MarkedReasoning:
    """qwen3's rule over one choice's ids (see the module's docstring)."""

    __slots__ = ("_dropped", "_text_markers", "_tokenizer", "count", "id_markers", "reasoning")

    def __init__(self, tokenizer: TokenizerLike, dropped: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._dropped = dropped
        self.id_markers: dict[int, str] = {}
        self._text_markers: list[str] = []
        for marker in (THINK_START, THINK_END, TOOL_CALL_START):
            token = single_token(tokenizer, marker)
            if token is None:
                self._text_markers.append(marker)
            else:
                self.id_markers[token] = marker
        self.count = 0
        self.reasoning = True

    def run(self, ids: Sequence[int]) -> int:
        """The whole output at once (a chat body, Responses)."""
        segment: list[int] = []
        for token in ids:
            if not self.reasoning:
                break
            marker = self.id_markers.get(token)
            if marker is None and token not in self._dropped:
                segment.append(token)
                continue
            self._segment(segment)
            segment = []
            self.mark(marker)
        self._segment(segment)
        return self.count

    def run_streamed(self, ids: Sequence[int], *, skip_special_tokens: bool) -> int:
        """Delta by delta, one token each, as vLLM's chat stream counts: a token is credited to
        its delta's text, so one whose delta has no text (a piece of a character, a skipped
        special token) is never counted."""
        detokenizer = Detokenizer(self._tokenizer, skip_special_tokens=skip_special_tokens)
        text: list[str] = []
        counts: list[int] = []
        for token in ids:
            if not self.reasoning:
                break
            delta = detokenizer.step(token)
            marker = self.id_markers.get(token)
            if marker is not None or token in self._dropped:
                self.scan("".join(text), counts)
                text, counts = [], []
                self.mark(marker)
                continue
            if not delta:
                continue
            alone = self._tokenizer.decode((token,), skip_special_tokens=False)
            credited = [0] * len(delta)
            credited[max(0, delta.find(alone) if alone else 0)] = 1
            text.append(delta)
            counts += credited
        self.scan("".join(text), counts)
        return self.count

    def mark(self, marker: str | None) -> None:
        if marker is not None and marker != THINK_START:
            self.reasoning = False

    def _segment(self, segment: Sequence[int]) -> None:
        """Ids between id markers and special tokens, decoded together."""
        if segment and self.reasoning:
            text = self._tokenizer.decode(segment, skip_special_tokens=False)
            self.scan(text, _first_chars(self._tokenizer, segment, text))

    def scan(self, text: str, counts: Sequence[int]) -> None:
        """`text` (with the tokens credited to each character): its text markers found."""
        position = 0
        while self.reasoning and text:
            found = [(at, m) for m in self._text_markers if (at := text.find(m, position)) >= 0]
            if not found:
                self.count += sum(counts[position:])
                return
            at, marker = min(found)
            self.count += sum(counts[position:at])
            position = at + len(marker)
            self.mark(marker)


def _qwen3(ids: Sequence[int], tokenizer: TokenizerLike, rule: ReasoningCount) -> int:
    if not rule.thinking:
        return 0
    dropped = tokenizer.special_token_ids if rule.special_ids is None else rule.special_ids
    counter = MarkedReasoning(tokenizer, dropped)
    if rule.streamed:
        return counter.run_streamed(ids, skip_special_tokens=rule.skip_special_tokens)
    return counter.run(ids)


def _none(ids: Sequence[int], tokenizer: TokenizerLike, rule: ReasoningCount) -> int:
    return 0


def harmony_reasoning(ids: Sequence[int], tokenizer: TokenizerLike) -> int:
    """Harmony's rule: content tokens of `analysis` messages and of `commentary` messages
    addressed to a recipient. The output opens inside an assistant header."""
    marks = {
        name: single_token(tokenizer, f"<|{name}|>")
        for name in ("start", "channel", "message", "end", "call", "return")
    }
    special = tokenizer.special_token_ids
    count = 0
    header: list[int] | None = []  # None: inside a message's content
    counted = False  # the current message's tokens are reasoning
    for token in ids:
        if header is not None:
            if token == marks["message"]:
                counted = reasoning_header(tokenizer.decode(header, skip_special_tokens=False))
                header = None
            else:
                header.append(token)
        elif token in (marks["end"], marks["call"], marks["return"]):
            header, counted = [], False
        elif counted and token not in special:
            count += 1
    return count


def reasoning_header(header: str) -> bool:
    """A header (`assistant<|channel|>analysis`, `… to=functions.f <|constrain|>json`) whose
    message is reasoning."""
    if "<|channel|>" not in header:
        return False
    role, _, rest = header.partition("<|channel|>")
    channel = rest.split("<|")[0].strip().split(" ")[0]
    recipient = "to=" in role or "to=" in rest
    return channel == "analysis" or (channel == "commentary" and recipient)


def _harmony(ids: Sequence[int], tokenizer: TokenizerLike, rule: ReasoningCount) -> int:
    return harmony_reasoning(ids, tokenizer)


_RULES: Final[Mapping[str, Callable[[Sequence[int], TokenizerLike, ReasoningCount], int]]] = {
    "deepseek_r1": _deepseek_r1,
    "qwen3": _qwen3,
    "granite": _none,
    "openai_gptoss": _harmony,
    "harmony": _harmony,
}


def reasoning_tokens(rule: ReasoningCount, ids: Sequence[int], tokenizer: TokenizerLike) -> int:
    """How many of one choice's `ids` are reasoning under `rule`."""
    return _RULES[rule.parser](ids, tokenizer, rule)


def reasoning_rule(plan: GeneratePlan) -> ReasoningCount | None:
    """How the plan's usage counts reasoning: a chat stream's as vLLM's stream counts."""
    rule = plan.reasoning_count
    if rule is None or not plan.stream or plan.endpoint is not Endpoint.CHAT:
        return rule
    skip = plan.stop_spec.skip_special_tokens
    return msgspec.structs.replace(rule, streamed=True, skip_special_tokens=skip)
