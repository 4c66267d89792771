"""The reference engines' logits-processor stand-ins (`engines.token_rules`): logit_bias forces
or bans, allowed_token_ids restricts, bad words never complete, min_tokens' mask still wins, and
a request stays one deterministic stream."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.engines.generation import (
    EosStop,
    Generation,
    Greedy,
    Mode,
    SamplingKey,
    Seeded,
    StopRules,
    TokenSource,
)
from smg_trio.engines.reasoning_gate import grammar_gate
from smg_trio.engines.token_rules import TokenRules

ORDINARY = tuple(range(10, 60))
EOS = (2,)
RANDOM = TokenSource(Mode.RANDOM, ORDINARY, eos_ids=EOS, eos_probability=0.1)
OPEN_ENDED = StopRules(max_tokens=10_000, max_model_len=100_000)

prompts = st.lists(st.integers(0, 4000), min_size=1, max_size=20)
keys: st.SearchStrategy[SamplingKey] = st.one_of(
    st.just(Greedy()), st.integers(0, 2**32).map(Seeded)
)
ordinary = st.sampled_from(ORDINARY)
GREEDY = Greedy()


def run(
    token_rules: TokenRules,
    *,
    source: TokenSource = RANDOM,
    prompt: tuple[int, ...] = (1, 2, 3),
    key: SamplingKey = GREEDY,
    rules: StopRules = OPEN_ENDED,
    steps: int = 60,
) -> list[int]:
    generation = Generation(source, prompt, key, rules, token_rules)
    for _ in range(steps):
        if generation.step().finish is not None:
            break
    return generation.output_ids


def test_a_bias_of_100_forces_its_token_every_time() -> None:
    assert run(TokenRules.of(logit_bias={42: 100.0}), steps=20) == [42] * 20


def test_the_highest_forcing_bias_wins_then_the_lowest_id() -> None:
    assert set(run(TokenRules.of(logit_bias={42: 100.0, 17: 100.0}), steps=5)) == {17}
    assert set(run(TokenRules.of(logit_bias={42: 100.0, 17: 100.0, 50: 100.0}))) == {17}


def test_a_forced_eos_waits_for_min_tokens_then_stops() -> None:
    rules = StopRules(max_tokens=50, max_model_len=1000, eos_ids=frozenset(EOS), min_tokens=3)
    output = run(TokenRules.of(logit_bias={2: 100.0}), rules=rules)
    assert len(output) == 4
    assert 2 not in output[:3]
    assert output[3] == 2


def test_a_bias_of_minus_100_bans_its_token() -> None:
    echo = TokenSource(Mode.ECHO, ORDINARY, eos_ids=EOS)
    prompt = (10, 11, 12)
    assert run(TokenRules(), source=echo, prompt=prompt, steps=6) == [10, 11, 12] * 2
    output = run(TokenRules.of(logit_bias={11: -100.0}), source=echo, prompt=prompt, steps=30)
    assert 11 not in output
    assert output[0::3] == [10] * 10
    assert output[2::3] == [12] * 10


def test_allowed_token_ids_restrict_the_output() -> None:
    output = run(TokenRules.of(allowed_token_ids=[20, 30]), steps=40)
    assert set(output) == {20, 30}


def test_a_bad_word_never_completes_and_a_one_token_one_never_appears() -> None:
    echo = TokenSource(Mode.ECHO, ORDINARY, eos_ids=EOS)
    prompt = (10, 11, 12, 13)
    output = run(TokenRules.of(bad_words=[(10, 11), (13,)]), source=echo, prompt=prompt, steps=40)
    assert 13 not in output
    assert all(pair != (10, 11) for pair in itertools.pairwise(output))
    assert output[0::4] == [10] * 10
    assert output[2::4] == [12] * 10


def test_small_biases_shift_the_choice_and_stay_deterministic() -> None:
    plain = run(TokenRules.of(logit_bias={5000: 0.0}), steps=200)  # a zero bias changes nothing
    assert plain == run(TokenRules(), steps=200)
    assert plain[0] != 34
    nudged = TokenRules.of(logit_bias={34: 50.0, plain[0]: -99.0})
    first, again = run(nudged, steps=200), run(nudged, steps=200)
    assert first == again
    assert 60 < first.count(34) < 140  # about half the positions
    assert first.count(plain[0]) < plain.count(plain[0])


@given(
    prompt=prompts,
    key=keys,
    banned=st.sets(ordinary, max_size=5),
    allowed=st.none() | st.sets(ordinary, min_size=12, max_size=30),
    bad_words=st.lists(st.lists(ordinary, min_size=1, max_size=3), max_size=3),
)
def test_no_rule_is_ever_broken(
    prompt: list[int],
    key: SamplingKey,
    banned: set[int],
    allowed: set[int] | None,
    bad_words: list[list[int]],
) -> None:
    token_rules = TokenRules.of(
        logit_bias=dict.fromkeys(banned, -100.0), allowed_token_ids=allowed, bad_words=bad_words
    )
    output = run(token_rules, prompt=tuple(prompt), key=key, steps=40)
    assert output == run(token_rules, prompt=tuple(prompt), key=key, steps=40)
    assert not banned & set(output)
    if allowed is not None:
        assert set(output) <= allowed
    for word in bad_words:
        n = len(word)
        assert all(output[i : i + n] != word for i in range(len(output) - n + 1)), word


def test_without_rules_the_stream_is_what_it_was() -> None:
    """The default rules take the old path: existing streams (and their tests) are unchanged."""
    rules = StopRules(max_tokens=30, max_model_len=1000, eos_ids=frozenset(EOS), min_tokens=5)
    generation = Generation(RANDOM, (7, 8), Seeded(3), rules)
    with_default = run(TokenRules(), prompt=(7, 8), key=Seeded(3), rules=rules)
    while generation.step().finish is None:
        pass
    assert generation.output_ids == with_default
    assert isinstance(generation.finish, EosStop) == (with_default[-1] == 2)


def test_a_gated_script_waits_for_its_marker_then_is_said() -> None:
    """vLLM's reasoning gate (engines.reasoning_gate): free output up to the marker, then the
    grammar's only way on."""
    replay = TokenSource(Mode.REPLAY, ORDINARY, eos_ids=EOS, replay_ids=(10, 11, 12, 13))
    rules = StopRules(max_tokens=50, max_model_len=1000, eos_ids=frozenset(EOS))
    gated = TokenRules.of(script=(40, 41, 2), script_after=(11, 12))
    assert run(gated, source=replay, rules=rules) == [10, 11, 12, 40, 41, 2]
    assert run(TokenRules.of(script=(40, 41, 2)), source=replay, rules=rules) == [40, 41, 2]


def test_the_grammar_gate_follows_reasoning_ended() -> None:
    end = (7, 8)
    assert grammar_gate(False, (1, 2), end) == end
    assert grammar_gate(True, (1, 2), end) == ()
    assert grammar_gate(False, (1, 2), ()) == ()  # an engine without a reasoning parser
    assert grammar_gate(None, (1, 2), end) == end
    assert grammar_gate(None, (1, 7, 8, 2), end) == ()  # the prompt ended the reasoning
