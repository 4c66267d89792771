"""The load-balancing policies: each one's rule, with seeded randomness (docs/routing.md §1)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.routing.policies import (
    POLICY_NAMES,
    ConsistentHash,
    LeastLoad,
    PowerOfTwo,
    RandomChoice,
    RoundRobin,
    build_policy,
)
from smg_trio.routing.vocabulary import Policy, RoutingContext
from tests.routing.loaded_workers import loaded_worker

NO_CONTEXT = RoutingContext()


def pick_counts(policy: Policy, picks: int, **in_flight: int) -> Counter[str]:
    """How often `policy` picks each worker named in `in_flight` (its load) in `picks` turns."""
    workers = [loaded_worker(name, in_flight=load) for name, load in in_flight.items()]
    return Counter(policy.choose(workers, NO_CONTEXT).name for _ in range(picks))


def test_round_robin_takes_each_candidate_in_turn() -> None:
    workers = [loaded_worker(f"w{i}") for i in range(3)]
    policy = RoundRobin()
    picks = [policy.choose(workers, NO_CONTEXT).name for _ in range(6)]
    assert picks == ["w0", "w1", "w2", "w0", "w1", "w2"]


def test_random_spreads_over_every_candidate() -> None:
    counts = pick_counts(RandomChoice(random.Random(7)), 4000, w0=0, w1=0, w2=0, w3=0)
    assert set(counts) == {"w0", "w1", "w2", "w3"}
    assert all(800 < count < 1200 for count in counts.values()), counts


def test_power_of_two_takes_the_less_loaded_of_its_two_samples() -> None:
    busy, idle = loaded_worker("busy", in_flight=9), loaded_worker("idle", in_flight=1)
    policy = PowerOfTwo(random.Random(1))
    # With two candidates both are always sampled: the idle one wins every time.
    assert {policy.choose([busy, idle], NO_CONTEXT).name for _ in range(50)} == {"idle"}


def test_power_of_two_never_picks_the_busiest_of_three() -> None:
    counts = pick_counts(PowerOfTwo(random.Random(3)), 600, a=0, b=5, c=50)
    assert counts["c"] == 0
    assert counts["a"] > counts["b"] > 0  # "a" wins both pairs it is in, "b" only the one


def test_least_load_takes_the_least_loaded_and_shares_ties() -> None:
    counts = pick_counts(LeastLoad(random.Random(5)), 400, a=3, b=1, c=1)
    assert counts["a"] == 0
    assert counts["b"] > 100
    assert counts["c"] > 100


@given(keys=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=40))
def test_consistent_hash_is_sticky_and_moves_only_the_keys_of_a_leaving_worker(
    keys: list[str],
) -> None:
    workers = [loaded_worker(f"w{i}") for i in range(4)]
    policy = ConsistentHash(random.Random(0))
    before = {key: policy.choose(workers, RoutingContext(session_key=key)).name for key in keys}
    again = {key: policy.choose(workers, RoutingContext(session_key=key)).name for key in keys}
    assert again == before
    remaining = [worker for worker in workers if worker.name != "w2"]
    after = {key: policy.choose(remaining, RoutingContext(session_key=key)).name for key in keys}
    for key in keys:
        if before[key] != "w2":
            assert after[key] == before[key]
        else:
            assert after[key] != "w2"


def test_consistent_hash_splits_many_keys_over_the_workers() -> None:
    workers = [loaded_worker(f"w{i}") for i in range(2)]
    policy = ConsistentHash(random.Random(0))
    counts = Counter(
        policy.choose(workers, RoutingContext(session_key=f"user-{i}")).name for i in range(2000)
    )
    assert all(600 < count < 1400 for count in counts.values()), counts


def test_consistent_hash_without_a_key_picks_at_random() -> None:
    workers = [loaded_worker(f"w{i}") for i in range(2)]
    policy = ConsistentHash(random.Random(2))
    assert {policy.choose(workers, NO_CONTEXT).name for _ in range(100)} == {"w0", "w1"}


def test_every_policy_name_builds_a_policy_and_others_are_refused() -> None:
    rng = random.Random(0)
    workers = [loaded_worker("only")]
    for name in POLICY_NAMES:
        assert build_policy(name, rng).choose(workers, NO_CONTEXT).name == "only"
    with pytest.raises(ValueError, match="unknown routing policy 'fastest'"):
        build_policy("fastest", rng)
