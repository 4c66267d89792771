"""Scripted generation: determinism per (prompt, sampling key), modes, and vLLM's stop order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.engines.generation import (
    EosStop,
    Generation,
    Greedy,
    LengthStop,
    Mode,
    SamplingKey,
    Seeded,
    StopRules,
    TokenSource,
    TokenStop,
    check_stop,
    ordinary_token_ids,
)
from smg_trio.model.folder import demo_model_path, load_model_dir

ORDINARY = tuple(range(10, 60))
EOS = (2, 0)
SOURCE = TokenSource(Mode.RANDOM, ORDINARY, eos_ids=EOS, eos_probability=0.1)
OPEN_ENDED = StopRules(max_tokens=10_000, max_model_len=100_000)

prompts = st.lists(st.integers(0, 4000), min_size=1, max_size=40)
keys: st.SearchStrategy[SamplingKey] = st.one_of(
    st.just(Greedy()), st.integers(-(2**63), 2**64 - 1).map(Seeded)
)


def run(
    source: TokenSource, prompt: list[int], key: SamplingKey, rules: StopRules, steps: int
) -> list[int]:
    generation = Generation(source, prompt, key, rules)
    for _ in range(steps):
        if generation.step().finish is not None:
            break
    return generation.output_ids


@given(prompt=prompts, key=keys, other=prompts)
def test_a_stream_depends_only_on_prompt_and_key(
    prompt: list[int], key: SamplingKey, other: list[int]
) -> None:
    alone = run(SOURCE, prompt, key, OPEN_ENDED, 40)
    # The same request again, stepped in lockstep with an unrelated one.
    first = Generation(SOURCE, prompt, key, OPEN_ENDED)
    neighbour = Generation(SOURCE, other, Seeded(7), OPEN_ENDED)
    for _ in range(40):
        first.step()
        neighbour.step()
    assert first.output_ids == alone


@given(prompt=prompts, key=keys, cut=st.integers(min_value=0, max_value=40))
def test_a_prompt_extended_by_its_output_goes_on_as_the_stream_would(
    prompt: list[int], key: SamplingKey, cut: int
) -> None:
    # What a migrated request relies on (docs/resilience.md §9): prompt + the first `cut` output
    # ids, sent anew, says the rest of the same stream, min_tokens' masking included.
    rules = StopRules(max_tokens=60, max_model_len=10_000, min_tokens=5, masked_ids=frozenset(EOS))
    whole = run(SOURCE, prompt, key, rules, 60)
    cut = min(cut, len(whole) - 1)
    rest = StopRules(
        max_tokens=60 - cut,
        max_model_len=10_000,
        min_tokens=max(0, 5 - cut),
        masked_ids=frozenset(EOS),
    )
    assert whole[:cut] + run(SOURCE, [*prompt, *whole[:cut]], key, rest, 60) == whole


def test_streams_differ_by_prompt_and_by_key() -> None:
    prompt = [5, 6, 7]
    greedy = run(SOURCE, prompt, Greedy(), OPEN_ENDED, 30)
    assert run(SOURCE, prompt, Seeded(1), OPEN_ENDED, 30) != greedy
    assert run(SOURCE, prompt, Seeded(1), OPEN_ENDED, 30) != run(
        SOURCE, prompt, Seeded(2), OPEN_ENDED, 30
    )
    assert run(SOURCE, [5, 6, 8], Greedy(), OPEN_ENDED, 30) != greedy


@given(prompt=prompts, key=keys)
def test_random_mode_says_only_ordinary_tokens_or_eos(prompt: list[int], key: SamplingKey) -> None:
    tokens = run(SOURCE, prompt, key, OPEN_ENDED, 200)
    assert set(tokens) <= set(ORDINARY) | set(EOS)


def test_random_mode_emits_eos_at_about_its_probability() -> None:
    tokens = [t for seed in range(20) for t in run(SOURCE, [1], Seeded(seed), OPEN_ENDED, 500)]
    share = sum(t in EOS for t in tokens) / len(tokens)
    assert 0.07 < share < 0.13
    assert {t for t in tokens if t in EOS} == set(EOS)


def test_echo_returns_the_prompts_ordinary_tokens_cycling() -> None:
    source = TokenSource(Mode.ECHO, ORDINARY, eos_ids=EOS, eos_probability=1.0)
    prompt = [1, 11, 2, 12, 13, 0]  # 0, 1, 2 are not ordinary: template tokens and EOS
    assert run(source, prompt, Greedy(), OPEN_ENDED, 7) == [11, 12, 13, 11, 12, 13, 11]


def test_echo_of_a_prompt_without_ordinary_tokens_falls_back_to_random() -> None:
    source = TokenSource(Mode.ECHO, ORDINARY, eos_ids=EOS, eos_probability=0.0)
    tokens = run(source, [0, 1, 2], Greedy(), OPEN_ENDED, 20)
    assert len(tokens) == 20
    assert set(tokens) <= set(ORDINARY)


def test_replay_says_the_text_then_the_first_eos() -> None:
    source = TokenSource(Mode.REPLAY, ORDINARY, eos_ids=EOS, replay_ids=(20, 21, 22))
    rules = StopRules(max_tokens=100, max_model_len=1000, eos_ids=frozenset({2}))
    generation = Generation(source, [1, 2, 3], Seeded(3), rules)
    steps = [generation.step() for _ in range(4)]
    assert [s.token_id for s in steps] == [20, 21, 22, 2]
    assert [s.finish for s in steps] == [None, None, None, EosStop(2)]
    # Without EOS stopping (ignore_eos) the replay cycles.
    assert run(source, [1], Greedy(), OPEN_ENDED, 6) == [20, 21, 22, 2, 20, 21]


def test_stop_order_is_eos_then_stop_token_then_length() -> None:
    rules = StopRules(
        max_tokens=3, max_model_len=10, eos_ids=frozenset({2}), stop_token_ids=frozenset({2, 9})
    )
    assert check_stop(rules, 2, num_tokens=5, num_output=3) == EosStop(2)
    assert check_stop(rules, 9, num_tokens=5, num_output=3) == TokenStop(9)
    assert check_stop(rules, 4, num_tokens=5, num_output=3) == LengthStop()
    assert check_stop(rules, 4, num_tokens=5, num_output=2) is None
    assert check_stop(rules, 4, num_tokens=10, num_output=1) == LengthStop()


def test_max_tokens_ends_with_length_on_the_last_token() -> None:
    source = TokenSource(Mode.RANDOM, ORDINARY)
    generation = Generation(source, [1], Greedy(), StopRules(max_tokens=4, max_model_len=100))
    finishes = [generation.step().finish for _ in range(4)]
    assert finishes == [None, None, None, LengthStop()]
    with pytest.raises(RuntimeError):
        generation.step()


def test_max_model_len_counts_the_prompt() -> None:
    source = TokenSource(Mode.RANDOM, ORDINARY)
    rules = StopRules(max_tokens=100, max_model_len=8)
    assert len(run(source, [1, 2, 3, 4, 5], Greedy(), rules, 100)) == 3


def test_stop_token_ids_report_the_matched_id() -> None:
    source = TokenSource(Mode.ECHO, ORDINARY)
    rules = StopRules(max_tokens=100, max_model_len=1000, stop_token_ids=frozenset({13}))
    generation = Generation(source, [11, 12, 13, 14], Greedy(), rules)
    steps = [generation.step() for _ in range(3)]
    assert steps[-1].finish == TokenStop(13)


@given(min_tokens=st.integers(0, 30), key=keys)
def test_min_tokens_masks_every_stop_id_until_reached(min_tokens: int, key: SamplingKey) -> None:
    always_eos = TokenSource(Mode.RANDOM, ORDINARY, eos_ids=EOS, eos_probability=1.0)
    rules = StopRules(
        max_tokens=100,
        max_model_len=1000,
        eos_ids=frozenset({0}),
        stop_token_ids=frozenset({2, 15}),
        min_tokens=min_tokens,
        masked_ids=frozenset({16}),
    )
    generation = Generation(always_eos, [3], key, rules)
    while generation.step().finish is None:
        pass
    assert len(generation.output_ids) == min_tokens + 1
    assert not set(generation.output_ids[:-1]) & {0, 2, 15, 16}
    assert generation.finish in (EosStop(0), TokenStop(2))


def test_demo_model_ordinary_tokens_exclude_added_tokens() -> None:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    ordinary = ordinary_token_ids(tokenizer)
    assert not {0, 1, 2, 3, 3999, 4000} & set(ordinary)
    assert len(ordinary) == tokenizer.vocab_size - 6


def test_token_source_rejects_what_it_cannot_generate() -> None:
    with pytest.raises(ValueError, match="ordinary"):
        TokenSource(Mode.RANDOM, ())
    with pytest.raises(ValueError, match="replay"):
        TokenSource(Mode.REPLAY, ORDINARY)
    with pytest.raises(ValueError, match="eos_probability"):
        TokenSource(Mode.RANDOM, ORDINARY, eos_probability=1.5)
