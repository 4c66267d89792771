"""I/O. Whether one gRPC engine takes requests, and why not: the gRPC backend's readiness state.

    not ready ──check passed──▶ ready ──check failed / unhealthy / unreachable──▶ not ready
                                  │
                                  └── HEALTH_TIMEOUTS_TO_OUT timed-out checks in a row, with no
                                      output streamed meanwhile ──▶ not ready

- A check that fails (unreachable, a gRPC status) or an engine that says it is unhealthy takes it
  out at once: that is what the engine says about itself.
- A check that only times out is weaker evidence: a busy engine (vLLM's Python servicer on
  loaded cores) answers its streams before its health check. Such a check counts as passed
  when the engine streamed output while it waited, and only a run of silent ones takes it out.
- A dead engine (lost connection, silence with calls in flight) is also out, and no Abort is
  sent to it until a check passes again.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

logger = logging.getLogger(__name__)

HEALTH_TIMEOUTS_TO_OUT: Final = 3
"""Consecutive timed-out health checks, with no output streamed meanwhile, that take a ready
engine out of rotation."""


class EngineReadiness:
    """Readiness of the engine `label` names (e.g. "vllm engine at 127.0.0.1:8200")."""

    def __init__(self, label: str) -> None:
        self._label = label
        self.ready = False
        self.dead = False
        """Lost or silent: no Abort is sent until a health check passes."""
        self.reason: str | None = None
        """Why it is not ready (None while ready, or before the first check)."""
        self._changed = trio.Event()
        self._answered_at = float("-inf")
        self._silent_checks = 0

    async def wait_ready(self) -> None:
        """Return once the engine is ready; the caller bounds the wait."""
        while not self.ready:
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    def engine_answered(self, now: float) -> None:
        """The engine streamed a response on some call at trio time `now`."""
        self._answered_at = now

    def check_passed(self, detail: object) -> None:
        self._silent_checks = 0
        self.dead = False
        self.reason = None
        if not self.ready:
            logger.info("%s is ready: %s", self._label, detail)
            self.ready = True
            self._notify()

    def check_timed_out(self, started: float, timeout_s: float) -> None:
        """The check sent at trio time `started` got no answer within `timeout_s`."""
        if self.ready and self._answered_at >= started:
            self._silent_checks = 0  # busy, not gone: it streamed output meanwhile
            return
        self._silent_checks += 1
        if not self.ready or self._silent_checks >= HEALTH_TIMEOUTS_TO_OUT:
            self.take_out(
                f"no health check answer within {timeout_s:g} s "
                f"({self._silent_checks} in a row) and no output meanwhile"
            )

    def take_out(self, reason: str) -> None:
        self.reason = reason
        if self.ready:
            logger.warning("%s is out: %s", self._label, reason)
            self.ready = False
            self._notify()

    def died(self, reason: str) -> None:
        self.dead = True
        self.take_out(reason)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
