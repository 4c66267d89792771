"""Pure. What of our images a vLLM engine still holds: a mirror of its receiver cache of
image items (`mm_processor_cache_gb`, an LRU by bytes), so a repeated image goes as
`data: nil` (docs/images.md §5).

The mirror is kept smaller than the engine's cache (1 GiB against vLLM's 4 GiB default) and
only one frontend feeds that cache, so what the mirror holds the engine holds too; if it does
not (another budget, a restart we have not seen yet), the engine ends the request with a cache
miss and the backend resends it once with data (`zmq_outputs`). An engine that registers again
or dies starts empty.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Final

from smg_trio.neutral.media import MediaFeature

MIRROR_BYTES: Final = 1 << 30


class MediaMirror:
    def __init__(self, capacity_bytes: int = MIRROR_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self._held: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0

    def held(self, features: Sequence[MediaFeature]) -> frozenset[str]:
        """The identifiers among `features` the engine holds (sent as `data: nil`)."""
        return frozenset(f.identifier for f in features if f.identifier in self._held)

    def sent(self, features: Sequence[MediaFeature]) -> None:
        """`features` went to the engine (with data, or nil and held): now the newest."""
        for feature in features:
            size = self._held.pop(feature.identifier, None)
            if size is None:
                size = feature.nbytes
                self._bytes += size
            self._held[feature.identifier] = size
        while self._bytes > self.capacity_bytes and self._held:
            _, size = self._held.popitem(last=False)
            self._bytes -= size

    def forget(self, identifiers: Iterable[str]) -> None:
        for identifier in identifiers:
            size = self._held.pop(identifier, None)
            if size is not None:
                self._bytes -= size

    def clear(self) -> None:
        self._held.clear()
        self._bytes = 0
