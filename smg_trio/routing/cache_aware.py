"""Pure. The cache_aware policy: send a prompt where its prefix was sent before, unless the
workers' loads are too far apart (docs/routing.md §2).

As SGLang's and smg's routers decide it:
- imbalanced (the busiest worker has more than `balance_abs_threshold` in-flight requests over
  the idlest AND more than `balance_rel_threshold` times its load): the least loaded worker;
- else the worker with the longest matching prefix, when that match covers more than
  `cache_threshold` of the prompt;
- else the least loaded worker, ties to the one caching the fewest tokens, so new prefixes
  spread over the workers instead of piling onto the first.
Whatever was chosen, the prompt is then recorded for that worker in the `PrefixTree`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from smg_trio.core.images import routing_ids
from smg_trio.routing.prefix_tree import DEFAULT_BLOCK_TOKENS, DEFAULT_MAX_NODES, PrefixTree
from smg_trio.routing.vocabulary import RoutingContext, Worker, in_flight

DEFAULT_CACHE_THRESHOLD: Final = 0.3  # smg's default match ratio
DEFAULT_BALANCE_ABS_THRESHOLD: Final = 64
DEFAULT_BALANCE_REL_THRESHOLD: Final = 1.5


class CacheAware:
    """Prefix affinity within a load-balance bound (see the module doc)."""

    def __init__(
        self,
        *,
        cache_threshold: float = DEFAULT_CACHE_THRESHOLD,
        balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        max_nodes: int = DEFAULT_MAX_NODES,
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.tree = PrefixTree(block_tokens=block_tokens, max_nodes=max_nodes)

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        loads = {worker.name: in_flight(worker) for worker in candidates}
        # An image's span by its identifier (docs/images.md §5), as the engine's prefix cache.
        ids = routing_ids(context.prompt_ids, context.media)
        chosen = self._choose(candidates, ids, loads)
        self.tree.insert(ids, chosen.name)
        return chosen

    def forget(self, worker: str) -> None:
        """`worker` left the pool: its prefixes no longer attract requests."""
        self.tree.forget(worker)

    def _choose(
        self, candidates: Sequence[Worker], ids: tuple[int, ...], loads: dict[str, int]
    ) -> Worker:
        if len(candidates) == 1:
            return candidates[0]
        if not self._imbalanced(loads.values()) and ids:
            matched = self.tree.match(ids)
            best = max(
                candidates, key=lambda worker: (matched.get(worker.name, 0), -loads[worker.name])
            )
            if matched.get(best.name, 0) / len(ids) > self.cache_threshold:
                return best
        return min(
            candidates,
            key=lambda worker: (loads[worker.name], self.tree.cached_tokens(worker.name)),
        )

    def _imbalanced(self, loads: Iterable[int]) -> bool:
        values = list(loads)
        highest, lowest = max(values), min(values)
        return (
            highest - lowest > self.balance_abs_threshold
            and highest > self.balance_rel_threshold * lowest
        )
