"""I/O. The tenant gate: the one call every generation request passes through (docs/fleet.md §2).

    async with gate.admitted(tenant, prompt_tokens, usage):
        ...serve the request...

or, for a Responses run whose create must hear the answer before the run begins
(docs/client-apis.md §3.5), in two steps:

    reservation = await gate.reserve(tenant, prompt_tokens, wait=False)  # 429 here
    ...answer the create, start the run...
    try:                                           # in the run
        async with reservation.used(usage): ...generate...
    finally:
        await reservation.release()                # gives back what was not used

1. Max concurrent: a slot is taken at once, or the request waits in the tenant's queue of at
   most `max_queue` waiting requests (full: 429 at once) for at most `queue_timeout_s` (then
   429). A waiting request whose client leaves is cancelled with its request task, and a
   cancelled wait leaves the queue at once: the count is decremented in a `finally`.
   `reserve(wait=False)` (a background response) takes a place in the queue instead of waiting:
   the run waits there when it begins, with no queue timeout (its client is not waiting; the
   run's deadline bounds it), and leaves it when cancelled.
2. Rates: one request and `prompt_tokens` tokens are charged, or the request is refused with
   429 `rate_limit_exceeded` and Retry-After (and its slot or queue place freed). Prompt tokens
   are charged at admission; the output tokens (`usage.output_tokens`, read when the block
   ends however it ends) are charged then, so a long answer delays the tenant's next requests.
   A reservation released unused (its run cancelled or failed before its generation began)
   gives its charge back (`refund`): the tenant pays for what runs.
3. State lives in this process, or with a `RedisState` in Redis, shared by every process and
   replica; a Redis outage switches to this process's own state, never to no limits or to an
   error (`tenant_state.py`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, Protocol

import trio

from smg_trio.core.rate_limits import Limited, retry_after_header
from smg_trio.errors import RateLimited
from smg_trio.observability.request_ids import new_request_id
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.routing.admission import DEFAULT_QUEUE_TIMEOUT_S
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.redis_client import open_redis
from smg_trio.tenancy.redis_state import RedisState
from smg_trio.tenancy.tenant_state import REDIS_RETRY_S, TenantState

__all__ = ["REDIS_RETRY_S", "TenantGate", "TenantReservation", "Usage", "open_tenant_gate"]

# A waiter for a slot held in Redis re-checks this often (a slot may free in another process).
SHARED_SLOT_POLL_S: Final = 0.05
QUEUE_FULL_RETRY_AFTER_S: Final = 1


class Usage(Protocol):
    """What the gate reads when a request ends: its output tokens (RequestRecord has them)."""

    @property
    def output_tokens(self) -> int: ...


class TenantGate:
    def __init__(
        self,
        metrics: TenantMetrics,
        shared: RedisState | None = None,
        *,
        queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
        redis_retry_s: float = REDIS_RETRY_S,
    ) -> None:
        self.metrics = metrics
        self.state = TenantState(metrics, shared, redis_retry_s=redis_retry_s)
        self.queue_timeout_s = queue_timeout_s
        self._waiting: dict[str, int] = {}
        self._released: dict[str, trio.Event] = {}

    @property
    def degraded(self) -> bool:
        """Redis is configured but this process serves from its own state now."""
        return self.state.degraded

    @asynccontextmanager
    async def admitted(
        self, tenant: Tenant | None, prompt_tokens: int, usage: Usage
    ) -> AsyncIterator[None]:
        """Hold the tenant's budget for the block (see the module doc); RateLimited if refused.
        No tenant (no `--api-keys`): nothing to hold."""
        if tenant is None:  # the path of every request without --api-keys: nothing more
            yield
            return
        reservation = await self.reserve(tenant, prompt_tokens)
        try:
            async with reservation.used(usage):
                yield
        finally:
            await reservation.release()

    async def reserve(
        self, tenant: Tenant | None, prompt_tokens: int, *, wait: bool = True
    ) -> TenantReservation:
        """Take the tenant's budget for one request (module doc): a slot (waiting for one in
        the queue, or with `wait` false only a place in it) and its rates' charge; RateLimited
        if refused, with nothing held."""
        reservation = TenantReservation(self, tenant, prompt_tokens)
        if tenant is None or not tenant.limited:
            return reservation
        try:
            if tenant.max_concurrent is not None:
                reservation.lease_id = new_request_id()
                reservation.slot = await self.state.try_lease(tenant, reservation.lease_id)
                if reservation.slot is None:
                    self._enter_queue(tenant)
                    reservation.queued = True
                    if wait:
                        await reservation.take_slot(self.queue_timeout_s)
            decision = await self.state.admit(tenant, prompt_tokens)
            if isinstance(decision, Limited):
                self.metrics.refused(tenant.name, f"rate_limited_{decision.kind}")
                raise _rate_limited(tenant, decision, prompt_tokens)
            reservation.charged = True
        except BaseException:
            await reservation.release()
            raise
        return reservation

    def _enter_queue(self, tenant: Tenant) -> None:
        name = tenant.name
        waiting = self._waiting.get(name, 0)
        if waiting >= tenant.max_queue:
            self.metrics.refused(name, "queue_full")
            raise RateLimited(
                f"tenant {name!r} is at its limit of {tenant.max_concurrent} concurrent "
                f"requests and its queue of {tenant.max_queue} is full; retry later",
                retry_after_s=QUEUE_FULL_RETRY_AFTER_S,
                kind="requests",
            )
        self._waiting[name] = waiting + 1
        self.metrics.waiting(name, +1)

    def leave_queue(self, tenant: Tenant) -> None:
        """A place in `tenant`'s queue is given up (its slot taken, or its request gone)."""
        name = tenant.name
        self.metrics.waiting(name, -1)
        left = self._waiting[name] - 1
        if left:
            self._waiting[name] = left
        else:
            del self._waiting[name]

    async def wait_for_slot(self, tenant: Tenant, lease_id: str, timeout_s: float) -> bool:
        """Wait in the queue (a place the caller took) until a slot is leased: where (see
        `TenantState.try_lease`). A wait past `timeout_s` is a 429; a cancelled one counts
        `left_queue`."""
        name = tenant.name
        try:
            with trio.move_on_after(timeout_s):
                while True:
                    released = self._released.setdefault(name, trio.Event())
                    held = await self.state.try_lease(tenant, lease_id)
                    if held is not None:
                        return held
                    poll = SHARED_SLOT_POLL_S if self.state.shared is not None else math.inf
                    with trio.move_on_after(poll):
                        await released.wait()
            self.metrics.refused(name, "queue_timeout")
            raise RateLimited(
                f"tenant {name!r} is at its limit of {tenant.max_concurrent} concurrent "
                f"requests and no slot freed within {timeout_s:g} s; retry later",
                retry_after_s=retry_after_header(timeout_s),
                kind="requests",
            )
        except trio.Cancelled:
            self.metrics.refused(name, "left_queue")
            raise

    async def release_slot(self, tenant: Tenant, lease_id: str, *, shared: bool) -> None:
        """Free a leased slot and wake the tenant's queue."""
        await self.state.release(tenant, lease_id, shared=shared)
        released = self._released.pop(tenant.name, None)
        if released is not None:
            released.set()


class TenantReservation:
    """One request's share of its tenant's budget, from `TenantGate.reserve` (module doc): its
    rates' charge, and a slot held or a place in the queue. `used` holds it while the request
    generates; `release` gives back whatever was not used (idempotent, shielded)."""

    def __init__(self, gate: TenantGate, tenant: Tenant | None, prompt_tokens: int) -> None:
        self._gate = gate
        self.tenant = tenant
        self.prompt_tokens = prompt_tokens
        self.lease_id = ""  # a slot's lease, named once the tenant has max_concurrent
        self.slot: bool | None = None  # a leased slot: True in Redis, False here (try_lease)
        self.queued = False  # holds a place in the tenant's queue
        self.charged = False  # its rates' charge, not yet used

    async def take_slot(self, timeout_s: float) -> None:
        """From a place in the queue to a slot (waiting at most `timeout_s`)."""
        assert self.tenant is not None
        assert self.queued
        self.slot = await self._gate.wait_for_slot(self.tenant, self.lease_id, timeout_s)
        self.queued = False
        self._gate.leave_queue(self.tenant)

    @asynccontextmanager
    async def used(self, usage: Usage) -> AsyncIterator[None]:
        """Hold the budget while the request generates: a queued reservation first waits for
        its slot (bounded by the caller's deadline only); the output tokens are charged and the
        slot freed when the block ends, however it ends."""
        tenant, gate = self.tenant, self._gate
        if tenant is None:
            yield
            return
        if self.queued:
            await self.take_slot(math.inf)
        self.charged = False  # used: the charge stays
        gate.metrics.admitted(tenant.name, self.prompt_tokens)
        slot = self.slot
        if slot is not None:
            gate.metrics.running(tenant.name, +1)
        try:
            yield
        finally:
            output = usage.output_tokens
            gate.metrics.finished(tenant.name, output)
            with trio.CancelScope(shield=True):
                if slot is not None:
                    gate.metrics.running(tenant.name, -1)
                    self.slot = None
                    await gate.release_slot(tenant, self.lease_id, shared=slot)
                if output > 0 and tenant.rates.tokens is not None:
                    await gate.state.reconcile(tenant, output)

    async def release(self) -> None:
        """Give back what was not used: the place in the queue, the slot, and the rates'
        charge of a request that never generated (`refunded` in the tenant's metrics)."""
        tenant, gate = self.tenant, self._gate
        if tenant is None:
            return
        if self.queued:
            self.queued = False
            gate.leave_queue(tenant)
        slot, self.slot = self.slot, None
        charged, self.charged = self.charged, False
        with trio.CancelScope(shield=True):
            if slot is not None:
                await gate.release_slot(tenant, self.lease_id, shared=slot)
            if charged:
                gate.metrics.refused(tenant.name, "refunded")
                await gate.state.refund(tenant, self.prompt_tokens)


def _rate_limited(tenant: Tenant, limited: Limited, prompt_tokens: int) -> RateLimited:
    rates = tenant.rates
    rate = rates.requests if limited.kind == "requests" else rates.tokens
    assert rate is not None
    unit = "RPM" if limited.kind == "requests" else "TPM"
    if math.isinf(limited.retry_after_s):
        return RateLimited(
            f"Request too large for tenant {tenant.name!r} on tokens per min ({unit}): "
            f"Limit {rate.limit}, Requested {prompt_tokens}.",
            retry_after_s=retry_after_header(rate.window_s),
            kind=limited.kind,
        )
    return RateLimited(
        f"Rate limit reached for tenant {tenant.name!r} on {limited.kind} per min ({unit}): "
        f"Limit {rate.limit}. Please try again in {limited.retry_after_s:.3g}s.",
        retry_after_s=retry_after_header(limited.retry_after_s),
        kind=limited.kind,
    )


# A Redis lease outlives its request's deadline by this much, then frees itself (a replica
# that died holding it).
LEASE_GRACE_S: Final = 30.0


@asynccontextmanager
async def open_tenant_gate(
    metrics: TenantMetrics,
    state_url: str | None,
    *,
    request_timeout_s: float,
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
) -> AsyncIterator[TenantGate]:
    """The gate, its state in this process (`state_url` None) or in Redis at `state_url`."""
    if state_url is None:
        yield TenantGate(metrics, queue_timeout_s=queue_timeout_s)
        return
    async with open_redis(state_url) as redis:
        # A request waits in the queue, then runs until its deadline.
        lease_s = queue_timeout_s + request_timeout_s + LEASE_GRACE_S
        shared = RedisState(redis, lease_s=lease_s)
        yield TenantGate(metrics, shared, queue_timeout_s=queue_timeout_s)
