"""cache_aware and its prefix tree (docs/routing.md §2): matches in whole blocks, bounded memory,
prefix affinity within the load-balance bound."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.routing.cache_aware import CacheAware
from smg_trio.routing.prefix_tree import PrefixTree
from smg_trio.routing.vocabulary import RoutingContext
from tests.routing.loaded_workers import backend_of, loaded_worker

BLOCK = 4
prompts = st.lists(st.integers(0, 3), min_size=0, max_size=24).map(tuple)


def common_blocks(a: tuple[int, ...], b: tuple[int, ...], block: int) -> int:
    """Whole leading blocks shared by `a` and `b`, in tokens (the tree's promise)."""
    shared = 0
    while (
        shared + block <= min(len(a), len(b))
        and a[shared : shared + block] == b[shared : shared + block]
    ):
        shared += block
    return shared


@given(
    sent=st.lists(st.tuples(prompts, st.sampled_from(["a", "b", "c"])), max_size=30), query=prompts
)
def test_a_match_is_the_longest_whole_block_prefix_each_worker_was_sent(
    sent: list[tuple[tuple[int, ...], str]], query: tuple[int, ...]
) -> None:
    tree = PrefixTree(block_tokens=BLOCK, max_nodes=10_000)
    for ids, worker in sent:
        tree.insert(ids, worker)
    expected: dict[str, int] = {}
    for ids, worker in sent:
        shared = common_blocks(ids, query, BLOCK)
        if shared:
            expected[worker] = max(expected.get(worker, 0), shared)
    assert dict(tree.match(query)) == expected


@settings(max_examples=50)
@given(sent=st.lists(st.lists(st.integers(0, 50), min_size=4, max_size=40).map(tuple), max_size=60))
def test_the_tree_never_holds_more_than_its_bound_and_keeps_the_newest_prompt(
    sent: list[tuple[int, ...]],
) -> None:
    tree = PrefixTree(block_tokens=BLOCK, max_nodes=20)
    for ids in sent:
        tree.insert(ids, "w")
        assert tree.node_count <= 20
    if sent:
        newest = sent[-1][: min(len(sent[-1]) // BLOCK, 18) * BLOCK]
        assert tree.match(newest).get("w", 0) == len(newest)
    assert tree.cached_tokens("w") == tree.node_count * BLOCK


def synthetic_prompts(rng: random.Random, count: int) -> list[tuple[int, tuple[int, ...]]]:
    """(prefix index, prompt): one of 8 distinct 2k-token prefixes plus a short unique tail."""
    prefixes = [tuple(rng.randrange(50_000) for _ in range(2048)) for _ in range(8)]
    chosen = [rng.randrange(8) for _ in range(count)]
    tails = [tuple(rng.randrange(50_000) for _ in range(rng.randrange(8, 200))) for _ in chosen]
    return [(index, prefixes[index] + tail) for index, tail in zip(chosen, tails, strict=True)]


def test_eight_shared_prefixes_keep_their_worker_and_split_evenly() -> None:
    rng = random.Random(13)
    workers = [loaded_worker("w0"), loaded_worker("w1")]
    policy = CacheAware()
    landed: dict[int, Counter[str]] = {index: Counter() for index in range(8)}
    for index, ids in synthetic_prompts(rng, 400):
        for worker in workers:  # some load on each, within the balance bound
            backend_of(worker).in_flight = rng.randrange(0, 16)
        landed[index][policy.choose(workers, RoutingContext(prompt_ids=ids)).name] += 1
    same = sum(counts.most_common(1)[0][1] for counts in landed.values())
    assert same / 400 >= 0.9
    totals = sum(landed.values(), Counter())
    assert max(totals.values()) / 400 <= 0.65, totals


def test_imbalanced_load_overrides_the_prefix_match() -> None:
    busy, idle = loaded_worker("busy"), loaded_worker("idle")
    policy = CacheAware(balance_abs_threshold=8, balance_rel_threshold=1.5)
    prompt = RoutingContext(prompt_ids=tuple(range(256)))
    backend_of(idle).in_flight = 1
    assert policy.choose([busy, idle], prompt).name == "busy"  # less loaded, first seen
    assert policy.choose([busy, idle], prompt).name == "busy"  # now the prefix holds it
    backend_of(busy).in_flight = 20  # 19 more than idle, and over 1.5x
    assert policy.choose([busy, idle], prompt).name == "idle"


def test_a_short_match_goes_to_the_least_loaded_worker() -> None:
    first, second = loaded_worker("first"), loaded_worker("second")
    policy = CacheAware(cache_threshold=0.5)
    shared = tuple(range(32))
    assert policy.choose([first, second], RoutingContext(prompt_ids=shared)).name == "first"
    backend_of(first).in_flight = 1
    # 32 of 96 tokens match "first" (a third, under 0.5): the idler "second" takes it.
    longer = RoutingContext(prompt_ids=shared + tuple(range(1000, 1064)))
    assert policy.choose([first, second], longer).name == "second"


def test_a_removed_worker_no_longer_attracts_its_prefixes() -> None:
    policy = CacheAware()
    prompt = RoutingContext(prompt_ids=tuple(range(64)))
    policy.choose([loaded_worker("gone")], prompt)
    policy.forget("gone")
    assert policy.tree.match(prompt.prompt_ids) == {}
