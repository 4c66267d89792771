"""core/rate_limits.py: GCRA's guarantees, for any arrivals (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.rate_limits import (
    REQUEST_JITTER_S,
    Admitted,
    Allowed,
    Limited,
    Rate,
    RateState,
    Refused,
    TenantRates,
    admit,
    gcra,
    reconcile,
    refund,
    requests_rate,
    retry_after_header,
    tokens_rate,
)

rates = st.builds(
    lambda limit, window, burst_share: Rate(limit, window, max(1.0, limit * burst_share)),
    st.integers(1, 10_000),
    st.sampled_from([1.0, 5.0, 60.0]),
    st.floats(0.0, 1.0),
)
gaps = st.lists(st.floats(0.0, 5.0), min_size=1, max_size=200)


def run(rate: Rate, arrivals: list[float], cost: float = 1.0) -> list[float]:
    """The arrivals that pass, one limit's state carried along."""
    tat, passed = 0.0, []
    for now in arrivals:
        decision = gcra(rate, tat, now, cost)
        if isinstance(decision, Allowed):
            tat = decision.tat
            passed.append(now)
    return passed


def times(start: float, deltas: list[float]) -> list[float]:
    out, now = [], start
    for delta in deltas:
        now += delta
        out.append(now)
    return out


@settings(max_examples=300)
@given(rates, st.floats(0.0, 1000.0), gaps)
def test_no_span_passes_more_than_burst_plus_rate(
    rate: Rate, start: float, deltas: list[float]
) -> None:
    passed = run(rate, times(start, [d * rate.interval_s for d in deltas]))
    for i, first in enumerate(passed):
        for j in range(i, len(passed)):
            span = passed[j] - first
            assert j - i + 1 <= rate.burst + span / rate.interval_s + 1e-6


@settings(max_examples=300)
@given(rates, st.floats(0.0, 1000.0), st.lists(st.floats(1.0, 3.0), min_size=1, max_size=100))
def test_arrivals_an_interval_apart_always_pass(
    rate: Rate, start: float, spacing: list[float]
) -> None:
    arrivals = times(start, [s * rate.interval_s * (1 + 1e-9) for s in spacing])
    assert run(rate, arrivals) == arrivals


@settings(max_examples=300)
@given(rates, st.floats(0.0, 1000.0), st.integers(1, 50), st.floats(0.0, 1.0))
def test_a_refusal_says_exactly_when_to_come_back(
    rate: Rate, now: float, sent: int, cost_share: float
) -> None:
    cost = max(1.0, rate.burst * cost_share)
    tat = 0.0
    for _ in range(sent):  # spend the burst at `now`
        decision = gcra(rate, tat, now, 1)
        if isinstance(decision, Allowed):
            tat = decision.tat
    decision = gcra(rate, tat, now, cost)
    if isinstance(decision, Refused):
        wait = decision.retry_after_s
        assert wait > 0
        assert isinstance(gcra(rate, tat, now + wait + 1e-6 * rate.interval_s, cost), Allowed)
        assert isinstance(gcra(rate, tat, now + wait * 0.99 - 1e-9, cost), Refused)


def test_a_cost_above_the_burst_never_passes() -> None:
    rate = tokens_rate(1000)
    assert gcra(rate, 0.0, 0.0, 1001) == Refused(math.inf)
    assert isinstance(gcra(rate, 0.0, 0.0, 1000), Allowed)


def test_sixty_a_minute_is_one_a_second_with_a_quarter_second_of_lateness() -> None:
    rate = requests_rate(60)
    assert (rate.interval_s, rate.burst) == (1.0, 1.25)
    # A minute-long flood, every 10 ms: one per second passes (61 with both ends).
    flood = [i / 100 for i in range(6000)]
    assert len(run(rate, flood)) == 61
    assert requests_rate(6000).burst == 100.0
    assert requests_rate(1).burst == 1.0 + 0.25 / 60


@settings(max_examples=300)
@given(
    st.integers(1, 100_000),
    st.floats(0.0, 1000.0),
    st.lists(st.floats(0.0, REQUEST_JITTER_S), min_size=1, max_size=100),
)
def test_a_client_at_the_limit_is_never_refused_for_being_late(
    per_minute: int, start: float, lateness: list[float]
) -> None:
    rate = requests_rate(per_minute)
    arrivals = [start + i * rate.interval_s + late for i, late in enumerate(lateness)]
    assert run(rate, sorted(arrivals)) == sorted(arrivals)


@settings(max_examples=300)
@given(
    st.integers(1, 600),
    st.integers(1, 100_000),
    st.lists(st.tuples(st.floats(0, 2), st.integers(0, 5000)), max_size=50),
)
def test_admit_charges_both_limits_or_neither(
    rpm: int, tpm: int, steps: list[tuple[float, int]]
) -> None:
    limits = TenantRates(requests_rate(rpm), tokens_rate(tpm))
    state, now = RateState(), 0.0
    for delta, tokens in steps:
        now += delta
        decision = admit(limits, state, now, tokens)
        if isinstance(decision, Limited):
            kind = decision.kind
            rate = limits.requests if kind == "requests" else limits.tokens
            assert rate is not None
            cost = 1 if kind == "requests" else tokens
            assert isinstance(
                gcra(
                    rate, state.requests_tat if kind == "requests" else state.tokens_tat, now, cost
                ),
                Refused,
            )
            continue  # nothing charged: the state is as it was
        assert isinstance(decision, Admitted)
        requests, tokens_limit = limits.requests, limits.tokens
        assert requests is not None
        assert tokens_limit is not None
        assert decision.state.requests_tat == max(state.requests_tat, now) + requests.interval_s
        assert (
            decision.state.tokens_tat
            == max(state.tokens_tat, now) + tokens * tokens_limit.interval_s
        )
        state = decision.state


def test_output_tokens_are_a_debt_the_next_requests_wait_for() -> None:
    limits = TenantRates(tokens=tokens_rate(600))  # 10 tokens a second, a burst of 600
    first = admit(limits, RateState(), 0.0, 100)
    assert isinstance(first, Admitted)
    assert first.tokens_remaining == 500
    state = reconcile(limits, first.state, 1.0, 1000)  # a long answer: 100 s of budget spent
    refused = admit(limits, state, 1.0, 100)
    assert isinstance(refused, Limited)
    assert refused.kind == "tokens"
    # tat 10 + 100 s; 100 more tokens fit once tat + 10 s is within the 60 s burst: at t = 60
    assert math.isclose(refused.retry_after_s, 59.0)
    assert reconcile(limits, state, 2.0, 0) is state


@settings(max_examples=300)
@given(
    st.integers(1, 600),
    st.integers(1, 100_000),
    st.floats(0.0, 100.0),
    st.floats(0.0, 100.0),
    st.floats(0.0, 100.0),
    st.integers(0, 5000),
)
def test_a_refund_at_once_undoes_the_admission(
    rpm: int, tpm: int, requests_tat: float, tokens_tat: float, now: float, tokens: int
) -> None:
    limits = TenantRates(requests_rate(rpm), tokens_rate(tpm))
    before = RateState(requests_tat, tokens_tat)
    decision = admit(limits, before, now, tokens)
    if isinstance(decision, Limited):
        return
    after = refund(limits, decision.state, now, tokens)
    # As good as never admitted: the same tat, a past one counting as now.
    assert math.isclose(after.requests_tat, max(requests_tat, now), abs_tol=1e-6)
    assert math.isclose(after.tokens_tat, max(tokens_tat, now), abs_tol=1e-6)


@settings(max_examples=300)
@given(
    st.integers(1, 600),
    st.integers(1, 100_000),
    st.floats(0.0, 100.0),
    st.floats(0.0, 100.0),
    st.floats(0.0, 200.0),
    st.integers(0, 200_000),
)
def test_a_refund_never_gives_more_than_an_idle_tenant_has(
    rpm: int, tpm: int, requests_tat: float, tokens_tat: float, now: float, tokens: int
) -> None:
    limits = TenantRates(requests_rate(rpm), tokens_rate(tpm))
    refunded = refund(limits, RateState(requests_tat, tokens_tat), now, tokens)
    assert refunded.requests_tat >= now
    assert refunded.tokens_tat >= now


def test_no_limits_admit_everything() -> None:
    assert admit(TenantRates(), RateState(), 5.0, 10**9) == Admitted(RateState(), None, None)


def test_retry_after_is_whole_seconds_rounded_up() -> None:
    assert [retry_after_header(s) for s in (0.0, 0.01, 1.0, 1.2, 59.9)] == [1, 1, 1, 2, 60]
