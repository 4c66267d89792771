"""The kv_events policy (docs/routing.md §9): the engine holding the longest prefix takes the
prompt; ties and new prefixes are decided the same way in every gateway process; imbalanced
loads go to the least loaded worker."""

from __future__ import annotations

from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.neutral.media import MediaSpan
from smg_trio.routing.kv_events import KvEventsPolicy, rendezvous
from smg_trio.routing.kv_index import KvIndex, block_keys
from smg_trio.routing.policies import build_policy
from smg_trio.routing.vocabulary import RoutingContext, Worker
from smg_trio.routing.workers import WorkerPool
from smg_trio.wire.vllm_kv_events import BlockStored
from tests.routing.loaded_workers import backend_of, loaded_worker

SYSTEM_A = tuple(range(100, 164))  # 4 blocks of 16
SYSTEM_B = tuple(range(200, 264))


def ask(ids: tuple[int, ...]) -> RoutingContext:
    return RoutingContext(prompt_ids=ids)


def engines_with(index: KvIndex, **held: tuple[int, ...]) -> None:
    for seed, (name, ids) in enumerate(held.items()):
        cache = PrefixCache(capacity_blocks=100, block_size=16, seed=seed)
        index.apply(name, cache.admit(ids).events)


def two_engines(
    block_size: int,
) -> tuple[KvIndex, KvEventsPolicy, list[Worker], dict[str, PrefixCache]]:
    """An index and policy over two idle workers, and each worker's engine cache."""
    index = KvIndex()
    caches = {
        name: PrefixCache(capacity_blocks=1000, block_size=block_size, seed=seed)
        for seed, name in enumerate(("w1", "w2"))
    }
    return index, KvEventsPolicy(index), [loaded_worker("w1"), loaded_worker("w2")], caches


def test_the_longest_engine_reported_prefix_wins() -> None:
    index = KvIndex()
    engines_with(index, w1=SYSTEM_A[:32], w2=(*SYSTEM_A, 1))
    policy = KvEventsPolicy(index)
    workers = [loaded_worker("w1", in_flight=0), loaded_worker("w2", in_flight=5)]
    assert policy.choose(workers, ask((*SYSTEM_A, 7, 8, 9))).name == "w2"


def test_imbalanced_loads_go_to_the_least_loaded() -> None:
    index = KvIndex()
    engines_with(index, w2=(*SYSTEM_A, 1))
    policy = KvEventsPolicy(index, balance_abs_threshold=4, balance_rel_threshold=1.5)
    workers = [loaded_worker("w1", in_flight=0), loaded_worker("w2", in_flight=5)]
    assert policy.choose(workers, ask((*SYSTEM_A, 7))).name == "w1"
    backend_of(workers[1]).in_flight = 4
    assert policy.choose(workers, ask((*SYSTEM_A, 7))).name == "w2"


def test_ties_and_new_prefixes_are_the_same_choice_in_every_process() -> None:
    index = KvIndex()
    engines_with(index, w1=(*SYSTEM_A, 1), w2=(*SYSTEM_A, 2))
    choices = set()
    for _ in range(2):  # two gateway processes: two policies, same events
        policy = KvEventsPolicy(index)
        workers = [loaded_worker("w1"), loaded_worker("w2")]
        choices.add(policy.choose(workers, ask((*SYSTEM_A, 3))).name)
    assert len(choices) == 1
    deepest = block_keys(SYSTEM_A, 16)[-1]
    assert choices == {max(("w1", "w2"), key=lambda name: rendezvous(deepest, name))}
    # A prefix nobody holds, equal loads: every process picks the same worker too.
    fresh = {
        KvEventsPolicy(KvIndex())
        .choose([loaded_worker("w1"), loaded_worker("w2")], ask(SYSTEM_B))
        .name
        for _ in range(3)
    }
    assert len(fresh) == 1


def test_a_burst_of_a_new_prefix_stays_together_before_its_events_arrive() -> None:
    policy = KvEventsPolicy(KvIndex())
    workers = [loaded_worker("w1"), loaded_worker("w2")]
    first = policy.choose(workers, ask((*SYSTEM_B, 1)))
    backend_of(first).in_flight = 3  # busier now, but it holds (will hold) the prefix
    assert {policy.choose(workers, ask((*SYSTEM_B, n))).name for n in range(5)} == {first.name}


def test_new_prefixes_go_to_the_least_loaded() -> None:
    policy = KvEventsPolicy(KvIndex())
    workers = [loaded_worker("w1", in_flight=2), loaded_worker("w2", in_flight=1)]
    assert policy.choose(workers, ask(SYSTEM_B)).name == "w2"


def test_a_retired_worker_is_forgotten_by_the_index() -> None:
    index = KvIndex()
    engines_with(index, w1=(*SYSTEM_A, 1))
    policy = build_policy("kv_events", __import__("random").Random(0), index)
    pool = WorkerPool([loaded_worker("w1"), loaded_worker("w2")], policy)
    pool.retire("w1", lambda: None)
    assert index.match(SYSTEM_A) == {}


def test_new_prefixes_split_evenly_over_the_engines_caches() -> None:
    # Loads say nothing here (both idle between requests); occupancy does: the engine holding
    # fewer blocks (reported, or sent and not yet reported) takes the next new prefix.
    index, policy, workers, caches = two_engines(block_size=16)
    placed = []
    for prefix in range(8):
        prompt = tuple(range(1000 * prefix, 1000 * prefix + 64))
        chosen = policy.choose(workers, ask(prompt)).name
        placed.append(chosen)
        if prefix % 2:  # half the engines' events arrive before the next prefix
            index.apply(chosen, caches[chosen].admit(prompt).events)
    assert placed.count("w1") == placed.count("w2") == 4


def test_prefixes_placed_before_the_block_size_is_known_count_at_the_engines_size() -> None:
    # Real vLLM on the CPU stores blocks of 32 tokens; the policy keys at 16 until the first
    # BlockStored says so. Two prefixes go to one engine and one to the other before any
    # event; later the second engine holds more (it stored two more prefixes). Counted at the
    # wrong size and never confirmed, the early placements made the first engine look fuller
    # than it was, and it took the next prefix (a 10/6 split in the real-vLLM bench).
    index, policy, workers, caches = two_engines(block_size=32)
    prompts = [tuple(range(1000 * prefix, 1000 * prefix + 64)) for prefix in range(6)]
    first = policy.choose(workers, ask(prompts[0]))
    other = next(worker for worker in workers if worker is not first)
    second = policy.choose(workers, ask(prompts[1]))
    assert second is other
    backend_of(other).in_flight = 1  # equal occupancy: the third goes to the idler, `first`
    assert policy.choose(workers, ask(prompts[2])) is first
    backend_of(other).in_flight = 0
    for prompt, holder in ((prompts[0], first), (prompts[1], other), (prompts[2], first)):
        index.apply(holder.name, caches[holder.name].admit(prompt).events)
    assert index.block_size == 32
    for prompt in prompts[3:5]:  # the other engine stores two more (traffic from elsewhere)
        index.apply(other.name, caches[other.name].admit(prompt).events)
    # first: 2 prefixes of 2 blocks; other: 3 prefixes of 2 blocks.
    assert policy.choose(workers, ask(prompts[5])) is first


def test_a_burst_routed_before_the_block_size_is_known_stays_together_after() -> None:
    index = KvIndex()
    policy = KvEventsPolicy(index)
    workers = [loaded_worker("w1"), loaded_worker("w2")]
    cache = PrefixCache(capacity_blocks=1000, block_size=32, seed=0)
    chosen = policy.choose(workers, ask((*SYSTEM_B, 1)))
    other = next(worker for worker in workers if worker is not chosen)
    # Another prefix's events say the block size (32) before this prefix's events arrive.
    index.apply(other.name, cache.admit(SYSTEM_A).events)
    backend_of(chosen).in_flight = 3
    assert {policy.choose(workers, ask((*SYSTEM_B, n))).name for n in range(4)} == {chosen.name}


def test_a_repeated_image_goes_where_the_engine_cached_it() -> None:
    """Two engines each cached one image's prompt (the same text and placeholder ids, another
    image): a request repeating an image goes to the engine holding it, whatever the loads'
    small difference; a new image is a new prefix past the text before it."""
    index = KvIndex()
    text = tuple(range(100, 116))  # one block of text, then a 32-token image span
    placeholders = (7,) * 32
    prompt = (*text, *placeholders, 5, 6)
    for name, identifier in (("w1", "img-a"), ("w2", "img-b")):
        index.apply(
            name,
            [
                BlockStored(
                    block_hashes=[hash((name, n)) for n in range(3)],
                    parent_block_hash=None,
                    token_ids=[*text, *placeholders],
                    block_size=16,
                    extra_keys=[None, [[identifier, 0]], [[identifier, -16]]],
                )
            ],
        )
    policy = KvEventsPolicy(index)
    workers = [loaded_worker("w1", in_flight=1), loaded_worker("w2", in_flight=0)]
    for identifier, expected in (("img-a", "w1"), ("img-b", "w2")):
        context = RoutingContext(prompt_ids=prompt, media=(MediaSpan(identifier, 16, 32),))
        assert policy.choose(workers, context).name == expected
    assert dict(index.match(prompt, (MediaSpan("img-c", 16, 32),))) == {"w1": 16, "w2": 16}
