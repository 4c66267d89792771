"""Pure. An approximate radix tree of recent prompt prefixes, per worker, in bounded memory: what
cache_aware consults to guess which engine still holds a prompt's prefix in its KV cache
(docs/routing.md §2).

- Approximate: prompts are cut into blocks of `block_tokens` ids (engines cache whole pages
  too) and only whole blocks are matched; a node is one block, its children keyed by the next
  block. Each node remembers which workers were sent a prompt through it, and when.
- Bounded: past `max_nodes` blocks the least recently used ones are dropped, leaves first,
  down to 90 % of the bound (one sweep per many inserts, not one per request).
- Time is a request counter, not a clock, so the tree is deterministic under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Final

DEFAULT_BLOCK_TOKENS: Final = 16  # a common KV page size (vLLM's default block size)
DEFAULT_MAX_NODES: Final = 64 * 1024  # 1M tokens of prefixes at 16 tokens a block
EVICT_TO_FRACTION: Final = 0.9

Block = tuple[int, ...]


class _Node:
    __slots__ = ("children", "depth", "key", "owners", "parent", "tick")

    def __init__(self, parent: _Node | None, key: Block, depth: int) -> None:
        self.parent = parent
        self.key = key
        self.depth = depth
        self.children: dict[Block, _Node] = {}
        self.owners: dict[str, int] = {}  # worker name -> tick of its last prompt through here
        self.tick = 0


class PrefixTree:
    """Which workers saw which prompt prefixes lately (see the module doc)."""

    def __init__(
        self, *, block_tokens: int = DEFAULT_BLOCK_TOKENS, max_nodes: int = DEFAULT_MAX_NODES
    ) -> None:
        if block_tokens < 1 or max_nodes < 1:
            raise ValueError("a prefix tree needs positive block size and node bound")
        self.block_tokens = block_tokens
        self.max_nodes = max_nodes
        self._root = _Node(None, (), 0)
        self._nodes = 0
        self._tick = 0
        self._blocks_of: Counter[str] = Counter()

    @property
    def node_count(self) -> int:
        return self._nodes

    def cached_tokens(self, worker: str) -> int:
        """How many prompt tokens the tree holds for `worker` (its share of the cache)."""
        return self._blocks_of[worker] * self.block_tokens

    def match(self, ids: tuple[int, ...]) -> Mapping[str, int]:
        """Per worker, how many leading tokens of `ids` it was sent lately (whole blocks)."""
        matched: dict[str, int] = {}
        node = self._root
        for block in self._blocks(ids):
            child = node.children.get(block)
            if child is None:
                break
            node = child
            tokens = node.depth * self.block_tokens
            for owner in node.owners:
                matched[owner] = tokens
        return matched

    def insert(self, ids: tuple[int, ...], worker: str) -> None:
        """Record that `ids` was sent to `worker` now."""
        self._tick += 1
        node = self._root
        for block in self._blocks(ids):
            child = node.children.get(block)
            if child is None:
                child = _Node(node, block, node.depth + 1)
                node.children[block] = child
                self._nodes += 1
            node = child
            if worker not in node.owners:
                self._blocks_of[worker] += 1
            node.owners[worker] = self._tick
            node.tick = self._tick
        if self._nodes > self.max_nodes:
            self._evict(int(self.max_nodes * EVICT_TO_FRACTION))

    def forget(self, worker: str) -> None:
        """Drop `worker` from every node (it left the pool)."""
        for node in self._walk():
            node.owners.pop(worker, None)
        self._blocks_of.pop(worker, None)

    def _blocks(self, ids: tuple[int, ...]) -> Iterator[Block]:
        size = self.block_tokens
        for start in range(0, len(ids) - size + 1, size):
            yield ids[start : start + size]

    def _walk(self) -> Iterator[_Node]:
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            yield node

    def _evict(self, keep: int) -> None:
        # A node's tick is never older than its children's (an insert stamps the whole path),
        # so oldest-first with deeper-first among equals only ever removes leaves.
        for node in sorted(self._walk(), key=lambda node: (node.tick, -node.depth)):
            if self._nodes <= keep:
                return
            if node.children or node.parent is None:
                continue
            del node.parent.children[node.key]
            self._nodes -= 1
            for owner in node.owners:
                self._blocks_of[owner] -= 1
