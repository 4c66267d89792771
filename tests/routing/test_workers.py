"""Worker selection: round-robin over the workers that are ready, 503 when none is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import BackendUnavailable
from smg_trio.routing.workers import NO_READY_WORKER, RoundRobin, WorkerPool
from tests.routing.loaded_workers import backend_of, loaded_worker


def pool_of(*ready: bool) -> WorkerPool:
    """Workers named "w0", "w1", ... with the given readiness, picked round-robin."""
    workers = [loaded_worker(f"w{index}", ready=is_ready) for index, is_ready in enumerate(ready)]
    return WorkerPool(workers, RoundRobin())


def names(pool: WorkerPool, picks: int) -> list[str]:
    return [pool.pick().name for _ in range(picks)]


def set_ready(pool: WorkerPool, index: int, *, ready: bool) -> None:
    backend_of(pool.workers[index]).ready = ready


def test_ready_workers_take_turns_in_pool_order() -> None:
    assert names(pool_of(True, True, True), 7) == ["w0", "w1", "w2", "w0", "w1", "w2", "w0"]


def test_a_single_worker_takes_every_request() -> None:
    assert names(pool_of(True), 3) == ["w0", "w0", "w0"]


def test_workers_that_are_not_ready_are_skipped() -> None:
    pool = pool_of(True, False, True)
    assert names(pool, 4) == ["w0", "w2", "w0", "w2"]
    assert pool.ready


def test_a_worker_leaves_and_rejoins_the_rotation_as_its_readiness_changes() -> None:
    pool = pool_of(True, True)
    set_ready(pool, 1, ready=False)
    assert names(pool, 2) == ["w0", "w0"]
    set_ready(pool, 1, ready=True)
    assert sorted(names(pool, 2)) == ["w0", "w1"]


def test_no_ready_worker_is_backend_unavailable_503() -> None:
    pool = pool_of(False, False)
    assert not pool.ready
    with pytest.raises(BackendUnavailable, match=NO_READY_WORKER) as raised:
        pool.pick()
    assert raised.value.status == 503
    set_ready(pool, 0, ready=True)  # an engine coming back is picked at once
    assert (pool.ready, pool.pick().name) == (True, "w0")


def test_a_pool_needs_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool([], RoundRobin())


@given(st.lists(st.booleans(), min_size=1, max_size=6).filter(any), st.integers(1, 4))
def test_every_ready_worker_gets_an_equal_share_and_no_other_gets_any(
    readiness: list[bool], rounds: int
) -> None:
    pool = pool_of(*readiness)
    ready_names = [f"w{index}" for index, is_ready in enumerate(readiness) if is_ready]
    picked = names(pool, rounds * len(ready_names))
    assert picked == ready_names * rounds
