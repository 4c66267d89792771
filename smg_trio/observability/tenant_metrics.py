"""I/O. Per-tenant metrics (docs/observability.md §1, docs/fleet.md §2), on the gateway's registry.

The `tenant` label takes the names in the `--api-keys` file only, so its cardinality is the
operator's. Updated per request (admission, refusal, end), never per token.

    smg_trio_tenant_requests{tenant, outcome}      admitted | rate_limited_requests |
                                                   rate_limited_tokens | queue_full |
                                                   queue_timeout | left_queue | refunded
    smg_trio_tenant_tokens{tenant, kind}           prompt (charged at admission) | output
    smg_trio_tenant_requests_running{tenant}       holding one of max_concurrent's slots
    smg_trio_tenant_requests_waiting{tenant}       in the tenant's queue for a slot
    smg_trio_tenant_shared_state_up                with --state-url only: 1 while Redis holds
                                                   the limits, 0 while a Redis outage has them
                                                   per process (absent without --state-url:
                                                   nothing is shared, so no value is true)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = r = registry
        self.requests = Counter(
            "smg_trio_tenant_requests",
            "Generation requests by tenant and what its budget said",
            ("tenant", "outcome"),
            registry=r,
        )
        self.tokens = Counter(
            "smg_trio_tenant_tokens",
            "Tokens charged to a tenant: prompt at admission, output at the end",
            ("tenant", "kind"),
            registry=r,
        )
        self.running_requests = Gauge(
            "smg_trio_tenant_requests_running",
            "A tenant's requests holding a concurrency slot",
            ("tenant",),
            registry=r,
            multiprocess_mode="livesum",
        )
        self.waiting_requests = Gauge(
            "smg_trio_tenant_requests_waiting",
            "A tenant's requests waiting for a concurrency slot",
            ("tenant",),
            registry=r,
            multiprocess_mode="livesum",
        )
        self.shared_up: Gauge | None = None
        """Registered by `sharing_state` (a `--state-url` is configured), else absent."""

    def sharing_state(self) -> None:
        """The limits are meant to be shared through Redis: the gauge exists, 1 until an
        outage says otherwise (without a state URL it is never registered)."""
        if self.shared_up is None:
            self.shared_up = Gauge(
                "smg_trio_tenant_shared_state_up",
                "1 while tenant limits are shared through Redis (--state-url), 0 while a "
                "Redis outage has them enforced per process",
                registry=self.registry,
                multiprocess_mode="livemin",
            )
            self.shared_up.set(1)

    def admitted(self, tenant: str, prompt_tokens: int) -> None:
        self.requests.labels(tenant, "admitted").inc()
        self.tokens.labels(tenant, "prompt").inc(prompt_tokens)

    def finished(self, tenant: str, output_tokens: int) -> None:
        self.tokens.labels(tenant, "output").inc(output_tokens)

    def refused(self, tenant: str, outcome: str) -> None:
        self.requests.labels(tenant, outcome).inc()

    def running(self, tenant: str, change: int) -> None:
        self.running_requests.labels(tenant).inc(change)

    def waiting(self, tenant: str, change: int) -> None:
        self.waiting_requests.labels(tenant).inc(change)

    def shared_state(self, *, up: bool) -> None:
        self.sharing_state()
        assert self.shared_up is not None
        self.shared_up.set(1 if up else 0)
