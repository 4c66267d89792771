"""Hypothesis properties of the stop scanner (docs/architecture.md §8, docs/stops-and-finalize.md §3.5).

The oracle: decode everything, then cut at the stop with the earliest end (ties: the longest).
Over T2 any byte string is representable, multibyte characters and broken UTF-8 included.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.stops import Stop
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.core.mock_tokenizers import (
    BPE_END,
    BPE_EOS,
    BYTE_EOS,
    ByteMockTokenizer,
    ByteTableMockTokenizer,
    WithoutTokenBytes,
)
from tests.core.test_stops import BPE_BYTES, BPE_WINDOW, Run, outcome_text, per_token, run, scanner

ALPHABET = "abE<>ND \n中文🚀é"
texts = st.text(ALPHABET, max_size=24)
stop_sets = st.lists(st.text(ALPHABET, max_size=4), max_size=4)
# Byte runs: valid text, or a stray byte that breaks UTF-8 (U+FFFD in the decode).
byte_runs = st.lists(
    st.one_of(
        texts.map(lambda text: list(text.encode())), st.sampled_from([[0x80], [0xE4], [0xF0, 0x9F]])
    ),
    max_size=4,
).map(lambda runs: [byte for run in runs for byte in run])


def oracle(decoded: str, stops: Sequence[str], *, visible: bool) -> tuple[str, str | None]:
    """Decode everything, then cut at the stop with the earliest end (ties: the longest)."""
    best: tuple[int, int, str] | None = None
    for stop in filter(None, stops):
        at = decoded.find(stop)
        if at >= 0 and (best is None or (at + len(stop), at) < (best[0], best[1])):
            best = (at + len(stop), at, stop)
    if best is None:
        return decoded, None
    end, start, stop = best
    return decoded[: end if visible else start], stop


def batched(ids: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({min(cut, len(ids)) for cut in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=500, deadline=None)
@given(
    ids=byte_runs,
    eos_at=st.none() | st.integers(0, 40),
    stops=stop_sets,
    visible=st.booleans(),
    byte_path=st.booleans(),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_output_equals_decode_then_cut(
    ids: list[int],
    eos_at: int | None,
    stops: list[str],
    visible: bool,
    byte_path: bool,
    cuts: list[int],
) -> None:
    tokenizer = ByteTableMockTokenizer() if byte_path else ByteMockTokenizer()
    if eos_at is not None:
        ids = [*ids[:eos_at], BYTE_EOS, *ids[eos_at:]]
    before_eos = ids[: ids.index(BYTE_EOS)] if BYTE_EOS in ids else ids
    decoded = tokenizer.decode(before_eos, skip_special_tokens=True)
    expected_text, expected_match = oracle(decoded, stops, visible=visible)
    result = run(scanner(tokenizer, stops, [BYTE_EOS], visible=visible), batched(ids, cuts))
    if expected_match is not None:
        assert result == Run(text=expected_text, stopped=True, matched=expected_match)
    elif BYTE_EOS in ids:
        assert result == Run(text=expected_text, stopped=True, token_id=BYTE_EOS)
    else:
        assert result == Run(text=expected_text)


@settings(max_examples=500, deadline=None)
@given(
    ids=byte_runs,
    stops=stop_sets,
    visible=st.booleans(),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_batching_never_changes_the_result(
    ids: list[int], stops: list[str], visible: bool, cuts: list[int]
) -> None:
    tokenizer = ByteTableMockTokenizer()
    one_by_one = run(scanner(tokenizer, stops, visible=visible), per_token(ids))
    assert run(scanner(tokenizer, stops, visible=visible), [ids]) == one_by_one
    assert run(scanner(tokenizer, stops, visible=visible), batched(ids, cuts)) == one_by_one


@settings(max_examples=500, deadline=None)
@given(ids=byte_runs, stops=stop_sets, visible=st.booleans())
def test_no_stop_text_leaks_and_holdback_is_minimal(
    ids: list[int], stops: list[str], visible: bool
) -> None:
    real_stops = [stop for stop in stops if stop]
    longest = max(map(len, real_stops), default=0)
    scan = scanner(ByteTableMockTokenizer(), stops, visible=visible)
    sent = ""
    for token_id in ids:
        outcome = scan.feed([token_id])
        sent += outcome_text(outcome)
        held = scan.held_text
        assert len(held) <= max(longest - 1, 0)
        if held:
            assert any(stop.startswith(held) for stop in real_stops)
        if isinstance(outcome, Stop):
            break
    else:
        sent += outcome_text(scan.finish())
    shown = sent
    if visible and scan.matched_stop is not None:
        assert sent.endswith(scan.matched_stop)
        shown = sent[:-1]  # a visible stop is the only stop text ever sent, and only at the end
    assert not any(stop in shown for stop in real_stops)


DEMO = load_model_dir(demo_model_path()).tokenizer
BPE_CASES: dict[str, tuple[TokenizerLike, tuple[int, ...]]] = {
    "bpe-window": (BPE_WINDOW, (BPE_EOS, BPE_END, BPE_END)),
    "bpe-bytes": (BPE_BYTES, (BPE_EOS, BPE_END, BPE_END)),
    "demo-window": (WithoutTokenBytes(DEMO), (0, 2, 3999)),
    "demo-bytes": (DEMO, (0, 2, 3999)),
}


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from(sorted(BPE_CASES)),
    text=st.text("ab <>ND\n.中文東京🚀👍🏽", max_size=40),
    added=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2))),
    stops=st.lists(st.text("ab <>ND\n.中文東京🚀", max_size=4), max_size=4),
    skip=st.booleans(),
    visible=st.booleans(),
)
def test_bpe_output_equals_decode_then_cut(
    case: str,
    text: str,
    added: list[tuple[int, int]],
    stops: list[str],
    skip: bool,
    visible: bool,
) -> None:
    tokenizer, added_ids = BPE_CASES[case]
    eos = tokenizer.eos_token_ids[0]
    ids = tokenizer.encode(text, add_special_tokens=False)
    for position, which in added:
        ids.insert(min(position, len(ids)), added_ids[which])
    before_eos = ids[: ids.index(eos)] if eos in ids else ids
    decoded = tokenizer.decode(before_eos, skip_special_tokens=skip)
    expected_text, expected_match = oracle(decoded, stops, visible=visible)
    if expected_match is None and visible and eos in ids:
        expected_text += tokenizer.decode([eos], skip_special_tokens=skip)
    result = run(scanner(tokenizer, stops, [eos], skip=skip, visible=visible), per_token(ids))
    assert result.text == expected_text
    assert result.matched == expected_match
