"""The KV index (docs/routing.md §9.3): fed the events of real prefix caches (the reference
engine's, which publishes what vLLM's block pool does), it knows exactly which leading prompt
blocks each engine holds; it stays within its bound; it forgets a cleared worker."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.neutral.media import MediaSpan
from smg_trio.routing.kv_index import KvIndex
from smg_trio.wire.vllm_kv_events import AllBlocksCleared, BlockRemoved, BlockStored

BLOCK = 2
prompts = st.lists(st.integers(0, 2), min_size=0, max_size=12).map(tuple)


def cached_prefix(cache: PrefixCache, ids: tuple[int, ...]) -> int:
    """Leading tokens of `ids` the cache holds, in whole blocks (no last-token cap)."""
    held = 0
    for value in cache.block_hashes(ids):
        if value not in cache._blocks:
            break
        held += cache.block_size
    return held


@settings(max_examples=200)
@given(
    sent=st.lists(st.tuples(prompts, st.sampled_from(["a", "b"])), max_size=40),
    capacity=st.integers(1, 8),
    query=prompts,
)
def test_the_index_holds_exactly_what_each_engines_cache_holds(
    sent: list[tuple[tuple[int, ...], str]], capacity: int, query: tuple[int, ...]
) -> None:
    caches = {
        name: PrefixCache(capacity_blocks=capacity, block_size=BLOCK, seed=seed)
        for seed, name in enumerate("ab")
    }
    index = KvIndex()
    for ids, worker in sent:
        index.apply(worker, caches[worker].admit(ids).events)
    for ids in [query, *(ids for ids, _ in sent)]:
        expected = {name: cached_prefix(cache, ids) for name, cache in caches.items()}
        assert dict(index.match(ids)) == {k: v for k, v in expected.items() if v}
    assert index.statistics().blocks == sum(len(cache) for cache in caches.values())


def test_a_worker_cleared_or_forgotten_holds_nothing() -> None:
    cache = PrefixCache(capacity_blocks=10, block_size=BLOCK, seed=1)
    index = KvIndex()
    index.apply("a", cache.admit((1, 2, 3, 4, 5)).events)
    index.apply("b", PrefixCache(capacity_blocks=10, block_size=BLOCK, seed=2).admit((1, 2)).events)
    assert index.match((1, 2, 3, 4)) == {"a": 4, "b": 2}
    index.apply("a", [AllBlocksCleared()])
    assert index.match((1, 2, 3, 4)) == {"b": 2}
    index.forget("b")
    assert index.match((1, 2, 3, 4)) == {}
    assert index.statistics().blocks == 0


def test_stores_a_prompt_could_never_hit_are_skipped() -> None:
    index = KvIndex()
    plain = {"block_hashes": [1], "parent_block_hash": None, "token_ids": [1, 2], "block_size": 2}
    index.apply("a", [BlockStored(**plain, lora_name="adapter")])  # type: ignore[arg-type]
    index.apply("a", [BlockStored(**plain, extra_keys=[("salt",)])])  # type: ignore[arg-type]
    index.apply("a", [BlockStored(**plain, medium="CPU")])  # type: ignore[arg-type]
    assert index.statistics().skipped_events == 3
    assert index.match((1, 2)) == {}
    index.apply("a", [BlockStored(**plain, extra_keys=[None])])  # type: ignore[arg-type]
    assert index.match((1, 2)) == {"a": 2}
    # Another block size than the first engine's, or a store whose parent was never seen.
    index.apply(
        "b",
        [BlockStored(block_hashes=[9], parent_block_hash=None, token_ids=[1, 2, 3], block_size=3)],
    )
    index.apply(
        "b", [BlockStored(block_hashes=[9], parent_block_hash=77, token_ids=[1, 2], block_size=2)]
    )
    stats = index.statistics()
    assert (stats.skipped_events, stats.orphan_blocks) == (4, 1)
    index.apply("a", [BlockRemoved(block_hashes=[1], medium="GPU")])
    assert index.match((1, 2)) == {}


def test_the_bound_drops_the_oldest_stores_of_the_fullest_worker() -> None:
    index = KvIndex(max_blocks=6)
    for name, seed in (("a", 1), ("b", 2)):
        cache = PrefixCache(capacity_blocks=100, block_size=1, seed=seed)
        index.apply(name, cache.admit(tuple(range(6)) if name == "a" else (7, 8, 9)).events)
    stats = index.statistics()
    assert stats.blocks == 6
    assert stats.evicted == 3
    assert index.blocks_of("a") == 3
    assert index.blocks_of("b") == 3
    # a's oldest (its first blocks) went: its prefix no longer matches from the start.
    assert index.match(tuple(range(6))) == {}
    assert index.match((7, 8, 9)) == {"b": 3}


# The documented cap (docs/routing.md §9.3): bytes per (worker, block) entry, measured.
BYTES_PER_BLOCK_CAP = 200


def test_memory_per_block_stays_under_the_documented_cap() -> None:
    index = KvIndex()
    caches = [PrefixCache(capacity_blocks=1 << 20, block_size=16, seed=seed) for seed in (1, 2)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for prompt in range(625):  # 625 prompts of 16 blocks on each of 2 workers: 20,000
            ids = tuple(prompt * 1000 + token for token in range(16 * 16))
            for number, cache in enumerate(caches):
                index.apply(f"w{number}", cache.admit(ids).events)
        del caches  # only the index's own memory is measured
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    blocks = index.statistics().blocks
    assert blocks == 20_000
    assert used / blocks < BYTES_PER_BLOCK_CAP, used / blocks


def image_blocks(identifier: str, hashes: tuple[int, int, int]) -> BlockStored:
    """A 12-token prompt's 3 blocks of 4 as vLLM publishes them when an image spans [2, 8):
    each block overlapping it carries `[identifier, image offset - block start]` (msgpack
    lists), the last block none."""
    return BlockStored(
        block_hashes=list(hashes),
        parent_block_hash=None,
        token_ids=[1, 2, 9, 9, 9, 9, 9, 9, 3, 4, 5, 6],
        block_size=4,
        extra_keys=[[[identifier, 2]], [[identifier, -2]], None],
    )


IMAGE_PROMPT = (1, 2, 9, 9, 9, 9, 9, 9, 3, 4, 5, 6)


def test_blocks_past_an_image_are_keyed_by_its_identifier_as_the_engine_keys_them() -> None:
    index = KvIndex()
    index.apply("a", [image_blocks("img-a", (11, 12, 13))])
    index.apply("b", [image_blocks("img-b", (21, 22, 23))])
    assert index.statistics().skipped_events == 0
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-a", 2, 6)]) == {"a": 12}
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-b", 2, 6)]) == {"b": 12}
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-c", 2, 6)]) == {}  # a new image
    assert index.match(IMAGE_PROMPT) == {}  # the placeholder ids alone are no image
    # The same image at another offset is another key (the offset is part of it).
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-a", 3, 5)]) == {}
    index.apply("a", [BlockRemoved(block_hashes=[13])])
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-a", 2, 6)]) == {"a": 8}


def test_a_block_with_a_cache_salt_beside_an_image_is_skipped() -> None:
    index = KvIndex()
    event = image_blocks("img-a", (11, 12, 13))
    salted = BlockStored(
        block_hashes=event.block_hashes,
        parent_block_hash=None,
        token_ids=event.token_ids,
        block_size=4,
        extra_keys=[[["img-a", 2], "salt"], [["img-a", -2]], None],
    )
    index.apply("a", [salted])
    assert index.statistics().skipped_events == 1
    assert index.match(IMAGE_PROMPT, [MediaSpan("img-a", 2, 6)]) == {}
