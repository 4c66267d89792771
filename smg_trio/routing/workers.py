"""Pure. Where a worker is picked: the gateway's engine workers, their breakers and leases, and the
policy that chooses one (docs/routing.md).

For each request the pool narrows its workers to the candidates (backend ready now, breaker
letting a request through, not being removed) and hands them to the request's `Policy`; with no
candidate the request fails fast with `BackendUnavailable` (503) instead of queueing for an
engine that may never come back. A retry passes the workers it already tried in `exclude`: they
are skipped while another candidate exists.

The gateway leases the picked worker for the request (`on_routed` ... `release`) and says how
the attempt went; that feeds the worker's circuit breaker (`breaker.py`) and its counters, and
lets a worker being removed (`retire`) say when its last request ended. `snapshot()` is the
read-only view `/workers` and the metrics exporter use. Time is the caller's (`now`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final

import msgspec

from smg_trio.errors import BackendUnavailable
from smg_trio.routing.breaker import BreakerState, CircuitBreaker
from smg_trio.routing.cache_aware import CacheAware
from smg_trio.routing.kv_events import KvEventsPolicy
from smg_trio.routing.policies import RoundRobin
from smg_trio.routing.vocabulary import EMPTY_CONTEXT, Policy, RoutingContext, Worker

NO_READY_WORKER: Final = "no engine worker is ready; try again shortly"

__all__ = ["NO_READY_WORKER", "Outcome", "RoundRobin", "Worker", "WorkerPool", "WorkerSnapshot"]


class Outcome(enum.Enum):
    """How one attempt on a worker went, for its breaker."""

    SUCCESS = "success"  # the engine answered (whatever the client did with it)
    FAILURE = "failure"  # the engine was unreachable, died or refused as overloaded
    NEUTRAL = "neutral"  # nothing learnt about the worker (the client left, a bad request)


class WorkerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One worker as `/workers` and the metrics see it."""

    id: str
    spec: str
    runtime: str
    wire: str
    model: str  # the key of the model it serves ("": not said)
    ready: bool  # the backend can take a request
    routable: bool  # ready, breaker not open and not being removed: a candidate now
    in_flight: int  # the backend's own count of engine requests
    requests: int  # requests routed to it by the gateway
    active: int  # gateway requests holding it now
    breaker: str  # closed, open or half_open
    consecutive_failures: int
    failures: int
    retries: int  # requests that failed here before their first byte and were tried again
    removing: bool


class _Entry:
    __slots__ = ("active", "breaker", "failures", "on_drained", "requests", "retries", "worker")

    def __init__(self, worker: Worker, breaker: CircuitBreaker) -> None:
        self.worker = worker
        self.breaker = breaker
        self.active = 0
        self.requests = 0
        self.failures = 0
        self.retries = 0
        self.on_drained: Callable[[], None] | None = None  # set while being removed


BreakerFactory = Callable[[], CircuitBreaker]


class WorkerPool:
    """The gateway's workers and the policies that pick one per request."""

    def __init__(
        self,
        workers: Sequence[Worker],
        policy: Policy,
        *,
        model_policies: Mapping[str, Policy] | None = None,
        breaker_factory: BreakerFactory = CircuitBreaker,
    ) -> None:
        if not workers:
            raise ValueError("a gateway needs at least one worker")
        self._policy = policy
        self._model_policies = dict(model_policies or {})
        self._new_breaker = breaker_factory
        self._entries: dict[str, _Entry] = {}
        for worker in workers:
            self.add(worker)

    @property
    def workers(self) -> tuple[Worker, ...]:
        """Every worker in the pool, in the order they were added (removing ones included)."""
        return tuple(entry.worker for entry in self._entries.values())

    @property
    def ready(self) -> bool:
        """At least one worker that is not being removed can take a request (/health)."""
        return any(
            entry.on_drained is None and entry.worker.backend.statistics().ready
            for entry in self._entries.values()
        )

    def ready_for(self, model_key: str | None) -> bool:
        """`ready`, among the workers of one model (None: any)."""
        return any(
            entry.on_drained is None
            and (model_key is None or entry.worker.model == model_key)
            and entry.worker.backend.statistics().ready
            for entry in self._entries.values()
        )

    def add(self, worker: Worker) -> None:
        """A new worker, routable at once; ValueError if its name is taken."""
        if worker.name in self._entries:
            raise ValueError(f"a worker named {worker.name!r} is in the pool already")
        self._entries[worker.name] = _Entry(worker, self._new_breaker())

    def retire(self, name: str, on_drained: Callable[[], None]) -> None:
        """Stop routing to `name`; `on_drained()` once its last request released it (at once if
        it has none), and the worker is gone from the pool then. KeyError if unknown."""
        entry = self._entries[name]
        if entry.on_drained is not None:
            raise ValueError(f"worker {name!r} is being removed already")
        entry.on_drained = on_drained
        for policy in (self._policy, *self._model_policies.values()):
            if isinstance(policy, CacheAware | KvEventsPolicy):
                policy.forget(name)
        if entry.active == 0:
            self._drop(entry)

    def pick(
        self,
        context: RoutingContext = EMPTY_CONTEXT,
        *,
        now: float = 0.0,
        exclude: Collection[str] = (),
    ) -> Worker:
        """The policy's choice among the candidates now (the workers of the context's model),
        preferring ones not in `exclude`; BackendUnavailable when there is none."""
        key = context.model_key
        candidates = [
            entry.worker
            for entry in self._entries.values()
            if entry.on_drained is None
            and (key is None or entry.worker.model == key)
            and entry.breaker.allows(now)
            and entry.worker.backend.statistics().ready
        ]
        if not candidates:
            raise BackendUnavailable(NO_READY_WORKER)
        fresh = [worker for worker in candidates if worker.name not in exclude]
        policy = self._model_policies.get(context.model or "", self._policy)
        return policy.choose(fresh or candidates, context)

    def on_routed(self, worker: Worker, now: float) -> None:
        """A request now holds `worker` (until `release`)."""
        entry = self._entries[worker.name]
        entry.active += 1
        entry.requests += 1
        entry.breaker.on_routed(now)

    def release(self, worker: Worker, outcome: Outcome, now: float, *, retried: bool) -> None:
        """The request let go of `worker` after `outcome`; `retried`: it goes on elsewhere."""
        entry = self._entries[worker.name]
        entry.active -= 1
        match outcome:
            case Outcome.SUCCESS:
                entry.breaker.on_success()
            case Outcome.FAILURE:
                entry.failures += 1
                entry.breaker.on_failure(now)
            case Outcome.NEUTRAL:
                entry.breaker.on_neutral()
        if retried:
            entry.retries += 1
        if entry.on_drained is not None and entry.active == 0:
            self._drop(entry)

    def snapshot(self, now: float = 0.0) -> tuple[WorkerSnapshot, ...]:
        """Every worker's state now (read only)."""
        rows = []
        for entry in self._entries.values():
            statistics = entry.worker.backend.statistics()
            breaker = entry.breaker.state(now)
            rows.append(
                WorkerSnapshot(
                    id=entry.worker.name,
                    spec=entry.worker.spec,
                    runtime=statistics.runtime.value,
                    wire=statistics.wire.value,
                    model=entry.worker.model,
                    ready=statistics.ready,
                    routable=statistics.ready
                    and entry.on_drained is None
                    and breaker is not BreakerState.OPEN,
                    in_flight=statistics.in_flight,
                    requests=entry.requests,
                    active=entry.active,
                    breaker=breaker.value,
                    consecutive_failures=entry.breaker.failures,
                    failures=entry.failures,
                    retries=entry.retries,
                    removing=entry.on_drained is not None,
                )
            )
        return tuple(rows)

    def _drop(self, entry: _Entry) -> None:
        del self._entries[entry.worker.name]
        assert entry.on_drained is not None
        entry.on_drained()
