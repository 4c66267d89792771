"""I/O. What the ZMQ backend knows of each engine and of each engine request it routed there:
an engine's slot (handshake, registration, death, load, images held), a request's route, a
pending utility call, the rank policy, and the settings checked before any socket is bound.

The registry (zmq_registry.py) keeps the slots and changes them; the output reader
(zmq_outputs.py) advances the routes; trio is used only for a call's event.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import trio

from smg_trio.backends.base import EngineLoad, PrefixCacheCounts
from smg_trio.backends.in_flight import InFlight
from smg_trio.backends.zmq_codec import Registration
from smg_trio.backends.zmq_media_cache import MediaMirror
from smg_trio.errors import ConfigError
from smg_trio.neutral.capabilities import capabilities_of
from smg_trio.neutral.runtime import Runtime, Wire


class RankPolicy(enum.Enum):
    """How a data-parallel rank is chosen for each engine request."""

    LEAST_LOADED = "least_loaded"  # fewest requests in flight; ties rotate
    ROUND_ROBIN = "round_robin"


@dataclass(eq=False)
class EngineSlot:
    """One engine (data-parallel rank) behind the socket set, by its 2-byte identity."""

    index: int
    identity: bytes
    said_hello: bool = False
    said_ready: bool = False
    registration: Registration | None = None
    dead_reason: str | None = None
    revivable: bool = False
    """Dead by silence only: it is still probed, and its next output takes it back."""
    abandoned: list[str] = field(default_factory=list)
    """Engine request ids sent to it and given up when it went silent: aborted if it revives."""
    load: EngineLoad | None = None  # the last load it reported (metrics)
    prefix_cache: PrefixCacheCounts | None = None  # the sum of its prefix-cache reports (metrics)
    awaiting_answer: bool = False
    """Its registration came from a sibling process (docs/processes.md §3): not ready here until
    it answers a probe, and a send it cannot take yet (not reconnected) is no death."""
    probe_delivered: bool = False
    """A probe reached its input: outputs from then on prove both directions reconnected (its
    output socket may reconnect, and deliver, before its input does)."""
    media: MediaMirror = field(default_factory=MediaMirror)
    """The images it holds (zmq_media_cache.py): a repeat goes as `data: nil`."""

    @property
    def ready(self) -> bool:
        return self.said_ready and self.registration is not None and self.dead_reason is None

    def restart(self) -> None:
        """A (new) engine process said HELLO with this identity."""
        self.said_hello, self.said_ready = True, False
        self.registration, self.dead_reason = None, None
        self.revivable, self.abandoned = False, []
        self.awaiting_answer = self.probe_delivered = False


@dataclass(eq=False, kw_only=True)
class Route(InFlight[EngineSlot]):
    """One engine request in flight on a rank."""

    add_sent: bool = False  # the writer handed its ADD to libzmq: leaving must ABORT it
    # Sent with some images as `data: nil`: the same ADD with every image's data, for one
    # resend should the engine answer with a cache miss (docs/images.md §5).
    full_add: list[bytes] | None = None
    pooled: tuple[tuple[float, ...], tuple[int, ...]] | None = None  # a pooling request's result


@dataclass(eq=False)
class PendingCall:
    engine: EngineSlot
    done: trio.Event = field(default_factory=trio.Event)
    value: Any = None
    error: BaseException | None = None

    def settle(self, *, value: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.value, self.error = value, error
            self.done.set()


def check_settings(runtime: Runtime, engine_count: int, **periods: float) -> None:
    """A ZMQ backend's settings, checked before any socket is bound (ConfigError)."""
    one_engine = capabilities_of(runtime, Wire.ZMQ).one_engine_per_worker
    if engine_count < 1 or (one_engine and engine_count != 1):
        raise ConfigError(
            f"engine_count must be >= 1 (and exactly 1 for TokenSpeed), got {engine_count}"
        )
    for name, value in periods.items():
        if not value > 0:
            raise ConfigError(f"{name} must be positive, got {value}")
