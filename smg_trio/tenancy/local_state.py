"""I/O. Tenant budgets kept in this process: the default, and the fallback while Redis is down.

The arithmetic is core/rate_limits.py's on trio's clock; concurrency is a count per tenant.
Idle tenants' states are forgotten (`is_idle`), so the dict holds only tenants active within
their last window.
"""

from __future__ import annotations

import trio

from smg_trio.core.rate_limits import (
    Admitted,
    Limited,
    RateState,
    admit,
    is_idle,
    reconcile,
    refund,
)
from smg_trio.tenancy.api_keys import Tenant


class LocalState:
    def __init__(self) -> None:
        self._rates: dict[str, RateState] = {}
        self._running: dict[str, int] = {}

    def admit(self, tenant: Tenant, tokens: int) -> Admitted | Limited:
        now = trio.current_time()
        state = self._rates.get(tenant.name, RateState())
        decision = admit(tenant.rates, state, now, tokens)
        if isinstance(decision, Admitted):
            self._rates[tenant.name] = decision.state
        return decision

    def reconcile(self, tenant: Tenant, output_tokens: int) -> None:
        now = trio.current_time()
        state = reconcile(
            tenant.rates, self._rates.get(tenant.name, RateState()), now, output_tokens
        )
        self._keep(tenant, state, now)

    def refund(self, tenant: Tenant, tokens: int) -> None:
        now = trio.current_time()
        state = refund(tenant.rates, self._rates.get(tenant.name, RateState()), now, tokens)
        self._keep(tenant, state, now)

    def _keep(self, tenant: Tenant, state: RateState, now: float) -> None:
        if is_idle(tenant.rates, state, now):
            self._rates.pop(tenant.name, None)
        else:
            self._rates[tenant.name] = state

    def try_lease(self, tenant: Tenant) -> bool:
        running = self._running.get(tenant.name, 0)
        if tenant.max_concurrent is not None and running >= tenant.max_concurrent:
            return False
        self._running[tenant.name] = running + 1
        return True

    def release(self, tenant: Tenant) -> None:
        left = self._running[tenant.name] - 1
        if left:
            self._running[tenant.name] = left
        else:
            del self._running[tenant.name]

    def running(self, tenant: Tenant) -> int:
        return self._running.get(tenant.name, 0)
