"""Continuous usage's reasoning count, a chunk at a time (core/reasoning_progress.py): for every
rule, the count it keeps as a choice's ids arrive equals the whole prefix counted afresh
(core/reasoning_tokens.py), at every length."""

from __future__ import annotations

from typing import Any, Final, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.plan import ReasoningCount
from smg_trio.core.reasoning_progress import ReasoningProgress
from smg_trio.core.reasoning_tokens import reasoning_tokens, single_token
from smg_trio.core.tokenizer import TokenizerLike
from tests.core.test_reasoning_tokens import END, START, tokenizer

pytestmark = pytest.mark.timeout(120)

_MARKS: Final = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>")
RULES: Final = (
    ReasoningCount(parser="deepseek_r1"),
    ReasoningCount(parser="granite"),
    ReasoningCount(parser="harmony"),
    ReasoningCount(parser="openai_gptoss"),
    ReasoningCount(parser="qwen3"),  # the whole-output rule: counted afresh, as before
    ReasoningCount(parser="qwen3", streamed=True),
    ReasoningCount(parser="qwen3", streamed=True, skip_special_tokens=False),
    ReasoningCount(parser="qwen3", streamed=True, thinking=False),
)


def _special_ids() -> list[int]:
    found = [single_token(tokenizer(), mark) for mark in _MARKS]
    return [START, END, *(token for token in found if token is not None)]


# Marker and special ids often, other ids of the vocabulary (words, byte pieces) between them.
_ids = st.lists(st.one_of(st.sampled_from(_special_ids()), st.integers(1, 3998)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(rule=st.sampled_from(RULES), ids=_ids, cuts=st.lists(st.integers(1, 6), max_size=60))
def test_the_count_so_far_equals_the_prefix_counted_afresh(
    rule: ReasoningCount, ids: list[int], cuts: list[int]
) -> None:
    progress = ReasoningProgress(rule, tokenizer())
    seen = 0
    for cut in [*cuts, len(ids)]:  # chunks of 1 to 6 ids, as an engine's batches come
        seen = min(len(ids), seen + cut)
        prefix = ids[:seen]
        assert progress.count(prefix) == reasoning_tokens(rule, prefix, tokenizer())
        if seen == len(ids):
            break


class _Counting:
    """A tokenizer that counts the calls made to it."""

    def __init__(self, inner: TokenizerLike) -> None:
        self._inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attribute(*args, **kwargs)

        return counted


def test_a_long_stream_reads_each_id_once_not_the_whole_prefix_per_chunk() -> None:
    """400 ids, one chunk each: the tokenizer is called a bounded number of times per id (the
    whole prefix counted per chunk calls it ~80,000 times), and the count is the same."""
    rule = ReasoningCount(parser="qwen3", streamed=True)
    ids = [100 + i % 500 for i in range(400)]
    counting = _Counting(tokenizer())
    progress = ReasoningProgress(rule, cast(TokenizerLike, counting))
    for length in range(1, len(ids) + 1):
        progress.count(ids[:length])
    assert progress.count(ids) == reasoning_tokens(rule, ids, tokenizer())
    assert counting.calls <= 10 * len(ids)
