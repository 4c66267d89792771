"""Pure. A choice's reasoning count as its tokens arrive, for continuous usage (every chunk of a
stream says its choice's count so far, docs/tools-and-reasoning.md §11).

`ReasoningProgress.count(ids)` equals `reasoning_tokens(rule, ids, tokenizer)` for every prefix
`ids` of one choice's output, but reads only the ids it has not seen: each rule as a fold
(deepseek_r1's depth, Harmony's header state, qwen3's streamed state of
`reasoning_tokens.MarkedReasoning.run_streamed`), the markers looked up once. Counting the
whole prefix again for every chunk cost a chunk time in proportion to the output so far (a
long stream's CPU grew with its square).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from smg_trio.core.detokenize import Detokenizer
from smg_trio.core.plan import ReasoningCount
from smg_trio.core.reasoning_tokens import (
    THINK_END,
    THINK_START,
    MarkedReasoning,
    reasoning_header,
    reasoning_tokens,
    single_token,
)
from smg_trio.core.tokenizer import TokenizerLike


class ReasoningProgress:
    """One choice's count so far under `rule` (see the module's docstring)."""

    __slots__ = ("_fold", "_rule", "_seen", "_tokenizer")

    def __init__(self, rule: ReasoningCount, tokenizer: TokenizerLike) -> None:
        self._rule, self._tokenizer = rule, tokenizer
        self._seen = 0
        self._fold: _Fold | None = _fold_for(rule, tokenizer)

    def count(self, ids: Sequence[int]) -> int:
        """The count of `ids`, which extend the ids of the previous call."""
        fold = self._fold
        if fold is None:  # a rule with no fold: the whole prefix each time
            return reasoning_tokens(self._rule, ids, self._tokenizer)
        for token in ids[self._seen :]:
            fold.step(token)
        self._seen = len(ids)
        return fold.value()


class _Fold(Protocol):
    def step(self, token: int) -> None: ...

    def value(self) -> int: ...


def _fold_for(rule: ReasoningCount, tokenizer: TokenizerLike) -> _Fold | None:
    if rule.parser == "deepseek_r1":
        return _ThinkSpans(single_token(tokenizer, THINK_START), single_token(tokenizer, THINK_END))
    if rule.parser == "granite":
        return _Zero()
    if rule.parser in ("openai_gptoss", "harmony"):
        return _Harmony(tokenizer)
    if rule.parser == "qwen3" and rule.streamed:
        if not rule.thinking:
            return _Zero()
        dropped = tokenizer.special_token_ids if rule.special_ids is None else rule.special_ids
        return _StreamedMarked(tokenizer, dropped, rule.skip_special_tokens)
    return None


class _Zero:
    def step(self, token: int) -> None:
        pass

    def value(self) -> int:
        return 0


class _ThinkSpans:
    """`reasoning_tokens.think_spans`, a token at a time."""

    def __init__(self, start: int | None, end: int | None) -> None:
        self._start, self._end = start, end
        self._depth = self._count = 0

    def step(self, token: int) -> None:
        if self._start is None or self._end is None:
            return
        if token == self._start:
            self._depth += 1
        elif token == self._end:
            self._depth = max(0, self._depth - 1)
        elif self._depth:
            self._count += 1

    def value(self) -> int:
        return self._count


class _Harmony:
    """`reasoning_tokens.harmony_reasoning`, a token at a time."""

    def __init__(self, tokenizer: TokenizerLike) -> None:
        self._tokenizer = tokenizer
        self._message = single_token(tokenizer, "<|message|>")
        self._ends = {single_token(tokenizer, f"<|{name}|>") for name in ("end", "call", "return")}
        self._special = tokenizer.special_token_ids
        self._header: list[int] | None = []  # None: inside a message's content
        self._counted = False
        self._count = 0

    def step(self, token: int) -> None:
        if self._header is not None:
            if token == self._message:
                header = self._tokenizer.decode(self._header, skip_special_tokens=False)
                self._counted = reasoning_header(header)
                self._header = None
            else:
                self._header.append(token)
        elif token in self._ends:
            self._header, self._counted = [], False
        elif self._counted and token not in self._special:
            self._count += 1

    def value(self) -> int:
        return self._count


class _StreamedMarked:
    """qwen3's streamed rule (`MarkedReasoning.run_streamed`), a token at a time: the text
    since the last marker is held with its credited tokens; `value` scans it on a copy of the
    state, as the whole run's final scan would at this length."""

    def __init__(
        self, tokenizer: TokenizerLike, dropped: frozenset[int], skip_special_tokens: bool
    ) -> None:
        self._tokenizer = tokenizer
        self._marked = MarkedReasoning(tokenizer, dropped)
        self._dropped = dropped
        self._detokenizer = Detokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
        self._text: list[str] = []
        self._counts: list[int] = []

    def step(self, token: int) -> None:
        marked = self._marked
        if not marked.reasoning:
            return
        delta = self._detokenizer.step(token)
        marker = marked.id_markers.get(token)
        if marker is not None or token in self._dropped:
            marked.scan("".join(self._text), self._counts)
            self._text, self._counts = [], []
            marked.mark(marker)
            return
        if not delta:
            return
        alone = self._tokenizer.decode((token,), skip_special_tokens=False)
        credited = [0] * len(delta)
        credited[max(0, delta.find(alone) if alone else 0)] = 1
        self._text.append(delta)
        self._counts += credited

    def value(self) -> int:
        marked = self._marked
        count, reasoning = marked.count, marked.reasoning
        marked.scan("".join(self._text), self._counts)
        value = marked.count
        marked.count, marked.reasoning = count, reasoning
        return value
