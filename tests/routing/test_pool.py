"""The worker pool around the policies (docs/routing.md §1, §4, §6): candidates, retries'
exclusions, per-model policies, breakers fed by leases, removal after the last request, and
the read-only snapshot."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from smg_trio.errors import BackendUnavailable
from smg_trio.routing.breaker import CircuitBreaker
from smg_trio.routing.policies import RoundRobin
from smg_trio.routing.vocabulary import RoutingContext, Worker
from smg_trio.routing.workers import BreakerFactory, Outcome, WorkerPool
from tests.routing.loaded_workers import backend_of, loaded_worker


def two_workers(breaker_factory: BreakerFactory = CircuitBreaker) -> WorkerPool:
    workers = [loaded_worker("w0"), loaded_worker("w1")]
    return WorkerPool(workers, RoundRobin(), breaker_factory=breaker_factory)


def test_a_retry_prefers_a_worker_it_has_not_tried_and_falls_back_to_any() -> None:
    pool = two_workers()
    assert {pool.pick(exclude={"w0"}).name for _ in range(4)} == {"w1"}
    backend_of(pool.workers[1]).ready = False
    assert pool.pick(exclude={"w0"}).name == "w0"  # the only candidate left


def test_a_served_name_can_have_its_own_policy() -> None:
    class Always:
        def __init__(self, name: str) -> None:
            self.name = name

        def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
            return next(worker for worker in candidates if worker.name == self.name)

    pool = WorkerPool(
        [loaded_worker("w0"), loaded_worker("w1")], Always("w0"), model_policies={"b": Always("w1")}
    )
    assert pool.pick(RoutingContext(model="a")).name == "w0"
    assert pool.pick(RoutingContext(model="b")).name == "w1"


def test_an_open_breaker_takes_the_worker_out_until_its_probe() -> None:
    pool = two_workers(breaker_factory=lambda: CircuitBreaker(failure_threshold=2, cooldown_s=5))
    w0 = pool.workers[0]
    for now in (0.0, 0.1):
        pool.on_routed(w0, now)
        pool.release(w0, Outcome.FAILURE, now, retried=True)
    assert {pool.pick(now=1.0).name for _ in range(4)} == {"w1"}
    row = pool.snapshot(1.0)[0]
    assert (row.breaker, row.routable, row.failures, row.retries) == ("open", False, 2, 2)
    assert "w0" in {pool.pick(now=5.1).name for _ in range(2)}  # half-open: one probe
    pool.on_routed(w0, 5.2)
    pool.release(w0, Outcome.SUCCESS, 5.3, retried=False)
    assert pool.snapshot(5.3)[0].breaker == "closed"


def test_every_breaker_open_is_no_ready_worker() -> None:
    pool = WorkerPool(
        [loaded_worker("w0")],
        RoundRobin(),
        breaker_factory=lambda: CircuitBreaker(failure_threshold=1),
    )
    pool.on_routed(pool.workers[0], 0.0)
    pool.release(pool.workers[0], Outcome.FAILURE, 0.0, retried=False)
    with pytest.raises(BackendUnavailable):
        pool.pick(now=0.5)


def test_a_removed_worker_gets_no_new_request_and_leaves_after_its_last_one() -> None:
    pool = two_workers()
    w0 = pool.workers[0]
    pool.on_routed(w0, 0.0)
    drained: list[str] = []
    pool.retire("w0", lambda: drained.append("w0"))
    assert {pool.pick().name for _ in range(4)} == {"w1"}
    assert pool.snapshot()[0].removing
    assert drained == []
    pool.release(w0, Outcome.SUCCESS, 1.0, retried=False)
    assert drained == ["w0"]
    assert [worker.name for worker in pool.workers] == ["w1"]


def test_an_idle_worker_is_removed_at_once_and_a_new_one_is_routable_at_once() -> None:
    pool = two_workers()
    drained: list[bool] = []
    pool.retire("w1", lambda: drained.append(True))
    pool.add(loaded_worker("w2"))
    assert drained == [True]
    assert {pool.pick().name for _ in range(4)} == {"w0", "w2"}
    with pytest.raises(ValueError, match="in the pool already"):
        pool.add(loaded_worker("w0"))


def test_the_snapshot_reports_load_leases_and_readiness() -> None:
    pool = two_workers()
    backend_of(pool.workers[0]).in_flight = 3
    backend_of(pool.workers[1]).ready = False
    pool.on_routed(pool.workers[0], 0.0)
    rows = {row.id: row for row in pool.snapshot()}
    assert (rows["w0"].in_flight, rows["w0"].active, rows["w0"].requests) == (3, 1, 1)
    assert (rows["w1"].ready, rows["w1"].routable, rows["w1"].breaker) == (False, False, "closed")
