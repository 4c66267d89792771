"""Pure. The kv_events policy: send a prompt to the worker whose engine holds the longest prefix of
its blocks, as the engines' KV events say (`kv_index.py`), unless the loads are too far apart
(docs/routing.md §9).

1. Imbalanced loads (cache_aware's rule and defaults: the busiest worker more than
   `balance_abs_threshold` in-flight requests over the idlest and more than
   `balance_rel_threshold` times its load): the least loaded worker.
2. Else the worker holding the most leading blocks of the prompt. Ties (two engines cached the
   same prefix) go to the highest rendezvous score of (deepest block's key, worker name), the
   same choice in every gateway process, so the duplicate on the other engine stops being used
   and ages out of its cache instead of being kept warm by half the traffic.
3. No worker holds the first block (a new prefix): the worker whose engine holds the fewest
   blocks (as reported, plus the new prefixes this process sent it that no event confirmed
   yet), then the least loaded, then the rendezvous score of the first block. Placing by
   cache occupancy splits the prefixes evenly over the engines' caches, and every gateway
   process sees the same occupancy; placing by momentary load splits them at random (a 10/6
   split of 16 prefixes overflows an engine that holds 8).

Between routing a prompt and its engine's `BlockStored` there is a prefill's delay; the policy
remembers its own recent choices (`pending`, a bounded FIFO of block keys) and, while no engine
reported any block of the prompt, counts them as held, so a burst of one new prefix does not
scatter before the first events arrive. Once events name a holder, they alone decide.

Until the first `BlockStored` says the engines' block size, block keys are computed at
`FALLBACK_BLOCK_SIZE`; the prompts routed meanwhile are kept (`UNSIZED_PROMPTS`, at most
`UNSIZED_TOKENS` tokens) and re-remembered at the engines' size once it is known, so their
new prefixes keep counting, at the right size, until their events confirm them (with real vLLM
at 32 tokens a block, the first prefixes otherwise counted double and were never confirmed:
one engine took 10 of 16 prefixes).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final

from smg_trio.routing.cache_aware import (
    DEFAULT_BALANCE_ABS_THRESHOLD,
    DEFAULT_BALANCE_REL_THRESHOLD,
)
from smg_trio.routing.kv_index import KvIndex, block_keys
from smg_trio.routing.vocabulary import RoutingContext, Worker, in_flight

DEFAULT_PENDING_BLOCKS: Final = 4096
RECENT_NEW_PREFIXES: Final = 64
FALLBACK_BLOCK_SIZE: Final = 16  # vLLM's default, until an engine said its own
UNSIZED_PROMPTS: Final = 64  # prompts kept while the engines' block size is unknown
UNSIZED_TOKENS: Final = 1 << 18


def rendezvous(key: int, worker: str) -> int:
    """A score the same in every process (blake2b of the key and the worker's name)."""
    data = key.to_bytes(8, "big", signed=True) + worker.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class KvEventsPolicy:
    """Longest engine-reported prefix within a load-balance bound (see the module doc)."""

    def __init__(
        self,
        index: KvIndex,
        *,
        balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD,
        pending_blocks: int = DEFAULT_PENDING_BLOCKS,
    ) -> None:
        self.index = index
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.pending_blocks = pending_blocks
        self._pending: dict[int, str] = {}  # block key -> worker last sent it, oldest first
        # first block key -> (worker, blocks) of the latest prompts no engine had any block of
        self._new_prefixes: dict[int, tuple[str, int]] = {}
        self._keyed_at = FALLBACK_BLOCK_SIZE  # the block size of the keys remembered above
        # (prompt, worker) routed while no engine had said its block size, oldest first
        self._unsized: deque[tuple[RoutingContext, str]] = deque()
        self._unsized_tokens = 0

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        if self.index.block_size is not None and (
            self._unsized or self.index.block_size != self._keyed_at
        ):
            self._rekey(self.index.block_size)
        size = self._keyed_at
        keys = block_keys(context.prompt_ids, size, context.media)
        chosen = self._choose(candidates, context, keys, size)
        self._remember(keys, chosen.name)
        if self.index.block_size is None:
            self._keep_unsized(context, chosen.name)
        return chosen

    def _keep_unsized(self, context: RoutingContext, worker: str) -> None:
        self._unsized.append((context, worker))
        self._unsized_tokens += len(context.prompt_ids)
        while len(self._unsized) > UNSIZED_PROMPTS or self._unsized_tokens > UNSIZED_TOKENS:
            dropped, _ = self._unsized.popleft()
            self._unsized_tokens -= len(dropped.prompt_ids)

    def _rekey(self, size: int) -> None:
        """The engines' block size is known: what was remembered at another size is
        remembered again at this one (the keys of other sizes would never match)."""
        if size != self._keyed_at:
            self._pending.clear()
            self._new_prefixes.clear()
            self._keyed_at = size
            for context, worker in self._unsized:
                self._remember(block_keys(context.prompt_ids, size, context.media), worker)
        self._unsized.clear()
        self._unsized_tokens = 0

    def _remember_new_prefix(self, keys: list[int], worker: str) -> None:
        if keys and not self.index.match_first(keys[0]):
            self._new_prefixes.pop(keys[0], None)
            self._new_prefixes[keys[0]] = (worker, len(keys))
            while len(self._new_prefixes) > RECENT_NEW_PREFIXES:
                del self._new_prefixes[next(iter(self._new_prefixes))]

    def forget(self, worker: str) -> None:
        """`worker` left the pool."""
        self.index.forget(worker)
        self._pending = {key: name for key, name in self._pending.items() if name != worker}
        self._unsized = deque(entry for entry in self._unsized if entry[1] != worker)
        self._unsized_tokens = sum(len(context.prompt_ids) for context, _ in self._unsized)

    def _choose(
        self, candidates: Sequence[Worker], context: RoutingContext, keys: list[int], size: int
    ) -> Worker:
        if len(candidates) == 1:
            return candidates[0]
        loads = {worker.name: in_flight(worker) for worker in candidates}
        if _imbalanced(loads.values(), self.balance_abs_threshold, self.balance_rel_threshold):
            return min(candidates, key=lambda worker: loads[worker.name])
        depth = dict(self.index.match(context.prompt_ids, context.media))
        if not depth:  # no engine reported the prefix (yet): our own recent choices count
            depth = {name: blocks * size for name, blocks in self._pending_depths(keys).items()}
        best = max((depth.get(worker.name, 0) for worker in candidates), default=0)
        if best > 0:
            holders = [worker for worker in candidates if depth.get(worker.name, 0) == best]
            key = keys[min(best // size, len(keys)) - 1] if keys else 0
            return max(holders, key=lambda worker: rendezvous(key, worker.name))
        first = keys[0] if keys else 0
        held = self._occupancy()
        return min(
            candidates,
            key=lambda worker: (
                held.get(worker.name, 0),
                loads[worker.name],
                -rendezvous(first, worker.name),
            ),
        )

    def _occupancy(self) -> dict[str, int]:
        """Blocks each worker's engine reported, plus the new prefixes we sent it lately that
        no engine reported yet."""
        held: dict[str, int] = {}
        for root, (name, blocks) in self._new_prefixes.items():
            if not self.index.match_first(root):
                held[name] = held.get(name, 0) + blocks
        for name in {*held, *self.index.workers()}:
            held[name] = held.get(name, 0) + self.index.blocks_of(name)
        return held

    def _pending_depths(self, keys: list[int]) -> dict[str, int]:
        depths: dict[str, int] = {}
        for index, key in enumerate(keys):
            name = self._pending.get(key)
            if name is None:
                break
            depths[name] = index + 1
        return depths

    def _remember(self, keys: list[int], worker: str) -> None:
        self._remember_new_prefix(keys, worker)
        for key in keys:
            self._pending.pop(key, None)
            self._pending[key] = worker
        while len(self._pending) > self.pending_blocks:
            del self._pending[next(iter(self._pending))]


def _imbalanced(loads: Iterable[int], absolute: int, relative: float) -> bool:
    values = list(loads)
    highest, lowest = max(values), min(values)
    return highest - lowest > absolute and highest > relative * lowest
