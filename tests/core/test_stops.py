"""The router stop scanner: docs/stops-and-finalize.md §3.4-§3.8 and §5 B (cases 25-48).

Expected values compare the concatenated text and the stop fields, not chunk boundaries, except
where our holdback rule (only a possible stop prefix is held) is itself the assertion. Our
divergences from smg, each marked where it applies: incomplete UTF-8 at the end of a stream
(end of stream or a token stop) is flushed as U+FFFD instead of being dropped. Hypothesis
properties live in test_stops_properties.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

import msgspec
import pytest

from smg_trio.core.plan import StopSpec
from smg_trio.core.stops import HOLD, Emit, Hold, ScanOutcome, Stop, StopScanner
from smg_trio.core.tokenizer import TokenizerLike
from tests.core.mock_tokenizers import (
    BPE_EOS,
    BYTE_EOS,
    WORD_EOS,
    WORD_IM_END,
    BpeTokenizer,
    ByteMockTokenizer,
    ByteTableMockTokenizer,
    WithoutTokenBytes,
    WordMockTokenizer,
)

T2_PATHS = [
    pytest.param(ByteMockTokenizer(), id="window-path"),
    pytest.param(ByteTableMockTokenizer(), id="byte-path"),
]
BPE_BYTES = BpeTokenizer()
BPE_WINDOW = WithoutTokenBytes(BPE_BYTES)
WORD_SPECIALS = frozenset({999, 1000, 1001, 1002, 1003})


def scanner(
    tokenizer: TokenizerLike,
    strings: Sequence[str] = (),
    token_ids: Sequence[int] = (),
    *,
    skip: bool = True,
    visible: bool = False,
) -> StopScanner:
    spec = StopSpec(
        strings=tuple(strings),
        token_ids=tuple(token_ids),
        skip_special_tokens=skip,
        no_stop_trim=visible,
    )
    return StopScanner(spec, tokenizer)


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """What the client ends up with: all text sent, and how the choice ended."""

    text: str
    stopped: bool = False
    matched: str | None = None
    token_id: int | None = None


def run(scan: StopScanner, batches: Sequence[Sequence[int]], *, finish: bool = True) -> Run:
    """Feed engine messages until a stop, then end the stream like the pipeline does."""
    text = ""
    for batch in batches:
        outcome = scan.feed(batch)
        text += outcome_text(outcome)
        if isinstance(outcome, Stop):
            return Run(text=text, stopped=True, matched=outcome.matched, token_id=outcome.token_id)
    if finish:
        outcome = scan.finish()
        text += outcome_text(outcome)
        if isinstance(outcome, Stop):
            return Run(text=text, stopped=True, matched=outcome.matched, token_id=outcome.token_id)
    return Run(text=text)


def outcome_text(outcome: ScanOutcome) -> str:
    match outcome:
        case Emit(text=text) | Stop(text=text):
            return text
        case Hold():
            return ""
        case _:
            assert_never(outcome)


def per_token(ids: Sequence[int]) -> list[list[int]]:
    return [[token_id] for token_id in ids]


# -- token stops ----------------------------------------------------------------------------


def test_hidden_token_stop_case_25() -> None:
    scan = scanner(WordMockTokenizer(), token_ids=[WORD_EOS])
    assert scan.feed([1]) == Emit("Hello")
    assert scan.feed([WORD_EOS]) == Stop(text="", token_id=WORD_EOS)
    assert scan.feed([2]) == Stop(text="", token_id=WORD_EOS)
    assert scan.matched_stop is None
    assert scan.stop_token_id == WORD_EOS


def test_visible_token_stop_case_26() -> None:
    shown = scanner(WordMockTokenizer(), token_ids=[WORD_EOS], skip=False, visible=True)
    assert run(shown, [[1], [WORD_EOS]]) == Run(text="Hello<eos>", stopped=True, token_id=WORD_EOS)
    skipped = scanner(WordMockTokenizer(), token_ids=[WORD_EOS], skip=True, visible=True)
    assert skipped.feed([1]) == Emit("Hello")
    assert skipped.feed([WORD_EOS]) == Stop(text="", token_id=WORD_EOS)


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_token_stop_flushes_a_partial_char_case_39(tokenizer: TokenizerLike) -> None:
    # Our divergence: smg loses the pending bytes silently; a stop token ends the stream, so we
    # render them as U+FFFD, the same text as if the engine had stopped there itself.
    scan = scanner(tokenizer, token_ids=[BYTE_EOS])
    result = run(scan, per_token([*b"hi", 0xF0, 0x9F, BYTE_EOS]))
    assert result == Run(text="hi\ufffd", stopped=True, token_id=BYTE_EOS)


def test_eos_text_visibility_case_48() -> None:
    ids = [*b"ok", BYTE_EOS]
    tokenizer = ByteTableMockTokenizer()
    assert run(scanner(tokenizer, token_ids=[BYTE_EOS], skip=False), [ids]).text == "ok"
    hidden_by_skip = scanner(tokenizer, token_ids=[BYTE_EOS], skip=True, visible=True)
    assert run(hidden_by_skip, [ids]).text == "ok"
    shown = scanner(tokenizer, token_ids=[BYTE_EOS], skip=False, visible=True)
    assert run(shown, [ids]) == Run(text="ok<eos>", stopped=True, token_id=BYTE_EOS)


# -- string stops over word tokens (T1) -------------------------------------------------------


def test_hidden_stop_spanning_tokens_case_27() -> None:
    scan = scanner(WordMockTokenizer(), ["Hello world"])
    assert scan.feed([1]) is HOLD  # "Hello" may begin the stop
    assert scan.feed([2]) == Stop(text="", matched="Hello world")
    assert scan.feed([3]) == Stop(text="", matched="Hello world")
    assert scan.matched_stop == "Hello world"
    assert scan.stop_token_id is None


def test_visible_stop_spanning_tokens_case_28() -> None:
    scan = scanner(WordMockTokenizer(), ["Hello world"], visible=True)
    assert scan.feed([1]) is HOLD
    assert scan.feed([2]) == Stop(text="Hello world", matched="Hello world")


def test_text_before_a_spanning_stop_survives_case_29() -> None:
    scan = scanner(WordMockTokenizer(), ["Hello world"])
    # Our holdback emits "test" at once (it cannot begin the stop); smg holds it in its window.
    assert scan.feed([3]) == Emit("test")
    assert scan.feed([1]) == Emit(" ")  # " Hello": only "Hello" may begin the stop
    assert scan.held_text == "Hello"
    assert scan.feed([2]) == Stop(text="", matched="Hello world")


def test_ids_after_the_stop_are_never_decoded_case_30() -> None:
    tokenizer = WordMockTokenizer()
    scan = scanner(tokenizer, ["Hello world test"])
    assert [scan.feed([1]), scan.feed([2])] == [HOLD, HOLD]
    assert scan.feed([3, 4]) == Stop(text="", matched="Hello world test")
    assert all(4 not in ids for ids in tokenizer.decode_calls)


def test_stop_at_the_very_first_token_case_31() -> None:
    scan = scanner(WordMockTokenizer(), ["."])
    assert scan.feed([6, 1]) == Stop(text="", matched=".")


def test_no_match_releases_everything_case_32() -> None:
    scan = scanner(WordMockTokenizer(), ["NEVER"])
    # Our holdback rule: nothing here can begin "NEVER", so nothing is ever held.
    assert [scan.feed([token_id]) for token_id in (1, 2, 3)] == [
        Emit("Hello"),
        Emit(" world"),
        Emit(" test"),
    ]
    assert scan.held_text == ""
    assert scan.finish() is HOLD
    assert not scan.is_stopped


@pytest.mark.parametrize(
    ("stops", "text", "matched"),
    [
        (["d", "world"], "Hello ", "world"),  # same end: the longest
        (["world", "d"], "Hello ", "world"),  # list order is irrelevant
        (["world", "wor"], "Hello ", "wor"),  # earlier end wins
    ],
)
def test_match_selection_case_33(stops: list[str], text: str, matched: str) -> None:
    result = run(scanner(WordMockTokenizer(), stops), [[1], [2]])
    assert result == Run(text=text, stopped=True, matched=matched)


def test_empty_stop_strings_are_ignored_case_34() -> None:
    scan = scanner(WordMockTokenizer(), ["", "test"])
    assert run(scan, [[1], [3], [2]]) == Run(text="Hello ", stopped=True, matched="test")
    only_empty = scanner(WordMockTokenizer(), [""])
    assert [only_empty.feed([1]), only_empty.feed([2])] == [Emit("Hello"), Emit(" world")]
    assert only_empty.held_text == ""


def test_stop_inside_one_engine_message_case_35() -> None:
    tokenizer = WordMockTokenizer()
    scan = scanner(tokenizer, ["."])
    assert scan.feed([1, 2, 6, 3]) == Stop(text="Hello world ", matched=".")
    assert all(3 not in ids for ids in tokenizer.decode_calls)


def test_special_token_stop_string_case_47() -> None:
    kept = scanner(WordMockTokenizer(special_ids=WORD_SPECIALS), ["<|im_end|>"], skip=False)
    result = run(kept, [[1], [WORD_IM_END], [2]])
    assert result == Run(text="Hello ", stopped=True, matched="<|im_end|>")
    # Skipped, the special token has no text, so the string can never match; the engine stops
    # on id 1002 (finalize converts the single-token stop) and reports its own matched_stop.
    for ids, text in (([[1], [WORD_IM_END]], "Hello"), ([[1], [WORD_IM_END], [2]], "Hello world")):
        skipped = scanner(WordMockTokenizer(special_ids=WORD_SPECIALS), ["<|im_end|>"], skip=True)
        assert run(skipped, ids) == Run(text=text)


# -- string stops over bytes (T2, both detokenizer paths) -------------------------------------


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_cjk_stop_over_split_chars_case_36(tokenizer: TokenizerLike) -> None:
    scan = scanner(tokenizer, ["文"])
    outcomes = [scan.feed([byte]) for byte in "a中文b".encode()]
    assert "".join(map(outcome_text, outcomes)) == "a中"
    assert outcomes[-1] == Stop(text="", matched="文")
    assert outcomes[1:3] == [HOLD, HOLD]  # the first two bytes of 中
    assert all("\ufffd" not in outcome_text(outcome) for outcome in outcomes)


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_stop_after_a_four_byte_char_case_37(tokenizer: TokenizerLike) -> None:
    result = run(scanner(tokenizer, ["x"]), per_token("hi🚀x".encode()))
    assert result == Run(text="hi🚀", stopped=True, matched="x")


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_incomplete_bytes_at_end_of_stream_case_38(tokenizer: TokenizerLike) -> None:
    # Our divergence: smg's expected text is "hi" (the bytes dropped); ours ends in U+FFFD.
    result = run(scanner(tokenizer), per_token([*b"hi", 0xE4, 0xB8]))
    assert result == Run(text="hi\ufffd")


@pytest.mark.parametrize("tokenizer", T2_PATHS)
@pytest.mark.parametrize(
    ("stops", "text", "output", "matched"),
    [(["b", "ab"], "xab", "x", "ab"), (["abc", "b"], "abc", "a", "b")],
)
def test_overlapping_stops_case_40(
    tokenizer: TokenizerLike, stops: list[str], text: str, output: str, matched: str
) -> None:
    ids = list(text.encode())
    for batches in ([ids], per_token(ids)):
        result = run(scanner(tokenizer, stops), batches)
        assert result == Run(text=output, stopped=True, matched=matched)


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_partial_stop_prefix_is_flushed_at_end_case_41(tokenizer: TokenizerLike) -> None:
    scan = scanner(tokenizer, ["END"])
    assert run(scan, per_token(b"valueEN"), finish=False).text == "value"
    assert scan.held_text == "EN"  # our holdback: exactly the possible stop prefix
    assert scan.finish() == Emit("EN")
    assert not scan.is_stopped


@pytest.mark.parametrize("tokenizer", T2_PATHS)
def test_visible_stop_discards_the_rest_case_42(tokenizer: TokenizerLike) -> None:
    for batches in ([list(b"valueEND tail")], per_token(b"valueEND tail")):
        result = run(scanner(tokenizer, ["END"], visible=True), batches)
        assert result == Run(text="valueEND", stopped=True, matched="END")


MULTIBYTE_STOPS = [" ×", "Δ", "°", " (∆", " –", "€", "中", "🚀", "💡"]


@pytest.mark.parametrize("tokenizer", T2_PATHS)
@pytest.mark.parametrize("stop", MULTIBYTE_STOPS)
def test_multibyte_stops_at_every_position_case_43(tokenizer: TokenizerLike, stop: str) -> None:
    for head in ("", "2", "ab×", "Δ°", " (", "€ – 中"):
        text = head + stop + " 3"
        expected = text[: text.index(stop)]
        assert run(scanner(tokenizer, [stop]), per_token(text.encode())).text == expected
    assert run(scanner(ByteTableMockTokenizer(), [" ×"]), [list(b"2 \xc3\x97 3")]).text == "2"


def test_multibyte_stops_never_match_word_tokens_case_43() -> None:
    tokenizer = WordMockTokenizer()
    result = run(scanner(tokenizer, MULTIBYTE_STOPS), per_token([1, 2, 3, 4, 5]))
    assert result == Run(text=tokenizer.decode([1, 2, 3, 4, 5], skip_special_tokens=True))


def _bpe_token_with_partial_tail() -> tuple[int, str]:
    """A BPE id whose bytes are whole characters followed by an incomplete one, and its text."""
    for token_id in range(BPE_BYTES.vocab_size):
        raw = BPE_BYTES.token_bytes(token_id) or b""
        for cut in range(len(raw) - 1, 0, -1):
            try:
                whole = raw[:cut].decode()
            except UnicodeDecodeError:
                continue
            if whole.strip() and raw[cut] >= 0xC0:
                return token_id, whole
    raise AssertionError("the trained BPE has no such token")


@pytest.mark.parametrize("tokenizer", [BPE_WINDOW, BPE_BYTES], ids=["window-path", "byte-path"])
@pytest.mark.parametrize("ending", ["finish", "token-stop"])
def test_stop_completed_by_text_released_at_the_end(tokenizer: TokenizerLike, ending: str) -> None:
    # The token's whole characters stay inside the detokenizer behind its incomplete tail; only
    # the end of the stream releases them, and a stop they complete must still win.
    token_id, whole = _bpe_token_with_partial_tail()
    stop = whole.strip()[-1]
    ids = [*tokenizer.encode("ab", add_special_tokens=False), token_id]
    if ending == "token-stop":
        ids.append(BPE_EOS)
    scan = scanner(tokenizer, [stop], [BPE_EOS])
    result = run(scan, per_token(ids))
    assert result == Run(text="ab" + whole[: whole.rindex(stop)], stopped=True, matched=stop)


def test_string_stops_match_only_text_ending_after_min_tokens() -> None:
    """vLLM checks stop strings once more than min_tokens tokens were generated: a stop inside
    the first min_tokens tokens is ordinary text, and one ending later still matches even when
    it began earlier."""
    t1 = WordMockTokenizer()
    spec = StopSpec(strings=("Hello",), min_tokens=2)
    early = StopScanner(spec, t1)
    # "Hello world Hello": the first Hello (token 1 of 2) must not stop the choice.
    first, second, third = early.feed([1]), early.feed([2]), early.feed([1])
    assert isinstance(first, Emit)
    assert isinstance(second, Emit)
    assert isinstance(third, Stop)
    assert third.matched == "Hello"
    assert first.text + second.text + third.text == "Hello world "
    spanning = StopScanner(StopSpec(strings=("Hello world",), min_tokens=1), t1)
    assert spanning.feed([1]) == HOLD  # held: a later token may complete the stop
    assert spanning.feed([2]) == Stop(text="", matched="Hello world")


def test_a_stream_ending_within_min_tokens_releases_its_held_text() -> None:
    scan = StopScanner(StopSpec(strings=("Hello world",), min_tokens=5), WordMockTokenizer())
    assert scan.feed([1]) == HOLD
    assert scan.finish() == Emit("Hello")
