"""EngineReadiness: what takes a gRPC engine out of rotation, and what only looks like it."""

from __future__ import annotations

from smg_trio.backends.grpc_readiness import HEALTH_TIMEOUTS_TO_OUT, EngineReadiness


def is_ready(readiness: EngineReadiness) -> bool:
    return readiness.ready  # read through a call: each check changes it


def ready_engine() -> EngineReadiness:
    readiness = EngineReadiness("vllm engine at 127.0.0.1:1")
    readiness.check_passed("info")
    assert is_ready(readiness)
    return readiness


def test_a_timed_out_check_with_output_meanwhile_counts_as_passed() -> None:
    readiness = ready_engine()
    for started in range(10):
        readiness.engine_answered(started + 0.5)
        readiness.check_timed_out(float(started), 5.0)
    assert is_ready(readiness)


def test_silent_timed_out_checks_take_it_out_only_in_a_run() -> None:
    readiness = ready_engine()
    for started in range(HEALTH_TIMEOUTS_TO_OUT - 1):
        readiness.check_timed_out(float(started), 5.0)
    assert is_ready(readiness)
    readiness.check_passed(None)  # a pass resets the run
    for started in range(HEALTH_TIMEOUTS_TO_OUT - 1):
        readiness.check_timed_out(float(started), 5.0)
    assert is_ready(readiness)
    readiness.check_timed_out(10.0, 5.0)
    assert not is_ready(readiness)
    assert readiness.reason == (
        f"no health check answer within 5 s ({HEALTH_TIMEOUTS_TO_OUT} in a row) "
        "and no output meanwhile"
    )


def test_an_engine_that_is_not_ready_stays_out_on_a_slow_check() -> None:
    readiness = EngineReadiness("vllm engine at 127.0.0.1:1")
    readiness.engine_answered(1.0)
    readiness.check_timed_out(0.0, 5.0)
    assert not is_ready(readiness)
    assert readiness.reason is not None


def test_failures_and_death_take_it_out_at_once_until_a_check_passes() -> None:
    readiness = ready_engine()
    readiness.take_out("health check failed: UNAVAILABLE")
    assert (readiness.ready, readiness.dead) == (False, False)
    readiness.check_passed(None)
    readiness.died("the connection was lost")
    assert (readiness.ready, readiness.dead, readiness.reason) == (
        False,
        True,
        "the connection was lost",
    )
    readiness.check_passed(None)
    assert (readiness.ready, readiness.dead, readiness.reason) == (True, False, None)
