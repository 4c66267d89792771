"""Pure. Which worker's engine holds which prompt blocks in its KV cache, as the engines' own KV
events say (docs/routing.md §9): what the kv_events policy reads.

- Keyed by content, not by the engine's hash: vLLM seeds its block hash per process (or per
  algorithm) and may change the algorithm between versions, but every `BlockStored` carries the
  blocks' token ids and its parent's hash. A block's key here is `hash((parent key, *its
  token ids))` (CPython's tuple hash: 64 bits, the same in every process, as ints are not
  salted), so a prompt's blocks get the same keys at routing time and two gateway processes
  agree. Per worker, the engine's hash of each block maps to its key, for `BlockRemoved`.
- Images: vLLM's block hash of a block that overlaps an image also takes `(identifier, offset
  of the image from the block's start)` for each such image, published per block as the
  event's `extra_keys`; the key here takes the same pairs (`media_extras`), and a prompt's
  images (its `MediaSpan`s) give them at routing time, so a repeated image matches where it is
  cached and another image of the same size does not (docs/images.md §5).
- Block size: the engine's (the first `BlockStored` decides; an event with another block size,
  a LoRA, extra hash keys other than images' (cache salt, prompt embeddings) or a medium other
  than the GPU's is counted and skipped: a prompt routed here could never hit those blocks).
- A stored block whose parent is unknown here (its store was missed) is skipped: its key cannot
  be computed.
- Bounded: at most `max_blocks` (worker, block) entries; past it, the oldest stored entries of
  the worker holding most are dropped (the engine evicts its least recently used blocks too).
  `statistics()` counts them; bench/RESULTS.md measures bytes per entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec

from smg_trio.neutral.media import MediaSpan
from smg_trio.wire.vllm_kv_events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    block_hash_int,
)

DEFAULT_MAX_BLOCKS: Final = 1 << 20  # 1M (worker, block) entries; ~see docs/routing.md §9
ROOT_KEY: Final = 0


class KvIndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    blocks: int  # (worker, block) entries held
    distinct_blocks: int  # content keys held by at least one worker
    block_size: int | None
    skipped_events: int  # stores of other block sizes, LoRA, extra keys, other media
    orphan_blocks: int  # stores whose parent was unknown
    evicted: int  # entries dropped to stay under max_blocks
    cleared: int  # times a worker's whole set was dropped (AllBlocksCleared, restart)


class _WorkerBlocks:
    __slots__ = ("bit", "keys")

    def __init__(self, bit: int) -> None:
        self.bit = bit
        self.keys: dict[int, int] = {}  # engine hash -> content key, oldest store first


MediaExtras = tuple[tuple[str, int], ...]


def block_key(parent: int, tokens: Sequence[int], extras: MediaExtras = ()) -> int:
    """A block's content key: its parent's, its token ids and its images' extra keys."""
    return hash((parent, *tokens, extras)) if extras else hash((parent, *tokens))


def media_extras(media: Sequence[MediaSpan], start: int, end: int) -> MediaExtras:
    """vLLM's extra keys of the block [start, end): `(identifier, offset - start)` for each
    image whose span it overlaps, in prompt order."""
    return tuple(
        (span.identifier, span.offset - start)
        for span in media
        if span.offset < end and start < span.offset + span.length
    )


def iter_block_keys(
    ids: Sequence[int], block_size: int, media: Sequence[MediaSpan] = ()
) -> Iterator[int]:
    """The content keys of the whole blocks of `ids`, in order."""
    parent = ROOT_KEY
    for start in range(0, len(ids) - block_size + 1, block_size):
        end = start + block_size
        extras = media_extras(media, start, end) if media else ()
        parent = block_key(parent, ids[start:end], extras)
        yield parent


def block_keys(ids: Sequence[int], block_size: int, media: Sequence[MediaSpan] = ()) -> list[int]:
    return list(iter_block_keys(ids, block_size, media))


def _event_extras(extra_keys: Sequence[Any] | None, count: int) -> list[MediaExtras] | None:
    """Each stored block's image extra keys; None when some block carries another kind (a
    LoRA name, a cache salt, an embeddings digest: published bare) or the list is malformed."""
    if not extra_keys:
        return [()] * count
    if len(extra_keys) != count:
        return None
    out: list[MediaExtras] = []
    for keys in extra_keys:
        pairs: list[tuple[str, int]] = []
        for key in keys or ():
            if not (
                isinstance(key, (list, tuple))
                and len(key) == 2
                and isinstance(key[0], str)
                and isinstance(key[1], int)
            ):
                return None
            pairs.append((key[0], key[1]))
        out.append(tuple(pairs))
    return out


class KvIndex:
    """The engines' cached blocks per worker (see the module doc)."""

    def __init__(self, *, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        if max_blocks < 1:
            raise ValueError("a KV index needs a positive block bound")
        self.max_blocks = max_blocks
        self.block_size: int | None = None
        self._holders: dict[int, int] = {}  # content key -> bit mask of workers holding it
        self._workers: dict[str, _WorkerBlocks] = {}
        self._free_bits: list[int] = []
        self._next_bit = 1
        self._blocks = 0
        self._skipped = 0
        self._orphans = 0
        self._evicted = 0
        self._cleared = 0

    def statistics(self) -> KvIndexStatistics:
        return KvIndexStatistics(
            blocks=self._blocks,
            distinct_blocks=len(self._holders),
            block_size=self.block_size,
            skipped_events=self._skipped,
            orphan_blocks=self._orphans,
            evicted=self._evicted,
            cleared=self._cleared,
        )

    def workers(self) -> tuple[str, ...]:
        return tuple(self._workers)

    def match_first(self, key: int) -> bool:
        """Some worker holds the block with content key `key`."""
        return key in self._holders

    def blocks_of(self, worker: str) -> int:
        entry = self._workers.get(worker)
        return 0 if entry is None else len(entry.keys)

    def apply(self, worker: str, events: Iterable[KvEvent]) -> None:
        """One batch of `worker`'s engine events, in order."""
        for event in events:
            match event:
                case BlockStored():
                    self._store(worker, event)
                case BlockRemoved():
                    self._remove(worker, event)
                case AllBlocksCleared():
                    self.clear(worker)

    def clear(self, worker: str) -> None:
        """`worker`'s engine holds nothing any more (cleared, restarted, or state lost)."""
        entry = self._workers.get(worker)
        if entry is None:
            return
        self._cleared += 1
        for key in entry.keys.values():
            self._drop_holder(key, entry.bit)
        self._blocks -= len(entry.keys)
        entry.keys.clear()

    def forget(self, worker: str) -> None:
        """`worker` left the pool."""
        self.clear(worker)
        entry = self._workers.pop(worker, None)
        if entry is not None:
            self._free_bits.append(entry.bit)

    def match(self, ids: Sequence[int], media: Sequence[MediaSpan] = ()) -> Mapping[str, int]:
        """Per worker holding at least the first block of `ids` (its images `media`): how many
        leading tokens of `ids` it holds (whole, contiguous blocks from the start)."""
        if self.block_size is None:
            return {}
        size = self.block_size
        running = -1  # workers holding every block so far
        depth: dict[int, int] = {}
        for index, key in enumerate(iter_block_keys(ids, size, media)):
            running &= self._holders.get(key, 0)
            if not running:
                break
            for bit in _bits(running):
                depth[bit] = (index + 1) * size
        return {
            name: depth[entry.bit] for name, entry in self._workers.items() if entry.bit in depth
        }

    def _worker(self, name: str) -> _WorkerBlocks:
        entry = self._workers.get(name)
        if entry is None:
            if self._free_bits:
                bit = self._free_bits.pop()
            else:
                bit, self._next_bit = self._next_bit, self._next_bit << 1
            entry = self._workers[name] = _WorkerBlocks(bit)
        return entry

    def _store(self, worker: str, event: BlockStored) -> None:
        size = event.block_size
        count = len(event.block_hashes)
        if (
            event.lora_id is not None
            or event.lora_name is not None
            or event.medium not in (None, MEDIUM_GPU)
            or event.group_idx not in (None, 0)
            or (extras := _event_extras(event.extra_keys, count)) is None
            or size < 1
            or len(event.token_ids) != size * count
            or (self.block_size is not None and size != self.block_size)
        ):
            self._skipped += 1
            return
        self.block_size = size
        entry = self._worker(worker)
        if event.parent_block_hash is None:
            parent = ROOT_KEY
        else:
            known = entry.keys.get(block_hash_int(event.parent_block_hash))
            if known is None:
                self._orphans += count
                return
            parent = known
        tokens = event.token_ids
        for index, raw_hash in enumerate(event.block_hashes):
            parent = block_key(parent, tokens[index * size : (index + 1) * size], extras[index])
            engine_hash = block_hash_int(raw_hash)
            old = entry.keys.pop(engine_hash, None)  # re-stored: now the newest
            if old is None:
                self._blocks += 1
            elif old != parent:
                self._drop_holder(old, entry.bit)
            entry.keys[engine_hash] = parent
            self._holders[parent] = self._holders.get(parent, 0) | entry.bit
        if self._blocks > self.max_blocks:
            self._evict(self._blocks - self.max_blocks)

    def _remove(self, worker: str, event: BlockRemoved) -> None:
        entry = self._workers.get(worker)
        if entry is None or event.medium not in (None, MEDIUM_GPU):
            return
        for raw_hash in event.block_hashes:
            key = entry.keys.pop(block_hash_int(raw_hash), None)
            if key is not None:
                self._blocks -= 1
                self._drop_holder(key, entry.bit)

    def _drop_holder(self, key: int, bit: int) -> None:
        mask = self._holders.get(key, 0) & ~bit
        if mask:
            self._holders[key] = mask
        else:
            self._holders.pop(key, None)

    def _evict(self, count: int) -> None:
        # From the worker holding most, its oldest stores first: the entries least likely to be
        # still cached, and no worker is starved of its recent blocks by another's volume.
        for _ in range(count):
            entry = max(self._workers.values(), key=lambda worker: len(worker.keys))
            engine_hash = next(iter(entry.keys))
            key = entry.keys.pop(engine_hash)
            self._drop_holder(key, entry.bit)
            self._blocks -= 1
            self._evicted += 1


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low
        mask ^= low
