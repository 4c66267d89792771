"""The KV-event subscriber over real ZMQ sockets (docs/routing.md §9.2), against the reference
engine's publisher (vLLM's PUB + replay ROUTER layout): a subscriber that joins late replays what
it missed from 0, and a restarted publisher (numbers from 0 again) clears the worker."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import trio
import zmq

from smg_trio.engines.kv_publisher import KvEventPublisher
from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.routing.kv_event_subscriber import subscribe_kv_events
from smg_trio.routing.kv_index import KvIndex

PROMPTS = [tuple(range(n * 100, n * 100 + 32)) for n in range(6)]


async def serve_replays_forever(publishers: list[KvEventPublisher]) -> None:
    while True:  # the engine's loop polls its replay socket between steps
        publishers[-1].serve_replay()
        await trio.sleep(0.002)


async def until(
    condition: Callable[[], bool], publisher: KvEventPublisher, cache: PrefixCache
) -> None:
    """Keep publishing new prompts (a PUB drops what it sends before its SUB is connected)
    until `condition` holds."""
    with trio.fail_after(10):
        for n in itertools.count(1000):
            if condition():
                return
            publisher.publish(cache.admit(tuple(range(n * 100, n * 100 + 16))).events)
            await trio.sleep(0.01)


async def test_a_late_subscriber_replays_from_zero_and_a_restart_clears(tmp_path: Path) -> None:
    events, replay = f"ipc://{tmp_path}/kv.sock", f"ipc://{tmp_path}/kvr.sock"
    cache = PrefixCache(capacity_blocks=100, block_size=16, seed=1)
    index = KvIndex()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    publishers = [KvEventPublisher(context, events, replay)]
    try:
        for prompt in PROMPTS:  # published before anyone listens
            publishers[0].publish(cache.admit(prompt).events)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_replays_forever, publishers)
            await nursery.start(subscribe_kv_events, "w1", events, replay, index)
            await until(lambda: index.statistics().blocks > 12, publishers[0], cache)
            # Everything published before the subscriber came arrived by replay.
            assert all(index.match(prompt) == {"w1": 32} for prompt in PROMPTS)

            publishers[0].close()  # the engine restarts: its numbers start at 0 again
            publishers.append(KvEventPublisher(context, events, replay))
            fresh = PrefixCache(capacity_blocks=100, block_size=16, seed=2)
            await until(lambda: index.statistics().cleared == 1, publishers[1], fresh)
            assert index.match(PROMPTS[0]) == {}  # what the old engine held is gone
            nursery.cancel_scope.cancel()
    finally:
        for publisher in publishers:
            publisher.close()
        context.term()
