"""Pure. The load-balancing policies that need no memory of prompts (docs/routing.md §1):
round_robin, random, power_of_two, least_load and consistent_hash. cache_aware and kv_events
are modules of their own (`cache_aware.py`, `kv_events.py`); `build_policy` makes any of them
by name.

Randomness is injected (`random.Random`), so a test seeds it and every choice is reproducible.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Sequence
from typing import Final

from smg_trio.routing.cache_aware import CacheAware
from smg_trio.routing.kv_events import KvEventsPolicy
from smg_trio.routing.kv_index import KvIndex
from smg_trio.routing.vocabulary import Policy, RoutingContext, Worker, in_flight

# Points per worker on the consistent-hash ring: enough that two workers split keys near evenly,
# few enough that rebuilding the ring when the worker set changes stays cheap.
RING_POINTS_PER_WORKER: Final = 64


class RoundRobin:
    """Each candidate in turn, in pool order."""

    def __init__(self) -> None:
        self._turns = 0

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        # The count runs over requests, not positions: when the candidate set changes, the
        # rotation carries on over the new set rather than restarting at its first worker.
        worker = candidates[self._turns % len(candidates)]
        self._turns += 1
        return worker


class RandomChoice:
    """A uniformly random candidate."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        return self._rng.choice(candidates)


class PowerOfTwo:
    """The less loaded of two random candidates (in-flight engine requests)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        if len(candidates) == 1:
            return candidates[0]
        first, second = self._rng.sample(candidates, 2)
        return second if in_flight(second) < in_flight(first) else first


class LeastLoad:
    """The candidate with the fewest in-flight engine requests; ties broken at random so equal
    workers share the traffic instead of the first one taking it all."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        loads = [in_flight(worker) for worker in candidates]
        lowest = min(loads)
        tied = [worker for worker, load in zip(candidates, loads, strict=True) if load == lowest]
        return tied[0] if len(tied) == 1 else self._rng.choice(tied)


def ring_hash(text: str) -> int:
    """A hash that is the same in every process (Python's `hash` of a str is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class ConsistentHash:
    """Sticky sessions: the same key lands on the same worker while it is a candidate, and a
    worker leaving or joining moves only the keys it owned (a hash ring with virtual points).
    A request without a key gets a random candidate."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._names: tuple[str, ...] = ()
        self._points: list[int] = []
        self._owners: list[str] = []

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        if context.session_key is None:
            return self._rng.choice(candidates)
        names = tuple(worker.name for worker in candidates)
        if names != self._names:
            self._build_ring(names)
        index = bisect.bisect(self._points, ring_hash(context.session_key)) % len(self._points)
        owner = self._owners[index]
        return next(worker for worker in candidates if worker.name == owner)

    def _build_ring(self, names: tuple[str, ...]) -> None:
        ring = sorted(
            (ring_hash(f"{name}#{point}"), name)
            for name in names
            for point in range(RING_POINTS_PER_WORKER)
        )
        self._names = names
        self._points = [point for point, _ in ring]
        self._owners = [name for _, name in ring]


POLICY_NAMES: Final = (
    "round_robin",
    "random",
    "power_of_two",
    "least_load",
    "cache_aware",
    "consistent_hash",
    "kv_events",
)


def build_policy(name: str, rng: random.Random, kv_index: KvIndex | None = None) -> Policy:
    """A fresh policy by its configuration name (one of POLICY_NAMES); ValueError otherwise.
    kv_events reads `kv_index` (the gateway process's one index, fed by the workers' KV-event
    subscribers); without one it gets an index of its own that nothing feeds."""
    match name:
        case "round_robin":
            return RoundRobin()
        case "random":
            return RandomChoice(rng)
        case "power_of_two":
            return PowerOfTwo(rng)
        case "least_load":
            return LeastLoad(rng)
        case "cache_aware":
            return CacheAware()
        case "consistent_hash":
            return ConsistentHash(rng)
        case "kv_events":
            return KvEventsPolicy(kv_index if kv_index is not None else KvIndex())
    raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(POLICY_NAMES)}")
