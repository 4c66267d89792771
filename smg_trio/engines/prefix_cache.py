"""Pure. The reference vLLM engine's automatic prefix cache, as far as a gateway can see it
(docs/routing.md §9.4): which prompt blocks a new request finds cached, and the KV events
(`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) vLLM's block pool would publish for it.

Like vLLM's:
- Blocks of `block_size` tokens; a block's hash chains its parent's hash and its tokens, from a
  seed random per engine process (vLLM seeds its `NONE_HASH` per process for non-cryptographic
  hashes), published as the low 64 bits (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`).
- A request finds its longest cached chain of whole blocks, but never the whole prompt: the
  last token is always computed (at most `(len - 1) // block_size` blocks hit).
- Its other whole prompt blocks are then cached: one `BlockStored` with the new blocks in order,
  `parent_block_hash` the last hit block's hash (None at the start of the prompt).
- Past `capacity_blocks` the least recently used blocks are evicted, one `BlockRemoved` each.
- It counts what vLLM's `PrefixCacheStats` counts, and hands the counts over as deltas
  (`take_stats`, vLLM's `make_prefix_cache_stats`): each admitted request, its prompt tokens
  looked up and the tokens found cached; `reset` once `clear` ran since the last hand-over.
Unlike vLLM: blocks of generated tokens are not cached, and a running request's blocks may be
evicted (vLLM pins them): neither matters to a gateway routing prompts.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from smg_trio.wire.vllm_kv_events import (
    HASH_MASK,
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
)
from smg_trio.wire.vllm_zmq_outputs import PrefixCacheStats


class Admitted(msgspec.Struct, frozen=True):
    cached_tokens: int  # prompt tokens found in the cache
    events: list[KvEvent]
    created_tokens: int = 0  # prompt tokens of the blocks it newly cached (vLLM's creation)


class PrefixCache:
    """An LRU cache of prompt blocks (see the module doc)."""

    def __init__(self, *, capacity_blocks: int, block_size: int, seed: int) -> None:
        if capacity_blocks < 1 or block_size < 1:
            raise ValueError("a prefix cache needs a positive capacity and block size")
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self._seed = seed & HASH_MASK
        self._blocks: OrderedDict[int, None] = OrderedDict()  # hash, least recently used first
        self._stats = PrefixCacheStats()  # since the last take_stats

    def __len__(self) -> int:
        return len(self._blocks)

    def block_hashes(self, prompt: Sequence[int]) -> list[int]:
        size = self.block_size
        hashes = []
        parent = self._seed
        for start in range(0, len(prompt) - size + 1, size):
            data = repr((parent, tuple(prompt[start : start + size]))).encode()
            parent = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
            hashes.append(parent)
        return hashes

    def admit(self, prompt: Sequence[int]) -> Admitted:
        """A request with `prompt` starts: its hit, and the events of caching its blocks."""
        hashes = self.block_hashes(prompt)
        most = max(0, (len(prompt) - 1) // self.block_size)
        hit = 0
        while hit < min(most, len(hashes)) and hashes[hit] in self._blocks:
            self._blocks.move_to_end(hashes[hit])
            hit += 1
        stats = self._stats
        self._stats = msgspec.structs.replace(
            stats,
            requests=stats.requests + 1,
            queries=stats.queries + len(prompt),
            hits=stats.hits + hit * self.block_size,
        )
        events: list[KvEvent] = []
        run: list[int] = []  # consecutive newly cached blocks: one BlockStored
        for index in range(hit, len(hashes) + 1):
            if index < len(hashes) and hashes[index] not in self._blocks:
                run.append(index)
                continue
            if run:
                events.append(self._stored(prompt, hashes, run))
                run = []
        for value in hashes[hit:]:
            self._blocks[value] = None
            self._blocks.move_to_end(value)
        protected = set(hashes)
        while len(self._blocks) > self.capacity_blocks:
            victim = next(iter(self._blocks))
            if victim in protected and len(protected) >= self.capacity_blocks:
                protected.discard(victim)  # a prompt longer than the cache: its head goes
            elif victim in protected:
                self._blocks.move_to_end(victim)
                continue
            del self._blocks[victim]
            events.append(BlockRemoved(block_hashes=[victim], medium=MEDIUM_GPU))
        return Admitted(hit * self.block_size, events, (len(hashes) - hit) * self.block_size)

    def _stored(self, prompt: Sequence[int], hashes: list[int], run: list[int]) -> BlockStored:
        size = self.block_size
        first = run[0]
        return BlockStored(
            block_hashes=[hashes[index] for index in run],
            parent_block_hash=hashes[first - 1] if first else None,
            token_ids=list(prompt[first * size : (run[-1] + 1) * size]),
            block_size=size,
            medium=MEDIUM_GPU,
        )

    def clear(self) -> list[KvEvent]:
        """Drop every block (vLLM's `reset_prefix_cache`)."""
        self._blocks.clear()
        self._stats = msgspec.structs.replace(self._stats, reset=True)
        return [AllBlocksCleared()]

    def take_stats(self) -> PrefixCacheStats:
        """What the cache saw since the last call (vLLM sends it with every scheduler step)."""
        stats, self._stats = self._stats, PrefixCacheStats()
        return stats
