"""The per-worker circuit breaker's state table (docs/routing.md §4), with made-up times."""

from __future__ import annotations

from smg_trio.routing.breaker import BreakerState, CircuitBreaker


def test_consecutive_failures_open_it_and_a_success_in_between_resets_the_count() -> None:
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=5.0)
    breaker.on_failure(0.0)
    breaker.on_failure(0.1)
    breaker.on_success()
    breaker.on_failure(0.2)
    breaker.on_failure(0.3)
    assert breaker.state(0.3) is BreakerState.CLOSED
    assert breaker.allows(0.3)
    breaker.on_failure(0.4)
    assert breaker.state(0.4) is BreakerState.OPEN
    assert not breaker.allows(4.0)


def test_after_the_cooldown_one_probe_passes_and_its_success_closes_it() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5.0)
    breaker.on_failure(10.0)
    assert not breaker.allows(14.9)
    assert breaker.state(15.0) is BreakerState.HALF_OPEN
    assert breaker.allows(15.0)
    breaker.on_routed(15.0)
    assert not breaker.allows(15.1)  # the probe is out: nobody else
    breaker.on_success()
    assert breaker.state(15.2) is BreakerState.CLOSED
    assert breaker.failures == 0


def test_a_failed_probe_opens_it_for_another_cooldown() -> None:
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=1.0)
    breaker.on_failure(0.0)
    breaker.on_failure(0.0)
    breaker.on_routed(1.0)  # the probe
    breaker.on_failure(1.5)
    assert breaker.state(2.4) is BreakerState.OPEN
    assert breaker.state(2.5) is BreakerState.HALF_OPEN


def test_a_probe_that_said_nothing_lets_the_next_request_probe() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=1.0)
    breaker.on_failure(0.0)
    breaker.on_routed(1.0)
    breaker.on_neutral()  # e.g. the client left
    assert breaker.state(1.1) is BreakerState.HALF_OPEN
    assert breaker.allows(1.1)
