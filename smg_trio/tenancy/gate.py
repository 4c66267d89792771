"""I/O. The tenant gate: the one call every generation request passes through (docs/fleet.md §2).

    async with gate.admitted(tenant, prompt_tokens, usage):
        ...serve the request...

1. Max concurrent: a slot is taken at once, or the request waits in the tenant's queue of at
   most `max_queue` waiting requests (full: 429 at once) for at most `queue_timeout_s` (then
   429). A waiting request whose client leaves is cancelled with its request task, and a
   cancelled wait leaves the queue at once: the count is decremented in a `finally`.
2. Rates: one request and `prompt_tokens` tokens are charged, or the request is refused with
   429 `rate_limit_exceeded` and Retry-After (and its slot freed). Prompt tokens are charged at
   admission; the output tokens (`usage.output_tokens`, read when the block ends however
   it ends) are charged then, so a long answer delays the tenant's next requests.
3. State lives in this process, or with a `RedisState` in Redis, shared by every process and
   replica. Every Redis call is bounded (`REDIS_CALL_BUDGET_S`); a failed or slow call
   switches the gate to this process's own state with one logged warning, and Redis is tried
   again `REDIS_RETRY_S` later (a logged info when it answers again). Never no limits, never
   an error to the client. A slot leased in one place is released in the same place.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Final, Protocol, TypeVar

import trio

from smg_trio.core.rate_limits import Admitted, Limited, retry_after_header
from smg_trio.errors import RateLimited
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.request_ids import new_request_id
from smg_trio.routing.admission import DEFAULT_QUEUE_TIMEOUT_S
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.local_state import LocalState
from smg_trio.tenancy.redis_client import RedisReplyError, RedisUnavailable, open_redis
from smg_trio.tenancy.redis_state import RedisState

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# A Redis round trip on a LAN is well under a millisecond; past this the call is abandoned.
REDIS_CALL_BUDGET_S: Final = 0.25
# After a failed Redis call, this process's own state serves this long before Redis is retried.
REDIS_RETRY_S: Final = 1.0
# A waiter for a slot held in Redis re-checks this often (a slot may free in another process).
SHARED_SLOT_POLL_S: Final = 0.05
QUEUE_FULL_RETRY_AFTER_S: Final = 1
# Redis leases remembered for release after an outage, at most.
MAX_UNRELEASED: Final = 4096


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
        self.redis_retry_s = redis_retry_s
        self.shared = shared
        self.local = LocalState()
        self.queue_timeout_s = queue_timeout_s
        self._shared_down_until = -math.inf
        self._waiting: dict[str, int] = {}
        self._released: dict[str, trio.Event] = {}
        # Redis leases whose release failed (an outage): released once Redis answers again,
        # else they would hold their slots until they expire.
        self._unreleased: list[tuple[Tenant, str]] = []

    @property
    def degraded(self) -> bool:
        """Redis is configured but this process serves from its own state now."""
        return self.shared is not None and trio.current_time() < self._shared_down_until

    @asynccontextmanager
    async def admitted(
        self, tenant: Tenant | None, prompt_tokens: int, usage: Usage
    ) -> AsyncIterator[None]:
        """Hold the tenant's budget for the block (see the module doc); RateLimited if refused.
        No tenant (no `--api-keys`): nothing to hold."""
        if tenant is None:
            yield
            return
        if not tenant.limited:
            self.metrics.admitted(tenant.name, prompt_tokens)
            try:
                yield
            finally:
                self.metrics.finished(tenant.name, usage.output_tokens)
            return
        async with self._slot(tenant):
            decision = await self._shared_or_local(
                lambda shared: shared.admit(tenant, prompt_tokens),
                lambda: self.local.admit(tenant, prompt_tokens),
            )
            if isinstance(decision, Limited):
                self.metrics.refused(tenant.name, f"rate_limited_{decision.kind}")
                raise _rate_limited(tenant, decision, prompt_tokens)
            assert isinstance(decision, Admitted)
            self.metrics.admitted(tenant.name, prompt_tokens)
            try:
                yield
            finally:
                output = usage.output_tokens
                self.metrics.finished(tenant.name, output)
                if output > 0 and tenant.rates.tokens is not None:
                    with trio.CancelScope(shield=True):
                        await self._shared_or_local(
                            lambda shared: shared.reconcile(tenant, output),
                            lambda: self.local.reconcile(tenant, output),
                        )

    @asynccontextmanager
    async def _slot(self, tenant: Tenant) -> AsyncIterator[None]:
        if tenant.max_concurrent is None:
            yield
            return
        lease_id = new_request_id()
        held = await self._try_lease(tenant, lease_id)
        if held is None:
            held = await self._wait_for_slot(tenant, lease_id)
        self.metrics.running(tenant.name, +1)
        try:
            yield
        finally:
            self.metrics.running(tenant.name, -1)
            with trio.CancelScope(shield=True):
                await self._release(tenant, lease_id, shared=held)

    async def _wait_for_slot(self, tenant: Tenant, lease_id: str) -> bool:
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
        try:
            with trio.move_on_after(self.queue_timeout_s):
                while True:
                    released = self._released.setdefault(name, trio.Event())
                    held = await self._try_lease(tenant, lease_id)
                    if held is not None:
                        return held
                    poll = SHARED_SLOT_POLL_S if self.shared is not None else math.inf
                    with trio.move_on_after(poll):
                        await released.wait()
            self.metrics.refused(name, "queue_timeout")
            raise RateLimited(
                f"tenant {name!r} is at its limit of {tenant.max_concurrent} concurrent "
                f"requests and no slot freed within {self.queue_timeout_s:g} s; retry later",
                retry_after_s=retry_after_header(self.queue_timeout_s),
                kind="requests",
            )
        except trio.Cancelled:
            self.metrics.refused(name, "left_queue")
            raise
        finally:  # a cancelled waiter (its client left) leaves the queue now
            self.metrics.waiting(name, -1)
            left = self._waiting[name] - 1
            if left:
                self._waiting[name] = left
            else:
                del self._waiting[name]

    async def _try_lease(self, tenant: Tenant, lease_id: str) -> bool | None:
        """A slot: True if leased in Redis, False if in this process, None if none is free."""
        if self.shared is not None and not self.degraded:
            shared = self.shared
            while self._unreleased and not self.degraded:
                owner, stale = self._unreleased.pop()
                if await self._bounded(partial(shared.release, owner, stale)) is None:
                    self._unreleased.append((owner, stale))
            try:
                answered = await self._bounded(lambda: shared.try_lease(tenant, lease_id))
            except trio.Cancelled:  # the script may have run: release it, to be sure
                self._remember_unreleased(tenant, lease_id)
                raise
            if answered is not None:
                return True if answered[0] else None
            self._remember_unreleased(tenant, lease_id)  # likewise
        return False if self.local.try_lease(tenant) else None

    async def _release(self, tenant: Tenant, lease_id: str, *, shared: bool) -> None:
        if shared:
            assert self.shared is not None
            state = self.shared
            if (
                self.degraded
                or await self._bounded(lambda: state.release(tenant, lease_id)) is None
            ):
                self._remember_unreleased(tenant, lease_id)
        else:
            self.local.release(tenant)
        released = self._released.pop(tenant.name, None)
        if released is not None:
            released.set()

    def _remember_unreleased(self, tenant: Tenant, lease_id: str) -> None:
        # Bounded: past the cap the oldest are left to expire on their own (LEASE_GRACE_S).
        self._unreleased.append((tenant, lease_id))
        del self._unreleased[:-MAX_UNRELEASED]

    async def _shared_or_local(
        self, shared_call: Callable[[RedisState], Awaitable[_T]], local_call: Callable[[], _T]
    ) -> _T:
        if self.shared is not None and not self.degraded:
            state = self.shared
            answered = await self._bounded(lambda: shared_call(state))
            if answered is not None:
                return answered[0]
        return local_call()

    async def _bounded(self, call: Callable[[], Awaitable[_T]]) -> tuple[_T] | None:
        """One Redis call within its budget: `(its result,)`, or None (and this process's own
        state for a while) if it failed or ran out of time."""
        failure = f"took longer than {REDIS_CALL_BUDGET_S:g} s"
        with trio.move_on_after(REDIS_CALL_BUDGET_S):
            try:
                result = await call()
            except (RedisUnavailable, RedisReplyError) as exc:
                failure = str(exc)
            else:
                if self._shared_down_until > -math.inf:
                    logger.info("Redis answers again: tenant limits are shared again")
                    self._shared_down_until = -math.inf
                    self.metrics.shared_state(up=True)
                return (result,)
        if not self.degraded:
            logger.warning(
                "Redis tenant state unavailable (%s): limits are enforced per process "
                "until it answers again",
                failure,
            )
            self.metrics.shared_state(up=False)
        self._shared_down_until = trio.current_time() + self.redis_retry_s
        return None


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
