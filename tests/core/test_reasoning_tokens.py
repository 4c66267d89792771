"""Reasoning tokens in usage, counted per parser as vLLM 0.32's parsers count them
(core/reasoning_tokens.py, docs/tools-and-reasoning.md §11)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from smg_trio.core.parsers.registry import REASONING_PARSERS
from smg_trio.core.plan import ReasoningCount
from smg_trio.core.reasoning_tokens import (
    _RULES,
    harmony_reasoning,
    reasoning_tokens,
    think_spans,
)
from smg_trio.model.folder import load_model_dir
from smg_trio.model.hf_tokenizer import ModelTokenizer

# The shipped test model's tokenizer: `<think>` and `</think>` are single tokens (3999, 4000),
# `<tool_call>` is not; Harmony's markers are special tokens.
TOKENIZER_FILE: Final = Path(__file__).resolve().parents[1] / "harmony_model" / "tokenizer.json"
START, END = 3999, 4000


@functools.cache
def tokenizer() -> ModelTokenizer:
    return ModelTokenizer(Tokenizer.from_file(str(TOKENIZER_FILE)))


def count(parser: str, ids: list[int], *, thinking: bool = True) -> int:
    return reasoning_tokens(ReasoningCount(parser=parser, thinking=thinking), ids, tokenizer())


def test_every_reasoning_parser_has_a_counting_rule() -> None:
    assert set(_RULES) == set(REASONING_PARSERS)


# A span tree: text ids (1..9), nested spans; the expected count is the text inside spans.
_text = st.lists(st.integers(1, 9), max_size=4)


def _span(children: list[tuple[list[int], int]]) -> tuple[list[int], int]:
    ids = [START]
    inside = 0
    for part, _ in children:
        ids += part
        inside += sum(1 for t in part if t not in (START, END))
    return [*ids, END], inside


_node = st.recursive(
    _text.map(lambda ids: (ids, 0)), lambda kids: st.lists(kids, max_size=3).map(_span)
)


@given(
    st.lists(st.one_of(_node, st.just(([END], 0))), max_size=6),  # stray ends are ignored
    st.one_of(st.none(), _text),  # a span never closed: the rest is reasoning
)
def test_deepseek_r1_counts_the_ids_inside_think_spans(
    parts: list[tuple[list[int], int]], open_tail: list[int] | None
) -> None:
    ids = [t for part, _ in parts for t in part]
    expected = sum(inside for _, inside in parts)
    if open_tail is not None:
        ids += [START, *open_tail]
        expected += len(open_tail)
    assert think_spans(ids, START, END) == expected
    assert count("deepseek_r1", ids) == expected


def test_deepseek_r1_counts_nothing_without_single_token_markers() -> None:
    assert think_spans([START, 5, 6, END], None, END) == 0


# vLLM 0.32's own parsers on this tokenizer (its qwen3 parser engine, streamed and not, and
# its deepseek_r1 parser): (text, extra ids after it, qwen3, deepseek_r1).
VLLM_FACTS: Final = [
    ("hello world how are you", [], 13, 0),
    ("<think>hello world</think>answer here", [], 7, 7),
    ("hello world</think>answer", [], 7, 0),  # the prompt opened the block
    ("abc</think>def</think>ghi", [], 2, 0),
    ("a <think> b", [], 3, 1),
    ("x </think> y", [], 2, 0),
    ("\n\n<think>\n\nhi", [], 5, 3),
    ("think <tool_call> then", [], 4, 0),  # a call ends qwen3's reasoning (a text marker here)
    ("<think>a<think>b</think>c</think>d", [], 2, 3),
    ("stray</think><think>in</think>out", [], 2, 1),
    ("a</thi", [], 5, 0),  # a partial marker is text
    ("a</th", [END], 4, 0),  # the id marker, after text spelling part of it
]


@pytest.mark.parametrize(("text", "extra", "qwen3", "deepseek_r1"), VLLM_FACTS)
def test_counts_equal_vllms(text: str, extra: list[int], qwen3: int, deepseek_r1: int) -> None:
    ids = tokenizer().encode(text, add_special_tokens=False) + extra
    assert count("qwen3", ids) == qwen3
    assert count("deepseek_r1", ids) == deepseek_r1
    assert count("granite", ids) == 0  # vLLM's granite parser does not count


def test_qwen3_without_thinking_counts_nothing() -> None:
    ids = tokenizer().encode("plain answer</think>", add_special_tokens=False)
    assert count("qwen3", ids, thinking=False) == 0
    assert count("deepseek_r1", [START, 5, END], thinking=False) == 1  # r1 reads only ids


# The test tokenizer's configs name `<|endoftext|>` (0) and `<|pad|>` (3) as special tokens;
# `<|im_start|>` (1) and `<|im_end|>` (2) are special-marked added tokens they do not name.
NAMED_SPECIALS: Final = load_model_dir(TOKENIZER_FILE.parent).named_special_ids


@pytest.mark.parametrize(
    ("extra", "vllm_count"),
    [([2], 7), ([0], 6), ([1, 2, 0], 8)],  # vLLM 0.32's qwen3 counts after "some thought" (6)
)
def test_qwen3_drops_the_named_special_tokens_only(extra: list[int], vllm_count: int) -> None:
    assert {0, 3} == NAMED_SPECIALS
    ids = tokenizer().encode("some thought", add_special_tokens=False) + extra
    rule = ReasoningCount(parser="qwen3", special_ids=NAMED_SPECIALS)
    assert reasoning_tokens(rule, ids, tokenizer()) == vllm_count
    # Without the configs' names, every special-marked added token is dropped.
    assert count("qwen3", ids) == 6


@pytest.mark.parametrize(
    ("text", "expected_text"),
    [
        (
            "<|channel|>analysis<|message|>Let me think.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Four.<|return|>",
            "Let me think.",
        ),
        ("<|channel|>commentary<|message|>a preamble<|end|>", ""),
        (
            '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>',
            '{"a": 1}',
        ),
        ("<|channel|>analysis<|message|>never ends", "never ends"),
    ],
)
def test_harmony_counts_analysis_and_addressed_commentary(text: str, expected_text: str) -> None:
    tok = tokenizer()
    ids = tok.encode(text, add_special_tokens=False)
    expected = len(tok.encode(expected_text, add_special_tokens=False)) if expected_text else 0
    assert harmony_reasoning(ids, tok) == expected
    assert count("openai_gptoss", ids) == count("harmony", ids) == expected


def test_a_stream_credits_no_token_whose_delta_has_no_text() -> None:
    """vLLM's stream counts delta by delta: the first token of a split character adds no text
    to its delta and is not counted there; the whole output's count credits it."""
    tok = tokenizer()
    ids = tok.encode("plan 日本 done", add_special_tokens=False)
    pieces = [tok.decode([t], skip_special_tokens=False) for t in ids]
    split = sum(1 for piece in pieces if "\ufffd" in piece)
    assert split  # the test tokenizer splits these characters over tokens
    whole = ReasoningCount(parser="qwen3")
    streamed = ReasoningCount(parser="qwen3", streamed=True)
    assert reasoning_tokens(whole, ids, tok) == len(ids)
    # "本" is two tokens here: the first makes no text of its own in a stream.
    assert reasoning_tokens(streamed, ids, tok) == len(ids) - 1
