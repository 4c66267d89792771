"""Pure. Where a worker is picked: the gateway's engine workers and the policy that chooses one.

A `WorkerPool` holds the workers the operator configured, in order. For each request the pool
asks every worker's backend whether it is ready right now and hands the ready ones to its
`Policy`, which returns one of them; when none is ready the request fails fast with
`BackendUnavailable` (503) instead of queueing for an engine that may never come back.

Policies only ever see ready workers, so each one is a choice among healthy candidates and
nothing else. `RoundRobin` is the only policy today.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from smg_trio.backends.base import Backend
from smg_trio.core.finalize import WorkerTarget
from smg_trio.errors import BackendUnavailable

NO_READY_WORKER: Final = "no engine worker is ready; try again shortly"


class Worker(msgspec.Struct, frozen=True):
    """One configured engine worker: how requests are shaped for it, and its client."""

    name: str  # the spec as the operator wrote it
    target: WorkerTarget
    backend: Backend


class Policy(Protocol):
    """Chooses the worker for one request."""

    def choose(self, ready: Sequence[Worker]) -> Worker:
        """One of `ready`: the workers that can take a request now, in pool order, never empty."""
        ...


class RoundRobin:
    """Each ready worker in turn, in pool order."""

    def __init__(self) -> None:
        self._turns = 0

    def choose(self, ready: Sequence[Worker]) -> Worker:
        # The count runs over requests, not positions: when the ready set changes, the rotation
        # carries on over the new set rather than restarting at its first worker.
        worker = ready[self._turns % len(ready)]
        self._turns += 1
        return worker


class WorkerPool:
    """The gateway's workers and the policy that picks one per request."""

    def __init__(self, workers: Sequence[Worker], policy: Policy) -> None:
        if not workers:
            raise ValueError("a gateway needs at least one worker")
        self.workers = tuple(workers)
        self._policy = policy

    @property
    def ready(self) -> bool:
        """At least one worker can take a request (what /health reports)."""
        return any(worker.backend.statistics().ready for worker in self.workers)

    def pick(self) -> Worker:
        """The policy's choice among the workers that are ready now; BackendUnavailable if none."""
        ready = [worker for worker in self.workers if worker.backend.statistics().ready]
        if not ready:
            raise BackendUnavailable(NO_READY_WORKER)
        return self._policy.choose(ready)
