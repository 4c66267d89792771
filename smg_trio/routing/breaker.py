"""Pure. A per-worker circuit breaker: consecutive failures open it, a cool-down later one probe
request may pass (half-open), and that probe's outcome closes or re-opens it (docs/routing.md §4).

    CLOSED ──threshold consecutive failures──▶ OPEN ──cool-down elapsed──▶ HALF_OPEN
      ▲                                          ▲                            │
      └──────────── probe succeeded ─────────────┼──────── probe failed ──────┘

The clock is the caller's: every call takes `now` (trio.current_time() in the gateway), so the
breaker is a plain state table that tests drive with made-up times.
"""

from __future__ import annotations

import enum
from typing import Final

DEFAULT_FAILURE_THRESHOLD: Final = 3
DEFAULT_COOLDOWN_S: Final = 5.0


class BreakerState(enum.Enum):
    CLOSED = "closed"  # requests flow
    OPEN = "open"  # the worker failed repeatedly: no request until the cool-down ends
    HALF_OPEN = "half_open"  # one probe request is out; the rest wait for its outcome


class CircuitBreaker:
    """Consecutive-failure breaker of one worker (see the module doc)."""

    __slots__ = ("_cooldown_s", "_opened_at", "_probe_out", "_state", "_threshold", "failures")

    def __init__(
        self,
        *,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("a breaker needs a failure threshold of at least 1")
        self._threshold = failure_threshold
        self._cooldown_s = cooldown_s
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._probe_out = False
        self.failures = 0
        """Consecutive failures since the last success."""

    def state(self, now: float) -> BreakerState:
        """The state at `now`: an OPEN breaker whose cool-down is over reads HALF_OPEN."""
        if self._state is BreakerState.OPEN and now - self._opened_at >= self._cooldown_s:
            self._state = BreakerState.HALF_OPEN
            self._probe_out = False
        return self._state

    def allows(self, now: float) -> bool:
        """Whether a request may be routed to the worker now (without taking the probe)."""
        state = self.state(now)
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and not self._probe_out
        )

    def on_routed(self, now: float) -> None:
        """A request was sent to the worker: in HALF_OPEN it is the one probe."""
        if self.state(now) is BreakerState.HALF_OPEN:
            self._probe_out = True

    def on_success(self) -> None:
        self.failures = 0
        self._state = BreakerState.CLOSED
        self._probe_out = False

    def on_neutral(self) -> None:
        """The request ended saying nothing of the worker (the client left, a bad request):
        a probe it carried is given back so the next request can probe."""
        self._probe_out = False

    def on_failure(self, now: float) -> None:
        self.failures += 1
        if self._state is BreakerState.HALF_OPEN or self.failures >= self._threshold:
            self._state = BreakerState.OPEN
            self._opened_at = now
            self._probe_out = False
