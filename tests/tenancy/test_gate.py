"""tenancy/gate.py: a tenant's slots, queue and rates, in this process and through Redis."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from harness.ports import free_port
from harness.redis_server import RedisServer, redis_server
from smg_trio.core.rate_limits import TenantRates, requests_rate, tokens_rate
from smg_trio.errors import RateLimited
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.gate import REDIS_RETRY_S, TenantGate, open_tenant_gate
from smg_trio.tenancy.redis_client import open_redis
from smg_trio.tenancy.redis_state import RedisState
from tests.tenancy import needs_redis

TEST_TIMEOUT_S: Final = 20.0


@dataclass
class Usage:
    output_tokens: int = 0


def gate(**kwargs: Any) -> TenantGate:
    return TenantGate(TenantMetrics(CollectorRegistry()), **kwargs)


@asynccontextmanager
async def two_gates_on_one_redis() -> AsyncIterator[tuple[RedisServer, TenantGate, TenantGate]]:
    """A redis-server of this test's own and two processes' gates on it, each its connection."""
    async with (
        redis_server() as server,
        open_redis(server.url) as one,
        open_redis(server.url) as two,
    ):
        yield (
            server,
            gate(shared=RedisState(one, lease_s=30.0)),
            gate(shared=RedisState(two, lease_s=30.0)),
        )


def sample(metrics: TenantMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


async def hold(
    gate: TenantGate,
    tenant: Tenant,
    release: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with gate.admitted(tenant, 1, Usage()):
        task_status.started()
        await release.wait()


async def test_a_waiting_request_whose_client_leaves_is_dropped_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tenant = Tenant("acme", TenantRates(), max_concurrent=1, max_queue=1)
    g = gate(queue_timeout_s=100.0)
    metrics = g.metrics
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            release = trio.Event()
            await nursery.start(hold, g, tenant, release)
            waiter_scope = trio.CancelScope()

            async def waiter() -> None:
                with waiter_scope:
                    async with g.admitted(tenant, 1, Usage()):
                        raise AssertionError("a request whose client left must not run")

            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            waiting = "smg_trio_tenant_requests_waiting"
            assert sample(metrics, waiting, tenant="acme") == 1
            # The queue (1) is full: one more is refused at once.
            with pytest.raises(RateLimited) as full:
                async with g.admitted(tenant, 1, Usage()):
                    pass
            assert (full.value.status, full.value.code, full.value.retry_after_s) == (
                429,
                "rate_limit_exceeded",
                1,
            )
            waiter_scope.cancel()  # its client left
            await trio.testing.wait_all_tasks_blocked()
            assert sample(metrics, waiting, tenant="acme") == 0
            # Its place is free at once: the next request queues, and runs when the slot frees.
            ran = trio.Event()

            async def next_one() -> None:
                async with g.admitted(tenant, 1, Usage()):
                    ran.set()

            nursery.start_soon(next_one)
            await trio.testing.wait_all_tasks_blocked()
            assert not ran.is_set()
            release.set()
            await ran.wait()
    outcomes = "smg_trio_tenant_requests_total"
    assert sample(metrics, outcomes, tenant="acme", outcome="left_queue") == 1
    assert sample(metrics, outcomes, tenant="acme", outcome="queue_full") == 1
    assert sample(metrics, outcomes, tenant="acme", outcome="admitted") == 2


async def test_a_wait_past_the_queue_timeout_is_a_429(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tenant = Tenant("acme", TenantRates(), max_concurrent=1, max_queue=4)
    g = gate(queue_timeout_s=3.0)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            release = trio.Event()
            await nursery.start(hold, g, tenant, release)
            started = trio.current_time()
            with pytest.raises(RateLimited) as timed_out:
                async with g.admitted(tenant, 1, Usage()):
                    pass
            assert trio.current_time() - started == pytest.approx(3.0)
            assert timed_out.value.retry_after_s == 3
            release.set()


async def test_requests_per_minute_refuse_with_retry_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tenant = Tenant("acme", TenantRates(requests=requests_rate(60)))
    g = gate()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with g.admitted(tenant, 5, Usage()):
            pass
        with pytest.raises(RateLimited) as limited:
            async with g.admitted(tenant, 5, Usage()):
                pass
        assert limited.value.retry_after_s == 1
        assert limited.value.error_type == "requests"
        assert "on requests per min (RPM): Limit 60" in limited.value.message
        await trio.sleep(1.0)
        async with g.admitted(tenant, 5, Usage()):
            pass


async def test_output_tokens_are_charged_when_the_request_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tenant = Tenant("acme", TenantRates(tokens=tokens_rate(600)))  # 10 a second, burst 600
    g = gate()
    with trio.fail_after(TEST_TIMEOUT_S):
        usage = Usage()
        async with g.admitted(tenant, 100, usage):
            usage.output_tokens = 450  # the answer: the budget is spent by its end
        with pytest.raises(RateLimited) as limited:
            async with g.admitted(tenant, 100, Usage()):
                pass
        assert limited.value.error_type == "tokens"
        assert limited.value.retry_after_s == 5  # 50 tokens over, at 10 a second
        with pytest.raises(RateLimited) as too_large:
            async with g.admitted(tenant, 601, Usage()):
                pass
        assert "Request too large" in too_large.value.message
    tokens = "smg_trio_tenant_tokens_total"
    assert sample(g.metrics, tokens, tenant="acme", kind="prompt") == 100
    assert sample(g.metrics, tokens, tenant="acme", kind="output") == 450


async def test_shared_state_gauge_exists_only_with_a_state_url() -> None:
    """Issue 45: without --state-url nothing is shared, so `..._shared_state_up` is absent
    (it said 1); with one it is 1 from the start, before any call reached Redis."""
    up = "smg_trio_tenant_shared_state_up"
    alone, shared = TenantMetrics(CollectorRegistry()), TenantMetrics(CollectorRegistry())
    url = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            open_tenant_gate(alone, None, request_timeout_s=30.0),
            open_tenant_gate(shared, url, request_timeout_s=30.0),
        ):
            assert alone.registry.get_sample_value(up) is None
            assert shared.registry.get_sample_value(up) == 1


async def test_redis_unreachable_falls_back_to_this_process_with_a_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens at the state URL: limits hold per process, nothing fails."""
    tenant = Tenant("acme", TenantRates(requests=requests_rate(60)), max_concurrent=1)
    metrics = TenantMetrics(CollectorRegistry())
    url = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(TEST_TIMEOUT_S), caplog.at_level(logging.WARNING):
        async with open_tenant_gate(metrics, url, request_timeout_s=30.0) as g:
            async with g.admitted(tenant, 1, Usage()):
                assert g.degraded
            with pytest.raises(RateLimited):  # still limited: one a second, here
                async with g.admitted(tenant, 1, Usage()):
                    pass
            await trio.sleep(REDIS_RETRY_S)
            async with g.admitted(tenant, 1, Usage()):
                pass
    warnings = [r for r in caplog.records if "Redis tenant state unavailable" in r.message]
    assert len(warnings) == 2  # once per outage seen: at the start, and after the retry
    up = metrics.registry.get_sample_value("smg_trio_tenant_shared_state_up")
    assert up == 0


@needs_redis
async def test_two_gates_on_one_redis_share_the_limits() -> None:
    """Two processes' gates on one Redis: one budget; the slot too; Redis killed: each its own."""
    tenant = Tenant("acme", TenantRates(requests=requests_rate(60)), max_concurrent=1, max_queue=0)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with two_gates_on_one_redis() as (server, first, second):
            async with first.admitted(tenant, 1, Usage()):
                with pytest.raises(RateLimited) as shared_slot:
                    async with second.admitted(tenant, 1, Usage()):
                        pass
            assert "queue of 0 is full" in shared_slot.value.message
            with pytest.raises(RateLimited) as shared_rate:
                async with second.admitted(tenant, 1, Usage()):
                    pass
            assert shared_rate.value.error_type == "requests"
            gates = (first, second)
            assert [g.degraded for g in gates] == [False, False]
            await server.kill()
            async with first.admitted(tenant, 1, Usage()), second.admitted(tenant, 1, Usage()):
                assert [g.degraded for g in gates] == [True, True]


@needs_redis
async def test_a_lease_whose_release_failed_is_released_when_redis_answers_again() -> None:
    tenant = Tenant("acme", TenantRates(), max_concurrent=1, max_queue=0)
    dead_url = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            redis_server() as server,
            open_redis(server.url) as good,
            open_redis(dead_url) as dead,
        ):
            reachable, unreachable = RedisState(good, lease_s=30.0), RedisState(dead, lease_s=30.0)
            g = gate(shared=reachable, redis_retry_s=0.0)
            async with g.admitted(tenant, 1, Usage()):
                g.state.shared = unreachable  # the way to Redis breaks while the slot is held
            g.state.shared = reachable  # and comes back: the slot is not left held in Redis
            other = gate(shared=RedisState(good, lease_s=30.0))
            async with g.admitted(tenant, 1, Usage()):
                pass
            async with other.admitted(tenant, 1, Usage()):
                pass


async def test_a_background_reservation_queues_without_waiting_and_gives_back_what_it_did_not_use(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`reserve(wait=False)`: the rates are charged and a place in the queue is held at once;
    the run waits for its slot past the queue timeout; released unused, its charge comes back."""
    tenant = Tenant(
        "acme", TenantRates(tokens=tokens_rate(250)), max_concurrent=1, max_queue=1
    )  # 250 tokens a minute: two prompts of 100 fit, a third does not
    g = gate(queue_timeout_s=3.0)
    metrics = g.metrics
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            release = trio.Event()
            holder = await g.reserve(tenant, 100, wait=False)
            assert holder.slot is not None

            async def run_holder() -> None:
                async with holder.used(Usage()):
                    await release.wait()

            nursery.start_soon(run_holder)
            queued = await g.reserve(tenant, 100, wait=False)  # no slot: a place, at once
            assert queued.queued
            assert sample(metrics, "smg_trio_tenant_requests_waiting", tenant="acme") == 1
            with pytest.raises(RateLimited) as full:  # the queue's one place is taken
                await g.reserve(tenant, 1, wait=False)
            assert (full.value.status, full.value.retry_after_s) == (429, 1)
            await queued.release()  # cancelled before it began: its place and charge back
            assert sample(metrics, "smg_trio_tenant_requests_waiting", tenant="acme") == 0
            # Without the refund 300 tokens would be over the 250: a 429 `tokens`.
            again = await g.reserve(tenant, 100, wait=False)
            ran_at: list[float] = []

            async def run_again() -> None:
                try:
                    async with again.used(Usage()):
                        ran_at.append(trio.current_time())
                finally:
                    await again.release()

            started = trio.current_time()
            nursery.start_soon(run_again)
            await trio.sleep(10.0)  # well past the queue timeout: a background run waits on
            assert ran_at == []
            release.set()
        await holder.release()
    assert ran_at[0] - started == pytest.approx(10.0)
    outcomes = "smg_trio_tenant_requests_total"
    assert sample(metrics, outcomes, tenant="acme", outcome="refunded") == 1
    assert sample(metrics, outcomes, tenant="acme", outcome="admitted") == 2
    assert sample(metrics, outcomes, tenant="acme", outcome="queue_full") == 1
    assert sample(metrics, "smg_trio_tenant_requests_running", tenant="acme") == 0


async def test_a_queued_background_run_cancelled_leaves_the_queue_and_is_refunded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tenant = Tenant("acme", TenantRates(requests=requests_rate(60)), max_concurrent=1, max_queue=2)
    g = gate()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            release = trio.Event()
            await nursery.start(hold, g, tenant, release)
            await trio.sleep(1.0)  # the holder's request is a second old: one more may pass
            queued = await g.reserve(tenant, 1, wait=False)
            with pytest.raises(RateLimited):  # 60 a minute: the next one is a second away
                await g.reserve(tenant, 1, wait=False)
            run = trio.CancelScope()

            async def run_queued() -> None:
                try:
                    with run:
                        async with queued.used(Usage()):
                            raise AssertionError("a cancelled run must not generate")
                finally:
                    await queued.release()

            nursery.start_soon(run_queued)
            await trio.testing.wait_all_tasks_blocked()
            run.cancel()  # POST /v1/responses/{id}/cancel while it waits for the slot
            await trio.testing.wait_all_tasks_blocked()
            assert sample(g.metrics, "smg_trio_tenant_requests_waiting", tenant="acme") == 0
            refunded = await g.reserve(tenant, 1, wait=False)  # its request came back
            await refunded.release()
            release.set()
    outcomes = "smg_trio_tenant_requests_total"
    assert sample(g.metrics, outcomes, tenant="acme", outcome="left_queue") == 1
    assert sample(g.metrics, outcomes, tenant="acme", outcome="refunded") == 2


@needs_redis
async def test_a_refund_through_redis_gives_the_charge_back_to_every_gate() -> None:
    tenant = Tenant("acme", TenantRates(requests=requests_rate(60)), max_concurrent=1, max_queue=1)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with two_gates_on_one_redis() as (_, first, second):
            reserved = await first.reserve(tenant, 1, wait=False)
            assert reserved.slot is True  # leased in Redis
            with pytest.raises(RateLimited) as limited:
                await second.reserve(tenant, 1, wait=False)
            assert limited.value.error_type == "requests"
            await reserved.release()  # its slot and its request, back in Redis
            other = await second.reserve(tenant, 1, wait=False)
            assert other.slot is True
            await other.release()
            assert [g.degraded for g in (first, second)] == [False, False]
