"""I/O. Where a tenant's budget lives (docs/fleet.md §2): in this process, or with a
`RedisState` in Redis, shared by every process and replica.

Every Redis call is bounded (`REDIS_CALL_BUDGET_S`); a failed or slow call switches to this
process's own state with one logged warning, and Redis is tried again `REDIS_RETRY_S` later (a
logged info when it answers again). Never no limits, never an error to the client. A slot
leased in one place is released in the same place; a Redis lease whose release failed is
remembered and released once Redis answers again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, TypeVar

import trio

from smg_trio.core.rate_limits import Admitted, Limited
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.local_state import LocalState
from smg_trio.tenancy.redis_client import RedisReplyError, RedisUnavailable
from smg_trio.tenancy.redis_state import RedisState

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# A Redis round trip on a LAN is well under a millisecond; past this the call is abandoned.
REDIS_CALL_BUDGET_S: Final = 0.25
# After a failed Redis call, this process's own state serves this long before Redis is retried.
REDIS_RETRY_S: Final = 1.0
# Redis leases remembered for release after an outage, at most.
MAX_UNRELEASED: Final = 4096


class TenantState:
    """Rates and slots, in Redis while it answers, else in this process (see the module doc)."""

    def __init__(
        self,
        metrics: TenantMetrics,
        shared: RedisState | None = None,
        *,
        redis_retry_s: float = REDIS_RETRY_S,
    ) -> None:
        self.metrics = metrics
        self.shared = shared
        if shared is not None:  # the gauge says something only when a state is shared
            metrics.sharing_state()
        self.local = LocalState()
        self.redis_retry_s = redis_retry_s
        self._shared_down_until = -math.inf
        # Redis leases whose release failed (an outage): released once Redis answers again,
        # else they would hold their slots until they expire.
        self._unreleased: list[tuple[Tenant, str]] = []

    @property
    def degraded(self) -> bool:
        """Redis is configured but this process serves from its own state now."""
        return self.shared is not None and trio.current_time() < self._shared_down_until

    async def admit(self, tenant: Tenant, prompt_tokens: int) -> Admitted | Limited:
        return await self._shared_or_local(
            lambda shared: shared.admit(tenant, prompt_tokens),
            lambda: self.local.admit(tenant, prompt_tokens),
        )

    async def reconcile(self, tenant: Tenant, output_tokens: int) -> None:
        await self._shared_or_local(
            lambda shared: shared.reconcile(tenant, output_tokens),
            lambda: self.local.reconcile(tenant, output_tokens),
        )

    async def refund(self, tenant: Tenant, tokens: int) -> None:
        await self._shared_or_local(
            lambda shared: shared.refund(tenant, tokens),
            lambda: self.local.refund(tenant, tokens),
        )

    async def try_lease(self, tenant: Tenant, lease_id: str) -> bool | None:
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

    async def release(self, tenant: Tenant, lease_id: str, *, shared: bool) -> None:
        """Free a slot where `try_lease` leased it (`shared`: in Redis)."""
        if not shared:
            self.local.release(tenant)
            return
        assert self.shared is not None
        state = self.shared
        if self.degraded or await self._bounded(lambda: state.release(tenant, lease_id)) is None:
            self._remember_unreleased(tenant, lease_id)

    def _remember_unreleased(self, tenant: Tenant, lease_id: str) -> None:
        # Bounded: past the cap the oldest are left to expire on their own (their lease time).
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
